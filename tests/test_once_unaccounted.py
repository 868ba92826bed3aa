"""`--once` and the TUI show a GPU's unaccounted memory from the same threshold; and a process this PID
namespace cannot see has unknown device files (null in --json), not none."""

from __future__ import annotations

import json

import pytest

from gputui.analyze.classify import UNACCOUNTED_MIN
from gputui.collect.procs.holders import HolderScan
from gputui.collect.procs.join import ProcessJoiner
from gputui.model import GpuProcess, GpuSample, Snapshot
from gputui.output.jsonout import dumps
from gputui.output.oneshot import render
from tests.builders import snapshot
from tests.collect.test_procs import _free_pid

MIB = 1 << 20


def snap(unaccounted: int | None) -> Snapshot:
    return snapshot(
        time=0.0,
        hostname="h",
        source="nvml",
        gpus=(GpuSample(index=0, name="GPU", mem_total=80 << 30, mem_used=10 << 30),),
        processes=(),
        unaccounted_memory={0: unaccounted},
    )


def test_the_threshold_is_the_tuis() -> None:
    from gputui.ui.widgets import process_rows

    assert process_rows.UNACCOUNTED_MIN is UNACCOUNTED_MIN
    assert UNACCOUNTED_MIN == 64 * MIB


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        (None, False),
        (0, False),
        (MIB, False),
        (UNACCOUNTED_MIN - 1, False),
        (UNACCOUNTED_MIN, True),
        (3 << 30, True),
    ],
)
def test_once_shows_unaccounted_memory_from_the_threshold(extra: int | None, shown: bool) -> None:
    text = render(snap(extra), width=160)
    assert ("unaccounted" in text) is shown, text


def test_a_pid_not_visible_here_has_unknown_devices() -> None:
    ghost = _free_pid()  # in NVML's list, not in this PID namespace
    scan = HolderScan(holders={}, unreadable=frozenset(), full=True)
    rows, _ = ProcessJoiner().join(
        [GpuProcess(gpu=0, pid=ghost, kinds="C", used_memory=1 << 30)], scan, {0: 0}
    )
    (row,) = rows
    assert (row.visible, row.category, row.devices) == (False, "nvml-only", None)
    data = json.loads(dumps(snapshot(hostname="h", source="nvml", processes=rows)))
    assert data["processes"][0]["devices"] is None
