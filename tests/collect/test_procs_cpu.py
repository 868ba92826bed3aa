"""%CPU of the processes the joiner reports: measured once per tick over the interval between ticks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest

import gputui.collect.procs.join as procs_module
from gputui.collect.procs.holders import Holder, HolderScan
from gputui.collect.procs.join import _CLOCK_TICKS, ProcessJoiner
from gputui.model import GpuProcess


class TickClock:
    """A monotonic clock that moves 5 ms at every reading: the time a tick's work takes."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        self.t += 0.005
        return self.t


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL)
    yield p
    p.kill()
    p.wait(timeout=10)


def test_a_parent_read_for_its_child_and_as_a_relative_is_read_once_per_tick(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """gputui is the parent of the demo's trainers, and busy while it samples: read a second time a
    few milliseconds later (as a tree view relative), it showed 69-183 % while `top` said 2 %."""
    parent = os.getpid()
    reads: Counter[int] = Counter()
    real_read_stat = procs_module._read_stat
    busy_ticks = 0

    def read_stat(pid: int) -> object:
        nonlocal busy_ticks
        reads[pid] += 1
        stat = real_read_stat(pid)
        if pid != parent or not isinstance(stat, procs_module._Stat):
            return stat
        busy_ticks += 1  # the parent uses one clock tick (10 ms) between any two readings
        return procs_module._Stat(stat.state, stat.ppid, busy_ticks, stat.start_ticks, stat.rss)

    monkeypatch.setattr(procs_module, "_read_stat", read_stat)
    clock = TickClock()
    joiner = ProcessJoiner(clock)
    device = "/dev/nvidia0"
    scan = HolderScan({child.pid: Holder(child.pid, (device,), (0,))}, frozenset(), True)
    listed = [GpuProcess(gpu=0, pid=child.pid, kinds="C", used_memory=1 << 30)]
    for tick in range(3):
        clock.t += 1.0  # the interval between ticks
        reads.clear()
        rows, hosts = joiner.join(listed, scan, {0: 0}, relatives=True)
        assert reads[parent] == 1, "one reading per process per tick"
        (me,) = [h for h in hosts if h.pid == parent]
        if tick == 0:
            assert me.cpu_percent is None  # a first reading: unknown
        else:
            # One clock tick over the ~1 s since the last tick's reading: about 1 %, not 100 %+.
            assert me.cpu_percent is not None
            assert me.cpu_percent == pytest.approx(100.0 / _CLOCK_TICKS, rel=0.1)
        assert rows[0].cpu_percent is None or rows[0].cpu_percent < 50


def test_a_clock_that_did_not_move_keeps_the_last_value(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    t = [10.0]
    joiner = ProcessJoiner(lambda: t[0])
    listed = [GpuProcess(gpu=0, pid=child.pid, kinds="C", used_memory=1)]
    assert joiner.join(listed)[0][0].cpu_percent is None
    t[0] += 1.0
    measured = joiner.join(listed)[0][0].cpu_percent
    assert measured is not None
    again = joiner.join(listed)[0][0].cpu_percent  # no time passed: nothing to divide by
    assert again == measured
