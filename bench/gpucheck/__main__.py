"""`make gpu-check` (python -m bench.gpucheck [--steps a,b] [--budget S]): run the steps, write the report.

Each step is a child process in a session of its own, limited to its own seconds and to what is left of
the whole budget (8 minutes on the GPU machine, minus a margin); a step past its limit is killed with
everything it started, and what it had found so far is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from bench.gpucheck.common import REPO, out_dir, work_dir

# name, time limit (s), what it checks
STEPS: tuple[tuple[str, float, str], ...] = (
    ("env", 30, "driver, GPU, Python, torch, debuggers, DCGM: what the machine is"),
    ("oracle", 75, "every GPU field and process against nvidia-smi at the same moment, idle and under load"),
    ("gpm", 75, "NVML GPM under a bf16 matmul, a copy, a one-block spin and idle; its cost per tick"),
    ("training", 150, "a real DataLoader job under `gputui run`: rows, allocator, snapshot, profile; attach"),
    ("leftovers", 60, "a worker left holding the GPU by a SIGKILLed trainer: found, classed, killed, freed"),
    ("tui", 100, "the TUI on the real driver in a 120x40 pty: CPU, bytes/s, first frame, RSS; a screenshot"),
    ("suite", 100, "the gpu-marked tests of the suite"),
)
BUDGET_S = 450.0  # under the 8 minutes the issue allows, with room for start-up and the report
WHEELS = REPO / ".gpu-wheels"
MAX_FILES = 8


def why_no_gpu() -> str | None:
    """None when a GPU can be checked here; else why not (one line)."""
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH (not an NVIDIA GPU machine)"
    return why_no_nvml()


def why_no_nvml() -> str | None:
    """None when NVML starts and sees a GPU; else why not (the gpu-marked tests ask this too)."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as err:
        return f"NVML unavailable: {err}"
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as err:
        return f"NVML cannot count the GPUs: {err}"
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return None if count > 0 else "NVML sees no GPU"


def site(log: Any) -> str | None:
    """Install the carried wheels into a private target (no index, no dependencies resolved), when
    Textual is missing here; the path to put first on PYTHONPATH, or None."""
    wheels = sorted(WHEELS.glob("*.whl"))
    if not wheels:
        return None
    target = work_dir() / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--target",
            str(target),
            *map(str, wheels),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        timeout=120,
    )
    return str(target) if done.returncode == 0 else None


def run_step(name: str, limit: float, env: dict[str, str], log: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    log.write(f"\n===== {name} (limit {limit:.0f} s) =====\n".encode())
    log.flush()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.gpucheck.steps", name],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    timed_out = False
    try:
        rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    # Whatever the step left running in its session (a job, a debugger) goes too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    seconds = time.monotonic() - t0
    path = work_dir() / f"{name}.json"
    try:
        result: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        result = {"step": name, "checks": [], "numbers": {}, "notes": [], "skipped": None}
    failed = [c for c in result["checks"] if not c["ok"]]
    if result.get("skipped"):
        status = "skip"
    elif timed_out:
        status = "timeout"
    elif rc != 0:
        status = "error"
    elif failed:
        status = "fail"
    else:
        status = "pass" if result["checks"] else "error"
    result.update(status=status, seconds=round(seconds, 1), exit_code=rc)
    return result


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"gputui gpu-check — {report['date']} — {report['machine']}",
        f"result: {report['result']}  ({report['seconds']:.0f} s)",
        "",
        "| step | status | checks | time | key numbers |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in report["steps"]:
        checks = r.get("checks", [])
        passed = sum(c["ok"] for c in checks)
        key = ", ".join(
            f"{k} {v}" for k, v in list(r.get("numbers", {}).items())[:4] if not isinstance(v, dict)
        )
        why = r.get("skipped") or ""
        lines.append(
            f"| {r['step']} | {r['status']} | {passed}/{len(checks)} | {r.get('seconds', 0):.0f} s | "
            f"{why or key} |"
        )
    failed = [(r["step"], c) for r in report["steps"] for c in r.get("checks", []) if not c["ok"]]
    if failed:
        lines += ["", "Failed checks:"]
        lines += [f"- {step}: {c['name']}: {c['value']!r} (expected {c['expect']})" for step, c in failed]
    notes = [(r["step"], n) for r in report["steps"] for n in r.get("notes", [])]
    if notes:
        lines += ["", "Notes:"]
        lines += [f"- {step}: {n}" for step, n in notes]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__)
    parser.add_argument("--steps", help="comma-separated subset of: " + ", ".join(s[0] for s in STEPS))
    parser.add_argument("--budget", type=float, default=float(os.environ.get("GPU_CHECK_BUDGET_S", BUDGET_S)))
    args = parser.parse_args()
    wanted = set(args.steps.split(",")) if args.steps else {s[0] for s in STEPS}
    unknown = wanted - {s[0] for s in STEPS}
    if unknown:
        print(f"gpu-check: unknown step(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2

    out, work = out_dir(), work_dir()
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    why = why_no_gpu()
    results = []
    with open(out / "gpu-check.log", "wb") as log:
        env = dict(os.environ, GPU_CHECK_OUT=str(out), GPU_CHECK_WORK=str(work), PYTHONUNBUFFERED="1")
        if why is None:
            private = site(log)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (private, str(REPO), os.environ.get("PYTHONPATH")) if p
            )
        for name, limit, doc in STEPS:
            if name not in wanted:
                continue
            left = args.budget - (time.monotonic() - t0)
            if why is not None:
                results.append({"step": name, "status": "skip", "skipped": why, "doc": doc, "checks": []})
            elif left < 10:
                results.append(
                    {
                        "step": name,
                        "status": "skip",
                        "skipped": "out of time budget",
                        "doc": doc,
                        "checks": [],
                    }
                )
            else:
                results.append({**run_step(name, min(limit, left), env, log), "doc": doc})
    statuses = {r["status"] for r in results}
    result = "skipped" if statuses == {"skip"} else ("pass" if statuses <= {"pass", "skip"} else "fail")
    report = {
        "format": "gputui-gpu-check",
        "version": 1,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.node() or "unknown",
        "commit": _commit(),
        "result": result,
        "no_gpu": why,
        "seconds": round(time.monotonic() - t0, 1),
        "steps": results,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    lines = summary_lines(report)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    files = [p for p in out.rglob("*") if p.is_file()]
    if len(files) > MAX_FILES:
        print(f"gpu-check: {len(files)} files in {out}, more than {MAX_FILES}", file=sys.stderr)
        return 1
    return 0 if result in ("pass", "skipped") else 1


def _commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        return done.stdout.strip() or None
    return None


if __name__ == "__main__":
    sys.exit(main())
