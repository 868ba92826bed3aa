"""Join the GPU source's processes with what the host knows of them (psutil).

NVML reports PIDs of the host's PID namespace, and a process may exit between NVML's list and our
lookup: both simply give a row with ``visible=False``, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import psutil

from gputui.model import GpuProcess, ProcessRow

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HostInfo:
    user: str | None
    name: str | None
    command: str | None
    cpu_percent: float | None
    rss: int | None
    create_time: float | None
    state: str | None
    ppid: int | None


def _maybe(fn: Callable[[], T]) -> T | None:
    """One psutil field; None when it is not ours to read. A vanished process still raises."""
    try:
        return fn()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return None


class ProcessJoiner:
    """Keeps psutil.Process objects across ticks: %CPU needs the previous reading of the same process."""

    def __init__(self) -> None:
        self._known: dict[int, psutil.Process] = {}

    def join(self, procs: Iterable[GpuProcess]) -> tuple[ProcessRow, ...]:
        infos: dict[int, HostInfo | None] = {}
        rows = []
        for gp in procs:
            if gp.pid not in infos:
                infos[gp.pid] = self.lookup(gp.pid)
            info = infos[gp.pid]
            rows.append(ProcessRow(
                gpu=gp.gpu, pid=gp.pid, kinds=gp.kinds, used_memory=gp.used_memory, sm_util=gp.sm_util,
                mem_util=gp.mem_util, visible=info is not None,
                **(_asdict(info) if info is not None else {}),
            ))
        for pid in set(self._known) - set(infos):  # forget processes no longer on any GPU
            del self._known[pid]
        return tuple(rows)

    def lookup(self, pid: int) -> HostInfo | None:
        """What psutil can see of `pid`, or None if it is not visible here (gone, other namespace)."""
        proc = self._known.get(pid)
        fresh = proc is None or not proc.is_running()  # is_running() also catches a reused PID
        if fresh:
            try:
                proc = psutil.Process(pid)
            except (psutil.NoSuchProcess, ValueError):
                self._known.pop(pid, None)
                return None
            self._known[pid] = proc
        assert proc is not None
        try:
            with proc.oneshot():
                cmdline = _maybe(proc.cmdline)
                name = _maybe(proc.name)
                mem = _maybe(proc.memory_info)
                cpu = _maybe(proc.cpu_percent)
                return HostInfo(
                    user=_maybe(proc.username),
                    name=name,
                    command=" ".join(cmdline) if cmdline else (f"[{name}]" if name else None),
                    # The first reading of a process has nothing to compare with: unknown, not 0 %.
                    cpu_percent=None if fresh else cpu,
                    rss=mem.rss if mem is not None else None,
                    create_time=_maybe(proc.create_time),
                    state=_maybe(proc.status),
                    ppid=_maybe(proc.ppid),
                )
        except psutil.NoSuchProcess:
            self._known.pop(pid, None)
            return None


def _asdict(info: HostInfo) -> dict[str, object]:
    return {f: getattr(info, f) for f in HostInfo.__dataclass_fields__}
