"""A CPU-torch job under `gputui run` that stops stepping: the agent's step count and step times say it
stalled; while it steps, no alarm. The GPU side (busy at idle power) is scripted: there is no GPU here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from gputui.analyze import hung
from gputui.collect.agents import client as agents
from gputui.model import GpuSample
from tests.agent.test_run import STARTUP_S, gputui_run, procs  # noqa: F401 - the fixture

JOB = textwrap.dedent("""
    import time
    import torch
    from torch.utils.data import DataLoader
    loader = DataLoader(list(range(10_000)), batch_size=4)
    end = time.monotonic() + 4.0
    for batch in loader:
        time.sleep(0.02)
        if time.monotonic() > end:
            break
    print("stalled", flush=True)
    time.sleep(120)  # as a rank waiting in an all-reduce that never completes
""")

RULES = hung.Rules(stall_factor=20.0, stall_min_s=2.0, quiet_s=2.0)


def spinning_gpu(now: float) -> hung.GpuWindow:
    w = hung.GpuWindow()
    for k in range(200, -1, -1):
        w.add(now - k, GpuSample(index=0, util_gpu=100, power=110.0, power_limit=700.0))
    return w


@pytest.mark.slow
def test_a_job_that_stops_stepping_is_stalled(procs: list[subprocess.Popen[str]]) -> None:  # noqa: F811
    pytest.importorskip("torch")
    proc = gputui_run("--", sys.executable, "-c", JOB, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs.append(proc)
    poller = agents.AgentPoller()
    stepping: list[str | None] = []
    stalled_text = None
    last = None
    deadline = time.monotonic() + STARTUP_S + 30
    while time.monotonic() < deadline and proc.poll() is None:
        report = poller.poll().get(proc.pid)
        now = time.time()
        if report is not None and report.ok and (report.progress.steps or 0) >= 3:
            last = report
            verdict = hung.stalled(report, spinning_gpu(now), now, RULES)
            age = report.progress.last_step_age_s or 0.0
            if age < 0.5:
                stepping.append(verdict)
            elif verdict is not None:
                stalled_text = verdict
                break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate(timeout=5)
    assert last is not None, "no agent reported steps"
    assert len(stepping) >= 3 and all(v is None for v in stepping), stepping  # no false alarm while it steps
    assert stalled_text is not None, last.progress
    p = last.progress
    assert p.steps is not None and p.steps > 50
    assert p.usual_step_s is not None and 0.015 <= p.usual_step_s < 0.2
    assert stalled_text.startswith(f"stalled at step {p.steps:,} for ")
    assert "probably waiting in a collective" in stalled_text
