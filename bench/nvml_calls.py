"""nvml: NVML queries per GPU per tick through the Sampler at 1 Hz on a fake NVML."""

from __future__ import annotations

from gputui.collect.sampler import Sampler


def bench_nvml_calls(gpus: int = 8, ticks: int = 60) -> dict[str, object]:
    """NVML queries per GPU per tick through the Sampler at 1 Hz (slow fields every 5th tick), on a fake
    NVML (tests/collect/fake_nvml.py: real pynvml structs) where every GPU runs one process."""
    from _pytest.monkeypatch import MonkeyPatch

    from gputui.collect.sources.nvml import NvmlSource
    from tests.collect.fake_nvml import FakeNvml, FakeProcess

    patch = MonkeyPatch()
    fake = FakeNvml(n_gpus=gpus).install(patch)
    try:
        for i in range(gpus):
            fake.gpus[i].processes["C"].append(FakeProcess(100 + i, 10 * 2**30))
        with Sampler(
            NvmlSource(), clock=lambda: fake.now, monotonic=lambda: fake.now, scan_holders=False
        ) as sampler:
            fake.reset_counts()
            for _ in range(ticks):
                for i in range(gpus):
                    fake.add_util_sample(i, 100 + i, 90, 40)
                sampler.tick()
                fake.advance(1.0)
        per_gpu = [fake.total_calls(i) / ticks for i in range(gpus)]
        lib = [fake.total_lib_calls(i) / ticks for i in range(gpus)]
    finally:
        patch.undo()
    return {
        "gpus": gpus,
        "ticks": ticks,
        "queries_per_gpu_per_tick": round(max(per_gpu), 2),
        "c_calls_per_gpu_per_tick": round(max(lib), 2),
    }
