"""The TUI driven by keys and the mouse on the fixed world (tests/ui/world.py): every test asserts what
is drawn (the cells of the CellCanvas widgets, the text of the modal screens), not only that nothing
crashed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Input, OptionList

from gputui.model import GpuSample, HostProcess, ProcessRow, Snapshot
from gputui.ui.app import INTERVALS, GpuTuiApp
from gputui.ui.screens.detail import DetailScreen, GpuChooser, HelpScreen
from gputui.ui.widgets.gpu_panes import FULL_LINES, GpuPanes
from gputui.ui.widgets.header import HeaderBar
from gputui.ui.widgets.process_table import ProcessTable
from gputui.units import fmt_bytes
from tests.helpers import known, screen_text, until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app, post
from tests.ui.drawn import body, header_line, lines, shown_pids, table

SIZE = (120, 40)
GPU_PIDS = [world.trainer_pid(g) for g in range(4)]
ALL_PIDS = sorted([*GPU_PIDS, world.WEIRD_PID, world.GHOST])
SPARK = set("▁▂▃▄▅▆▇█")
GONE = ("the process is gone", "the PID now belongs to another process")


# -- reading what is drawn -------------------------------------------------------------------------


def header_bar(app: GpuTuiApp) -> str:
    return lines(app.query_one(HeaderBar))[0]


def panes(app: GpuTuiApp) -> list[str]:
    return lines(app.query_one(GpuPanes))


def column_x(app: GpuTuiApp, label: str) -> int:
    """An x inside a column's label on the drawn header line (labels are unique prefixes)."""
    return 1 if label == "GPU" else header_line(app).index(label) + 1


def by_pid(app: GpuTuiApp, field: str) -> list[Any]:
    """A field of the drawn rows' processes, in the drawn order (whatever the field holds)."""
    assert app.snapshot is not None
    rows: list[ProcessRow | HostProcess] = [*app.snapshot.processes, *app.snapshot.host_processes]
    procs = {p.pid: p for p in rows}
    return [getattr(procs[pid], field, None) for pid in shown_pids(app)]


def cursor_line(app: GpuTuiApp) -> str:
    """The drawn line that carries the cursor's colours (the table has the focus)."""
    t = table(app)
    bg = t.cursor_style.bgcolor
    hits = [
        "".join(ch for ch, _ in line)
        for line in t._lines[1:]
        if line
        and line[0][1] is not None
        and line[0][1].bgcolor == bg
        and (bg is not None or line[0][1].reverse)
    ]
    assert len(hits) == 1, hits
    return hits[0]


async def press(pilot: Pilot[int], *keys: str) -> None:
    await pilot.press(*keys)
    await pilot.pause()


def quiet_app(gpus: int = 4) -> GpuTuiApp:
    """An app whose sampler ticks once and then sleeps (and is paused by the tests), so the snapshots a
    test posts stay shown."""
    return make_app(gpus=gpus, interval=30.0)


# -- sort ------------------------------------------------------------------------------------------


async def test_s_cycles_the_sort_column_and_S_reverses() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert header_line(app).startswith("GPU▲")  # ▲: smallest first
        gpus = by_pid(app, "gpu")
        assert gpus == sorted(gpus)

        await press(pilot, "s")
        assert app.view.sort == "gpu_mem"
        assert "GPU MEM▼" in header_line(app) and "GPU▲" not in header_line(app)
        mem = by_pid(app, "used_memory")
        assert mem == sorted(mem, reverse=True)
        assert app.snapshot is not None
        biggest = max(app.snapshot.processes, key=lambda p: p.used_memory or 0)
        drawn_mem = fmt_bytes(biggest.used_memory)
        assert shown_pids(app)[0] == biggest.pid and drawn_mem in body(app)[0]

        await press(pilot, "S")
        assert "GPU MEM▲" in header_line(app)
        mem = by_pid(app, "used_memory")
        assert mem == sorted(mem)
        assert shown_pids(app)[-1] == biggest.pid and drawn_mem in body(app)[-1]

        await press(pilot, "s")  # the next column starts in its natural order again
        assert (app.view.sort, app.view.reverse) == ("sm", False)
        assert "SM%▼" in header_line(app)
        sm = by_pid(app, "sm_util")
        assert sm == sorted(sm, reverse=True)
        assert "93%" in body(app)[0]

        for _ in range(4):  # cpu, rss, time, pid
            await press(pilot, "s")
        assert "PID▲" in header_line(app)
        assert shown_pids(app) == ALL_PIDS


async def test_clicking_a_header_sorts_by_it_and_again_reverses() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.click(ProcessTable, offset=(column_x(app, "PID"), 0))
        await pilot.pause()
        assert app.view.sort == "pid" and not app.view.reverse
        assert "PID▲" in header_line(app)
        assert shown_pids(app) == ALL_PIDS

        await pilot.click(ProcessTable, offset=(column_x(app, "PID"), 0))
        await pilot.pause()
        assert app.view.reverse
        assert "PID▼" in header_line(app)
        assert shown_pids(app) == ALL_PIDS[::-1]

        await pilot.click(ProcessTable, offset=(column_x(app, "GPU MEM"), 0))
        await pilot.pause()
        assert "GPU MEM▼" in header_line(app) and "PID▼" not in header_line(app)
        assert shown_pids(app)[0] == world.trainer_pid(3)
        mem = by_pid(app, "used_memory")
        assert mem == sorted(mem, reverse=True)

        await pilot.click(ProcessTable, offset=(column_x(app, "USER"), 0))
        await pilot.pause()
        assert "USER▲" in header_line(app)
        users = [line.split()[2] for line in body(app)]
        assert users == sorted(users) and users[-1] == "mallory"


async def test_unknown_start_time_sorts_last_by_time() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.click(ProcessTable, offset=(column_x(app, "TIME"), 0))
        await pilot.pause()
        assert app.view.sort == "time"
        # "Unknown values sort last in either direction" (process_rows._sort_key), as CPU% does.
        assert shown_pids(app)[-1] == world.GHOST, body(app)


# -- filter ----------------------------------------------------------------------------------------


async def test_filter_by_user_then_enter_keeps_it_and_esc_clears_it() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        box = app.query_one(Input)
        assert not box.display
        await press(pilot, "slash")
        assert box.display and box.has_focus
        await press(pilot, *"mallory")
        assert shown_pids(app) == [world.WEIRD_PID]
        assert "mallory" in body(app)[0]

        await press(pilot, "enter")
        assert table(app).has_focus and not box.display and box.value == "mallory"
        assert "filter: mallory" in lines(app.status)[0]  # the box's row is the table's again
        assert shown_pids(app) == [world.WEIRD_PID]
        await until(pilot, lambda: app.frames >= 2)  # a refresh keeps the filter
        await pilot.pause()
        assert shown_pids(app) == [world.WEIRD_PID]

        await press(pilot, "slash")
        assert box.has_focus
        await press(pilot, "escape")
        assert not box.display and box.value == "" and table(app).has_focus
        assert sorted(shown_pids(app)) == ALL_PIDS


async def test_filter_by_pid_substring_and_no_match_note() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "slash", *"412")
        assert shown_pids(app) == [world.trainer_pid(2)]
        await press(pilot, "backspace", "backspace")  # "4": every pid but none else
        assert sorted(shown_pids(app)) == ALL_PIDS
        await press(pilot, *"zzz-nothing")
        assert body(app) == [" no process matches the filter / GPU choice"]
        await press(pilot, "escape")
        assert sorted(shown_pids(app)) == ALL_PIDS


async def test_enter_on_an_empty_filter_hides_the_box() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "slash", "enter")
        assert not app.query_one(Input).display and table(app).has_focus
        assert sorted(shown_pids(app)) == ALL_PIDS


# -- tree ------------------------------------------------------------------------------------------


async def test_t_toggles_the_tree() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "t")
        assert app.sampler.want_relatives
        pids = shown_pids(app)
        rows = dict(zip(pids, body(app), strict=True))
        launcher = pids.index(world.LAUNCHER)
        assert "torchrun" in rows[world.LAUNCHER]
        cmd_x = lines(table(app))[0].index("COMMAND")
        assert rows[world.LAUNCHER][cmd_x:].startswith("torchrun")
        # The trainers under the launcher, each followed by its two data-loader workers.
        expected = []
        for g, trainer in enumerate(GPU_PIDS):
            expected += [trainer, trainer + 1, trainer + 2]
            last = g == len(GPU_PIDS) - 1
            assert rows[trainer][cmd_x:].startswith("└─ python" if last else "├─ python"), rows[trainer]
            stem = "   " if last else "│  "
            assert rows[trainer + 1][cmd_x:].startswith(stem + "├─ python"), rows[trainer + 1]
            assert rows[trainer + 2][cmd_x:].startswith(stem + "└─ python"), rows[trainer + 2]
        assert pids[launcher + 1 : launcher + 1 + len(expected)] == expected
        # Host processes have no GPU: their GPU cell is "-".
        assert rows[world.LAUNCHER].split()[0] == "-"
        assert rows[world.trainer_pid(0) + 1].split()[0] == "-"

        await press(pilot, "t")
        assert not app.view.tree
        assert sorted(shown_pids(app)) == ALL_PIDS
        assert not any("├─" in line or "└─" in line for line in body(app))


async def test_tree_with_a_filter_shows_only_related_processes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "t", "slash", *"mallory")
        # mallory's eval (pid 4999, parent 1) has no relatives among the host processes.
        assert shown_pids(app) == [world.WEIRD_PID], shown_pids(app)


# -- GPU choice ------------------------------------------------------------------------------------


async def test_g_chooses_a_gpu_and_g_again_shows_all() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "g")
        assert isinstance(app.screen, GpuChooser)
        options = app.screen.query_one(OptionList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert prompts[0] == "all GPUs" and prompts[3].startswith("GPU 2")
        for _ in range(options.option_count):
            if options.highlighted == 3:
                break
            await press(pilot, "down")
        await press(pilot, "enter")
        assert not isinstance(app.screen, GpuChooser)
        assert app.view.gpu == 2
        assert shown_pids(app) == [world.trainer_pid(2)]
        assert [line.split()[0] for line in body(app)] == ["2"]
        heads = panes(app)[::FULL_LINES]
        assert heads[2].startswith("▶ 2")
        assert not any("▶" in h for i, h in enumerate(heads) if i != 2)

        await press(pilot, "g")
        assert app.view.gpu is None
        assert sorted(shown_pids(app)) == ALL_PIDS
        assert not any("▶" in line for line in panes(app))


async def test_gpu_chooser_escape_keeps_all_gpus() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "g", "escape")
        assert not isinstance(app.screen, GpuChooser)
        assert app.view.gpu is None
        assert sorted(shown_pids(app)) == ALL_PIDS


# -- detail ----------------------------------------------------------------------------------------


async def _open_detail_with_enter(pilot: Pilot[int], app: GpuTuiApp, pid: int) -> DetailScreen:
    index = shown_pids(app).index(pid)
    await press(pilot, "home", *["down"] * index)
    assert known(table(app).current).pid == pid
    assert cursor_line(app).split()[1] == str(pid)
    await press(pilot, "enter")
    screen = app.screen
    assert isinstance(screen, DetailScreen)
    await until(pilot, lambda: screen.detail is not None)
    await pilot.pause()
    return screen


async def test_enter_opens_the_detail_of_the_highlighted_pid() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        pid = world.trainer_pid(2)
        screen = await _open_detail_with_enter(pilot, app, pid)
        assert screen.process.pid == pid
        text = screen_text(app)
        assert f"process {pid}" in text
        assert screen.detail is not None and screen.detail.error in GONE
        assert screen.detail.error in text
        assert "--rank 2" in text and "alice" in text
        await press(pilot, "escape")
        assert not isinstance(app.screen, DetailScreen)
        assert known(table(app).current).pid == pid


async def test_double_click_on_a_row_opens_its_detail() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        index = shown_pids(app).index(world.trainer_pid(3))
        await pilot.double_click(ProcessTable, offset=(20, 1 + index))
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        screen = app.screen
        assert isinstance(screen, DetailScreen) and screen.process.pid == world.trainer_pid(3)
        await until(pilot, lambda: screen.detail is not None)
        await pilot.pause()
        assert any(message in screen_text(app) for message in GONE)
        await press(pilot, "escape")
        assert not isinstance(app.screen, DetailScreen)


async def test_single_click_moves_the_cursor_only() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.click(ProcessTable, offset=(20, 3))
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)
        assert table(app).cursor == 2
        assert cursor_line(app).split()[1] == str(shown_pids(app)[2])


# -- pause, interval -------------------------------------------------------------------------------


async def test_p_pauses_and_resumes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert "PAUSED" not in header_bar(app)
        await press(pilot, "p")
        assert app.paused and "PAUSED" in header_bar(app)
        await press(pilot, "p")
        assert not app.paused and "PAUSED" not in header_bar(app)


async def test_plus_and_minus_change_the_interval() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert "every 1 s" in header_bar(app)
        await press(pilot, "plus")
        assert app.interval == 0.5 and "every 0.5 s" in header_bar(app)
        await press(pilot, "minus", "minus")
        assert app.interval == 2.0 and "every 2 s" in header_bar(app)
        assert app.query_one(GpuPanes).interval == 2.0
        for _ in range(len(INTERVALS)):
            await press(pilot, "minus")
        assert app.interval == INTERVALS[-1] and f"every {INTERVALS[-1]:g} s" in header_bar(app)
        for _ in range(len(INTERVALS) + 1):
            await press(pilot, "plus")
        assert app.interval == INTERVALS[0] and f"every {INTERVALS[0]:g} s" in header_bar(app)


# -- help, palette, quit ---------------------------------------------------------------------------


async def test_question_mark_opens_help() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.pause()
        text = screen_text(app)
        for key, description in app.KEYS.help():
            assert key in text
            assert description[:30] in text, description
        await press(pilot, "escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_command_palette_lists_the_app_commands() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await press(pilot, *"tree")

        def prompts() -> list[str]:
            return [str(o.prompt) for ol in app.screen.query(OptionList) for o in ol.options]

        await until(pilot, lambda: any(p.startswith("Tree view") for p in prompts()))
        await press(pilot, "enter")
        await until(pilot, lambda: not isinstance(app.screen, CommandPalette))
        await until(pilot, lambda: app.view.tree)
        await pilot.pause()
        assert world.LAUNCHER in shown_pids(app)


async def test_q_quits_with_status_0() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert not app.is_running


# -- the cursor across refreshes -------------------------------------------------------------------


def _with_sm(snap: Snapshot, sm: dict[int, int]) -> Snapshot:
    rows = tuple(replace(p, sm_util=sm.get(p.pid, p.sm_util)) for p in snap.processes)
    return replace(snap, processes=rows, time=snap.time + 1)


async def test_cursor_follows_its_pid_when_the_order_changes() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "p")  # from here on, only the snapshots this test posts
        await press(pilot, "s", "s")
        assert app.view.sort == "sm"
        assert shown_pids(app)[0] == world.trainer_pid(0)  # 93 %
        pid = world.trainer_pid(0)
        assert table(app).cursor == 0 and cursor_line(app).split()[1] == str(pid)

        snap = app.snapshot
        assert snap is not None
        await post(pilot, app, _with_sm(snap, {pid: 1, world.trainer_pid(3): 99}))
        assert shown_pids(app)[0] == world.trainer_pid(3)
        t = table(app)
        assert t.current is not None and t.current.pid == pid
        assert t.cursor != 0 and shown_pids(app)[t.cursor] == pid
        assert cursor_line(app).split()[1] == str(pid)
        assert "1%" in cursor_line(app).split()


async def test_cursor_stays_in_range_when_its_process_goes() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "p")  # from here on, only the snapshots this test posts
        await press(pilot, "end")
        t = table(app)
        last = shown_pids(app)[-1]
        assert t.current is not None and t.current.pid == last
        snap = app.snapshot
        assert snap is not None
        gone = replace(snap, processes=tuple(p for p in snap.processes if p.pid != last), time=snap.time + 1)
        await post(pilot, app, gone)
        assert last not in shown_pids(app)
        assert len(shown_pids(app)) == len(ALL_PIDS) - 1
        assert 0 <= t.cursor < len(t.rows) and t.current is not None
        assert cursor_line(app).split()[1] == str(t.current.pid)
        await press(pilot, "up")
        assert cursor_line(app).split()[1] == str(shown_pids(app)[-2])

        await post(pilot, app, replace(snap, processes=(), time=snap.time + 2))
        assert body(app) == [" no GPU processes"] and t.current is None
        await press(pilot, "enter", "down")  # nothing to open, nothing to move to
        assert not isinstance(app.screen, DetailScreen)
        await post(pilot, app, replace(snap, time=snap.time + 3))
        assert sorted(shown_pids(app)) == ALL_PIDS and t.current is not None


# -- hostile command lines -------------------------------------------------------------------------


async def test_markup_and_control_characters_render_literally_in_the_table() -> None:
    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await first_frame(pilot, app)
        y = 1 + shown_pids(app).index(world.WEIRD_PID)
        assert table(app).cursor != y - 1
        row = lines(table(app))[y]
        assert "python eval.py --tag [/] [bold]not bold[/bold] ?[31mred? [link=x]y" in row
        x = row.index("not bold")
        assert not any(style.bold for _, style in table(app)._lines[y][x : x + 8])  # not read as markup
        for line in table(app)._lines:
            assert all(ch.isprintable() for ch, _ in line)


async def test_markup_and_control_characters_render_literally_in_the_detail() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        screen = await _open_detail_with_enter(pilot, app, world.WEIRD_PID)
        assert screen.process.pid == world.WEIRD_PID
        text = screen_text(app)
        assert f"process {world.WEIRD_PID}" in text
        assert "python eval.py --tag [/] [bold]not bold[/bold] ?[31mred? [link=x]y" in text
        assert "mallory" in text
        assert "\x1b" not in text and "\x07" not in text, repr(text)


# -- layout ----------------------------------------------------------------------------------------


async def test_8_gpus_at_120x40_show_every_gpus_history_and_leave_the_table_20_rows() -> None:
    """The box of issue 16: every GPU with its util and memory sparklines, and the table still shows
    at least 20 rows (the layout engine picks two columns of panes there)."""
    app = make_app(gpus=8)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        drawn = panes(app)
        text = "\n".join(drawn)
        for g in range(8):
            assert f" {g} H100" in text
        assert sum(line.count("SM act") for line in drawn) == 8  # the demo's H100s: SM activity's history
        assert sum(line.count("mem ") for line in drawn) == 8
        assert all(SPARK & set(line) for line in drawn if "SM act" in line or "mem " in line)
        t = table(app)
        assert t.size.height - 1 >= 20  # its header, then 20 rows
        assert len(body(app)) == 10 == len(t.rows)  # every row of this world drawn


async def test_4_gpus_at_80x24_are_compact_with_inline_sparklines() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        assert app.query_one(GpuPanes).compact
        drawn = panes(app)
        assert len(drawn) == 4
        for g, line in enumerate(drawn):
            assert line.startswith(f" {g:>2} H100")
            assert SPARK & set(line) and "%" in line and "°C" in line
        assert len(body(app)) == len(ALL_PIDS)


async def test_16_gpus_at_120x40_switch_to_compact() -> None:
    app = make_app(gpus=16)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.query_one(GpuPanes).compact
        drawn = panes(app)
        assert len(drawn) == 16
        assert all(SPARK & set(line) for line in drawn)
        assert len(body(app)) >= 10


async def test_resizing_keeps_the_cursor_on_its_pid() -> None:
    app = make_app(gpus=4)

    def width_is(width: int) -> Callable[[], bool]:
        return lambda: table(app).size.width == width

    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        pid = world.trainer_pid(3)
        await press(pilot, "home", *["down"] * shown_pids(app).index(pid))
        assert known(table(app).current).pid == pid
        for size, compact in (((80, 24), True), ((200, 60), False), ((120, 40), False), ((80, 24), True)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            await until(pilot, width_is(size[0]))
            await pilot.pause()
            assert app.query_one(GpuPanes).compact == compact, size
            assert known(table(app).current).pid == pid
            assert cursor_line(app).split()[1] == str(pid)
            assert all(len(line) == size[0] for line in table(app)._lines)
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert app.is_running


# -- bad samples -----------------------------------------------------------------------------------


def _bad(snap: Snapshot) -> Snapshot:
    gpus = tuple(GpuSample(index=g.index, lost=g.index == 1) for g in snap.gpus)
    unknown = {"used_memory": None, "sm_util": None, "mem_util": None, "visible": True}
    procs = (  # near the largest pid_max (4194304): no such process here
        ProcessRow(gpu=0, pid=4194301, kinds="C", **unknown),  # type: ignore[arg-type]
        ProcessRow(
            gpu=2,
            pid=4194302,
            kinds="",
            **unknown,  # type: ignore[arg-type]
            user=None,
            command=None,
            create_time=None,
            cpu_percent=None,
            rss=None,
            state=None,
        ),
    )
    return replace(
        snap,
        time=snap.time + 1,
        gpus=gpus,
        processes=procs,
        unaccounted_memory={},
        driver_version=None,
        cuda_driver_version=None,
        errors=("NVML: GPU 1 is lost",),
    )


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["full", "compact"])
async def test_a_bad_sample_never_crashes(size: tuple[int, int]) -> None:
    app = quiet_app()
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "p")  # from here on, only the snapshots this test posts (`t` wakes the sampler)
        snap = app.snapshot
        assert snap is not None
        await post(pilot, app, _bad(snap))
        drawn = panes(app)
        text = "\n".join(drawn)
        assert "LOST" in text and "n/a" in text
        heads = drawn[:: 1 if app.query_one(GpuPanes).compact else FULL_LINES]
        assert "LOST" in heads[1] and "LOST" not in heads[0]
        assert "n/a" in heads[0]
        assert sorted(shown_pids(app)) == [4194301, 4194302]
        assert all("n/a" in line for line in body(app))
        # PAUSED and the error are on the header at any width; the versions give way on a narrow one.
        assert "PAUSED" in header_bar(app) and "⚠ NVML: GPU 1" in header_bar(app)
        if size[0] >= 120:
            assert "driver n/a" in header_bar(app) and "⚠ NVML: GPU 1 is lost" in header_bar(app)
        else:
            assert "driver" not in header_bar(app)
        # Still alive: keys work and every view copes with the unknowns.
        for keys in (["s"] * 8, ["S"], ["t"], ["t"], ["slash", *"4194302", "enter"]):
            await press(pilot, *keys)
            assert body(app), keys
        assert shown_pids(app) == [4194302]
        await _open_detail_with_enter(pilot, app, 4194302)
        assert "n/a" in screen_text(app)
        await press(pilot, "escape")
        await post(pilot, app, replace(snap, time=snap.time + 2))  # and a good sample after it
        assert "LOST" not in "\n".join(panes(app))
        assert app.is_running
