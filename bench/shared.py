"""What the benchmarks share: timing, a process tree's CPU, peak RSS, gputui in a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]  # the checkout


def timed(fn: Callable[[], object], runs: int) -> float:
    """The median of `runs` calls of `fn`, in ms."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of `proc` and every descendant (and the reaped children of each)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def peak_rss_kib(pid: int) -> int | None:
    """gputui's own peak resident set (VmHWM); None if it already exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM")), None)
    except OSError:
        return None


_NO_SETTINGS = tempfile.TemporaryDirectory(prefix="gputui-bench-config-")


def start_in_pty(
    args: tuple[str, ...],
    cols: int,
    rows: int,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """`gputui ARGS` (or `command`, a whole command line) in a pseudo-terminal of cols x rows, as over
    SSH (256 colours, no COLORTERM)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k != "COLORTERM"}
    # The defaults, whatever the person running the bench saved (gputui.settings).
    environ.update(TERM="xterm-256color", XDG_CONFIG_HOME=_NO_SETTINGS.name, **(env or {}))
    proc = subprocess.Popen(
        command or [sys.executable, "-m", "gputui", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=environ,
        start_new_session=True,
    )
    os.close(slave)
    return proc, master


def quit_in_pty(proc: subprocess.Popen[bytes], master: int) -> None:
    """`q`, as a person quits; SIGKILL if it does not go within 5 s."""
    os.write(master, b"q")
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    os.close(master)


@dataclass
class PtyRun:
    """What a program wrote to its pseudo-terminal and what it cost, over the measured window."""

    seconds: float
    written: int  # bytes, in the window
    cpu_percent: float | None  # of one core, the whole process tree
    peak_rss_kib: int | None
    first_output_s: float | None
    first_frame_s: float | None
    stream: bytes  # the window's bytes, if asked for

    def summary(self) -> dict[str, float | int | None]:
        s = self.seconds
        return {
            "seconds": round(s, 1),
            "bytes_per_s": round(self.written / s) if s else None,
            "cpu_percent_of_core": round(self.cpu_percent, 2) if self.cpu_percent is not None else None,
            "peak_rss_mib": round(self.peak_rss_kib / 1024, 1) if self.peak_rss_kib is not None else None,
            "first_output_s": round(self.first_output_s, 3) if self.first_output_s is not None else None,
            "first_full_frame_s": round(self.first_frame_s, 3) if self.first_frame_s is not None else None,
        }


# A start on a small VM varies by ±15 % from run to run (the page cache, the other core's work): the first
# full frame is the median of this many starts, the measured run's and the rest started for it alone.
FIRST_FRAME_STARTS = 5


def first_frame_only(
    start: Callable[[], tuple[subprocess.Popen[bytes], int]], full_frame: tuple[bytes, ...]
) -> float | None:
    """One more start (`start()` gives the process and its terminal), quit as soon as every byte string of
    `full_frame` is on it: the seconds that took, or None if it did not come within 10 s."""
    t0 = time.monotonic()
    proc, master = start()
    try:
        return watch_pty(proc, master, t0, 10.0, 0.0, full_frame, until_frame=True).first_frame_s
    finally:
        quit_in_pty(proc, master)


def first_frames(
    run: PtyRun,
    start: Callable[[], tuple[subprocess.Popen[bytes], int]],
    full_frame: tuple[bytes, ...],
    starts: int = FIRST_FRAME_STARTS,
) -> dict[str, object]:
    """The first full frame over `starts` starts (the measured `run` and the others): the median, the
    slowest, and each; a start that never drew its full frame makes the median unknown."""
    times = [run.first_frame_s, *(first_frame_only(start, full_frame) for _ in range(starts - 1))]
    known = sorted(t for t in times if t is not None)
    return {
        "first_full_frame_s": round(statistics.median(known), 3) if len(known) == len(times) else None,
        "first_full_frame_slowest_s": round(known[-1], 3) if known else None,
        "first_full_frame_starts_s": [round(t, 3) if t is not None else None for t in times],
    }


def watch_pty(
    proc: subprocess.Popen[bytes],
    master: int,
    start: float,
    warmup: float,
    measure: float,
    full_frame: tuple[bytes, ...],
    capture: bool = False,
    until_frame: bool = False,
) -> PtyRun:
    """Read the terminal of `proc` (started at monotonic `start`) for `warmup` + `measure` seconds, or only
    until its first full frame (`until_frame`): when every byte string of `full_frame` has been written."""
    ps = psutil.Process(proc.pid)
    seen = b""
    first_frame = first_output = None
    written = 0
    cpu0 = None
    t_measure = None
    kept: list[bytes] = []
    while True:
        now = time.monotonic()
        if t_measure is None and now - start >= warmup:
            t_measure, written, cpu0 = now, 0, tree_cpu(ps)
        if t_measure is not None and now - t_measure >= measure:
            break
        ready, _, _ = select.select([master], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        written += len(chunk)
        if capture and t_measure is not None:
            kept.append(chunk)
        if first_output is None:
            first_output = time.monotonic() - start
        if first_frame is None:
            seen += chunk
            if all(mark in seen for mark in full_frame):
                first_frame = time.monotonic() - start
                if until_frame:
                    break
    elapsed = time.monotonic() - t_measure if t_measure else 0.0
    cpu = (tree_cpu(ps) - cpu0) / elapsed * 100 if cpu0 is not None and elapsed else None
    return PtyRun(elapsed, written, cpu, peak_rss_kib(proc.pid), first_output, first_frame, b"".join(kept))
