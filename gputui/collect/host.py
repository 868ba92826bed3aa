"""The host's CPU, memory, swap, load and uptime, as htop and nvitop show them.

Cheap enough for every tick: psutil reads /proc/stat and /proc/meminfo (tens of microseconds), the load
average is one system call, and the boot time is read once. Any reading that fails is None on screen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import psutil

from gputui.model import HostStats


class HostSampler:
    """One HostStats per call. CPU% is measured since the previous call (psutil keeps the last reading),
    so the first call says None: "unknown", not 0%."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._first = True
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
        try:
            value = psutil.cpu_percent(interval=None)
        except (OSError, RuntimeError):
            return None
        if self._first:  # psutil's first answer compares with nothing (it says 0.0)
            self._first = False
            return None
        return max(0.0, min(100.0, float(value)))

    def _cpu_count(self) -> int | None:
        if self._cpus is None:
            self._cpus = psutil.cpu_count(logical=True)
        return self._cpus

    def _memory(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        try:
            vm = psutil.virtual_memory()
            out["mem_total"], out["mem_used"] = int(vm.total), max(0, int(vm.total - vm.available))
        except (OSError, RuntimeError):
            pass
        try:
            swap = psutil.swap_memory()
            out["swap_total"], out["swap_used"] = int(swap.total), max(0, int(swap.used))
        except (OSError, RuntimeError):
            pass
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
