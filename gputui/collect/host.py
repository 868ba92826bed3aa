"""The host's CPU, memory, swap, load and uptime, as htop and nvitop show them.

Cheap enough for every tick: the first line of /proc/stat and /proc/meminfo, read here directly (psutil's
two memory calls read meminfo twice and /proc/vmstat once, ~4x the time); the load average is one system
call, and the CPU count and boot time are read once. Any reading that fails is None on screen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import psutil

from gputui.collect.procs import procfs
from gputui.model import HostStats

# The /proc/meminfo lines read, in kB: MemAvailable is the kernel's own estimate of what can be given
# to a new program without swapping (Linux >= 3.14; before, free + buffers + page cache).
_MEMINFO = (b"MemTotal:", b"MemAvailable:", b"MemFree:", b"Buffers:", b"Cached:", b"SwapTotal:", b"SwapFree:")


class HostSampler:
    """One HostStats per call. CPU% is measured since the previous call, so the first call says None:
    "unknown", not 0%. `proc`: where procfs is mounted (a test's directory)."""

    def __init__(self, clock: Callable[[], float] = time.time, proc: str = "/proc") -> None:
        self.clock = clock
        self.proc = proc
        self._last: tuple[int, int] | None = None  # (busy, total) CPU time in ticks at the last call
        self._percent: float | None = None  # what the last call said
        self._boot: float | None = None
        self._cpus: int | None = None

    def read(self) -> HostStats:
        return HostStats(
            cpu_percent=self._cpu(),
            cpu_count=self._cpu_count(),
            **self._memory(),
            load=_load(),
            uptime=self._uptime(),
        )

    def _cpu(self) -> float | None:
        """Busy time over all time since the last call, as htop counts it: idle and I/O wait are not
        busy; guest time is already in user and nice time, so it is not counted twice."""
        last, self._last = self._last, None
        try:
            fields = procfs.read(f"{self.proc}/stat").split(b"\n", 1)[0].split()
            if fields[:1] != [b"cpu"] or len(fields) < 5:
                return None
            ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
        except (OSError, ValueError):
            return None
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        now = (sum(ticks) - idle, sum(ticks))
        if last is not None and now[1] == last[1]:
            # Within one kernel tick (10 ms) of the last call: nothing new to say. The last figure stands,
            # and the next call measures from the same start.
            self._last = last
            return self._percent
        self._last = now
        if last is None or now[1] < last[1]:  # the first call, or the counters went back: unknown
            self._percent = None
        else:
            self._percent = max(0.0, min(100.0, 100.0 * (now[0] - last[0]) / (now[1] - last[1])))
        return self._percent

    def _cpu_count(self) -> int | None:
        if self._cpus is None:
            self._cpus = psutil.cpu_count(logical=True)
        return self._cpus

    def _memory(self) -> dict[str, int | None]:
        try:
            text = procfs.read(f"{self.proc}/meminfo")
        except OSError:
            return {}
        kb: dict[bytes, int] = {}
        for line in text.splitlines():
            name, _, rest = line.partition(b" ")
            if name in _MEMINFO:
                value = rest.split()[:1]
                if value and value[0].isdigit():
                    kb[name] = int(value[0])
        out: dict[str, int | None] = {}
        total = kb.get(b"MemTotal:")
        available = kb.get(b"MemAvailable:")
        if available is None and b"MemFree:" in kb:
            available = kb[b"MemFree:"] + kb.get(b"Buffers:", 0) + kb.get(b"Cached:", 0)
        if total is not None and available is not None:
            out["mem_total"], out["mem_used"] = total << 10, max(0, total - available) << 10
        swap_total, swap_free = kb.get(b"SwapTotal:"), kb.get(b"SwapFree:")
        if swap_total is not None and swap_free is not None:
            out["swap_total"], out["swap_used"] = swap_total << 10, max(0, swap_total - swap_free) << 10
        return out

    def _uptime(self) -> float | None:
        if self._boot is None:
            try:
                self._boot = float(psutil.boot_time())
            except (OSError, RuntimeError):
                return None
        return max(0.0, self.clock() - self._boot)


def _load() -> tuple[float, float, float] | None:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # not available on this system
        return None
    return (one, five, fifteen)
