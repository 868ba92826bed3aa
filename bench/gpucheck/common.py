"""What the steps share: the result they build, nvidia-smi as the oracle, child processes that end with
the step, and waiting with a deadline."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def out_dir() -> Path:
    return Path(os.environ.get("GPU_CHECK_OUT") or REPO / "bench" / "out" / "gpu-check")


def work_dir() -> Path:
    """Scratch space of the whole check (not brought back: the output folder is limited to 8 files)."""
    return Path(os.environ.get("GPU_CHECK_WORK") or "/tmp/gputui-gpu-check")


@dataclass
class Result:
    """One step's outcome: checks (each pass/fail with its value and what was expected) and numbers.
    Saved after every change, so a step killed at its time limit still reports what it found."""

    step: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None

    @property
    def path(self) -> Path:
        return work_dir() / f"{self.step}.json"

    def check(self, name: str, ok: bool, value: Any = None, expect: str = "") -> bool:
        self.checks.append({"name": name, "ok": bool(ok), "value": _plain(value), "expect": expect})
        self.save()
        print(f"[{self.step}] {'PASS' if ok else 'FAIL'} {name}: {value!r} (expect {expect})", flush=True)
        return bool(ok)

    def number(self, name: str, value: Any) -> None:
        self.numbers[name] = _plain(value)
        self.save()

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.save()
        print(f"[{self.step}] note: {text}", flush=True)

    def skip(self, why: str) -> None:
        self.skipped = why
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "step": self.step,
            "checks": self.checks,
            "numbers": self.numbers,
            "notes": self.notes,
            "skipped": self.skipped,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(self.path)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


# -- nvidia-smi, the oracle --------------------------------------------------------------------------------


def smi(*args: str, timeout: float = 30.0) -> str:
    done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"nvidia-smi {' '.join(args)}: {(done.stdout + done.stderr).strip()[:300]}")
    return done.stdout


def smi_csv(query: str, fields: list[str]) -> list[dict[str, str]]:
    """`nvidia-smi --query-<query>=FIELDS --format=csv,noheader,nounits`, one dict per line."""
    if not fields:
        return []
    text = smi(f"--query-{query}={','.join(fields)}", "--format=csv,noheader,nounits")
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        # A GPU name holds no comma in practice; a process name might: the last field takes the rest.
        if len(values) > len(fields):
            values = [*values[: len(fields) - 1], ",".join(values[len(fields) - 1 :])]
        rows.append(dict(zip(fields, values, strict=False)))
    return rows


# -- children that end with the step ----------------------------------------------------------------------

_children: list[subprocess.Popen[bytes]] = []


def python() -> str:
    return sys.executable


def spawn(argv: list[str], log: Path | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
    """A child in a session of its own (its whole tree can be signalled), ended by `cleanup()`."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
    _children.append(proc)
    return proc


def workload(kind: str, seconds: float, ready: Path, *extra: str) -> subprocess.Popen[bytes]:
    """bench/gpucheck/workloads.py KIND: a CUDA load that touches `ready` once it runs steadily."""
    ready.unlink(missing_ok=True)
    return spawn(
        [python(), "-m", "bench.gpucheck.workloads", kind, str(seconds), str(ready), *extra],
        log=work_dir() / "workloads.log",
        cwd=REPO,
    )


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def cleanup() -> None:
    for proc in _children:
        stop(proc, grace=3.0)


def until(pred: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """pred()'s first truthy value within `timeout` seconds, else None."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= end:
            return None
        time.sleep(every)


@contextlib.contextmanager
def running(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield proc
    finally:
        stop(proc)


def within(a: float | None, b: float | None, tol: float) -> bool:
    return a is not None and b is not None and abs(a - b) <= tol


def number(text: str) -> float | None:
    """A number from nvidia-smi's CSV, None for its '[N/A]', '[Not Supported]' and the like."""
    try:
        return float(text)
    except ValueError:
        return None
