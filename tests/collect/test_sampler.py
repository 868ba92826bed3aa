"""Sampler: one snapshot per tick from a source joined with the host; slow fields on their own cadence."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.analyze.history import History
from gputui.collect.sampler import Sampler
from gputui.collect.sources.base import Reading, SourceInfo
from gputui.collect.sources.demo import DemoSource
from gputui.model import GpuProcess, GpuSample
from tests.helpers import known

GIB = 1 << 30


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class RecordingSource:
    """A GPU source without GPUs or processes of its own: records the `slow` flag of every read."""

    name = "demo"
    devices_dir = Path("/nonexistent")

    def __init__(self, gpus: int = 2) -> None:
        self.gpus = gpus
        self.slow: list[bool] = []
        self.opened = self.closed = 0

    def open(self) -> SourceInfo:
        self.opened += 1
        return SourceInfo(driver_version="1.0", nvml_version="2.0", cuda_driver_version="3.0")

    def read(self, slow: bool) -> Reading:
        self.slow.append(slow)
        n = len(self.slow)
        gpus = tuple(
            GpuSample(index=i, util_gpu=n % 101, mem_total=100, mem_used=n % 101, power=float(n))
            for i in range(self.gpus)
        )
        return Reading(gpus, (GpuProcess(gpu=0, pid=os.getpid(), kinds="C", used_memory=10),), ("note",))

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def demo_sampler() -> Iterator[tuple[Sampler, DemoSource, FakeClock]]:
    clock = FakeClock(1_700_000_000.0)
    src = DemoSource(gpus=3, clock=clock, start_at=120.0)
    sampler = Sampler(src, clock=clock)
    try:
        sampler.open()
        yield sampler, src, clock
    finally:
        sampler.close()


def test_snapshot_from_the_demo(demo_sampler: tuple[Sampler, DemoSource, FakeClock]) -> None:
    sampler, src, clock = demo_sampler
    first = sampler.tick()
    clock.t += 1.0
    snap = sampler.tick()
    assert sampler.ticks == 2
    assert snap.time == clock.t
    assert snap.hostname == socket.gethostname()
    assert snap.source == "demo"
    assert (snap.driver_version, snap.nvml_version, snap.cuda_driver_version) == (
        "580.95.05",
        "13.580.95.05",
        "13.0",
    )
    assert [g.index for g in snap.gpus] == [0, 1, 2]
    for g in snap.gpus:
        assert g.name and g.uuid and g.pci_bus_id
        assert g.util_gpu is not None and 0 <= g.util_gpu <= 100
        assert g.mem_total and g.mem_used and 0 < g.mem_used <= g.mem_total
        assert g.power is not None and g.power_limit is not None and g.temperature is not None
        assert g.energy is not None
    assert known(snap.gpus[0].energy) > known(first.gpus[0].energy)  # a second of power, integrated

    trainers = {p.pid: p for p in snap.processes if p.pid in {t.pid for t in src.trainers}}
    assert sorted(known(p.gpu) for p in trainers.values()) == [0, 1, 2]
    for gpu, popen in enumerate(src.trainers):
        row = trainers[popen.pid]
        assert row.gpu == gpu and row.kinds == "C" and row.visible
        assert row.ppid == os.getpid()
        assert row.command is not None and f"--role trainer --gpu {gpu}" in row.command
        assert row.user and row.rss and row.create_time and row.state
        assert row.cpu_percent is not None  # second tick
    assert all(p.cpu_percent is None for p in first.processes)  # first sighting

    (ghost,) = [p for p in snap.processes if p.pid == src.ghost_pid]
    assert ghost.gpu == 2 and ghost.visible is False and ghost.used_memory == GIB
    assert snap.unaccounted_memory == {0: GIB + GIB // 2, 1: 0, 2: 0}
    assert snap.errors == ()


def test_slow_fields_on_their_own_cadence() -> None:
    src = RecordingSource()
    mono = FakeClock(500.0)
    sampler = Sampler(src, slow_interval=5.0, monotonic=mono)
    with sampler:
        assert src.opened == 1
        expected = []
        for t, slow in [
            (500.0, True),
            (501.0, False),
            (504.9, False),
            (505.0, True),
            (505.1, False),
            (509.9, False),
            (510.0, True),
            (600.0, True),
            (600.5, False),
            (604.0, False),
        ]:
            mono.t = t
            sampler.tick()
            expected.append(slow)
        assert src.slow == expected
    assert src.closed == 1


def test_the_first_tick_is_slow_whatever_the_clock() -> None:
    src = RecordingSource()
    sampler = Sampler(src, slow_interval=5.0, monotonic=FakeClock(0.0))
    with sampler:
        sampler.tick()
        sampler.tick()
    assert src.slow == [True, False]


def test_tick_passes_the_reading_through() -> None:
    src = RecordingSource(gpus=3)
    clock = FakeClock(1234.5)
    with Sampler(src, clock=clock, monotonic=FakeClock()) as sampler:
        snap = sampler.tick()
    assert snap.time == 1234.5
    assert (snap.driver_version, snap.nvml_version, snap.cuda_driver_version) == ("1.0", "2.0", "3.0")
    assert [g.index for g in snap.gpus] == [0, 1, 2]
    assert [(p.gpu, p.pid, p.visible) for p in snap.processes] == [(0, os.getpid(), True)]
    assert snap.unaccounted_memory == {0: 0, 1: 1, 2: 1}  # GPU 0: 1 used - 10 listed, floored at 0
    assert snap.errors == ("note",)


def test_history_is_bounded() -> None:
    src = RecordingSource(gpus=2)
    clock = FakeClock(0.0)
    history = History(capacity=5)
    with Sampler(src, history=history, clock=clock, monotonic=clock) as sampler:
        for i in range(12):
            clock.t = float(i)
            sampler.tick()
    assert sampler.history is history
    assert sorted(history.gpus) == [0, 1]
    for h in history.gpus.values():
        assert len(h) == 5
        assert list(h.times) == [7.0, 8.0, 9.0, 10.0, 11.0]
        assert list(h.power) == [8.0, 9.0, 10.0, 11.0, 12.0]
        assert len(h.util) == len(h.mem) == 5


def test_history_with_the_demo(demo_sampler: tuple[Sampler, DemoSource, FakeClock]) -> None:
    sampler, _, clock = demo_sampler
    history = History(capacity=3)
    sampler.history = history
    for _ in range(7):
        clock.t += 1.0
        sampler.tick()
    assert sorted(history.gpus) == [0, 1, 2]
    assert all(len(h) == 3 for h in history.gpus.values())
    assert list(history.gpus[0].times) == [clock.t - 2.0, clock.t - 1.0, clock.t]


class SlowSource(RecordingSource):
    """Its reads wait until the test lets them go, so a second thread can arrive mid-tick."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = threading.Event()
        self.go = threading.Event()

    def read(self, slow: bool) -> Reading:
        self.reading.set()
        assert self.go.wait(5)
        return super().read(slow)


def test_prefetch_opens_and_the_next_tick_returns_its_snapshot() -> None:
    src = RecordingSource()
    clock = FakeClock(100.0)
    sampler = Sampler(src, clock=clock, monotonic=clock)
    sampler.prefetch()
    assert src.opened == 1 and src.slow == [True]  # opened once, read once
    clock.t = 101.0
    first = sampler.tick()
    assert first.time == 100.0 and src.slow == [True]  # the prefetched one, not a new read
    second = sampler.tick()
    assert second.time == 101.0 and src.slow == [True, False]
    sampler.prefetch()  # a later prefetch is a tick like any other, returned once
    assert sampler.tick().time == 101.0 and len(src.slow) == 3
    sampler.close()


def test_a_tick_during_a_prefetch_waits_for_it_and_gets_its_snapshot() -> None:
    src = SlowSource()
    sampler = Sampler(src, clock=FakeClock(5.0), monotonic=FakeClock(0.0))
    early = threading.Thread(target=sampler.prefetch)
    early.start()
    assert src.reading.wait(5)
    got: list[float] = []
    late = threading.Thread(target=lambda: got.append(sampler.tick().time))
    late.start()
    late.join(0.2)
    assert late.is_alive() and not got  # not a second read on the same source at the same time
    src.go.set()
    early.join(5)
    late.join(5)
    assert got == [5.0] and len(src.slow) == 1
    sampler.close()


def test_a_failed_prefetch_leaves_the_next_tick_to_read_and_raise() -> None:
    class Failing(RecordingSource):
        def read(self, slow: bool) -> Reading:
            super().read(slow)
            raise RuntimeError("the source broke")

    src = Failing()
    sampler = Sampler(src, monotonic=FakeClock())
    with pytest.raises(RuntimeError):
        sampler.prefetch()
    with pytest.raises(RuntimeError, match="the source broke"):
        sampler.tick()  # read again: the app's own tick is the one that reports
    assert len(src.slow) == 2
    sampler.close()
