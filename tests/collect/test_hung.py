"""Hung jobs on scripted series: a collective wait is called, a busy GPU, an eval phase and a checkpoint
write are not."""

from __future__ import annotations

from gputui.analyze import hung
from gputui.model import AGENT_OK, AGENT_SLOW, AgentReport, GpuSample, TrainingProgress


def window(
    phases: list[tuple[float, int, float]], limit: float = 700.0, start: float = 0.0
) -> hung.GpuWindow:
    """A GPU's window from (seconds, util %, watts) phases at 1 Hz, after an idle first sample."""
    w = hung.GpuWindow()
    t = start
    w.add(t, GpuSample(index=0, util_gpu=0, power=70.0, power_limit=limit))
    for seconds, util, watts in phases:
        for _ in range(int(seconds)):
            t += 1.0
            w.add(t, GpuSample(index=0, util_gpu=util, power=watts, power_limit=limit))
    return w


def report(
    steps: int, age: float, usual: float = 0.4, time: float | None = None, status: str = AGENT_OK
) -> AgentReport:
    return AgentReport(
        pid=1,
        status=status,
        time=time,
        progress=TrainingProgress(steps=steps, last_step_age_s=age, usual_step_s=usual),
    )


TRAINING = (600, 97, 620.0)  # ten minutes of training at full power


def test_collective_wait_with_the_agent_is_stalled() -> None:
    w = window([TRAINING, (180, 100, 110.0)])  # then three minutes spinning at idle power
    now = 781.0
    text = hung.stalled(report(41_230, 180.0), w, now)
    assert text == (
        "stalled at step 41,230 for 3 min (usual step 0.4 s); GPU busy (100%+ at 110 W): "
        "probably waiting in a collective"
    )
    # a slow agent's last numbers are older than they say
    assert "for 4 min" in (
        hung.stalled(report(41_230, 180.0, time=now - 60, status=AGENT_SLOW), w, now) or ""
    )


def test_no_stall_while_stepping_or_before_the_first_steps() -> None:
    w = window([TRAINING, (180, 100, 110.0)])
    assert hung.stalled(report(41_230, 0.3), w, 781.0) is None
    assert hung.stalled(report(41_230, 30.0), w, 781.0) is None  # 75 usual steps, but under a minute
    assert hung.stalled(report(1, 180.0), w, 781.0) is None  # still loading: never stepped
    assert hung.stalled(AgentReport(pid=1), w, 781.0) is None  # an agent without step counts
    assert hung.stalled(report(41_230, 180.0), None, 781.0) is None  # no GPU seen


def test_a_slow_step_is_judged_by_its_own_usual_time() -> None:
    w = window([TRAINING, (300, 100, 110.0)])
    assert hung.stalled(report(900, 200.0, usual=12.0), w, 901.0) is None  # 17 usual steps
    assert hung.stalled(report(900, 250.0, usual=12.0), w, 901.0) is not None


def test_false_alarms_with_the_agent() -> None:
    now = 781.0
    no_step = report(41_230, 180.0)
    # an eval loop without a DataLoader: no batches, the GPU computes at full power
    assert hung.stalled(no_step, window([TRAINING, (180, 98, 650.0)]), now) is None
    # a checkpoint write: the GPU idles while the host writes
    assert hung.stalled(no_step, window([TRAINING, (180, 0, 75.0)]), now) is None
    # an eval phase with small batches: partly busy
    assert hung.stalled(no_step, window([TRAINING, (180, 40, 200.0)]), now) is None


def test_without_the_agent() -> None:
    w = window([TRAINING, (150, 100, 120.0)])
    now = 751.0
    text = hung.possibly_hung(150.0, w, now)
    assert text == "possibly hung (collective wait): GPU 100%+ busy at 120 W (near idle) and 0% CPU for 2 min"
    assert hung.possibly_hung(90.0, w, now) is None  # not quiet for two minutes yet
    assert hung.possibly_hung(None, w, now) is None  # CPU unknown
    assert hung.possibly_hung(150.0, window([(60, 100, 120.0)]), 61.0) is None  # under two minutes seen


def test_false_alarms_without_the_agent() -> None:
    now = 751.0
    # a busy GPU at full power (a CUDA graph replay with an idle host thread)
    assert hung.possibly_hung(150.0, window([TRAINING, (150, 99, 640.0)]), now) is None
    # an eval phase: busy in bursts
    assert hung.possibly_hung(150.0, window([TRAINING, (100, 96, 130.0), (50, 30, 130.0)]), now) is None
    # a checkpoint write: GPU idle
    assert hung.possibly_hung(150.0, window([TRAINING, (150, 0, 72.0)]), now) is None
    # one busy sample at working power in the window
    assert (
        hung.possibly_hung(
            150.0, window([TRAINING, (140, 100, 120.0), (1, 100, 500.0), (9, 100, 120.0)]), now
        )
        is None
    )


def test_idle_level() -> None:
    # a GPU busy since gputui met it has not shown its idle power: a share of its limit stands in
    w = hung.GpuWindow()
    w.add(0.0, GpuSample(index=0, util_gpu=100, power=600.0, power_limit=700.0))
    assert w.near_idle_w() == 0.2 * 700 + 0.15 * 700
    w.add(1.0, GpuSample(index=0, util_gpu=0, power=65.0, power_limit=700.0))
    assert w.near_idle_w() == 65.0 + 0.15 * 700
    # no power limit: no verdict at all
    nolimit = hung.GpuWindow()
    for t in range(200):
        nolimit.add(float(t), GpuSample(index=0, util_gpu=100, power=60.0))
    assert nolimit.near_idle_w() is None
    assert hung.possibly_hung(200.0, nolimit, 199.0) is None
    # a lost GPU's samples are unknown, not busy
    lost = hung.GpuWindow()
    for t in range(200):
        lost.add(float(t), GpuSample(index=0, lost=True, util_gpu=100, power=60.0, power_limit=700.0))
    assert hung.possibly_hung(200.0, lost, 199.0) is None


def test_a_gpu_window_keeps_ten_minutes_with_unknowns_and_starts_again_when_the_clock_steps_back() -> None:
    w = window([TRAINING, (100, 97, 620.0)])  # 701 samples over 700 s
    assert w.since(0.0)[0][0] == 700.0 - hung.KEEP_S and len(w.since(0.0)) == hung.KEEP_S + 1
    w.add(701.0, GpuSample(index=0, util_gpu=None, power=None, power_limit=700.0))
    w.add(702.0, GpuSample(index=0, lost=True))
    w.add(703.0, GpuSample(index=0, util_gpu=100_000, power=80.0, power_limit=700.0))  # driver garbage
    assert w.since(701.0) == [(701.0, None, None), (702.0, None, None), (703.0, 100, 80.0)]
    w.add(650.0, GpuSample(index=0, util_gpu=97, power=600.0, power_limit=700.0))  # NTP stepped back
    assert w.since(0.0) == [(650.0, 97, 600.0)]
    assert w.busy_at_idle_power(650.0, 120.0, 95) is None  # too short a window for a verdict
