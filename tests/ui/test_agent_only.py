"""A job under `gputui run` that holds no GPU (CPU-only torch, CUDA not started yet) runs the agent but has
no GPU process row: it gets a row of its own (class no-gpu, ◆), so `a` reaches its allocator panel."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import psutil

from gputui.collect.procs.join import ProcessJoiner
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import AgentReport, HostProcess, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.allocator import AllocatorScreen
from gputui.ui.widgets.process_rows import AGENT_ONLY, NO_GPU, View, build_rows
from tests.ui import world
from tests.ui.conftest import first_frame, move_to
from tests.ui.drawn import lines

CPU_ONLY = 999_999  # a pid no process here has: only its agent's socket is known


def with_agent(pid: int, hosts: tuple[HostProcess, ...] = ()) -> Snapshot:
    snap = world.snapshots(gpus=2, seconds=0, weird=False)[0]
    return replace(snap, agents={pid: AgentReport(pid, torch="2.5.1")}, host_processes=hosts)


def test_a_process_with_an_agent_and_no_gpu_has_a_row() -> None:
    rows = build_rows(with_agent(CPU_ONLY), View())
    mine = [r for r in rows if r.kind == AGENT_ONLY]
    assert [r.key for r in mine] == [f"agent/{CPU_ONLY}"]
    cells = [c.plain for c in mine[0].cells]
    assert cells[1] == f"◆{CPU_ONLY}" and NO_GPU in cells and cells[0] == "-"
    assert "n/a" in cells  # its user, CPU and RSS are unknown: said so, never 0
    # Not among the suspicious ones, not a job, not on a chosen GPU:
    assert not [r for r in build_rows(with_agent(CPU_ONLY), View(zombies=True)) if r.kind == AGENT_ONLY]
    assert not [r for r in build_rows(with_agent(CPU_ONLY), View(gpu=0)) if r.kind == AGENT_ONLY]
    # A GPU process with an agent is its own row already: no second one.
    rank = world.trainer_pid(0)
    assert not [r for r in build_rows(with_agent(rank), View()) if r.kind == AGENT_ONLY]


def test_described_from_the_host_processes_when_the_sampler_read_it() -> None:
    me = psutil.Process()
    host = HostProcess(
        os.getpid(), me.ppid(), "alice", "python", "python train_cpu.py", 3.0, 1 << 30, 1.0, "running"
    )
    rows = [r for r in build_rows(with_agent(os.getpid(), (host,)), View()) if r.kind == AGENT_ONLY]
    assert len(rows) == 1 and rows[0].process == host
    assert rows[0].cells[-1].plain == "python train_cpu.py" and NO_GPU in [c.plain for c in rows[0].cells]
    filtered = build_rows(with_agent(os.getpid(), (host,)), View(filter="train_cpu"))
    assert [r.kind for r in filtered] == [AGENT_ONLY]  # the filter sees its command
    assert build_rows(with_agent(os.getpid(), (host,)), View(filter="nomatch")) == []


def test_the_joiner_describes_extra_pids_that_have_no_row() -> None:
    rows, hosts = ProcessJoiner().join([], extra=[os.getpid(), CPU_ONLY])
    assert rows == () and [h.pid for h in hosts] == [os.getpid()]  # a pid that is not there: left out
    assert hosts[0].create_time == psutil.Process().create_time()


async def test_a_opens_its_allocator_panel() -> None:
    app = GpuTuiApp(ReplaySampler([with_agent(CPU_ONLY)]), interval=30.0, devices_dir=Path("/nonexistent"))
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await move_to(pilot, app, f"agent/{CPU_ONLY}")
        assert "runs the gputui agent and holds no GPU" in " ".join(lines(app.row_note))
        await pilot.press("enter")  # no detail to open: said in one line
        await pilot.pause()
        assert "holds no GPU" in app.status.message and not isinstance(app.screen, AllocatorScreen)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AllocatorScreen) and app.screen.pid == CPU_ONLY


class _OneAgent:
    """The agents the sampler polls: one CPU-only process's."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> dict[int, AgentReport]:
        return {self.pid: AgentReport(self.pid, torch="2.5.1")}


def test_the_sampler_describes_a_cpu_only_agent_so_its_row_has_a_command() -> None:
    """Asked before the join, the agents' pids are described like any related process: the row of a real
    CPU-only job shows its user and command, not n/a."""
    import subprocess
    import sys

    from gputui.collect.sampler import Sampler
    from gputui.collect.sources.demo import DemoSource

    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "cpu_only_job"])
    try:
        with Sampler(DemoSource(gpus=1, start_at=120.0), agents=_OneAgent(job.pid)) as sampler:  # type: ignore[arg-type]
            snap = sampler.tick()
        assert job.pid in {h.pid for h in snap.host_processes}
        (row,) = [r for r in build_rows(snap, View()) if r.kind == AGENT_ONLY]
        assert "cpu_only_job" in row.cells[-1].plain and "n/a" not in row.cells[-1].plain
    finally:
        job.kill()
        job.wait()
