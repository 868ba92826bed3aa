"""The table uses the space it has: columns as wide as their content, COMMAND the rest, a command line
keeps the words that tell it apart, CLASS says nothing for ok, the highlighted row is said in full in the
free rows, and long results, reasons and job labels wrap instead of being cut (the status line, the
Events pane, the jobs view)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.app import App, ComposeResult

from gputui.actions.kill_plan import describe_outcomes
from gputui.actions.signals import Outcome, Target
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Owner
from gputui.ui.widgets.command_fit import squeeze, telling_words
from gputui.ui.widgets.status import StatusLine
from tests.ui import everyday, world
from tests.ui.conftest import first_frame
from tests.ui.drawn import body, header_line, lines
from tests.ui.test_dips_ui import events_text

RANKS = tuple(
    f"python -u train.py --config configs/llama-7b.yaml --local-rank {r} --batch-size 16" for r in range(8)
)

# -- a command line in the cells it has ----------------------------------------------------------------


def test_a_squeezed_command_keeps_its_program_and_the_words_no_sibling_has() -> None:
    other = "python finetune.py --data /datasets/sft --local-rank 5"
    telling = telling_words((*RANKS, other, "python3 -m ipykernel_launcher -f k.json"))
    assert squeeze(RANKS[3], telling[RANKS[3]], 38) == "python -u train.py … --local-rank 3 …"
    # Its script is what the row is: with no room for a telling word beside it, the line is cut at its end.
    assert squeeze(RANKS[3], telling[RANKS[3]], 30) == RANKS[3]
    assert squeeze(RANKS[3], telling[RANKS[3]], 200) == RANKS[3]  # it fits: as it is
    # Another script's --local-rank 5 does not make rank 5's less telling: siblings run the same script.
    assert telling[RANKS[5]] == telling[RANKS[3]] == frozenset({5, 6})
    # Nothing to tell it apart from: left whole, for the table to cut at its end with …
    alone = "python3 -m ipykernel_launcher -f k.json"
    assert telling[alone] == frozenset() and squeeze(alone, telling[alone], 10) == alone
    # The words that tell it apart do not fit: the line is cut at its end as any other.
    assert squeeze(RANKS[3], telling[RANKS[3]], 20) == RANKS[3]


def test_the_demo_trainers_keep_their_gpu() -> None:
    demo = tuple(f"python -IS demo_train.py --role trainer --gpu {g} --workers 3" for g in range(1, 8))
    telling = telling_words(demo)
    assert squeeze(demo[2], telling[demo[2]], 36) == "python -IS demo_train.py … --gpu 3 …"


# -- the everyday box ----------------------------------------------------------------------------------


async def shown(size: tuple[int, int], *keys: str) -> tuple[list[str], list[str], list[str]]:
    """(the table's lines, the note's lines, the whole screen) after `keys`."""
    app = everyday.app()
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()
        return [header_line(app), *body(app)], lines(app.row_note), everyday.screen_text(app)


async def test_at_120_columns_every_rank_shows_its_local_rank_and_ok_is_blank() -> None:
    table, _, _ = await shown((120, 40))
    for gpu in range(everyday.GPUS):
        row = next(line for line in table if f" {world.trainer_pid(gpu)} " in line)
        assert f"--local-rank {gpu}" in row, row
        assert " ok " not in row
    header = table[0]
    # USER and TIME are as wide as their content: alice, bob, carol, root; 1h35m, 1d00h, 2h05m.
    assert header[header.index("USER") :].startswith("USER  T ")
    assert "RSS  TIME CLASS" in header  # TIME: 5 cells, right-justified
    assert "orphan" in " ".join(table)  # CLASS shows what is not ok


async def test_the_highlighted_row_is_said_in_full_in_the_free_rows() -> None:
    _, note, _ = await shown((120, 40))
    assert note and note[0].startswith("── pid 4101")
    assert everyday.command(0) in " ".join(note)  # the whole line: path, every argument
    _, note, _ = await shown((120, 40), "down", "down", "down", "down", "down", "down", "down")
    text = " ".join(note)
    assert "orphan: its parent has ended" in text and "~4.8 GiB?: an estimate" in text


async def test_no_free_row_no_note() -> None:
    table, note, _ = await shown((80, 24))
    assert note == [] and len(table) > 1


async def test_the_zombies_view_says_the_whole_reason_of_the_highlighted_row_at_120() -> None:
    _, note, _ = await shown((120, 40), "z")
    assert "its parent has ended and it still holds a GPU's device file" in " ".join(note)


async def test_the_events_pane_never_cuts_the_jobs_launcher_pid() -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("e")
        await pilot.pause()
        rows = [line for line in events_text(app).splitlines() if "torchrun" in line]
        assert rows and all("torchrun pid 4000" in row for row in rows), rows


async def test_the_jobs_view_says_a_long_job_name_in_full() -> None:
    owner = Owner(
        "kubernetes", "0f1e2d3c-aaaa-bbbb-cccc-123456789abc", "llama-7b-finetune-sweep-lr3e-4", "research"
    )
    snaps = everyday.snapshots()
    snaps = [replace(s, processes=tuple(replace(p, owner=owner) for p in s.processes)) for s in snaps]
    app = everyday.app()
    assert isinstance(app.sampler, ReplaySampler)
    app.sampler.snapshots[:] = snaps[everyday.HISTORY :]
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("J")
        await pilot.pause()
        note = " ".join(lines(app.row_note))
        assert "pod research/llama-7b-finetune-sweep-lr3e-4" in note, note


# -- the status line -----------------------------------------------------------------------------------


class StatusApp(App[None]):
    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")


def thirteen() -> str:
    gone = [Outcome(Target(4101 + i, 1.0, "python -u train.py"), "SIGTERM", "gone") for i in range(12)]
    alive = Outcome(Target(10775, 1.0, "python finetune.py"), "SIGTERM", "still alive")
    return describe_outcomes([*gone[:6], alive, *gone[6:]], final=True)[0]


@pytest.mark.parametrize("width", [80, 120])
async def test_a_kill_result_of_13_processes_says_what_to_do_next(width: int) -> None:
    app = StatusApp()
    async with app.run_test(size=(width, 10)) as pilot:
        status = app.query_one(StatusLine)
        status.say(thirteen(), "warning")
        await pilot.pause()
        drawn = lines(status)
        text = " ".join(" ".join(drawn).split())
        assert "still alive: 10775 — press K to send SIGKILL" in text, drawn
        assert "gone: 12 (4101, 4102, 4103, 4104, 4105, 4106, …)" in text, drawn
        assert status.size.height == len(drawn) <= 2
        status.say("")  # the second line goes with the message
        await pilot.pause()
        assert status.size.height == 1


async def test_a_status_line_too_long_for_two_lines_ends_with_an_ellipsis() -> None:
    app = StatusApp()
    async with app.run_test(size=(40, 10)) as pilot:
        status = app.query_one(StatusLine)
        status.say("word " * 40)
        await pilot.pause()
        drawn = lines(status)
        assert len(drawn) == 2 and drawn[1].endswith("…")
