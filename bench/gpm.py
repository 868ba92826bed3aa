"""gpm: GPM's NVML calls and time per GPU per tick (issue 27)."""

from __future__ import annotations

import statistics
import time


def bench_gpm(gpus: int = 8, ticks: int = 60) -> dict[str, object]:
    """GPM's cost per GPU per tick (issue 27): its NVML calls, and the time NvmlSource.read takes with GPM
    armed against the same fake without GPM (the fake's own Python counts on both sides, so the difference
    is gputui's: building the request, reading 16 metrics back, checking them)."""
    from _pytest.monkeypatch import MonkeyPatch

    from gputui.collect.sources.nvml import NvmlSource
    from tests.collect.fake_nvml import FakeNvml

    values = {metric: 50.0 for _name, metric in gpm_ids()}

    def run(with_gpm: bool) -> tuple[float, float]:
        patch = MonkeyPatch()
        fake = FakeNvml(n_gpus=gpus).install(patch)
        try:
            for g in fake.gpus:
                g.gpm = dict(values) if with_gpm else None
            src = NvmlSource(gpm="on")
            src.open()
            src.read(True)
            fake.reset_counts()
            took = []
            for i in range(ticks):
                fake.advance(1.0)
                start = time.perf_counter()
                src.read(i % 5 == 0)
                took.append(time.perf_counter() - start)
            calls = sum(fake.calls[i][n] for i in range(gpus) for n in GPM_CALLS) / ticks / gpus
            src.close()
        finally:
            patch.undo()
        return statistics.median(took) * 1000 / gpus, calls

    with_ms, calls = run(True)
    without_ms, _ = run(False)
    return {
        "gpus": gpus,
        "gpm_calls_per_gpu_per_tick": round(calls, 2),
        "read_ms_per_gpu_with_gpm": round(with_ms, 3),
        "read_ms_per_gpu_without_gpm": round(without_ms, 3),
        "gpm_ms_per_gpu_per_tick": round(with_ms - without_ms, 3),
    }


GPM_CALLS = ("nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlGpmMigSampleGet")


def gpm_ids() -> tuple[tuple[str, int], ...]:
    from gputui.collect.sources.gpm import RATE_IDS, RATIO_IDS

    return (*RATIO_IDS, *RATE_IDS)
