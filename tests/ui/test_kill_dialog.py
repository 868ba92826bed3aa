"""The kill dialog on its own (a bare host app pushes it): what it draws, which keys answer it and what
it answers. No process is signalled here: the dialog only returns a KillRequest (tests/ui/test_kill.py
runs the whole workflow on real processes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Checkbox, RadioButton

from gputui.actions.kill_plan import KillPlan, plan_kill
from gputui.cells import width
from gputui.ui.screens.kill import EntryList, KillRequest, KillScreen, StateCheckbox, wrap_cells
from tests.ui.test_kill_plan import GUARD, JOB, TRAINER, gpu_row, snap

SIZE = (120, 40)


class Host(App[None]):
    def __init__(self, dialog: KillScreen) -> None:
        super().__init__()
        self.dialog = dialog
        self.answers: list[KillRequest | None] = []

    def on_mount(self) -> None:
        self.push_screen(self.dialog, self.answers.append)


def drawn(widget: Widget) -> list[str]:
    strips = widget.render_lines(Region(0, 0, *widget.outer_size))
    return [strip.text.rstrip() for strip in strips]


def plan_for_trainer(**changes: object) -> KillPlan:
    return plan_kill([replace(TRAINER, **changes)], JOB, GUARD)  # type: ignore[arg-type]


# -- the checkbox ------------------------------------------------------------------------------------


async def test_textual_s_checkbox_draws_the_same_glyph_on_and_off() -> None:
    """Why StateCheckbox exists: the issue's ▐X▌ either way. This fails once Textual draws the state."""

    class Both(App[None]):
        def compose(self) -> ComposeResult:
            yield Checkbox("off", value=False, id="off")
            yield Checkbox("on", value=True, id="on")

    app = Both()
    async with app.run_test(size=(40, 10)) as pilot:
        await pilot.pause()
        off, on = ("\n".join(drawn(app.query_one(f"#{i}", Checkbox))) for i in ("off", "on"))
        assert "▐X▌ off" in off and "▐X▌ on" in on


async def test_the_children_box_draws_its_state_and_space_toggles_it() -> None:
    app = Host(KillScreen.for_plan(plan_kill([TRAINER], snap(TRAINER), GUARD)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        box = app.screen.query_one("#children", StateCheckbox)
        assert not box.value
        assert "▐ ▌ include its children" in "\n".join(drawn(box))
        box.focus()
        await pilot.press("space")
        await pilot.pause()
        assert box.value
        assert "▐X▌ include its children" in "\n".join(drawn(box))
        await pilot.press("space")
        await pilot.pause()
        assert "▐ ▌ include its children" in "\n".join(drawn(box))


async def test_only_the_chosen_signal_draws_a_dot() -> None:
    app = Host(KillScreen.for_plan(plan_for_trainer()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        radios = {r.id: "\n".join(drawn(r)) for r in app.screen.query(RadioButton)}
        assert "▐●▌ SIGTERM (T)" in radios["SIGTERM"]
        assert "▐ ▌ SIGINT (I)" in radios["SIGINT"] and "▐ ▌ SIGKILL (K)" in radios["SIGKILL"]
        await pilot.click("#SIGKILL")
        await pilot.pause()
        radios = {r.id: "\n".join(drawn(r)) for r in app.screen.query(RadioButton)}
        assert "▐ ▌ SIGTERM" in radios["SIGTERM"] and "▐●▌ SIGKILL" in radios["SIGKILL"]


async def test_workers_holding_the_gpu_turn_the_box_on_and_are_listed_and_sent() -> None:
    plan = plan_for_trainer()
    app = Host(KillScreen.for_plan(plan))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        box = app.screen.query_one("#children", StateCheckbox)
        assert box.value
        assert "▐X▌ include its children" in "\n".join(drawn(box))
        assert [line.split()[0] for line in grid_of(app)[1:]] == ["4242", "4243", "4244", "4245"]
        note = " ".join(" ".join(drawn(app.screen.query_one("#children-note"))).split())
        assert "its 3 children are in the list above" in note and "hold a GPU" in note
        assert "4243" not in note  # listed once: in the list
        await pilot.press("y")
        await pilot.pause()
    # The dialog sends exactly what it listed, children first: nothing is looked for again at send time.
    family = {e.target.pid: e.target for e in plan.signalled(True)}
    assert app.answers == [KillRequest(tuple(family[pid] for pid in (4243, 4244, 4245, 4242)), "SIGTERM")]
    assert not app.answers[0].include_children  # type: ignore[union-attr]


async def test_unchecking_the_box_sends_to_the_process_alone() -> None:
    app = Host(KillScreen.for_plan(plan_for_trainer()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.click("#children")
        await pilot.pause()
        assert [line.split()[0] for line in grid_of(app)[1:]] == ["4242"]
        note = " ".join(" ".join(drawn(app.screen.query_one("#children-note"))).split())
        assert "not included: its 3 children, 4243, 4244, 4245" in note
        await pilot.press("y")
        await pilot.pause()
    (answer,) = app.answers
    assert answer is not None and not answer.include_children
    assert [t.pid for t in answer.targets] == [TRAINER.pid]


# -- keys --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "signal"),
    [("T", "SIGTERM"), ("t", "SIGTERM"), ("I", "SIGINT"), ("i", "SIGINT"), ("K", "SIGKILL")],
)
async def test_a_direct_key_sends_its_signal_at_once(key: str, signal: str) -> None:
    app = Host(KillScreen.for_plan(plan_for_trainer()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, KillScreen)
    (answer,) = app.answers
    assert answer is not None and answer.signal == signal
    assert [t.pid for t in answer.targets] == [4243, 4244, 4245, TRAINER.pid] and not answer.include_children


async def test_a_second_lowercase_k_does_not_kill() -> None:
    """`k` opens the dialog in the app: a double tap must not be a SIGKILL."""
    app = Host(KillScreen.for_plan(plan_for_trainer()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen) and app.answers == []
        await pilot.press("escape")
        await pilot.pause()
    assert app.answers == [None]


async def test_enter_on_cancel_and_escape_answer_nothing() -> None:
    for key in ("enter", "escape", "n"):
        app = Host(KillScreen.for_plan(plan_for_trainer()))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press(key)
            await pilot.pause()
        assert app.answers == [None], key


# -- the command line --------------------------------------------------------------------------------

LONG = (
    "/root/.pyenv/versions/3.11.7/bin/python3 -u /home/alice/projects/llm/train.py --config "
    "configs/llama-7b.yaml --data /mnt/data/shards --batch-size 32 --lr 3e-4 --resume "
    "checkpoints/step-120000 --seed 17 --tag the-end-of-the-command"
)


def grid_of(app: Host) -> list[str]:
    return drawn(app.screen.query_one(EntryList))


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (200, 60)])
async def test_the_whole_command_is_shown_in_the_dialog_s_width(size: tuple[int, int]) -> None:
    row = replace(TRAINER, command=LONG)
    app = Host(KillScreen.for_plan(plan_kill([row], snap(row), GUARD)))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(EntryList)
        lines = grid_of(app)
        at = lines[0].index("COMMAND")
        command = " ".join(line[at:].strip() for line in lines[1:])
        assert command == LONG, lines
        assert all(width(line) <= grid.size.width for line in lines)
        assert lines[1].split()[:4] == [str(TRAINER.pid), "alice", "ok", "68.7"]
        # The command takes the dialog's width: at 120 columns, ~70 cells of it on the first line.
        assert width(lines[1]) >= grid.size.width - 12, (lines, grid.size.width)


async def test_a_wide_character_command_fits_in_cells() -> None:
    command = "python 训练脚本.py --名前 データセット " * 6 + "e\u0301nd"
    row = replace(TRAINER, command=command, user="李小龍")
    app = Host(KillScreen.for_plan(plan_kill([row], snap(row), GUARD)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        grid = app.screen.query_one(EntryList)
        lines = grid_of(app)
        assert len(lines) > 2
        assert all(width(line) <= grid.size.width for line in lines), [width(x) for x in lines]
        assert "李小龍" in lines[1]
        assert "e\u0301nd" in lines[-1]


async def test_two_entries_each_start_a_line() -> None:
    other = gpu_row(5000, 1000, command=LONG)
    plan = plan_kill([replace(TRAINER, command=LONG), other], snap(TRAINER, other), GUARD)
    app = Host(KillScreen.for_plan(plan))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        starts = [line.split()[0] for line in grid_of(app)[1:] if line and not line[0].isspace()]
        assert starts == [str(TRAINER.pid), "5000"]
        assert "Send a signal to 2 processes?" in "\n".join(
            "\n".join(drawn(w)) for w in app.screen.query("Static")
        )


def test_wrap_cells_breaks_after_a_space_and_never_splits_a_wide_character() -> None:
    assert wrap_cells("python train.py --lr 3e-4", 12) == ["python", "train.py", "--lr 3e-4"]
    assert wrap_cells("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert wrap_cells("训练训练训", 4) == ["训练", "训练", "训"]
    assert wrap_cells("a训练", 4) == ["a训", "练"]
    assert wrap_cells("", 10) == [""]
    assert wrap_cells("short", 10) == ["short"]
    for line in wrap_cells(LONG, 17):
        assert width(line) <= 17
