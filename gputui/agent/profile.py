"""Profile the next N training steps with torch.profiler, on request from the monitor.

The request comes on the agent's thread; the recording happens in the training thread, because
torch.profiler must be started and stopped in the thread that runs the steps. A step is one DataLoader
batch: progress.py's __next__ wrapper calls `on_batch` while a profile is wanted, and only then (its
hook is None otherwise: nothing costs anything while no profile is asked for). torch.profiler is imported
only once a profile starts: the agent stays standard-library only until then.

The verdict, from the window between the first and the last profiled batch (thresholds below):
input-bound   the loop waited for the DataLoader for >= INPUT_BOUND of the wall time;
launch-bound  else, the GPU idled >= IDLE_BOUND of the time and >= LAUNCH_SHORT of the kernels ran
              shorter than SHORT_KERNEL_US: the CPU cannot launch small kernels fast enough;
host-bound    else, the GPU idled >= IDLE_BOUND: Python and CPU ops between the kernels;
gpu-bound     else: the GPU was busy;
no-gpu        no kernel was recorded (a CPU-only run, or CUPTI unavailable): the time is CPU work.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

INPUT_BOUND = 0.30  # share of wall time waiting for the DataLoader
IDLE_BOUND = 0.30  # share of wall time with no kernel running
LAUNCH_SHORT = 0.50  # share of kernels shorter than SHORT_KERNEL_US
SHORT_KERNEL_US = 10.0
TOP_OPS = 10
MAX_STEPS = 1000
MAX_SECONDS = 600.0
MAX_NAME = 200  # characters of an operator's name in the summary
MAX_TRACE_BYTES = 512 * 2**20  # a larger trace is kept, but not parsed for the GPU numbers

IDLE, WAITING, RECORDING, PROCESSING, DONE, FAILED = (
    "idle",
    "waiting",
    "recording",
    "processing",
    "done",
    "failed",
)
STATES = (IDLE, WAITING, RECORDING, PROCESSING, DONE, FAILED)

EXPLANATIONS = {
    "input-bound": "the loop waits for the DataLoader: more workers, pin_memory, a faster dataset",
    "launch-bound": "many tiny kernels with the GPU idle between them: fuse (torch.compile), CUDA graphs",
    "host-bound": "the GPU idles between kernels: Python / CPU work, syncs (.item(), .cpu()) in the step",
    "gpu-bound": "the GPU was busy: speed-ups are in the kernels (precision, batch size, fused ops)",
    "no-gpu": "no GPU kernel recorded (a CPU-only run, or CUPTI unavailable): the steps are CPU work",
}


class ProfileError(RuntimeError):
    """Why no profile can start: said to the monitor as it is."""


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by (start, end) intervals, overlaps counted once."""
    total = 0.0
    end = float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def kernel_stats(trace: dict[str, Any], wall_us: float) -> dict[str, Any]:
    """Kernel count, share shorter than SHORT_KERNEL_US, and GPU idle share, from a chrome trace."""
    kernels: list[tuple[float, float]] = []
    for event in trace.get("traceEvents", ()) or ():
        if not isinstance(event, dict) or event.get("cat") != "kernel" or event.get("ph") != "X":
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and dur >= 0:
            kernels.append((float(ts), float(ts) + float(dur)))
    if not kernels:
        return {"kernels": 0, "short_kernel_share": None, "gpu_idle_share": None}
    short = sum(1 for start, stop in kernels if stop - start < SHORT_KERNEL_US)
    busy = union_us(kernels)
    idle = 1.0 - busy / wall_us if wall_us > 0 else None
    return {
        "kernels": len(kernels),
        "short_kernel_share": round(short / len(kernels), 3),
        "gpu_idle_share": round(min(1.0, max(0.0, idle)), 3) if idle is not None else None,
    }


def verdict(data_wait: float | None, gpu_idle: float | None, short_share: float | None) -> str:
    if data_wait is not None and data_wait >= INPUT_BOUND:
        return "input-bound"
    if gpu_idle is None:
        return "no-gpu"
    if gpu_idle >= IDLE_BOUND and short_share is not None and short_share >= LAUNCH_SHORT:
        return "launch-bound"
    if gpu_idle >= IDLE_BOUND:
        return "host-bound"
    return "gpu-bound"


def top_ops(averages: Any, device: bool) -> list[dict[str, Any]]:
    """The TOP_OPS operators by self CPU (or self device) time, in microseconds."""
    rows: list[dict[str, Any]] = []
    for avg in averages:
        name = str(getattr(avg, "key", "?"))
        if name.startswith("ProfilerStep#"):  # our own step markers: the whole step, not an operator
            continue
        cpu = float(getattr(avg, "self_cpu_time_total", 0.0) or 0.0)
        gpu = getattr(avg, "self_device_time_total", None)
        if gpu is None:
            gpu = getattr(avg, "self_cuda_time_total", 0.0)  # torch < 2.4
        rows.append(
            {
                "name": name[:MAX_NAME],
                "count": int(getattr(avg, "count", 0) or 0),
                "self_cpu_us": round(cpu, 1),
                "self_device_us": round(float(gpu or 0.0), 1),
            }
        )
    key = "self_device_us" if device else "self_cpu_us"
    rows.sort(key=lambda r: r[key], reverse=True)
    return [r for r in rows if r[key] > 0][:TOP_OPS]


def _always_record(step: int) -> Any:
    import torch.profiler

    return torch.profiler.ProfilerAction.RECORD


class Profiler:
    """One profile at a time. `request` (agent thread) arms it; `on_batch` (training thread) runs it."""

    def __init__(
        self,
        directory: Callable[[], Path],
        install: Callable[[Callable[[float], None] | None], bool],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`directory`: where the trace goes (the agent's private one); `install(hook)`: set (or, with
        None, clear) the DataLoader batch hook, False when the host has no DataLoader yet."""
        self.directory = directory
        self.install = install
        self.clock = clock
        self._lock = threading.Lock()
        self.state = IDLE
        self.steps = 0
        self.max_seconds = 0.0
        self.steps_done = 0
        self.path: str | None = None
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self._prof: Any = None
        self._cuda = False
        self._started = 0.0
        self._waited = 0.0

    # -- agent thread -----------------------------------------------------------------------------

    def request(self, steps: int, max_seconds: float) -> str:
        """Arm a profile of the next `steps` batches; raises ProfileError (a message) when it cannot."""
        torch = sys.modules.get("torch")
        if torch is None:
            raise ProfileError("torch is not imported in this process")
        with self._lock:
            if self.state in (RECORDING, PROCESSING):  # a WAITING one is replaced: it never started
                raise ProfileError(f"a profile is already {self.state}")
            if not self.install(self.on_batch):
                raise ProfileError("no DataLoader in this process: the profiler counts its batches as steps")
            self.state, self.steps, self.max_seconds = WAITING, steps, max_seconds
            self.steps_done, self.path, self.summary, self.error = 0, None, None, None
        return f"recording the next {steps} steps (at most {max_seconds:g} s)"

    def status(self) -> dict[str, Any]:
        with self._lock:
            elapsed = self.clock() - self._started if self.state == RECORDING else None
            return {
                "state": self.state,
                "steps": self.steps,
                "steps_done": self.steps_done,
                "elapsed_s": round(elapsed, 2) if elapsed is not None else None,
                "path": self.path,
                "error": self.error,
                "summary": self.summary,
            }

    # -- training thread --------------------------------------------------------------------------

    def on_batch(self, waited: float) -> None:
        """A DataLoader batch was just handed to the training loop, after `waited` seconds."""
        try:
            if self.state == WAITING:
                self._start()
            elif self.state == RECORDING:
                self.steps_done += 1
                self._waited += waited
                if self.steps_done >= self.steps or self.clock() - self._started >= self.max_seconds:
                    self._stop()
                else:
                    self._prof.step()
        except Exception as err:  # the training goes on whatever the profiler does
            self._fail(f"{type(err).__name__}: {err}")

    def _start(self) -> None:
        import torch
        import torch.profiler

        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_initialized():  # asked only: never initialized by us
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # A schedule that always records: with one (and only then) each step is a "ProfilerStep#N" span in
        # the trace viewer; start() opens the first.
        prof = torch.profiler.profile(activities=activities, schedule=_always_record)
        prof.start()
        with self._lock:
            self._prof, self._cuda, self._started, self._waited = prof, len(activities) > 1, self.clock(), 0.0
            self.state = RECORDING

    def _stop(self) -> None:
        wall = self.clock() - self._started
        prof = self._prof
        prof.stop()
        self.install(None)  # no more calls per batch
        with self._lock:
            self.state, self._prof = PROCESSING, None
        args = (prof, self._cuda, wall, self._waited, self.steps_done)
        # Writing and summing the trace takes a while: not in the training thread.
        threading.Thread(target=self._process, args=args, name="gputui-profile", daemon=True).start()

    def _process(self, prof: Any, gpu: bool, wall: float, waited: float, steps: int) -> None:
        try:
            path = self._export(prof)
            trace = self._read(path)
            stats = kernel_stats(trace, wall * 1e6) if trace is not None else {}
            averages = prof.key_averages()
            data_wait = round(min(1.0, waited / wall), 3) if wall > 0 else None
            summary: dict[str, Any] = {
                "steps": steps,
                "wall_s": round(wall, 3),
                "steps_per_s": round(steps / wall, 3) if wall > 0 else None,
                "data_wait_share": data_wait,
                "cuda": gpu,
                "kernels": stats.get("kernels"),
                "short_kernel_share": stats.get("short_kernel_share"),
                "gpu_idle_share": stats.get("gpu_idle_share"),
                "top_ops": top_ops(averages, device=False),
                "top_device_ops": top_ops(averages, device=True) if gpu else [],
            }
            summary["verdict"] = verdict(data_wait, summary["gpu_idle_share"], summary["short_kernel_share"])
            summary["explanation"] = EXPLANATIONS[summary["verdict"]]
            with self._lock:
                self.path, self.summary, self.state = path, summary, DONE
        except Exception as err:
            self._fail(f"{type(err).__name__}: {err}")

    def _export(self, prof: Any) -> str:
        path = self.directory() / f"profile-{os.getpid()}-{int(time.time())}.json"
        # Made 0600 before anything is in it; the exporter truncates and keeps the mode.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        prof.export_chrome_trace(str(path))
        os.chmod(path, 0o600)
        return str(path)

    @staticmethod
    def _read(path: str) -> dict[str, Any] | None:
        if os.path.getsize(path) > MAX_TRACE_BYTES:
            return None
        with open(path, "rb") as f:
            trace = json.load(f)
        return trace if isinstance(trace, dict) else None

    def _fail(self, message: str) -> None:
        with self._lock:
            prof, self._prof = self._prof, None
            recording = self.state == RECORDING
            self.state, self.error = FAILED, message[:MAX_NAME]
        self.install(None)
        if recording and prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()
