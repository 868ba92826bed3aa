"""A defunct process is one row per (GPU, pid), whether NVML lists it, its parent, or both."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from gputui.analyze.classify import DEFUNCT
from gputui.collect.procs.holders import HolderScan
from gputui.collect.procs.join import ProcessJoiner
from gputui.model import GpuProcess
from tests.helpers import wait_until


@pytest.fixture
def zombie() -> Iterator[int]:
    """A child of this test that has exited and that the test does not reap (until the end)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 10.0)
        yield child.pid
    finally:
        child.wait(timeout=10)


def scan(*zombies: int) -> HolderScan:
    return HolderScan(holders={}, unreadable=frozenset(), full=True, zombies=frozenset(zombies))


def gp(gpu: int, pid: int) -> GpuProcess:
    return GpuProcess(gpu=gpu, pid=pid, kinds="C", used_memory=1 << 30)


@pytest.mark.parametrize("zombie_gpu", [0, 1])
def test_a_defunct_process_nvml_lists_is_one_row(zombie: int, zombie_gpu: int) -> None:
    # Its parent (this test) is on GPU 0 and NVML still lists the defunct one (its context not torn down).
    rows, _ = ProcessJoiner().join([gp(0, os.getpid()), gp(zombie_gpu, zombie)], scan(zombie), {0: 0, 1: 1})
    mine = [r for r in rows if r.pid == zombie]
    assert [(r.gpu, r.kinds, r.category) for r in mine] == [(zombie_gpu, "C", DEFUNCT)]
    assert mine[0].used_memory == 1 << 30  # NVML's row, with its memory, is the one kept
    assert len({(r.gpu, r.pid) for r in rows}) == len(rows)


def test_a_defunct_child_nvml_does_not_list_still_has_its_row(zombie: int) -> None:
    rows, _ = ProcessJoiner().join([gp(0, os.getpid())], scan(zombie), {0: 0})
    mine = [r for r in rows if r.pid == zombie]
    assert [(r.gpu, r.kinds, r.category) for r in mine] == [(0, "", DEFUNCT)]
    assert f"its parent {os.getpid()} has not reaped it" in mine[0].reason
