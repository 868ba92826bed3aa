"""`gputui doctor --pid`: the memory trend and the hung check.

The histories are an agent's `memory_history` replies read by the real parser (a leak, a growing cache,
a flat line, too short), the progress a stats reply read by the real parser; the GPUs' memory is NVML's
reading as SystemFacts carries it. Then the same from a real agent over its socket, the monitor's rows
as the D screen passes them, and no agent at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent.memory_ring import POINT_S, MemoryRing
from gputui.agent.server import Agent
from gputui.analyze import hung
from gputui.collect.agents import reply as agent_reply
from gputui.collect.agents.client import AgentPoller
from gputui.doctor import process
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.process import ProcessFacts
from gputui.doctor.report import OK, PROBLEM, WARNING, Check
from gputui.model import AgentReport, GpuProcess, GpuSample, ProcessRow
from gputui.ui.screens.doctor import view_of, watched_rows
from tests.agent.conftest import stop_agent
from tests.builders import h100, process_row, snapshot

MIB = 1 << 20
GIB = 1 << 30
PID = 4242
T0 = 1.7e9  # the agent's clock when it answers
BORN = T0 - 3600.0  # the process has run for an hour: its warm-up is long past
LEAK = 2 * MIB  # bytes/s: 120 MiB/min


def history(
    span: float = 600.0,
    allocated: float = 0.0,
    reserved: float = 0.0,
    device: int = 0,
    now: float = T0,
) -> dict[str, Any]:
    """An agent's reply: one point per POINT_S over the last `span` s; allocated and reserved grow by
    the given bytes/s from 6 GiB and 8 GiB."""
    n = int(span / POINT_S) + 1
    points = []
    for k in range(n):
        t = now - span + k * POINT_S
        points.append([t, int(6 * GIB + allocated * k * POINT_S), int(8 * GIB + reserved * k * POINT_S)])
    return {"ok": True, "time": now, "interval": POINT_S, "devices": [{"index": device, "points": points}]}


def gpu(index: int = 0, free: int = 1680 * MIB) -> GpuSample:
    return h100(index=index, mem_used=80 * GIB - free)


def machine(*samples: GpuSample) -> SystemFacts:
    samples = samples or (gpu(),)
    gpus = tuple(GpuFact(s.index, s.name, minor=s.index, mig=False) for s in samples)
    procs = tuple(GpuProcess(s.index, PID, "C", 10 * GIB) for s in samples)
    return SystemFacts(gpus=gpus, processes=procs, samples=samples)


def facts(**kw: Any) -> ProcessFacts:
    base: dict[str, Any] = dict(
        pid=PID,
        command="python train.py",
        devices=("/dev/nvidia0",),
        environ={"CUDA_VISIBLE_DEVICES": "0"},
        memory={0: 10 * GIB},
        born=BORN,
    )
    if "history" in kw and isinstance(kw["history"], dict):
        kw["history"] = agent_reply.parse_memory_history(kw["history"])
    base.update(kw)
    return ProcessFacts(**base)


def trend(checks: list[Check]) -> Check:
    (line,) = [c for c in checks if "memory trend" in c.found]
    return line


def hung_lines(checks: list[Check]) -> list[Check]:
    return [c for c in checks if "hung" in c.found or "step" in c.found]


# -- from the agent's history --------------------------------------------------------------------------


def test_a_leak_says_its_rate_when_the_gpu_is_full_and_that_tensors_leak() -> None:
    p = facts(history=history(allocated=LEAK, reserved=LEAK))
    line = trend(process.checks(p, machine()))
    assert line.status == PROBLEM  # full within half an hour
    assert line.found == (
        f"pid {PID} memory trend: growing 120 MiB/min — GPU 0 is full in ~14 min; "
        "allocated grows 120 MiB/min: tensors leak (kept references)"
    )
    assert "memory_viz" in line.fix and ".item()" in line.fix


def test_a_slow_leak_with_room_left_is_a_warning() -> None:
    p = facts(history=history(allocated=LEAK, reserved=LEAK))
    line = trend(process.checks(p, machine(gpu(free=30 * GIB))))
    assert line.status == WARNING
    assert "GPU 0 is full in ~4.3 h; allocated grows" in line.found


def test_the_gpu_is_found_through_cuda_visible_devices() -> None:
    """cuda:0 of a process with CUDA_VISIBLE_DEVICES=1 is NVML's GPU 1: its free memory counts."""
    p = facts(
        history=history(allocated=LEAK, reserved=LEAK),
        environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
        memory={1: 10 * GIB},
    )
    line = trend(process.checks(p, machine(gpu(0, free=70 * GIB), gpu(1, free=600 * MIB))))
    assert "GPU 1 is full in ~5 min" in line.found


def test_only_reserved_growing_is_fragmentation() -> None:
    p = facts(history=history(reserved=LEAK))
    line = trend(process.checks(p, machine()))
    assert line.status == PROBLEM
    assert line.found.startswith(f"pid {PID} memory trend: growing 120 MiB/min — GPU 0 is full in ~14 min; ")
    assert "only reserved grows 120 MiB/min" in line.found and "fragmentation" in line.found
    assert "expandable_segments:True" in line.fix


def test_a_flat_history_is_steady() -> None:
    p = facts(history=history())
    line = trend(process.checks(p, machine()))
    assert line.status == OK
    assert line.found == (
        f"pid {PID} memory trend: steady over the last 10 min (flat): allocated 6.0 GiB, reserved 8.0 GiB "
        "on GPU 0"
    )


def test_a_sawtooth_is_steady() -> None:
    """Eval adds 2 GiB for 30 s every 2 minutes and gives it back: no trend, no alarm."""
    reply = history()
    for point in reply["devices"][0]["points"]:
        if (point[0] - T0) % 120 < 30:
            point[1] += 2 * GIB
            point[2] += 2 * GIB
    line = trend(process.checks(facts(history=reply), machine()))
    assert line.status == OK and "steady" in line.found


def test_a_short_history_says_how_much_is_missing() -> None:
    """The agent started with the process 95 s ago: a trend needs its warm-up minute and three more."""
    p = facts(history=history(span=95.0, allocated=LEAK, reserved=LEAK), born=T0 - 95.0)
    line = trend(process.checks(p, machine()))
    assert line.status == OK
    assert line.found == f"pid {PID} memory trend: not enough history yet (95 s of 4 min)"


def test_an_agent_attached_late_needs_no_warm_up() -> None:
    p = facts(history=history(span=60.0, allocated=LEAK, reserved=LEAK))
    line = trend(process.checks(p, machine()))
    assert line.found == f"pid {PID} memory trend: not enough history yet (60 s of 3 min)"


def test_an_agent_without_points_yet() -> None:
    p = facts(history={"ok": True, "time": T0, "devices": []})
    line = trend(process.checks(p, machine()))
    assert line.status == OK and "no points yet" in line.found


def test_an_agent_that_gave_no_history_says_why() -> None:
    p = facts(history="bad reply: the agent said: unknown op 'memory_history'")
    line = trend(process.checks(p, machine()))
    assert line.status == OK and "unknown op 'memory_history'" in line.found


# -- without an agent ----------------------------------------------------------------------------------


def test_without_an_agent_the_doctor_says_plainly_what_it_cannot_know() -> None:
    line = trend(process.checks(facts(), machine()))
    assert line.status == OK
    assert "a one-shot doctor has no memory history" in line.found
    assert "the monitor (`gputui`) shows its trend on the process row after ~4 minutes" in line.found
    assert "`gputui run -- COMMAND`" in line.found and f"`gputui attach {PID}`" in line.found
    assert hung_lines(process.checks(facts(), machine())) == []  # and no guess at a hang


def test_a_process_without_gpu_memory_gets_no_trend_line() -> None:
    checks = process.checks(facts(memory={}), machine())
    assert [c for c in checks if "memory trend" in c.found] == []


# -- the monitor's rows (the D screen) ---------------------------------------------------------------


def row(*, gpu: int | None = 0, pid: int = PID, **kw: Any) -> ProcessRow:
    return process_row(gpu, pid, used_memory=10 * GIB, sm_util=90, mem_util=40, **kw)


def test_the_monitors_trend_is_used() -> None:
    p = facts(watched=(row(memory_growth=float(LEAK), full_in=600.0),))
    line = trend(process.checks(p, machine()))
    assert line.status == PROBLEM
    assert line.found == f"pid {PID} memory trend: growing 120 MiB/min — GPU 0 is full in ~10 min"
    assert "gputui run" in line.fix  # only an agent tells a leak from a growing cache


def test_the_monitors_trend_with_the_agents_verdict() -> None:
    p = facts(
        watched=(row(gpu=3, memory_growth=float(LEAK), full_in=3 * 3600.0),),
        history=history(allocated=LEAK, reserved=LEAK),
    )
    line = trend(process.checks(p, machine()))
    assert line.status == WARNING
    assert line.found == (
        f"pid {PID} memory trend: growing 120 MiB/min — GPU 3 is full in ~3.0 h; "
        "allocated grows 120 MiB/min: tensors leak (kept references)"
    )


def test_the_monitor_has_not_watched_long_enough() -> None:
    line = trend(process.checks(facts(watched=(row(),)), machine()))
    assert line.found == f"pid {PID} memory trend: not enough history yet (the monitor needs ~4 min)"


def test_the_monitor_says_steady() -> None:
    line = trend(process.checks(facts(watched=(row(memory_growth=0.0),)), machine()))
    assert line.status == OK and "steady over the monitor's last 10 min" in line.found


def test_the_monitors_hung_verdict_is_used() -> None:
    said = "possibly hung (collective wait): GPU 99%+ busy at 90 W (near idle) and 0% CPU for 3 min"
    (line,) = hung_lines(process.checks(facts(watched=(row(hung=said),)), machine()))
    assert line.status == PROBLEM and line.found == f"pid {PID} looks hung: {said}"
    assert f"py-spy dump --pid {PID}" in line.fix and "NCCL" in line.fix


def test_the_d_screen_passes_the_rows_and_the_gpus_memory() -> None:
    snap = snapshot(
        time=T0,
        hostname="h",
        gpus=(gpu(0), gpu(1)),
        processes=(row(gpu=1, memory_growth=1.0), row(pid=7), row(gpu=None)),
    )
    assert watched_rows(snap, PID) == (snap.processes[0],)
    assert watched_rows(None, PID) == () and watched_rows(snap, None) == ()
    assert view_of(snap).samples == snap.gpus


# -- hung, from the agent's progress -------------------------------------------------------------------


def stats(age: float, steps: int = 41_230, usual: float = 0.4, at: float = T0) -> AgentReport:
    reply = {
        "ok": True,
        "pid": PID,
        "time": at,
        "allocator": {"devices": []},
        "progress": {"batches": 75, "steps": steps, "last_step_age_s": age, "usual_step_s": usual},
    }
    report = agent_reply.parse(PID, reply)
    assert report.ok, report.error
    return report


def look(util: int, watts: float, at: float = T0 + 1.0) -> dict[int, hung.GpuWindow]:
    """GPU 0 read as look_at_gpus reads it: LOOK_READINGS over LOOK_S, the last at `at`."""
    window = hung.GpuWindow()
    n = process.LOOK_READINGS
    for k in range(n):
        sample = GpuSample(0, util_gpu=util, power=watts, power_limit=700.0)
        window.add(at - process.LOOK_S * (n - 1 - k) / n, sample)
    return {0: window}


def test_a_stalled_job_on_a_busy_waiting_gpu_looks_hung() -> None:
    p = facts(agent=stats(age=179.0), looks=look(100, 110.0), looked_at=T0 + 1.0)
    (line,) = hung_lines(process.checks(p, machine()))
    assert line.status == PROBLEM
    assert line.found == (
        f"pid {PID} looks hung: stalled at step 41,230 for 3 min (usual step 0.4 s); "
        "GPU busy (100%+ at 110 W): probably waiting in a collective"
    )
    assert f"py-spy dump --pid {PID}" in line.fix and "dead rank" in line.fix


def test_a_stalled_job_on_a_gpu_at_full_power_is_not_called_hung() -> None:
    p = facts(agent=stats(age=179.0), looks=look(100, 650.0), looked_at=T0 + 1.0)
    (line,) = hung_lines(process.checks(p, machine()))
    assert line.status == OK
    assert "no step for a while" in line.found and "not a collective wait" in line.found


def test_a_stepping_job_is_not_hung() -> None:
    p = facts(agent=stats(age=0.2), looks=look(100, 110.0), looked_at=T0 + 1.0)
    (line,) = hung_lines(process.checks(p, machine()))
    assert line.status == OK
    assert line.found == f"pid {PID} is stepping: step 41,230, the last 0.2 s ago (usual step 0.4 s)"


def test_gather_looks_at_the_gpu_only_when_the_agent_says_no_step_came(tmp_path: Path) -> None:
    """A real process (this one) with a stalled agent report: gather looks at its GPU (NVML's readings
    replaced: there is no GPU here); with a stepping report it does not look at all."""
    looked: list[list[int]] = []

    def reading(gpus: list[int]) -> dict[int, hung.GpuWindow]:
        looked.append(gpus)
        return look(100, 110.0, at=time.time())

    system = SystemFacts(processes=(GpuProcess(0, os.getpid(), "C", 10 * GIB),))
    common: dict[str, Any] = dict(history=lambda _pid: "none", look=reading, attachable=None)
    stepping = process.gather(
        os.getpid(), system, tmp_path, agent=lambda pid: stats(0.1, at=time.time()), **common
    )
    assert looked == [] and stepping.looked_at is None
    stalled = process.gather(
        os.getpid(), system, tmp_path, agent=lambda pid: stats(400.0, at=time.time()), **common
    )
    assert looked == [[0]]
    (line,) = hung_lines(process.checks(stalled, system))
    assert line.status == PROBLEM and "stalled at step 41,230 for 7 min" in line.found
    watched = process.gather(
        os.getpid(),
        system,
        tmp_path,
        agent=lambda pid: stats(400.0, at=time.time()),
        watched=(row(pid=os.getpid()),),
        **common,
    )
    assert looked == [[0]] and watched.looks == {}  # the TUI's rows carry the monitor's verdict


# -- a real agent --------------------------------------------------------------------------------------


@pytest.fixture
def leaking_agent(tmp_path: Path) -> Iterator[Path]:
    """This process's agent, whose ring holds ten minutes of a 120 MiB/min leak (its allocator read is
    the only stand-in: there is no CUDA here)."""
    clock = [0.0]
    start = time.time() - 600.0

    def read() -> list[tuple[int, int, int]]:
        grown = int(LEAK * clock[0])
        return [(0, 6 * GIB + grown, 8 * GIB + grown)]

    ring = MemoryRing(clock=lambda: clock[0], wall=lambda: start + clock[0], read=read)
    while clock[0] <= 600.0:
        ring.tick()
        clock[0] += POINT_S
    clock[0] -= POINT_S  # now: the last point was just taken
    agent = Agent(directory=tmp_path / "run", memory=ring)
    agent.start()
    try:
        yield tmp_path / "run"
    finally:
        stop_agent(agent)


def test_the_doctor_reads_a_real_agents_history(leaking_agent: Path, tmp_path: Path) -> None:
    me = os.getpid()
    system = SystemFacts(
        gpus=(GpuFact(0, "NVIDIA H100 80GB HBM3", minor=0, mig=False),),
        processes=(GpuProcess(0, me, "C", 10 * GIB),),
        samples=(gpu(0, free=1680 * MIB),),
    )
    p = process.gather(
        me,
        system,
        tmp_path,
        agent=lambda pid: AgentPoller(leaking_agent).report(pid),
        history=lambda pid: process.agent_history(pid, leaking_agent),
    )
    assert p.agent is not None and isinstance(p.history, agent_reply.MemoryHistory)
    line = trend(process.checks(p, system))
    assert line.status == PROBLEM
    assert "growing 120 MiB/min — GPU 0 is full in ~14 min; allocated grows 120 MiB/min" in line.found
