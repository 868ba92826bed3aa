"""The process table widget on a training job: `f` shows or folds one rank's workers, `F` all of them;
←/→ scroll COMMAND (the fold mark and tree branches stay); every drawn line fits the table in terminal
cells, wide and combining characters included; at 120x40 with 8 ranks x 3 workers, every rank is on
screen in the app."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.app import App, ComposeResult
from textual.pilot import Pilot

from gputui import cells
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.process_rows import View
from gputui.ui.widgets.process_table import SCROLL_STEP, ProcessTable, fit, skip_cells
from tests.builders import holder_row
from tests.ui import world
from tests.ui.conftest import first_frame
from tests.ui.drawn import body, header_line, lines, shown_pids, table
from tests.ui.test_process_rows import _proc, job, rank_pid

CJK_COMMAND = "python3 训练脚本.py --数据集 /数据/中文语料库/第一部分 --名字 e\u0301te\u0301 " + "长" * 40


class TableApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.header_clicks: list[str] = []

    def compose(self) -> ComposeResult:
        yield ProcessTable(id="procs")

    def on_process_table_header_clicked(self, message: ProcessTable.HeaderClicked) -> None:
        self.header_clicks.append(message.column)


def drawn(app: App[None]) -> list[str]:
    return lines(app.query_one(ProcessTable))


def command_x(app: App[None]) -> int:
    return drawn(app)[0].index("COMMAND")


async def shown(pilot: Pilot[None], snap: Snapshot, view: View | None = None) -> ProcessTable:
    t = pilot.app.query_one(ProcessTable)
    t.show(snap, view or View())
    t.focus()
    await pilot.pause()
    return t


def pids(app: App[None]) -> list[int]:
    return [int(line.split()[1]) for line in drawn(app)[1:]]


# -- width in cells ---------------------------------------------------------------------------------


def test_fit_measures_cells() -> None:
    assert fit("训练", 4) == "训练"
    assert fit("训练x", 4) == "训 …"  # 2 cells, a space where half a character would be, then …
    assert cells.width(fit("训练x", 4)) == 4
    assert fit("e\u0301", 3, "right") == "  e\u0301"  # a combining mark takes no cell
    assert cells.width(fit(CJK_COMMAND, 50)) == 50


def test_skip_cells() -> None:
    assert skip_cells("abcdef", 2) == "cdef"
    assert skip_cells("训练ab", 2) == "练ab"
    assert skip_cells("训练ab", 1) == " 练ab"  # half a wide character: a space
    assert skip_cells("ab", 5) == ""


async def test_a_cjk_and_combining_command_line_fits_the_table() -> None:
    snap = job(ranks=2, extra=(_proc(1, 9000, "ok", 1, command=CJK_COMMAND),))
    app = TableApp()
    async with app.run_test(size=(120, 20)) as pilot:
        t = await shown(pilot, snap)
        for text in drawn(app):
            assert cells.width(text) <= 120, text
        row = next(line for line in drawn(app) if "训练" in line)
        assert cells.width(row) == 120 and row.endswith("…")  # cut at the table's edge, and says so
        t.action_scroll_command(1)
        await pilot.pause()
        assert all(cells.width(text) <= 120 for text in drawn(app))


# -- folding ----------------------------------------------------------------------------------------


async def test_f_shows_the_workers_of_the_rank_under_the_cursor_and_folds_them_again() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        t = await shown(pilot, job(ranks=3))
        assert pids(app) == [rank_pid(g) for g in range(3)]
        x = command_x(app)
        assert drawn(app)[1][x:].startswith("+3 python3 -u train.py")
        await pilot.press("down", "f")
        await pilot.pause()
        assert pids(app) == [5000, 5010, 5011, 5012, 5013, 5020]
        x = command_x(app)  # the workers shown have a class: CLASS takes its cells, COMMAND moves
        assert drawn(app)[2][x:].startswith("-3 python3")
        assert drawn(app)[3][x:].startswith("├─ python3")
        assert t.current is not None and t.current.pid == 5010  # the cursor stays on the rank
        await pilot.press("down", "down", "f")  # on a worker: folds its rank, the cursor goes to it
        await pilot.pause()
        assert pids(app) == [5000, 5010, 5020]
        assert t.current is not None and t.current.pid == 5010


async def test_F_shows_every_worker_then_folds_them_all() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        t = await shown(pilot, job(ranks=3))
        await pilot.press("F")
        await pilot.pause()
        assert len(pids(app)) == 12 and not t.workers_folded
        await pilot.press("f")  # one rank folded back, the others stay open
        await pilot.pause()
        assert pids(app) == [5000, 5010, 5011, 5012, 5013, 5020, 5021, 5022, 5023]
        await pilot.press("F")
        await pilot.pause()
        assert pids(app) == [5000, 5010, 5020] and t.workers_folded


async def test_the_folding_survives_the_next_tick() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        t = await shown(pilot, job(ranks=2))
        await pilot.press("f")
        await pilot.pause()
        t.show(replace(job(ranks=2), time=10_005.0), View())
        await pilot.pause()
        assert pids(app) == [5000, 5001, 5002, 5003, 5010]


async def test_f_on_a_process_without_workers_does_nothing() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        t = await shown(pilot, job(ranks=2, workers=0))
        before = drawn(app)
        await pilot.press("f")
        await pilot.pause()
        assert drawn(app) == before and t.folding.expanded == frozenset()


# -- scrolling COMMAND ------------------------------------------------------------------------------


async def test_left_and_right_scroll_the_command_and_keep_the_fold_mark() -> None:
    app = TableApp()
    async with app.run_test(size=(80, 20)) as pilot:
        t = await shown(pilot, job(ranks=2))
        x = command_x(app)
        await pilot.press("right")
        await pilot.pause()
        assert t.command_offset == SCROLL_STEP
        assert drawn(app)[1][x:].startswith("+3 " + "python3 -u train.py"[SCROLL_STEP:])
        assert f"COMMAND ◂{SCROLL_STEP}" in drawn(app)[0]
        for _ in range(50):  # never past the end of the longest command shown
            await pilot.press("right")
        await pilot.pause()
        assert "--rank" in drawn(app)[1] or "0" in drawn(app)[1][x:]
        assert drawn(app)[1][x + 3 :].strip()  # something of the command is still on screen
        for _ in range(60):
            await pilot.press("left")
        await pilot.pause()
        assert t.command_offset == 0 and "◂" not in drawn(app)[0]
        assert drawn(app)[1][x:].startswith("+3 python3 -u")


# -- the app: 8 ranks x 3 workers at 120x40 ---------------------------------------------------------


def _with_workers(snap: Snapshot) -> Snapshot:
    """The world's trainers, each with 3 data-loader workers that hold its GPU (class worker)."""
    workers = [
        holder_row(
            p.gpu,
            p.pid + 5 + w,
            user=p.user,
            command=p.command,
            cpu_percent=30.0,
            rss=2 << 30,
            create_time=p.create_time,
            state="sleeping",
            ppid=p.pid,
            category="worker",
        )
        for p in snap.processes
        if p.ppid == world.LAUNCHER
        for w in range(3)
    ]
    return replace(snap, processes=(*snap.processes, *workers))


async def test_every_rank_of_an_8_gpu_job_with_workers_is_on_screen_at_120x40() -> None:
    snaps = [_with_workers(s) for s in world.snapshots(gpus=8, seconds=60)]
    app = GpuTuiApp(ReplaySampler(snaps[30:]), interval=1.0, devices_dir=Path("/nonexistent"))
    for snap in snaps[:30]:
        app.ingest(snap)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        ranks = [world.trainer_pid(g) for g in range(8)]
        assert set(ranks) <= set(shown_pids(app)), body(app)
        x = header_line(app).index("COMMAND")
        rows = dict(zip(shown_pids(app), body(app), strict=False))
        assert all(rows[pid][x:].startswith("+3 python train.py") for pid in ranks)
        assert table(app).rows[0].workers  # folded by default, not by a key press


async def test_a_click_on_the_fold_mark_shows_the_workers_and_elsewhere_only_moves_the_cursor() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        t = await shown(pilot, job(ranks=3))
        x = command_x(app)
        await pilot.click(ProcessTable, offset=(x + 5, 2))  # on the command, not the mark
        await pilot.pause()
        assert pids(app) == [5000, 5010, 5020] and t.cursor == 1
        await pilot.click(ProcessTable, offset=(x + 1, 3))  # on "+3" of the third rank
        await pilot.pause()
        assert pids(app) == [5000, 5010, 5020, 5021, 5022, 5023]
        assert t.current is not None and t.current.pid == 5020


async def test_a_click_on_a_header_is_one_click() -> None:
    """Textual calls on_click of every class in the MRO: ProcessTable's must not call CursorTable's again
    (a header click sorted, then reversed at once)."""
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, job(ranks=2))
        await pilot.click(ProcessTable, offset=(drawn(app)[0].index("PID") + 1, 0))  # widths: the content's
        await pilot.pause()
        assert app.header_clicks == ["pid"]
