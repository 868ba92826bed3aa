"""The sampler sets memory_growth, full_in and hung on its rows: the demo's leaking trainer, a hung
process on a scripted GPU, and the cost of doing it for 32 processes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.analyze import classify
from gputui.collect.sampler import Sampler
from gputui.collect.sources import demo
from gputui.collect.sources.base import Reading, SourceInfo
from gputui.collect.sources.demo import DemoSource
from gputui.model import GpuProcess, GpuSample, ProcessRow
from tests.builders import process_row
from tests.helpers import known

GIB = 1 << 30


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_demo_gpu_that_leaks_is_forecast() -> None:
    clock = FakeClock(1_700_000_000.0)
    src = DemoSource(gpus=4, clock=clock)
    with Sampler(src, clock=clock, monotonic=clock) as sampler:
        rows: dict[int, ProcessRow] = {}
        snap = None
        for _ in range(330):  # five and a half minutes at 1 Hz
            snap = sampler.tick()
            clock.t += 1.0
            if clock.t - 1_700_000_000.0 < 200:
                trainers = [p for p in snap.processes if p.pid in {t.pid for t in src.trainers}]
                assert all(p.memory_growth is None and p.full_in is None for p in trainers)
        assert snap is not None
        for p in snap.processes:
            if p.pid in {t.pid for t in src.trainers}:
                rows[p.gpu or 0] = p
        leaky = rows[demo.LEAKY_GPU]
        assert leaky.memory_growth == pytest.approx(demo.LEAK_BPS, rel=0.05)
        gpu = snap.gpus[demo.LEAKY_GPU]
        assert gpu.mem_total and gpu.mem_used
        growth = known(leaky.memory_growth)
        assert leaky.full_in == pytest.approx((gpu.mem_total - gpu.mem_used) / growth, rel=0.01)
        assert 30 * 60 < known(leaky.full_in) < 60 * 60
        for i in range(4):
            if i != demo.LEAKY_GPU:
                assert rows[i].memory_growth == 0.0 and rows[i].full_in is None, rows[i]
        assert all(p.hung is None and p.category != classify.HUNG for p in snap.processes)
        # departed processes are forgotten
        assert set(sampler.memory.mem) <= {(p.pid, p.create_time) for p in snap.processes}


class SpinningGpu:
    """One GPU at 100 % and 110 W of 700 W (a NCCL kernel spinning), with the given processes on it."""

    name = "demo"
    devices_dir = Path("/nonexistent")

    def __init__(self, pids: list[int], power: float = 110.0) -> None:
        self.pids, self.power = pids, power

    def open(self) -> SourceInfo:
        return SourceInfo(driver_version="1", nvml_version="2", cuda_driver_version="3")

    def read(self, slow: bool) -> Reading:
        gpu = GpuSample(
            index=0, util_gpu=100, power=self.power, power_limit=700.0, mem_total=80 * GIB, mem_used=40 * GIB
        )
        procs = tuple(GpuProcess(gpu=0, pid=p, kinds="C", used_memory=GIB) for p in self.pids)
        return Reading((gpu,), procs)

    def close(self) -> None:
        pass


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("power", [110.0, 650.0])
def test_a_process_asleep_on_a_spinning_gpu_is_hung(sleeper: subprocess.Popen[bytes], power: float) -> None:
    clock = FakeClock(time.time())
    with Sampler(SpinningGpu([sleeper.pid], power), clock=clock, monotonic=clock, scan_holders=False) as s:
        verdicts = []
        for _ in range(140):
            snap = s.tick()
            (row,) = [p for p in snap.processes if p.pid == sleeper.pid]
            verdicts.append((row.hung, row.category, row.reason))
            clock.t += 1.0
    assert all(h is None for h, _, _ in verdicts[:110]), verdicts[:110]  # not before two minutes
    hung, category, reason = verdicts[-1]
    if power > 200:  # a GPU at full power computes: no false alarm
        assert hung is None and category == classify.OK
        return
    assert hung is not None and hung.startswith("possibly hung (collective wait): GPU 100%+ busy at 110 W")
    assert (category, reason) == (classify.HUNG, hung)
    assert classify.HUNG in classify.SUSPICIOUS


def test_tick_cost_with_32_processes(capsys: pytest.CaptureFixture[str]) -> None:
    """The trend and hung rules on 32 rows with ten minutes of history: measured, and kept small."""
    clock = FakeClock(1_000_000.0)
    s = Sampler(SpinningGpu([]), clock=clock, monotonic=clock, scan_holders=False)
    gpus = (
        GpuSample(
            index=0, util_gpu=97, power=600.0, power_limit=700.0, mem_total=80 * GIB, mem_used=60 * GIB
        ),
    )
    costs = []
    for tick in range(900):
        rows = tuple(
            process_row(
                0,
                100_000 + i,
                used_memory=GIB + tick * 2000 * i,
                visible=False,
                cpu_percent=50.0,
                create_time=0.0,
            )
            for i in range(32)
        )
        start = time.perf_counter()
        out = s._with_trends(rows, gpus, {}, clock.t)
        costs.append(time.perf_counter() - start)
        clock.t += 1.0
    assert out[31].memory_growth == pytest.approx(31 * 2000, rel=0.05)
    assert out[0].memory_growth == 0.0
    late = costs[600:]
    mean, worst = sum(late) / len(late), max(late)
    with capsys.disabled():
        print(
            f"\ntrend+hung cost, 32 processes, 10 min of history: "
            f"mean {mean * 1e3:.2f} ms, max {worst * 1e3:.2f} ms"
        )
    assert mean < 0.01
