"""Profile from the monitor: torch.profiler over the next N DataLoader batches, a trace and a verdict."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import profile, protocol
from gputui.agent.server import Agent
from gputui.collect.agents import client as agents
from gputui.collect.agents.profile_reply import ProfileStatus, parse_status
from gputui.collect.agents.reply import BadReply
from tests.agent.test_run import STARTUP_S, gputui_run, procs  # noqa: F401 (a fixture)

# -- the arithmetic -------------------------------------------------------------------------------


def test_union_counts_overlaps_once() -> None:
    assert profile.union_us([]) == 0
    assert profile.union_us([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25
    assert profile.union_us([(20, 30), (0, 10)]) == 20


def _trace(kernels: list[tuple[float, float]]) -> dict[str, Any]:
    events: list[object] = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1e6}]
    events += [{"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur} for ts, dur in kernels]
    events += ["junk", {"cat": "kernel", "ph": "X", "ts": "x", "dur": 1}]  # ignored, not fatal
    return {"traceEvents": events}


@pytest.mark.parametrize(
    ("kernels", "wait", "expected", "idle"),
    [
        ([(i * 100.0, 5.0) for i in range(1000)], 0.0, "launch-bound", 0.95),  # 1000 tiny kernels, 5% busy
        ([(i * 1000.0, 200.0) for i in range(100)], 0.0, "host-bound", 0.8),  # long kernels, gaps between
        ([(i * 1000.0, 950.0) for i in range(100)], 0.0, "gpu-bound", 0.05),
        ([(i * 1000.0, 950.0) for i in range(100)], 0.5, "input-bound", 0.05),  # data wait decides first
        ([], 0.1, "no-gpu", None),
    ],
)
def test_verdicts(kernels: list[tuple[float, float]], wait: float, expected: str, idle: float | None) -> None:
    stats = profile.kernel_stats(_trace(kernels), wall_us=100_000.0)
    assert stats["gpu_idle_share"] == idle
    assert stats["kernels"] == len(kernels)
    assert profile.verdict(wait, stats["gpu_idle_share"], stats["short_kernel_share"]) == expected


# -- the agent's ops ------------------------------------------------------------------------------


def _ask(agent: Agent, message: dict[str, Any]) -> dict[str, Any]:
    return agent.answer(protocol.encode(message))


@pytest.mark.parametrize(
    "params", [{"steps": 0}, {"steps": 10**6}, {"steps": True}, {"steps": "20"}, {"max_seconds": 1e9}]
)
def test_profile_bounds_its_parameters(agent: Agent, params: dict[str, Any]) -> None:
    reply = _ask(agent, {"v": 1, "op": "profile", **params})
    assert reply["ok"] is False and "not a number in" in reply["error"]
    assert agent.profiler.state == profile.IDLE
    assert _ask(agent, {"v": 1, "op": "profile_status"}) == {
        "ok": True,
        "profile": {
            "state": "idle",
            "steps": 0,
            "steps_done": 0,
            "elapsed_s": None,
            "path": None,
            "error": None,
            "summary": None,
        },
    }


# -- the monitor's validation ---------------------------------------------------------------------

GOOD = {
    "state": "done",
    "steps": 20,
    "steps_done": 20,
    "path": "/tmp/gputui-1000/profile-1-2.json",
    "summary": {
        "steps": 20,
        "wall_s": 1.5,
        "steps_per_s": 13.3,
        "data_wait_share": 0.7,
        "cuda": False,
        "kernels": 0,
        "gpu_idle_share": None,
        "verdict": "input-bound",
        "explanation": "waits\x1b[2J",
        "top_ops": [{"name": "aten::mm\x07", "count": 20, "self_cpu_us": 1000.0, "self_device_us": 0.0}],
    },
}


def test_a_good_status_parses_and_its_strings_are_made_printable() -> None:
    status = parse_status(GOOD)
    assert status.state == "done" and status.summary is not None
    assert status.summary.verdict == "input-bound" and status.summary.data_wait_share == 0.7
    assert status.summary.explanation == "waits?[2J"
    assert status.summary.top_ops[0].name == "aten::mm?"


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"state": "exploded"}, "profile.state"),
        ({"steps_done": -1}, "profile.steps_done"),
        ({"path": 7}, "profile.path"),
        ({"path": "x" * 5000}, "profile.path"),
        ({"summary": {**GOOD["summary"], "verdict": "fast"}}, "verdict"),  # type: ignore[dict-item]
        ({"summary": {**GOOD["summary"], "data_wait_share": 1.5}}, "data_wait_share"),  # type: ignore[dict-item]
        ({"summary": {**GOOD["summary"], "gpu_idle_share": float("nan")}}, "gpu_idle_share"),  # type: ignore[dict-item]
        ({"summary": {**GOOD["summary"], "top_ops": [{}] * 11}}, "top_ops"),  # type: ignore[dict-item]
        ({"summary": {**GOOD["summary"], "top_ops": [{"name": 3}]}}, "top_ops[0].name"),  # type: ignore[dict-item]
        ({"summary": []}, "profile.summary"),
    ],
)
def test_a_hostile_status_is_refused(change: dict[str, Any], where: str) -> None:
    with pytest.raises(BadReply, match=where.replace("[", r"\[").replace("]", r"\]")):
        parse_status({**GOOD, **change})


# -- real training loops under `gputui run` --------------------------------------------------------

LOOP = textwrap.dedent("""
    import sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset
    STARVED = sys.argv[1] == "starved"

    class Data(Dataset):
        def __len__(self):
            return 100_000
        def __getitem__(self, i):
            if STARVED:
                time.sleep(0.004)  # a slow disk: 8 of them per batch
            return torch.ones(16)

    w = torch.randn(512, 512)
    end = time.monotonic() + 150
    while time.monotonic() < end:
        for batch in DataLoader(Data(), batch_size=8):
            x = torch.randn(128, 512)
            for _ in range(1 if STARVED else 8):
                x = torch.tanh(x @ w)
            if time.monotonic() > end:
                break
""")


def _profile_of(kind: str, procs: list[subprocess.Popen[str]]) -> ProfileStatus:  # noqa: F811
    proc = gputui_run(
        "--", sys.executable, "-c", LOOP, kind, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    procs.append(proc)
    poller = agents.AgentPoller()
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline and proc.poll() is None:  # the agent answers and batches flow
        report = poller.poll().get(proc.pid)
        if report is not None and (report.progress.batches or 0) > 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate(timeout=5)
    reply = poller.act(proc.pid, "profile", steps=10, max_seconds=30)
    assert reply["ok"], reply
    assert "the next 10 steps" in reply["message"]
    busy = poller.act(proc.pid, "profile", steps=10, max_seconds=30)  # one at a time
    assert not busy["ok"] or "next 10 steps" in busy["message"]  # refused while recording; waiting: replaced
    status: ProfileStatus | None = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = poller.act(proc.pid, "profile_status")
        assert answer["ok"], answer
        status = answer["profile"]
        assert isinstance(status, ProfileStatus)
        if status.state in ("done", "failed"):
            break
        time.sleep(0.2)
    assert status is not None and status.state == "done", status
    return status


def _check_trace(status: ProfileStatus, pid: int) -> None:
    assert status.path is not None
    path = Path(status.path)
    assert path.parent == protocol.runtime_dir() and str(pid) in path.name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    trace = json.loads(path.read_text())  # what Perfetto and chrome://tracing open
    events = trace["traceEvents"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in events if isinstance(e, dict))
    assert any(e.get("name") == "aten::mm" for e in events if isinstance(e, dict))
    path.unlink()


def test_a_data_starved_loop_is_input_bound(procs: list[subprocess.Popen[str]]) -> None:  # noqa: F811
    pytest.importorskip("torch")
    status = _profile_of("starved", procs)
    summary = status.summary
    assert summary is not None and summary.steps == 10
    assert summary.verdict == "input-bound", summary
    assert summary.data_wait_share is not None and summary.data_wait_share >= 0.5
    assert summary.gpu_idle_share is None and not summary.cuda  # CPU-only torch: said, not guessed
    # The DataLoader's own record_function is where the time went.
    assert "DataLoader" in summary.top_ops[0].name, summary.top_ops
    _check_trace(status, procs[-1].pid)


def test_a_compute_loop_is_not_input_bound(procs: list[subprocess.Popen[str]]) -> None:  # noqa: F811
    pytest.importorskip("torch")
    status = _profile_of("compute", procs)
    summary = status.summary
    assert summary is not None and summary.steps == 10
    assert summary.verdict == "no-gpu", summary  # not input-bound; and on CPU-only torch, no GPU verdict
    assert summary.data_wait_share is not None and summary.data_wait_share < 0.3
    assert "aten::mm" in [op.name for op in summary.top_ops[:3]], summary.top_ops
    _check_trace(status, procs[-1].pid)


def test_without_torch_there_is_nothing_to_profile(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from gputui.agent import protocol
        from gputui.agent.server import Agent
        a = Agent(directory=Path(sys.argv[1]))
        print(a.answer(protocol.encode({"op": "profile"}))["error"])
        print("torch" in sys.modules, "torch.profiler" in sys.modules)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert out.stdout.splitlines() == ["torch is not imported in this process", "False False"], out
