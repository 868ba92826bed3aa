"""The demo's GPM (issue 27): its H100s serve SM, tensor and DRAM activity that follow their trainers. A
healthy bf16 rank keeps its SMs busy and its tensor cores working; the starved rank, while its loader
lags, reads ~95 % on NVML while its SMs sit nearly empty (a dip only GPM sees); a stall is low on both,
an idle GPU is 0 on both (not n/a); a MIG GPU's instances have their own. GPM measures between two
samples: a first sample gives nothing, as NvmlSource's does, and open() takes it (a one-shot reading has
GPM)."""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict

import pytest

from gputui.analyze import dip_causes
from gputui.analyze.dips import SM, DipDetector
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import MIG_LAYOUT, STARVED_FOR_S, STARVED_GPU, DemoSource
from gputui.model import GPM_OFF_NOTE, GPM_RATES, GPM_RATIOS, GpmMetrics, GpuSample
from tests.builders import process_row, snapshot

GPUS = 4
PIDS = [4101, 4111, 4121, 4131]
HEALTHY = 0


def readings(
    src: DemoSource, start: float = 600.0, seconds: int = 300
) -> list[tuple[float, list[GpuSample]]]:
    out = []
    for k in range(seconds):
        t = start + k
        out.append((t, list(src.reading_at(t, k % 5 == 0, PIDS).gpus)))
    return out


def by_stage(src: DemoSource, gpu: int) -> dict[str, list[GpuSample]]:
    """GPU `gpu`'s samples (after the first, which has no GPM) by its trainer's stage."""
    out: dict[str, list[GpuSample]] = defaultdict(list)
    for t, gpus in readings(src)[1:]:
        out[src.sims[gpu].stage(t)].append(gpus[gpu])
    return out


def median(samples: list[GpuSample], name: str) -> float:
    values: list[float] = [getattr(g.gpm, name) for g in samples if g.gpm is not None]
    assert len(values) == len(samples), name  # every reading after the first measures
    return statistics.median(values)


def test_a_healthy_bf16_rank_keeps_its_sms_and_tensor_cores_busy() -> None:
    stages = by_stage(DemoSource(gpus=GPUS, seed=0), HEALTHY)
    train = stages["train"]
    assert len(train) > 100
    assert 85 <= median(train, "sm_active") <= 95
    assert 40 <= median(train, "sm_occupancy") <= 60
    assert 50 <= median(train, "tensor") <= 70
    assert 40 <= median(train, "dram") <= 60
    for g in train:
        m = g.gpm
        assert m is not None and m.sm_active is not None and m.graphics is not None and g.util_gpu is not None
        assert m.sm_active <= m.graphics  # no SM is active while no kernel runs
        assert abs(m.graphics - g.util_gpu) <= 1  # the graphics engine is NVML's "a kernel ran"
        assert m.hmma == m.tensor and m.imma == 0 and m.dfma == 0  # bf16 autocast: all of it HMMA
        assert all(0 <= getattr(m, name) <= 100 for name in GPM_RATIOS)
        assert dip_causes.gpm_findings(m, g.util_gpu) == []  # nothing to say about a healthy step


def starving(src: DemoSource, gpu: int) -> tuple[list[GpuSample], list[GpuSample]]:
    """GPU `gpu`'s training samples while its loader lags, and the others."""
    lagging: list[GpuSample] = []
    rest: list[GpuSample] = []
    for t, gpus in readings(src)[1:]:
        if src.sims[gpu].stage(t) == "train":
            (lagging if src.sims[gpu].starving(t) else rest).append(gpus[gpu])
    return lagging, rest


def test_the_starved_rank_is_busy_by_nvml_and_nearly_empty_by_gpm() -> None:
    starved, rest = starving(DemoSource(gpus=GPUS, seed=0), STARVED_GPU)
    assert len(starved) > 30 and len(rest) > 30  # part of the time, every STARVED_EVERY_S
    assert all(g.util_gpu is not None and g.util_gpu >= 80 for g in starved)  # NVML: "busy"
    assert median(starved, "sm_active") <= 10
    assert all(g.gpm and g.gpm.sm_active is not None and g.gpm.sm_active <= 20 for g in starved)
    assert median(starved, "tensor") <= 1
    for g in starved:  # the doctor's rule calls every such reading out
        assert g.gpm is not None
        (finding,) = dip_causes.gpm_findings(g.gpm, g.util_gpu)
        assert finding.key == "starved"
    # The rest of the time it trains as the others do.
    assert 85 <= median(rest, "sm_active") <= 95 and 50 <= median(rest, "tensor") <= 70
    # Tiny kernels draw little: its power is far under its own while it trains well.
    power = statistics.median(g.power for g in starved if g.power is not None)
    assert power < 0.5 * statistics.median(g.power for g in rest if g.power is not None)
    # No other rank starves.
    other = DemoSource(gpus=GPUS, seed=0)
    assert not any(other.sims[i].starving(t) for i in range(GPUS) if i != STARVED_GPU for t in range(0, 600))


def test_only_gpm_sees_the_starved_stretch_as_a_dip() -> None:
    """NVML's utilization stays ~95 % through it; the dip detector, on SM activity, finds a long dip."""
    src = DemoSource(gpus=GPUS, seed=0)
    detector = DipDetector()
    dips = []
    for t, gpus in readings(src, start=600.0, seconds=240):
        procs = tuple(process_row(g.index, PIDS[g.index], used_memory=1) for g in gpus)
        dips += detector.add(snapshot(time=t, hostname="h", gpus=tuple(gpus), processes=procs))
    lagging = [d for d in dips if d.gpu == STARVED_GPU and d.duration >= STARVED_FOR_S / 2]
    assert lagging, [(d.gpu, d.start, d.duration) for d in dips]
    for d in lagging:
        assert d.signal == SM and d.lowest <= 10 and d.baseline >= 80  # SM 90 -> 6 %
        inside = [t for t in range(int(d.start), int(d.end)) if src.sims[STARVED_GPU].starving(t)]
        assert len(inside) >= STARVED_FOR_S / 2  # (a stall just before it may start it early)
        assert all(src.sims[STARVED_GPU].util(t) >= 80 for t in inside)  # while NVML says busy


def test_a_stall_and_an_evaluation_are_low_on_both_numbers() -> None:
    stages = by_stage(DemoSource(gpus=GPUS, seed=0), HEALTHY)
    for stage in ("stall", "eval"):
        assert stages[stage], stage
        assert median(stages[stage], "sm_active") < 25
        assert median(stages[stage], "tensor") < 10
    # A stall is the data loader: nothing arrives over PCIe that the step would wait on (no false cause).
    assert all(
        g.gpm and g.gpm.pcie_rx is not None and g.gpm.pcie_rx < dip_causes.PCIE_BUSY for g in stages["stall"]
    )


def test_an_idle_gpu_reads_0_on_both_not_n_a() -> None:
    src = DemoSource(gpus=GPUS, seed=0)
    src.reading_at(600.0, True, PIDS)
    r = src.reading_at(601.0, True, [PIDS[0], None, PIDS[2], PIDS[3]])  # rank 1's trainer ended
    g = r.gpus[1]
    assert g.util_gpu == 0 and g.gpm is not None
    assert all(getattr(g.gpm, name) == 0.0 for name in GPM_RATIOS)
    assert g.gpm.nvlink_rx == 0.0 and g.gpm.pcie_rx == 0.0


def test_rates_are_nvml_s_own() -> None:
    src = DemoSource(gpus=GPUS, seed=0)
    for _, gpus in readings(src, seconds=30)[1:]:
        for g in gpus:
            assert g.gpm is not None
            assert (g.gpm.pcie_rx, g.gpm.pcie_tx) == (g.pcie_rx, g.pcie_tx)
            assert (g.gpm.nvlink_rx, g.gpm.nvlink_tx) == (g.nvlink_rx, g.nvlink_tx)
            assert all(getattr(g.gpm, name) >= 0 for name in GPM_RATES)


def test_gpm_needs_two_samples_and_keeps_the_older_one_when_asked_too_soon() -> None:
    src = DemoSource(gpus=2, seed=0)
    first = src.reading_at(600.0, True, PIDS[:2])
    assert all(g.gpm is None for g in first.gpus)  # one sample: nothing to measure between
    second = src.reading_at(601.0, False, PIDS[:2])
    assert all(g.gpm is not None and g.gpm.interval == 1.0 for g in second.gpus)
    soon = src.reading_at(601.01, False, PIDS[:2])
    assert all(g.gpm is None for g in soon.gpus)  # 10 ms: too few cycles, as gputui.collect.sources.gpm says
    later = src.reading_at(602.0, False, PIDS[:2])
    assert all(g.gpm is not None and g.gpm.interval == 1.0 for g in later.gpus)  # from 601, not 601.01


def test_open_takes_the_first_sample_so_the_first_reading_measures() -> None:
    src = DemoSource(gpus=1, seed=0, workers=0, start_at=120.0)
    try:
        with Sampler(src) as sampler:
            snap = sampler.tick()
    finally:
        src.close()
    (g,) = snap.gpus
    assert g.gpm is not None and g.gpm.sm_active is not None and g.gpm.interval is not None
    assert 0.05 <= g.gpm.interval < 1.0
    assert snap.gpm_note is None


def test_gpm_off_is_n_a_and_says_why() -> None:
    src = DemoSource(gpus=2, seed=0, gpm="off")
    for t in (600.0, 601.0, 602.0):
        r = src.reading_at(t, True, PIDS[:2])
        assert all(g.gpm is None for g in r.gpus)
        assert r.gpm_note == GPM_OFF_NOTE
    on = DemoSource(gpus=2, seed=0, gpm="on")
    on.reading_at(600.0, True, PIDS[:2])
    assert on.reading_at(601.0, True, PIDS[:2]).gpm_note is None
    with pytest.raises(ValueError, match="gpm"):
        DemoSource(gpm="sometimes")


def test_a_mig_gpu_s_instances_have_their_own() -> None:
    src = DemoSource(gpus=2, seed=0, mig=True)
    train = [gpus[0] for t, gpus in readings(src, seconds=60)[1:] if src.sims[0].stage(t) == "train"]
    assert train
    for g in train:
        assert g.util_gpu is None and g.gpm is not None  # NVML has no utilization on MIG; GPM has
        trainer, leak, idle = g.mig
        assert [(m.gpu_instance, m.profile) for m in g.mig] == [(gi, p) for gi, _, p, _ in MIG_LAYOUT]
        assert trainer.gpm is not None and leak.gpm is not None and idle.gpm is not None
        assert trainer.gpm.sm_active is not None and trainer.gpm.sm_active > 80  # the trainer's own SMs
        assert leak.gpm.sm_active == 0 and idle.gpm.sm_active == 0  # the orphan holds memory, runs nothing
        # The whole GPU: the trainer's 3 of 7 compute slices busy.
        assert g.gpm.sm_active == pytest.approx(trainer.gpm.sm_active * 3 / 7, abs=0.1)
        assert g.gpm.dram == pytest.approx((trainer.gpm.dram or 0) * 4 / 8, abs=0.1)


def test_a_metric_n_a_on_one_instance_leaves_the_whole_gpu_s_n_a() -> None:
    from gputui.collect.sources.demo import _whole_gpu

    src = DemoSource(gpus=1, seed=0, mig=True)
    src.reading_at(600.0, True, PIDS[:1])
    g = src.reading_at(601.0, True, PIDS[:1]).gpus[0]
    first = g.mig[0].gpm
    assert g.gpm is not None and first is not None
    mig = (dataclasses.replace(g.mig[0], gpm=dataclasses.replace(first, tensor=None)), *g.mig[1:])
    whole = _whole_gpu(g.gpm, mig)
    assert whole.tensor is None and whole.sm_active == g.gpm.sm_active  # unknown stays unknown, never 0


def test_the_simulation_is_deterministic() -> None:
    def metrics(seed: int) -> list[GpmMetrics | None]:
        return [g.gpm for _, gpus in readings(DemoSource(gpus=GPUS, seed=seed), seconds=20) for g in gpus]

    assert metrics(0) == metrics(0)
    assert metrics(0) != metrics(1)
