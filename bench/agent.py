"""agent: the in-process agent's CPU cost when gputui polls it once a second; agent_poll: one tick's poll
of 16 real agents, 8 of them stopped."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def bench_agent(seconds: float = 10.0) -> dict[str, object]:
    """CPU of a process running the agent (torch imported, a DataLoader stepping) while gputui polls
    it once a second, against the same process not polled."""
    script = (
        "import time, torch, gputui.agent\n"
        "from torch.utils.data import DataLoader\n"
        "gputui.agent.start()\n"
        "end = time.time() + 3600\n"
        "while time.time() < end:\n"
        "    for _ in DataLoader(range(64), batch_size=8):\n"
        "        time.sleep(0.05)\n"
    )
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"skipped": "torch is not installed"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        from gputui.collect.agents.client import AgentPoller, discover

        deadline = time.monotonic() + 30
        while proc.pid not in discover() and time.monotonic() < deadline:
            time.sleep(0.1)
        ps = psutil.Process(proc.pid)
        time.sleep(2.0)

        def cpu() -> float:
            t = ps.cpu_times()
            return t.user + t.system

        c0 = cpu()
        time.sleep(seconds)
        idle = (cpu() - c0) / seconds * 100
        poller = AgentPoller()
        c0, t0 = cpu(), time.monotonic()
        polls = 0
        while time.monotonic() - t0 < seconds:
            polls += len(poller.poll())
            time.sleep(1.0)
        polled = (cpu() - c0) / (time.monotonic() - t0) * 100
        return {
            "polls": polls,
            "process_cpu_percent_not_polled": round(idle, 2),
            "process_cpu_percent_polled_1hz": round(polled, 2),
            "agent_cost_percent_of_core": round(polled - idle, 2),
        }
    finally:
        proc.kill()
        proc.wait()


def bench_agent_poll(agents: int = 16, stopped: int = 8, polls: int = 20) -> dict[str, object]:
    """One tick's poll of `agents` real agents, `stopped` of them halted (SIGSTOP): the wall time of a
    poll, which the 150 ms deadline must bound whatever the agents do."""

    from gputui.collect.agents.client import AgentPoller

    script = (
        "import sys, time; from pathlib import Path; from gputui.agent.server import Agent\n"
        "Agent(directory=Path(sys.argv[1])).start(); print('up', flush=True); time.sleep(600)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            subprocess.Popen([sys.executable, "-c", script, tmp], stdout=subprocess.PIPE)
            for _ in range(agents)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
            poller = AgentPoller(Path(tmp))

            def poll_ms() -> list[float]:
                times = []
                for _ in range(polls):
                    t0 = time.perf_counter()
                    poller.poll()
                    times.append((time.perf_counter() - t0) * 1000)
                return times

            answering = poll_ms()
            for proc in procs[:stopped]:
                os.kill(proc.pid, signal.SIGSTOP)
            # The first polls wait out the deadline; once a stopped agent's queue of connections is full,
            # connecting fails at once.
            with_stopped = poll_ms()
            slow = sum(r.status == "slow" for r in poller.poll().values())
        finally:
            for proc in procs:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    return {
        "agents": agents,
        "stopped": stopped,
        "poll_ms_median_all_answering": round(statistics.median(answering), 2),
        "poll_ms_max_all_answering": round(max(answering), 2),
        "poll_ms_median_with_stopped": round(statistics.median(with_stopped), 1),
        "poll_ms_max_with_stopped": round(max(with_stopped), 1),
        "marked_slow": slow,
    }
