"""Leftovers are tied to their memory: a GPU's unaccounted memory names its likely holders (orphans,
children of a defunct parent: they hold the GPU's device file and NVML lists no memory for them), an
orphan's row shows the share it likely holds as an estimate (`~4.8 GiB?`), Enter on the unaccounted row
lists the holders and `k` offers to signal exactly them, on real processes, through the kill dialog."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psutil

from gputui.analyze.classify import ORPHAN, WORKER, Leftover, estimated, leftovers, likely_holders
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Category, ProcessRow
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.kill import KillScreen
from gputui.ui.screens.leftovers import LeftoverScreen
from gputui.ui.widgets.process_rows import View, build_rows
from tests.builders import holder_row
from tests.helpers import Children, screen_text, until
from tests.ui.conftest import first_frame
from tests.ui.drawn import body, lines, table
from tests.ui.test_kill import (
    SIZE,
    SLEEPER,
    dialog_pids,
    ended,
    open_dialog,
    press,
    row_of,
    said,
    snapshot,
    status,
)

GIB = 1 << 30
GPU = 1


HELD = 9 * GIB + GIB // 2


def holder(pid: int, gpu: int = GPU, category: Category = ORPHAN, **changes: object) -> ProcessRow:
    row = holder_row(
        gpu,
        pid,
        user="carol",
        command=f"python finetune.py --worker {pid}",
        create_time=1000.0 + pid,
        state="sleeping",
        ppid=1,
        devices=(f"/dev/nvidia{gpu}", "/dev/nvidiactl"),
        category=category,
        reason="parent gone (now 1 systemd); not in NVML's list",
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def rank(pid: int, gpu: int = GPU, **changes: object) -> ProcessRow:
    return replace(holder(pid, gpu, "ok"), kinds="C", used_memory=40 * GIB, devices=(), **changes)  # type: ignore[arg-type]


def app_with_leftover(*rows: ProcessRow, readonly: bool = False) -> GpuTuiApp:
    """The app on one snapshot of `rows` where GPU 1 has HELD bytes no listed process accounts for."""
    snap = replace(snapshot(*rows), unaccounted_memory={GPU: HELD})
    return GpuTuiApp(
        ReplaySampler([snap]), interval=30.0, devices_dir=Path("/nonexistent"), readonly=readonly
    )


# -- who likely holds it -------------------------------------------------------------------------------


def test_the_likely_holders_are_orphans_and_children_of_a_defunct_parent_on_that_gpu() -> None:
    procs = [
        rank(100),
        holder(101, category=WORKER, ppid=100),  # a live rank's worker: its memory is its rank's
        holder(102),  # an orphan: yes
        holder(103, gpu=0),  # an orphan of another GPU
        rank(200, state="zombie"),
        holder(201, category=WORKER, ppid=200),  # its parent is defunct: yes
        holder(300, state="zombie", category="defunct"),  # exited: its descriptors are closed
        holder(301, visible=False),  # not visible here: nothing to signal
        replace(holder(302), kinds="C", used_memory=GIB),  # in NVML's list: accounted for already
    ]
    assert [p.pid for p in likely_holders(procs, GPU)] == [102, 201]
    assert [p.pid for p in likely_holders(procs, 0)] == [103]


def test_each_holder_is_estimated_an_even_share_and_small_leftovers_are_none() -> None:
    snap = replace(snapshot(rank(100), holder(102), holder(104)), unaccounted_memory={0: 10 << 20, GPU: HELD})
    found = leftovers(snap)
    assert list(found) == [GPU]  # 10 MiB on GPU 0 is the driver's bookkeeping, no row
    assert found[GPU].share == HELD // 2 and estimated(HELD // 2) == "~4.8 GiB?"
    assert Leftover(GPU, HELD, ()).share is None


# -- the table -----------------------------------------------------------------------------------------


def test_an_orphan_row_shows_its_estimated_share_and_the_unaccounted_row_names_its_holders() -> None:
    snap = replace(snapshot(rank(100), holder(102), holder(104)), unaccounted_memory={GPU: HELD})
    rows = {r.key.split("/")[1]: r for r in build_rows(snap, View())}
    memory = 4  # GPU MEM's index
    assert rows["102"].cells[memory].plain == "~4.8 GiB?"
    assert rows["100"].cells[memory].plain == "40.0 GiB"  # a measured amount carries no mark
    unaccounted = rows["unaccounted"]
    assert unaccounted.cells[memory].plain == "9.5 GiB"
    assert "likely held by 102, 104" in unaccounted.cells[-1].plain
    assert unaccounted.leftover is not None and [p.pid for p in unaccounted.leftover.holders] == [102, 104]
    nothing = replace(snap, unaccounted_memory={GPU: 0})
    assert build_rows(nothing, View())[1].cells[memory].plain == "-"  # no unaccounted memory: no estimate


async def test_the_note_under_the_table_explains_the_estimate() -> None:
    snap_rows = (rank(100), holder(102), holder(104))
    app = app_with_leftover(*snap_rows)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "down")
        note = " ".join(line.strip() for line in lines(app.row_note))
        assert "pid 102" in note and "~4.8 GiB?: an estimate (~), not measured (?)" in note
        assert "split evenly among its 2 likely holders (102, 104)" in note


# -- Enter and k on the unaccounted row, on real processes --------------------------------------------


def _orphans(spawn: Children, count: int = 2) -> tuple[list[psutil.Process], list[ProcessRow]]:
    procs = [spawn.start(SLEEPER)[0] for _ in range(count)]
    rows = [
        replace(
            row_of(p, f"python finetune.py --worker {i}", gpu=GPU),
            kinds="",
            used_memory=None,
            sm_util=None,
            mem_util=None,
            devices=(f"/dev/nvidia{GPU}",),
            category=ORPHAN,
            reason="parent gone",
        )
        for i, p in enumerate(procs)
    ]
    return procs, rows


async def test_enter_lists_the_holders_and_k_signals_exactly_them(spawn: Children) -> None:
    trainer = spawn.start(SLEEPER)[0]
    procs, rows = _orphans(spawn)
    app = app_with_leftover(row_of(trainer, "python train.py", gpu=GPU), *rows)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "end")
        current = table(app).current
        assert current is not None and current.key == f"{GPU}/unaccounted"
        await press(pilot, "enter")
        await until(pilot, lambda: isinstance(app.screen, LeftoverScreen))
        await pilot.pause()
        text = screen_text(app)
        assert all(str(p.pid) in text for p in procs) and str(trainer.pid) not in text
        assert "~4.8 GiB?" in text and "an estimate (~)" in text
        await press(pilot, "k")
        await until(pilot, lambda: isinstance(app.screen, KillScreen))
        await pilot.pause()
        assert sorted(dialog_pids(app)) == sorted(p.pid for p in procs)  # never the trainer
        text = screen_text(app)
        assert "Estimated holders of GPU 1's 9.5 GiB unaccounted memory" in text
        assert "~9.5 GiB? estimated" in " ".join(text.split())
        await press(pilot, "y")
        await until(pilot, lambda: all(ended(spawn, p) for p in procs), timeout=5.0)
        assert not ended(spawn, trainer)
        await said(pilot, app, "gone")


async def test_k_on_the_unaccounted_row_opens_the_dialog_for_its_holders(spawn: Children) -> None:
    procs, rows = _orphans(spawn, count=1)
    app = app_with_leftover(*rows)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert "likely held by" in body(app)[-1]
        await press(pilot, "end")
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [procs[0].pid]
        assert screen.entries[0].memory == "~9.5 GiB?"  # one holder: all of it, as an estimate
        assert screen.entries[0].target.create_time == procs[0].create_time()
        await press(pilot, "escape")
        assert not ended(spawn, procs[0])


async def test_read_only_says_why_k_on_the_unaccounted_row_sends_nothing(spawn: Children) -> None:
    procs, rows = _orphans(spawn, count=1)
    app = app_with_leftover(*rows, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "end", "enter")
        await until(pilot, lambda: isinstance(app.screen, LeftoverScreen))
        await press(pilot, "k")
        await until(pilot, lambda: not isinstance(app.screen, LeftoverScreen))
        assert "read-only" in status(app) and not isinstance(app.screen, KillScreen)
        assert not ended(spawn, procs[0])
