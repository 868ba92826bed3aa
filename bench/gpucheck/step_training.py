"""A real training job (bench/gpucheck/train_job.py: a CUDA model, a DataLoader of 3 workers) under
`gputui run`, seen by gputui as a person would: its row and its workers', its memory against nvidia-smi, its
allocator as the agent reports it against the job's own torch.cuda.memory_stats()/memory_snapshot() at
the same moment, a memory_viz snapshot, the profile's verdict. Then a second job started on an
interpreter without gputui (`python -I`, outside the checkout) and `gputui attach` to it (cuda-gdb where
there is no gdb). The agent's replies are saved as agent_replies.json, a fixture."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.gpucheck.common import MIB, REPO, Result, out_dir, python, smi_csv, spawn, stop, until, work_dir
from gputui.agent import protocol
from gputui.collect.agents.client import AgentPoller
from gputui.collect.sampler import Sampler
from gputui.collect.sources.nvml import NvmlSource
from gputui.model import AgentReport

TRAIN = Path(__file__).with_name("train_job.py")
COMPARED = ("allocated", "reserved", "segments", "largest_free_block")


def steps(directory: Path) -> list[tuple[int, float]]:
    try:
        lines = (directory / "steps").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2:
            out.append((int(parts[0]), float(parts[1])))
    return out


def raw(pid: int, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    """The agent's reply as it sent it (the fixture keeps what the wire carried)."""
    found = AgentPoller().discover().get(pid)
    if found is None:
        return {"ok": False, "error": "no agent socket"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(found.path))
        s.sendall(protocol.encode(request))
        buffer = b""
        while b"\n" not in buffer:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buffer += chunk
    return protocol.decode(buffer.split(b"\n", 1)[0])


def held(directory: Path) -> dict[str, Any] | None:
    """Hold the job (no step runs) and read what it says of its own allocator."""
    (directory / "hold").touch()
    if not until((directory / "stats.json").exists, 20):
        return None
    stats: dict[str, Any] = json.loads((directory / "stats.json").read_text())
    return stats


def release(directory: Path) -> None:
    (directory / "hold").unlink(missing_ok=True)
    (directory / "stats.json").unlink(missing_ok=True)


def compare_allocator(r: Result, label: str, report: AgentReport | None, own: dict[str, Any]) -> None:
    dev = report.devices[0] if report is not None and report.devices else None
    seen = {k: getattr(dev, k, None) for k in COMPARED}
    want = {k: own.get(k) for k in COMPARED}
    r.check(f"{label}: the agent's allocator equals the job's own", seen == want, seen, f"{want}")


def run(r: Result) -> None:
    a = work_dir() / "train-a"
    a.mkdir(parents=True)
    job = spawn(
        [python(), "-m", "gputui", "run", "--", python(), str(TRAIN), str(a)], log=a / "log", cwd=REPO
    )
    replies: dict[str, Any] = {}
    try:
        if not until(lambda: len(steps(a)) >= 30, 90):
            r.check("job A steps under gputui run", False, len(steps(a)), ">= 30 steps in 90 s")
            return
        r.number("job_a_steps_per_s", _rate(steps(a)))
        with Sampler(NvmlSource(), slow_interval=1.0) as sampler:
            sampler.tick()
            time.sleep(0.5)
            snap = sampler.tick()
        apps = {
            int(x["pid"]): float(x["used_memory"]) for x in smi_csv("compute-apps", ["pid", "used_memory"])
        }
        row = next((p for p in snap.processes if p.pid == job.pid), None)
        r.check(
            "trainer row: NVML's memory as nvidia-smi's (MiB, +-1)",
            row is not None
            and row.used_memory is not None
            and abs(row.used_memory / MIB - apps.get(job.pid, -9)) <= 1,
            None if row is None else (row.used_memory and row.used_memory / MIB, apps.get(job.pid)),
            "equal",
        )
        workers = [p for p in snap.processes if p.ppid == job.pid]
        r.check(
            "its 3 DataLoader workers are rows of class worker",
            len(workers) == 3 and all(w.category == "worker" for w in workers),
            [(w.pid, w.category, w.reason, w.devices) for w in workers],
            "3 x worker",
        )
        agent = snap.agents.get(job.pid)
        r.check(
            "the agent answers in the sampler's tick, CUDA initialized",
            agent is not None and agent.ok and agent.cuda_initialized,
            None if agent is None else (agent.status, agent.error, agent.cuda_initialized, agent.torch),
            "ok, cuda_initialized",
        )
        own = held(a)
        if own is None:
            r.check("job A holds and writes its own stats", False, None, "stats.json")
            return
        time.sleep(0.3)
        report = AgentPoller().report(job.pid, deadline_s=5.0)
        compare_allocator(r, "job A", report, own)
        replies["stats"] = raw(job.pid, {"op": "stats"})
        replies["memory_history"] = raw(job.pid, {"op": "memory_history"})
        dumped = AgentPoller().act(job.pid, "dump_snapshot")
        path = Path(dumped.get("message", "").rsplit(" ", 1)[-1]) if dumped.get("ok") else None
        check_snapshot(r, path, own)
        release(a)
        profile(r, job.pid, replies)
        attach(r, replies)
    finally:
        stop(job)
        (out_dir() / "agent_replies.json").write_text(json.dumps(replies, indent=1, default=str))


def _rate(points: list[tuple[int, float]]) -> float | None:
    if len(points) < 2:
        return None
    return round((points[-1][0] - points[0][0]) / max(1e-6, points[-1][1] - points[0][1]), 1)


def check_snapshot(r: Result, path: Path | None, own: dict[str, Any]) -> None:
    ok = path is not None and path.is_file() and path.stat().st_size > 0
    segments = None
    if ok and path is not None:
        with open(path, "rb") as f:  # written a moment ago by our own job: trusted here
            snapshot = pickle.load(f)
        segments = len(snapshot.get("segments", ()))
        r.number("snapshot_bytes", path.stat().st_size)
    r.check(
        "memory_viz snapshot written, its segments as the job's",
        ok and segments == own["segments"],
        (str(path), segments),
        f"a pickle with {own['segments']} segments",
    )


def profile(r: Result, pid: int, replies: dict[str, Any]) -> None:
    poller = AgentPoller()
    started = poller.act(pid, "profile", steps=20, max_seconds=30)
    r.check("profile starts", bool(started.get("ok")), started.get("message"), "ok")
    status = None

    def done() -> bool:
        nonlocal status
        status = poller.act(pid, "profile_status").get("profile")
        return status is not None and status.state in ("done", "failed")

    until(done, 45, every=0.5)
    replies["profile_status"] = raw(pid, {"op": "profile_status"})
    summary = status.summary if status is not None else None
    r.check(
        "profile verdict: input-bound (the dataset sleeps 4 ms an item)",
        summary is not None and summary.verdict == "input-bound",
        None
        if status is None
        else (status.state, status.error, summary and summary.verdict, summary and summary.data_wait_share),
        "input-bound",
    )
    if summary is not None:
        r.number(
            "profile",
            {
                "verdict": summary.verdict,
                "data_wait_share": summary.data_wait_share,
                "gpu_idle_share": summary.gpu_idle_share,
                "kernels": summary.kernels,
            },
        )


def attach(r: Result, replies: dict[str, Any]) -> None:
    """Job B: on an interpreter that cannot import gputui, then `gputui attach PID --yes`."""
    b = Path("/tmp/gputui-gpucheck-b")  # outside the checkout: nothing there imports gputui
    shutil.rmtree(b, ignore_errors=True)
    b.mkdir()
    script = b / "train_job.py"
    shutil.copy(TRAIN, script)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUTUI_AGENT")}
    probe = subprocess.run([python(), "-I", "-c", "import gputui"], cwd=b, env=env, capture_output=True)
    r.check(
        "job B's interpreter cannot import gputui", probe.returncode != 0, probe.returncode, "ImportError"
    )
    job = spawn([python(), "-I", str(script), str(b)], log=b / "log", cwd=b, env=env)
    try:
        if not until(lambda: len(steps(b)) >= 20, 60):
            r.check("job B steps", False, len(steps(b)), ">= 20 steps")
            return
        t0 = time.time()
        done = subprocess.run(
            [python(), "-m", "gputui", "attach", str(job.pid), "--yes", "--timeout", "60"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        t1 = time.time()
        message = (done.stdout + done.stderr).strip()
        r.number("attach_seconds", round(t1 - t0, 2))
        r.check("gputui attach succeeds on job B", done.returncode == 0, message[-400:], "exit 0")
        around = [t for _, t in steps(b) if t0 - 1 <= t <= t1 + 1]
        if len(around) >= 2:
            r.number("attach_longest_step_gap_s", round(max(y - x for x, y in itertools.pairwise(around)), 3))
        before = len(steps(b))
        until(lambda: len(steps(b)) > before + 10, 15)
        r.check(
            "job B keeps stepping after the attach",
            len(steps(b)) > before + 10,
            len(steps(b)) - before,
            "> 10 more steps",
        )
        if done.returncode != 0:
            return
        own = held(b)
        if own is None:
            r.check("job B holds and writes its own stats", False, None, "stats.json")
            return
        time.sleep(0.3)
        report = AgentPoller().report(job.pid, deadline_s=5.0)
        r.check(
            "job B's agent: CUDA initialized",
            report is not None and report.cuda_initialized,
            None if report is None else (report.status, report.error),
            "True",
        )
        compare_allocator(r, "job B (attached)", report, own)
        replies["stats_attached"] = raw(job.pid, {"op": "stats"})
        release(b)
    finally:
        stop(job)
        log = (b / "log").read_text(errors="replace")[-2000:] if (b / "log").exists() else ""
        if "gputui" in log:
            r.note(f"job B's output: {log.strip()[-600:]}")
