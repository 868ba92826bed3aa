"""Why a GPU dipped, in one line: the dip detector keeps what else was true while the GPU was low (an Xid,
clocks held down, a hung or stalled job, busy host CPUs) next to the data loader's share, and the Events
pane adds a profile recorded near the dip."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.analyze import dip_causes
from gputui.analyze.dip_causes import ProfileNote, profile_causes
from gputui.analyze.dips import Dip, DipDetector
from gputui.model import AgentReport, HostStats, Snapshot, TrainingProgress, XidEvent
from gputui.ui.widgets.dip_groups import DipGroup
from tests.collect.test_dips import T0, agents_with, feed, pid_of, row, snap

BUSY = [snap(k, [95, 95], procs=[row(0), row(1)]) for k in range(30)]


def dipped(*during: Snapshot, after: Snapshot | None = None) -> Dip:
    """GPU 0 busy for 30 s, then low through `during` (one per second from 30 s), then back."""
    det = DipDetector()
    feed(det, BUSY)
    feed(det, during)
    back = after or snap(30 + len(during), [95, 95], procs=[row(0), row(1)])
    (dip,) = det.add(back)
    return dip


def low(t: float, **kw: object) -> Snapshot:
    s = snap(t, [10, 95], procs=[row(0), row(1)])
    return replace(s, **kw)  # type: ignore[arg-type]


def test_a_plain_dip_has_no_reason() -> None:
    dip = dipped(low(30), low(31), low(32))
    assert dip.causes == () and dip.explanation() == ""


def test_busy_host_cpus_are_named_with_their_peak() -> None:
    dip = dipped(
        low(30, host=HostStats(cpu_percent=93.0)),
        low(31, host=HostStats(cpu_percent=99.4)),
        low(32, host=HostStats(cpu_percent=91.0)),
    )
    assert dip.explanation() == "host CPUs 99% busy"


def test_host_cpus_below_the_line_say_nothing() -> None:
    dip = dipped(*(low(t, host=HostStats(cpu_percent=dip_causes.HOST_CPU_BUSY - 1)) for t in (30, 31, 32)))
    assert dip.explanation() == ""


def test_an_xid_on_that_gpu_comes_first_even_with_the_data_loader_waiting() -> None:
    agents = agents_with(0.8, pid_of(0))
    dip = dipped(
        low(30, agents=agents, host=HostStats(cpu_percent=97.0)),
        low(31, agents=agents, xids=(XidEvent(gpu=0, xid=79, time=T0 + 31),)),
        low(32, agents=agents),
    )
    assert dip.explanation() == (
        "GPU 0 Xid 79: GPU fallen off the bus; input-bound: 80% of step time waiting for data; "
        "host CPUs 97% busy"
    )


def test_an_xid_on_another_gpu_is_not_this_dips_reason() -> None:
    dip = dipped(low(30, xids=(XidEvent(gpu=1, xid=79, time=T0 + 30),)), low(31), low(32))
    assert dip.explanation() == ""


def test_an_xid_just_before_the_dip_began_is_its_reason_and_an_old_one_is_not() -> None:
    det = DipDetector()
    early = XidEvent(gpu=0, xid=13, time=T0 - 100)
    just = XidEvent(gpu=0, xid=43, time=T0 + 29)
    feed(det, [replace(s, xids=(early,)) if k == 0 else s for k, s in enumerate(BUSY[:-1])])
    det.add(replace(BUSY[-1], xids=(just,)))
    feed(det, [low(30), low(31), low(32)])
    (dip,) = det.add(snap(33, [95, 95], procs=[row(0), row(1)]))
    assert dip.explanation() == "GPU 0 Xid 43: GPU stopped processing"


def test_clocks_held_down_by_the_hardware() -> None:
    s = low(30)
    hot = replace(s, gpus=(replace(s.gpus[0], throttle_reasons=("hw_thermal", "sw_power_cap")), s.gpus[1]))
    dip = dipped(hot, replace(hot, time=T0 + 31), low(32))
    assert dip.explanation() == "GPU 0 clocks held down (hardware thermal limit)"


def test_a_power_cap_alone_is_not_a_reason() -> None:
    s = low(30)
    capped = replace(s, gpus=(replace(s.gpus[0], throttle_reasons=("sw_power_cap",)), s.gpus[1]))
    assert dipped(capped, replace(capped, time=T0 + 31), low(32)).explanation() == ""


def test_a_hung_job_on_that_gpu_is_named_with_its_newest_text() -> None:
    def hung(t: float, text: str) -> Snapshot:
        return low(t, processes=(replace(row(0), hung=text), row(1)))

    dip = dipped(hung(30, "stalled at step 41,230 for 2 min"), hung(31, "stalled at step 41,230 for 3 min"))
    assert dip.explanation() == f"pid {pid_of(0)} stalled at step 41,230 for 3 min"


def agent_stopped(age: float, usual: float = 0.4) -> dict[int, AgentReport]:
    progress = TrainingProgress(steps=500, last_step_age_s=age, usual_step_s=usual, data_wait_share=0.05)
    return {pid_of(0): AgentReport(pid=pid_of(0), progress=progress)}


def test_a_job_that_stopped_stepping_says_for_how_long() -> None:
    dip = dipped(low(30, agents=agent_stopped(20.0)), low(31, agents=agent_stopped(41.0)), low(32))
    assert dip.explanation() == (
        f"pid {pid_of(0)} made no step for 41 s (usual step 0.4 s); "
        "not input-bound: 5% of step time waiting for data"
    )


@pytest.mark.parametrize(("age", "usual"), [(5.0, 0.1), (9.0, 0.4), (30.0, 2.0)])
def test_a_pause_of_a_few_steps_is_the_dip_itself_not_news(age: float, usual: float) -> None:
    """Under NO_STEP_MIN_S, or under STALL_FACTOR usual steps, a pause is what a dip is."""
    dip = dipped(
        low(30, agents=agent_stopped(age, usual)), low(31, agents=agent_stopped(age, usual)), low(32)
    )
    assert "no step" not in dip.explanation()


def test_an_ongoing_dip_already_says_why() -> None:
    det = DipDetector()
    feed(det, BUSY)
    feed(det, [low(30, host=HostStats(cpu_percent=95.0)), low(31), low(32)])
    (now,) = det.ongoing(T0 + 32)
    assert now.explanation() == "host CPUs 95% busy"


def test_the_next_dip_starts_with_no_reasons_of_its_own() -> None:
    det = DipDetector()
    feed(det, BUSY)
    feed(det, [low(30, host=HostStats(cpu_percent=95.0)), low(31), low(32)])
    (first,) = det.add(snap(33, [95, 95], procs=[row(0), row(1)]))
    feed(det, [snap(k, [95, 95], procs=[row(0), row(1)]) for k in range(34, 40)])
    feed(det, [low(40), low(41), low(42)])
    (second,) = det.add(snap(43, [95, 95], procs=[row(0), row(1)]))
    assert first.explanation() == "host CPUs 95% busy" and second.explanation() == ""


# -- a profile recorded near the dip (the Events pane's) -------------------------------------------------


def note(pid: int, gpu: int | None, start: float, end: float, verdict: str = "input-bound") -> ProfileNote:
    return ProfileNote(pid=pid, gpu=gpu, start=T0 + start, end=T0 + end, verdict=verdict)


def test_a_profile_near_the_dip_on_its_gpu_joins_the_reason() -> None:
    dip = dipped(low(30, host=HostStats(cpu_percent=95.0)), low(31), low(32))
    notes = [
        note(11, 0, -200, -180, "host-bound"),  # the older profile of that process
        note(11, 0, -100, -80, "input-bound"),
        note(12, 1, 0, 20, "gpu-bound"),  # another GPU
        note(13, 0, -2000, -1900, "launch-bound"),  # long before
        note(14, None, 30, 32, "gpu-bound"),  # its GPU unknown
    ]
    extra = tuple(profile_causes(notes, [dip.gpu], dip.start, dip.end))
    assert dip.explanation(extra) == "host CPUs 95% busy; profile of pid 11: input-bound"


def test_a_group_says_each_reason_once_and_keeps_the_ranks_disagreement() -> None:
    xid = (XidEvent(gpu=1, xid=79, time=T0 + 30),)
    a = Dip(
        0,
        T0,
        T0 + 3,
        95,
        10,
        wait_share=0.71,
        causes=tuple(dip_causes.observe(low(30, host=HostStats(cpu_percent=96.0)), 0)),
    )
    b = Dip(
        1,
        T0,
        T0 + 3,
        95,
        10,
        wait_share=0.12,
        causes=(
            *dip_causes.observe(low(30, host=HostStats(cpu_percent=98.0)), 1),
            *dip_causes.observe(low(30, xids=xid), 1),
        ),
    )
    group = DipGroup((a, b), job=None)
    assert group.explanation() == (
        "GPU 1 Xid 79: GPU fallen off the bus; "
        "input-bound: 71% of step time waiting for data on GPU 0 (12% on GPU 1); "
        "host CPUs 98% busy"
    )
