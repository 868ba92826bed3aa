"""The dip detector (gputui.analyze.dips) on synthetic utilization series and on the demo's own timeline.

Every series is a list of Snapshots built from gputui.model classes: one GpuSample per GPU with its
utilization, and a compute ProcessRow on each GPU that "has a job on it"."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

import pytest

from gputui.analyze.dips import LONG_DIP_S, MIN_DIP_S, Dip, DipDetector
from gputui.collect.sources.demo import DemoSource
from gputui.model import AgentReport, GpuSample, ProcessRow, Snapshot, TrainingProgress
from tests.builders import process_row, snapshot

T0 = 1_795_000_000.0
LOST = object()  # a GPU that NVML lost (GpuSample.lost)
Util = float | None | object


def pid_of(gpu: int) -> int:
    return 5000 + gpu


def row(gpu: int, pid: int | None = None, kinds: str = "C") -> ProcessRow:
    return process_row(gpu, pid_of(gpu) if pid is None else pid, kinds=kinds)


def sample(index: int, util: Util) -> GpuSample:
    if util is LOST:
        return GpuSample(index=index, lost=True)
    assert util is None or isinstance(util, (int, float))
    return GpuSample(index=index, util_gpu=None if util is None else round(util))


def snap(
    t: float,
    utils: Sequence[Util],
    on: Iterable[int] | None = None,
    procs: Sequence[ProcessRow] | None = None,
    agents: dict[int, AgentReport] | None = None,
) -> Snapshot:
    """GPUs 0..len(utils)-1 at time T0 + t; a job on each GPU in `on` (default: all of them)."""
    if procs is None:
        procs = [row(g) for g in (range(len(utils)) if on is None else on)]
    return snapshot(
        time=T0 + t,
        gpus=tuple(sample(i, u) for i, u in enumerate(utils)),
        processes=tuple(procs),
        agents=agents or {},
    )


def feed(det: DipDetector, snaps: Iterable[Snapshot]) -> list[Dip]:
    ended: list[Dip] = []
    for s in snaps:
        ended += det.add(s)
    return ended


def single(values: Sequence[Util], dt: float = 1.0, **kw: object) -> tuple[DipDetector, list[Dip]]:
    """One GPU with a job on it, one sample every `dt` seconds from T0."""
    det = DipDetector()
    ended = feed(det, (snap(k * dt, [v], **kw) for k, v in enumerate(values)))  # type: ignore[arg-type]
    return det, ended


def busy(n: int, level: float = 95.0) -> list[Util]:
    return [level] * n


# -- a training job: epochs at ~95 % with data-loader stalls and an evaluation dip ------------------

EPOCH_S = 60.0
LEAD_S = 30.0  # busy before the first epoch: the detector has seen what "busy" is
STALLS = ((12.0, 2.0), (30.0, 3.0), (41.0, 2.5))  # (position in the epoch, seconds)
EVAL_S = 8.0


def training_util(t: float, rng: random.Random) -> tuple[float, str]:
    """(utilization, phase) at `t` seconds: "busy", "stall" or "eval"."""
    if t < LEAD_S:
        return 95.0 + rng.uniform(-3, 3), "busy"
    pos = (t - LEAD_S) % EPOCH_S
    if pos >= EPOCH_S - EVAL_S:
        return 15.0 + rng.uniform(-5, 5), "eval"
    if any(s <= pos < s + d for s, d in STALLS):
        return 20.0 + rng.uniform(-6, 6), "stall"
    return 95.0 + rng.uniform(-3, 3), "busy"


def runs(times: Sequence[float], phases: Sequence[str]) -> list[tuple[float, float, str]]:
    """(first low sample, first sample back, phase) of every finished run of non-busy samples."""
    out, start, kind = [], None, ""
    for t, phase in zip(times, phases, strict=True):
        if phase != "busy" and start is None:
            start, kind = t, phase
        elif phase == "busy" and start is not None:
            out.append((start, t, kind))
            start = None
    return out


def training_series(
    epochs: int, dt: float, seed: int = 7
) -> tuple[list[Snapshot], list[tuple[float, float, str]]]:
    rng = random.Random(seed)
    n = int((LEAD_S + epochs * EPOCH_S + 5) / dt)
    times = [k * dt for k in range(n)]
    values, phases = zip(*(training_util(t, rng) for t in times), strict=True)
    return ([snap(t, [v]) for t, v in zip(times, values, strict=True)], runs(times, phases))


@pytest.mark.parametrize("dt", [1.0, 0.5, 0.25])
def test_stalls_and_eval_dips_are_all_found_with_their_kind(dt: float) -> None:
    snaps, expected = training_series(epochs=4, dt=dt)
    assert len(expected) == 4 * (len(STALLS) + 1)
    det = DipDetector()
    ended = feed(det, snaps)
    assert list(det.dips) == ended
    assert len(ended) == len(expected), ended
    for dip, (start, end, phase) in zip(ended, expected, strict=True):
        assert dip.gpu == 0 and not dip.ongoing
        assert abs(dip.start - (T0 + start)) <= dt and abs(dip.end - (T0 + end)) <= dt, (dip, start, end)
        assert dip.kind == ("long" if phase == "eval" else "stall"), dip
    assert [d.kind for d in ended].count("long") == 4
    assert [d.kind for d in ended].count("stall") == 4 * len(STALLS)
    assert all(d.duration < LONG_DIP_S for d in ended if d.kind == "stall")
    assert all(abs(d.duration - EVAL_S) <= dt for d in ended if d.kind == "long")
    assert all(90 <= d.baseline <= 98 and d.lowest <= 26 for d in ended)


def test_a_dip_ends_at_the_first_sample_back_above_the_line() -> None:
    _, ended = single([*busy(20), 20, 20, 20, *busy(5)])
    assert ended == [Dip(0, T0 + 20, T0 + 23, 95, 20, last=T0 + 22)]
    assert ended[0].duration == 3.0 and ended[0].kind == "stall"


def test_kind_boundary_is_five_seconds() -> None:
    _, ended = single([*busy(20), *[10] * 4, *busy(5), *[10] * 5, *busy(5)])
    assert [(d.duration, d.kind) for d in ended] == [(4.0, "stall"), (5.0, "long")]


def test_steady_noise_for_an_hour_is_never_a_dip() -> None:
    rng = random.Random(1234)
    det, ended = single([95 + rng.uniform(-3, 3) for _ in range(3600)])
    assert ended == [] and list(det.dips) == []
    assert det.ongoing(T0 + 3599) == []


def test_noisier_but_busy_is_never_a_dip() -> None:
    rng = random.Random(99)
    _, ended = single([88 + rng.uniform(-12, 12) for _ in range(3600)])
    assert ended == []


@pytest.mark.parametrize(
    "procs",
    [
        pytest.param([], id="no-process"),
        pytest.param([row(0, kinds="")], id="device-holder-only"),  # holds /dev/nvidia0; not in NVML's lists
        pytest.param([row(1)], id="job-on-another-gpu"),
    ],
)
def test_a_gpu_without_a_job_never_dips_even_at_zero(procs: list[ProcessRow]) -> None:
    values = [*busy(120), *[0] * 60, *busy(60), *[3] * 10, *busy(30)]
    det = DipDetector()
    ended = feed(det, (snap(k, [v, 95], procs=procs) for k, v in enumerate(values)))
    assert ended == [] and list(det.dips) == []
    assert det.ongoing(T0 + 190) == []


def test_job_leaving_then_idle_is_not_a_dip() -> None:
    det = DipDetector()
    snaps = [snap(k, [95]) for k in range(60)] + [snap(60 + k, [0], on=()) for k in range(60)]
    assert feed(det, snaps) == []
    assert det.ongoing(T0 + 119) == []


def test_a_one_second_blip_is_not_a_dip() -> None:
    det, ended = single([*busy(30), 5, *busy(30), 5, *busy(30)])
    assert ended == [] and list(det.dips) == []


@pytest.mark.parametrize(
    ("dt", "low_samples", "is_dip"),
    [
        (0.5, 3, False),  # 1.5 s
        (0.5, 4, True),  # 2.0 s
        (1.0, 1, False),
        (1.0, 2, True),
    ],
)
def test_the_two_second_minimum(dt: float, low_samples: int, is_dip: bool) -> None:
    _, ended = single([*busy(40), *[10] * low_samples, *busy(10)], dt=dt)
    assert len(ended) == int(is_dip)
    if is_dip:
        assert ended[0].duration == pytest.approx(MIN_DIP_S)


def test_warm_up_is_not_a_dip() -> None:
    """A job starting: low utilization before the GPU has ever been busy."""
    _, ended = single([5, 10, 20, 30, 45, 60, 80, *busy(120)])
    assert ended == []


def test_no_verdict_in_the_first_ten_samples_with_a_job() -> None:
    _, ended = single([*busy(5), *[10] * 5, *busy(30)])
    assert ended == []
    _, ended = single([*busy(10), *[10] * 5, *busy(30)])  # ten busy samples seen: a verdict
    assert [(d.start, d.end) for d in ended] == [(T0 + 10, T0 + 15)]


def test_the_demo_like_ramp_is_not_a_dip() -> None:
    """Utilization climbing from 30 % over ten seconds, as the demo's warm-up does."""
    values = [95 * (0.3 + 0.7 * min(1.0, t / 10)) for t in range(120)]
    _, ended = single(values)
    assert ended == []


def test_a_lost_gpu_neither_starts_a_dip_nor_spoils_the_baseline() -> None:
    det, ended = single([*busy(60), *[LOST] * 20, *busy(30), *[None] * 20, *busy(30), 10, 10, 10, *busy(5)])
    assert len(ended) == 1
    (dip,) = ended
    assert (dip.start, dip.end, dip.baseline, dip.lowest) == (T0 + 160, T0 + 163, 95, 10)
    assert det.ongoing(T0 + 165) == []


def test_no_ongoing_dip_while_the_gpu_is_lost() -> None:
    det = DipDetector()
    feed(det, (snap(k, [95]) for k in range(30)))
    for k in range(30, 50):
        assert det.add(snap(k, [LOST])) == []
        assert det.ongoing(T0 + k) == []


def test_a_gpu_lost_during_a_dip_does_not_stretch_it_over_the_loss() -> None:
    det = DipDetector()
    feed(det, (snap(k, [95]) for k in range(30)))
    feed(det, (snap(k, [10]) for k in range(30, 33)))
    ended = feed(det, (snap(k, [LOST]) for k in range(33, 60)))
    assert [(d.start, d.end) for d in ended] == [(T0 + 30, T0 + 33)]
    assert feed(det, (snap(k, [95]) for k in range(60, 70))) == []
    assert det.ongoing(T0 + 69) == []


def test_a_lost_gpu_does_not_disturb_another_gpus_dips() -> None:
    det = DipDetector()
    values = [*busy(30), 10, 10, 10, *busy(10)]
    ended = feed(det, (snap(k, [LOST, v], on=(0, 1)) for k, v in enumerate(values)))
    assert [(d.gpu, d.start, d.end) for d in ended] == [(1, T0 + 30, T0 + 33)]


def test_depth_and_baseline() -> None:
    _, ended = single([*busy(30, 90), 40, 25, 30, 35, *busy(10, 90)])
    (dip,) = ended
    assert (dip.baseline, dip.lowest, dip.depth) == (90, 25, 65)


def test_baseline_is_the_median_of_the_recent_busy_samples() -> None:
    _, ended = single([*busy(21, 80), *busy(20, 96), *[30] * 3, *busy(5)])  # 41 samples: median 80
    assert ended[0].baseline == 80
    _, ended = single([*busy(20, 80), *busy(21, 96), *[30] * 3, *busy(5)])
    assert ended[0].baseline == 96


@pytest.mark.parametrize(
    ("level", "low", "is_dip"),
    [
        (90, 45, False),  # not under half
        (90, 44, True),
        (30, 14, False),  # under half, but only 16 points below
        (30, 10, True),  # 20 points below
    ],
)
def test_under_half_and_twenty_points_below(level: float, low: float, is_dip: bool) -> None:
    _, ended = single([*busy(30, level), *[low] * 5, *busy(10, level)])
    assert len(ended) == int(is_dip)


def test_ongoing_reports_a_dip_in_progress() -> None:
    det = DipDetector()
    feed(det, (snap(k, [95]) for k in range(30)))
    assert det.add(snap(30, [12])) == []
    assert det.ongoing(T0 + 30) == [] and det.ongoing(T0 + 31) == []  # not yet 2 s
    det.add(snap(31, [8]))
    det.add(snap(32, [10]))
    (now,) = det.ongoing(T0 + 32)
    assert now.ongoing
    assert (now.gpu, now.start, now.end, now.baseline, now.lowest) == (0, T0 + 30, T0 + 32, 95, 8)
    assert now.kind == "stall"
    for k in range(33, 37):
        det.add(snap(k, [10]))
    (now,) = det.ongoing(T0 + 36)
    assert now.duration == 6.0 and now.kind == "long"
    assert list(det.dips) == []  # not finished: not in the list
    (done,) = det.add(snap(37, [95]))
    assert not done.ongoing and done.duration == 7.0
    assert det.ongoing(T0 + 37) == []


def agents_with(share: float | None, pid: int) -> dict[int, AgentReport]:
    return {pid: AgentReport(pid=pid, progress=TrainingProgress(steps_per_s=3.2, data_wait_share=share))}


def dip_with_agent(share: float | None, agent_gpu: int = 0) -> Dip:
    det = DipDetector()
    procs = [row(0), row(1)]
    feed(det, (snap(k, [95, 95], procs=procs) for k in range(30)))
    agents = agents_with(share, pid_of(agent_gpu))
    feed(det, (snap(k, [10, 95], procs=procs, agents=agents) for k in range(30, 34)))
    (now,) = det.ongoing(T0 + 33)
    (dip,) = det.add(snap(34, [95, 95], procs=procs))
    assert now.wait_share == dip.wait_share
    return dip


def test_wait_share_and_explanation_from_the_agent_on_that_gpu() -> None:
    dip = dip_with_agent(0.71)
    assert dip.wait_share == pytest.approx(0.71)
    assert dip.explanation() == "input-bound: 71% of step time waiting for data"


def test_a_low_wait_share_is_not_input_bound() -> None:
    assert dip_with_agent(0.2).explanation() == "not input-bound: 20% of step time waiting for data"


@pytest.mark.parametrize(
    ("share", "agent_gpu"),
    [(0.71, 1), (None, 0)],
    ids=["agent-on-another-gpu", "agent-without-dataloader-stats"],
)
def test_no_explanation_without_a_wait_share_for_that_gpu(share: float | None, agent_gpu: int) -> None:
    dip = dip_with_agent(share, agent_gpu)
    assert dip.wait_share is None and dip.explanation() == ""


def test_wait_share_does_not_leak_into_the_next_dip() -> None:
    det = DipDetector()
    feed(det, (snap(k, [95]) for k in range(30)))
    feed(det, (snap(k, [10], agents=agents_with(0.9, pid_of(0))) for k in range(30, 33)))
    feed(det, (snap(k, [95]) for k in range(33, 50)))
    feed(det, (snap(k, [10]) for k in range(50, 53)))
    feed(det, (snap(k, [95]) for k in range(53, 60)))
    assert [d.wait_share for d in det.dips] == [pytest.approx(0.9), None]


def test_summary_dips_per_minute_and_mean_length() -> None:
    snaps, expected = training_series(epochs=10, dt=1.0)
    det = DipDetector()
    feed(det, snaps)
    assert len(det.dips) == 40
    since, now = T0, snaps[-1].time
    s = det.summary(0, since, now, busy_s=(now - since) * 0.8)
    lengths = [end - start for start, end, _ in expected]
    assert s == {
        "dips": 40,
        "dips_per_min": round(40 / ((now - since) / 60), 2),
        "mean_dip_s": round(sum(lengths) / 40, 1),
        "busy_percent": 80.0,
    }
    assert s["mean_dip_s"] == pytest.approx((2 + 3 + 2.5 + 8) / 4, abs=0.2)
    # The last five minutes only: the dips that ended in them.
    since = now - 300
    recent = det.summary(0, since, now, busy_s=0.0)
    assert recent["dips"] == sum(1 for _, end, _ in expected if T0 + end >= since)
    assert recent["dips_per_min"] == pytest.approx(recent["dips"] / 5, abs=0.01)
    assert recent["busy_percent"] == 0.0


def test_summary_without_dips_and_of_another_gpu() -> None:
    det = DipDetector()
    feed(det, (snap(k, [95, v], on=(0, 1)) for k, v in enumerate([*busy(30), 10, 10, 10, *busy(27)])))
    assert det.summary(0, T0, T0 + 60, busy_s=60.0) == {
        "dips": 0,
        "dips_per_min": 0.0,
        "mean_dip_s": None,
        "busy_percent": 100.0,
    }
    assert det.summary(1, T0, T0 + 60, busy_s=57.0) == {
        "dips": 1,
        "dips_per_min": 1.0,
        "mean_dip_s": 3.0,
        "busy_percent": 95.0,
    }
    assert det.summary(1, T0, T0, busy_s=0.0)["busy_percent"] is None


def test_summary_counts_an_ongoing_dip() -> None:
    det = DipDetector()
    feed(det, (snap(k, [95]) for k in range(30)))
    feed(det, (snap(k, [10]) for k in range(30, 36)))
    s = det.summary(0, T0, T0 + 35, busy_s=30.0)
    assert s["dips"] == 1 and s["mean_dip_s"] == 5.0


# -- the demo's own timeline ------------------------------------------------------------------------


def demo_phase(demo: DemoSource, gpu: int) -> Callable[[float], str]:
    """The simulation's phase at `t`, from its own parameters (gputui.collect.sources.demo._Sim.util)."""
    sim = demo.sims[gpu]

    def phase(t: float) -> str:
        pos = (t + sim.phase) % sim.epoch
        if pos > sim.epoch - sim.eval:
            return "eval"
        return "stall" if any(s <= pos < s + d for s, d in sim.stalls) else "busy"

    return phase


def test_the_demos_timeline_has_stalls_and_long_dips() -> None:
    gpus, seconds = 2, 600  # ten simulated minutes of a job in full swing
    demo = DemoSource(gpus=gpus, seed=0)  # not opened: no process is started
    phases = [demo_phase(demo, g) for g in range(gpus)]
    # Start where every GPU is busy: the detector's first ten samples tell it what "busy" is.
    start = next(t for t in range(600, 700) if all(p(t + k) == "busy" for p in phases for k in range(12)))
    times = [float(start + k) for k in range(seconds + 1)]
    pids = [7100 + g for g in range(gpus)]
    det = DipDetector()
    for k, t in enumerate(times):
        reading = demo.reading_at(t, slow=k % 5 == 0, trainer_pids=pids)
        procs = [
            process_row(
                p.gpu,
                p.pid,
                kinds=p.kinds,
                used_memory=p.used_memory,
                sm_util=p.sm_util,
                mem_util=p.mem_util,
            )
            for p in reading.processes
        ]
        det.add(snapshot(time=T0 + t, gpus=reading.gpus, processes=tuple(procs)))
    found = list(det.dips)
    kinds = [d.kind for d in found]
    assert kinds.count("stall") >= 5 and kinds.count("long") >= 10, found
    for g, phase in enumerate(phases):
        expected = runs(times, [phase(t) for t in times])
        # Every epoch's evaluation is in a long dip.
        evals = [(s, e) for s, e, _ in expected if any(phase(t) == "eval" for t in range(int(s), int(e)))]
        assert len(evals) >= seconds // 80
        mine = [d for d in found if d.gpu == g]
        got = [(d.start - T0, d.end - T0, d.kind) for d in mine]
        want = [(s, e, "long" if e - s >= LONG_DIP_S else "stall") for s, e, _ in expected]
        assert got == want
        assert all(d.kind == "long" for d in mine if (d.start - T0, d.end - T0) in evals)
        assert all(85 <= d.baseline <= 98 and d.lowest <= 32 for d in mine)


def test_a_new_job_learns_its_own_busy_level() -> None:
    """Job A ran at 95 %; job B (other pids) runs at 35 %: B's level is not a dip against A's."""
    from gputui.model import GpuSample

    def snap(t: int, util: int, pid: int) -> Snapshot:
        return snapshot(
            time=T0 + t,
            hostname="h",
            gpus=(GpuSample(index=0, util_gpu=util),),
            processes=(process_row(0, pid, visible=True),),
        )

    det = DipDetector()
    ended = [d for t in range(60) for d in det.add(snap(t, 95, 1000))]
    ended += [d for t in range(60, 120) for d in det.add(snap(t, 35, 2000))]
    assert ended == [] and det.ongoing(T0 + 119) == []
    # ...while the same job falling from 95 % to 35 % is one.
    det = DipDetector()
    for t in range(60):
        det.add(snap(t, 95, 1000))
    for t in range(60, 70):
        det.add(snap(t, 35, 1000))
    assert [d.gpu for d in det.ongoing(T0 + 69)] == [0]
