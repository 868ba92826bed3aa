"""A process whose memory grows toward its GPU's limit: ↑ on its GPU MEM, `full in ~14m · ` before its
command, the trend in words in the detail; a hung one says so on its row and in the detail."""

from __future__ import annotations

import dataclasses
from typing import Any

from gputui.model import ProcessDetail
from gputui.ui.screens.detail import memory_trend, render_detail
from gputui.ui.widgets.process_rows import View, build_rows
from tests.ui import world
from tests.ui.test_detail_fields import text_of

MIB = 1 << 20


def snap_with(**changes: Any):  # type: ignore[no-untyped-def]
    snap = world.snapshots(gpus=2, seconds=1)[-1]
    rows = tuple(
        dataclasses.replace(r, **changes) if r.pid == world.trainer_pid(0) else r for r in snap.processes
    )
    return dataclasses.replace(snap, processes=rows)


def cells_of(snap, pid: int) -> list[str]:  # type: ignore[no-untyped-def]
    row = next(r for r in build_rows(snap, View()) if r.pid == pid)
    return [c.plain for c in row.cells]


def test_a_growing_process_is_marked_and_says_when_its_gpu_is_full() -> None:
    snap = snap_with(memory_growth=2 * MIB, full_in=14 * 60 + 5)
    cells = cells_of(snap, world.trainer_pid(0))
    assert cells[4].endswith("GiB↑") and cells[-1].startswith("full in ~14m · python train.py")
    calm = cells_of(snap, world.trainer_pid(1))
    assert not calm[4].endswith("↑") and calm[-1].startswith("python train.py")
    trainer = next(r for r in snap.processes if r.pid == world.trainer_pid(0))
    assert memory_trend(trainer) == "growing 120 MiB/min — this GPU is full in ~14 min"  # as Events says it


def test_a_far_off_full_gpu_earns_no_badge_and_a_flat_trend_says_so() -> None:
    far = snap_with(memory_growth=1024.0, full_in=5 * 3600.0)
    assert cells_of(far, world.trainer_pid(0))[-1].startswith("python train.py")
    trainer = next(r for r in far.processes if r.pid == world.trainer_pid(0))
    assert memory_trend(trainer) == "flat (under 1 MiB/min)"


def test_a_hung_process_says_so_on_its_row_and_in_its_detail() -> None:
    why = "possibly hung (collective wait): 99% busy at idle power, 0% CPU for 3 min"
    snap = snap_with(hung=why)
    assert cells_of(snap, world.trainer_pid(0))[-1].startswith("hung · ")
    trainer = next(r for r in snap.processes if r.pid == world.trainer_pid(0))
    detail = ProcessDetail(trainer.pid, None, None, None, False, None, ())
    assert why in text_of(render_detail(trainer, detail), width=200)
