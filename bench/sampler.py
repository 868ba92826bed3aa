"""sampler: one Sampler tick on the demo (8 GPUs, ~34 real processes), 100 ticks after a warm-up."""

from __future__ import annotations

import statistics
import time

from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource


def bench_sampler(gpus: int = 8, ticks: int = 100) -> dict[str, float | int]:
    with Sampler(DemoSource(gpus=gpus), slow_interval=5.0) as sampler:
        for _ in range(3):
            sampler.tick()
        times = []
        for _ in range(ticks):
            t0 = time.perf_counter()
            snap = sampler.tick()
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        return {
            "gpus": gpus,
            "gpu_processes": len(snap.processes),
            "ticks": ticks,
            "tick_ms_median": round(statistics.median(times), 3),
            "tick_ms_p95": round(times[int(0.95 * len(times)) - 1], 3),
        }
