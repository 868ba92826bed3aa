"""Dips on a GPU with GPM (Hopper and newer) are measured on SM activity, not NVML's utilization: a starved
loop of tiny kernels keeps utilization near 100 % while its SMs sit nearly empty. A track keeps one signal:
GPM appearing after the first ticks, or vanishing when DCGM takes the counters, never makes a fake dip.
And the counters say why: tensor cores idle under working SMs, DRAM-bound work, PCIe copies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from gputui.analyze import dip_causes
from gputui.analyze.dip_causes import ProfileNote, profile_causes
from gputui.analyze.dips import MIN_BUSY_SAMPLES, SIGNAL_GRACE, SM, UTIL, Dip, DipDetector
from gputui.model import GpmMetrics, GpuSample, Snapshot
from tests.builders import snapshot
from tests.collect.test_dips import T0, feed, row

GIB = 1024**3
Reading = tuple[float | None, GpmMetrics | None]  # NVML's utilization, the GPM reading of one tick


def tick(t: float, util: float | None, gpm: GpmMetrics | None = None, job: bool = True) -> Snapshot:
    """GPU 0 at T0 + t: NVML's utilization, its GPM reading (None: none this tick), a job on it or not."""
    g = GpuSample(index=0, util_gpu=None if util is None else round(util), gpm=gpm)
    return snapshot(time=T0 + t, source="nvml", gpus=(g,), processes=(row(0),) if job else ())


def sm(active: float, **kw: float | None) -> GpmMetrics:
    return GpmMetrics(interval=1.0, sm_active=active, **kw)


def series(start: float, readings: Sequence[Reading]) -> list[Snapshot]:
    return [tick(start + k, util, gpm) for k, (util, gpm) in enumerate(readings)]


def repeat(n: int, util: float | None, gpm: GpmMetrics | None = None) -> list[Reading]:
    return [(util, gpm)] * n


def run(snaps: Iterable[Snapshot]) -> tuple[DipDetector, list[Dip]]:
    det = DipDetector()
    return det, feed(det, snaps)


# A data-starved loop: NVML says 98 % throughout; the SMs go from 88 % to 6 % for four seconds.
STARVED = [(98.0, sm(88.0))] * 20 + [(98.0, sm(6.0))] * 4 + [(98.0, sm(88.0))] * 3


def test_a_starved_loop_dips_on_sm_activity_while_utilization_stays_up() -> None:
    _, ended = run(series(0, STARVED))
    (dip,) = ended
    assert dip.signal == SM
    assert (dip.baseline, dip.lowest) == (88.0, 6.0)
    assert (dip.start, dip.end) == (T0 + 20, T0 + 24)
    assert dip.fell() == "SM 88→6%"
    # NVML's utilization alone (no GPM) sees nothing at all.
    _, blind = run(series(0, [(util, None) for util, _ in STARVED]))
    assert blind == []


def test_a_dip_on_utilization_says_so_and_is_worded_as_before() -> None:
    _, ended = run(series(0, [(95.0, None)] * 20 + [(5.0, None)] * 3 + [(95.0, None)]))
    (dip,) = ended
    assert dip.signal == UTIL and dip.fell() == "95→5%"


def test_gpm_arriving_after_the_first_ticks_is_no_dip() -> None:
    """Utilization learnt at 98 %, then GPM arrives with a healthy SM activity of 40 %: under half of 98,
    and 58 points below it, which would be a dip on one busy level; it is another number, learnt afresh."""
    det, ended = run(series(0, [(98.0, None)] * 15 + [(98.0, sm(40.0))] * 20))
    assert ended == [] and det.ongoing(T0 + 35) == []
    assert det.tracks[0].signal == SM
    # Once it has learnt SM's busy level, a real SM dip is found.
    _, later = run(
        series(0, [(98.0, None)] * 15 + [(98.0, sm(40.0))] * 20 + [(98.0, sm(3.0))] * 3 + [(98.0, sm(40.0))])
    )
    (dip,) = later
    assert dip.signal == SM and dip.baseline == 40.0


def test_a_switch_restarts_the_busy_level_it_learnt() -> None:
    """After GPM goes, utilization needs MIN_BUSY_SAMPLES busy samples of its own before it can dip."""
    busy_sm = repeat(20, 98.0, sm(90.0))
    gone = repeat(SIGNAL_GRACE, 98.0)  # the last of these switches the track to utilization
    early = repeat(3, 5.0) + repeat(1, 98.0)  # too soon: nothing learnt yet to fall from
    det, ended = run(series(0, busy_sm + gone + early))
    assert ended == [] and det.tracks[0].signal == UTIL
    learnt = repeat(MIN_BUSY_SAMPLES, 98.0)
    _, ended = run(series(0, busy_sm + gone + early + learnt + repeat(3, 5.0) + repeat(1, 98.0)))
    (dip,) = ended
    assert dip.signal == UTIL and dip.fell() == "98→5%"


def test_gpm_taken_away_mid_dip_ends_that_dip_on_sm_and_makes_none_on_utilization() -> None:
    """DCGM starts during an SM dip: a few ticks without GPM are a hole (the dip goes on); after
    SIGNAL_GRACE of them the dip ends there, measured on SM, and utilization (98 %) starts over."""
    low = [(98.0, sm(5.0))] * 3
    gone = [(98.0, None)] * (SIGNAL_GRACE + 15)
    det = DipDetector()
    ended = feed(det, series(0, [(98.0, sm(90.0))] * 20 + low))
    assert ended == []
    holes = series(23, gone[: SIGNAL_GRACE - 1])
    ended = feed(det, holes)
    assert ended == [] and [d.start for d in det.ongoing(holes[-1].time)] == [T0 + 20]  # still in it
    ended = feed(det, series(23 + SIGNAL_GRACE - 1, gone[SIGNAL_GRACE - 1 :]))
    (dip,) = ended
    assert dip.signal == SM and dip.start == T0 + 20 and dip.end == T0 + 23 + SIGNAL_GRACE - 1
    assert dip.last == T0 + 22  # the last sample known low
    assert det.ongoing(T0 + 40) == [] and det.tracks[0].signal == UTIL


def test_one_tick_without_gpm_does_not_split_a_dip_or_end_it() -> None:
    readings = [(98.0, sm(88.0))] * 20 + [(98.0, sm(6.0)), (98.0, None), (98.0, sm(7.0)), (98.0, sm(88.0))]
    _, ended = run(series(0, readings))
    (dip,) = ended
    assert dip.signal == SM and (dip.start, dip.end) == (T0 + 20, T0 + 23) and dip.lowest == 6.0


def test_sm_activity_unsupported_alone_keeps_utilization_and_the_other_metrics() -> None:
    """A GPM reading whose SM metric failed (its own nvmlReturn) while the others came: the dip is
    measured on utilization, and the metrics that came still say why."""
    other = GpmMetrics(interval=1.0, sm_active=None, dram=75.0)
    _, ended = run(series(0, [(95.0, other)] * 20 + [(10.0, other)] * 3 + [(95.0, other)]))
    (dip,) = ended
    assert dip.signal == UTIL and dip.fell() == "95→10%"
    assert "GPU 0 DRAM 75% busy: memory-bound work" in dip.explanation()


def test_a_lost_gpu_ends_its_dip_and_keeps_its_signal() -> None:
    det = DipDetector()
    feed(det, series(0, [(98.0, sm(90.0))] * 20 + [(98.0, sm(5.0))] * 3))
    lost = snapshot(time=T0 + 23, source="nvml", gpus=(GpuSample(index=0, lost=True),), processes=(row(0),))
    (dip,) = det.add(lost)
    assert dip.signal == SM and dip.end == T0 + 23
    assert det.tracks[0].signal == SM


# -- what the counters say during the dip -----------------------------------------------------------------


def test_tensor_cores_that_went_idle_under_working_sms_are_named() -> None:
    """Training at SM 90 % with the tensor cores 50 % busy; then the SMs fall to 30 %, still working, with
    the tensor cores idle: other work than the model's matmuls."""
    busy = [(99.0, sm(90.0, tensor=50.0, hmma=48.0))] * 20
    eval_ = [(99.0, sm(30.0, tensor=0.0, hmma=0.0))] * 3
    _, ended = run(series(0, [*busy, *eval_, busy[0]]))
    (dip,) = ended
    assert dip.explanation() == (
        "GPU 0 SMs 30% active but tensor cores idle (were 50%): work other than the model's matmuls "
        "(evaluation, metrics, preprocessing on the GPU)"
    )


def test_idle_tensor_cores_are_no_reason_for_a_job_that_never_used_them() -> None:
    busy = [(99.0, sm(90.0, tensor=0.0))] * 20
    _, ended = run(series(0, [*busy, *[(99.0, sm(30.0, tensor=0.0))] * 3, busy[0]]))
    (dip,) = ended
    assert dip.explanation() == ""


def test_idle_sms_with_idle_tensor_cores_are_the_dip_itself_not_a_reason() -> None:
    busy = [(99.0, sm(90.0, tensor=50.0))] * 20
    _, ended = run(series(0, [*busy, *[(99.0, sm(dip_causes.DIP_SM_WORKING - 5, tensor=0.0))] * 3, busy[0]]))
    (dip,) = ended
    assert "tensor" not in dip.explanation()


def test_dram_bound_and_pcie_copies_are_named_each_at_its_peak() -> None:
    busy = [(99.0, sm(90.0, dram=30.0))] * 20
    during = [
        (99.0, sm(8.0, dram=60.0, pcie_rx=2.0 * GIB, pcie_tx=0.1 * GIB)),
        (99.0, sm(6.0, dram=72.0, pcie_rx=5.0 * GIB)),
        (99.0, sm(9.0, dram=55.0, pcie_rx=1.5 * GIB)),
    ]
    _, ended = run(series(0, [*busy, *during, busy[0]]))
    (dip,) = ended
    assert dip.explanation() == (
        "GPU 0 DRAM 72% busy, SMs 6%: memory-bound work (device copies, elementwise ops); "
        "GPU 0 PCIe host→device 5.0 GiB/s: the step waits on copies from the host "
        "(pin_memory=True with non_blocking=True overlaps them)"
    )


def test_a_quiet_bus_and_a_quiet_dram_say_nothing() -> None:
    busy = [(99.0, sm(90.0))] * 20
    quiet = sm(5.0, dram=dip_causes.DRAM_BUSY - 1, pcie_rx=dip_causes.PCIE_BUSY * 0.9, pcie_tx=None)
    _, ended = run(series(0, [*busy, *[(99.0, quiet)] * 3, busy[0]]))
    (dip,) = ended
    assert dip.explanation() == ""


def test_a_checkpoint_copy_to_the_host_is_named() -> None:
    busy = [(99.0, sm(90.0))] * 20
    _, ended = run(series(0, [*busy, *[(99.0, sm(2.0, pcie_tx=3.0 * GIB))] * 3, busy[0]]))
    (dip,) = ended
    assert dip.explanation() == "GPU 0 PCIe device→host 3.0 GiB/s: copies to the host (a checkpoint, .cpu())"


def test_gpm_evidence_ranks_after_the_data_loader_and_before_the_host() -> None:
    assert dip_causes.DATA < dip_causes.GPM < dip_causes.HOST < dip_causes.PROFILE


def test_a_profiles_gpm_verdict_joins_its_reason() -> None:
    n = ProfileNote(
        11, 0, T0, T0 + 5, "gpu-bound", gpm="tensor cores idle: fp32 matmuls? (SM 85% active, tensor 0%)"
    )
    (cause,) = profile_causes([n, replace(n, pid=12, gpm="")], [0], T0, T0 + 3)[:1]
    assert (
        cause.text
        == "profile of pid 11: gpu-bound, tensor cores idle: fp32 matmuls? (SM 85% active, tensor 0%)"
    )
    texts = [c.text for c in profile_causes([replace(n, gpm="")], [0], T0, T0 + 3)]
    assert texts == ["profile of pid 11: gpu-bound"]
