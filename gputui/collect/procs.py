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


@dataclass
class _Known:
    proc: psutil.Process
    create_time: float | None
    user: str | None
    name: str | None
    command: str | None
    seen_before: bool = False


class ProcessJoiner:
    """Keeps psutil.Process objects across ticks: %CPU needs the previous reading of the same process,
    and user and command line, read once per process, cost most of a lookup."""

    def __init__(self) -> None:
        self._known: dict[int, _Known] = {}

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
        try:
            known = self._known.get(pid)
            if known is not None:
                with known.proc.oneshot():
                    info = self._read(known)
                if info is not None:
                    return info
            # New, or the PID now belongs to another process: start afresh.
            proc = psutil.Process(pid)
            with proc.oneshot():
                cmdline = _maybe(proc.cmdline)
                name = _maybe(proc.name)
                known = self._known[pid] = _Known(
                    proc, _maybe(proc.create_time), _maybe(proc.username), name,
                    " ".join(cmdline) if cmdline else (f"[{name}]" if name else None))
                return self._read(known)
        except (psutil.NoSuchProcess, ValueError):
            self._known.pop(pid, None)
            return None

    @staticmethod
    def _read(known: _Known) -> HostInfo | None:
        """The changing fields; None if the PID was reused since `known` was made."""
        proc = known.proc
        if _maybe(proc.create_time) != known.create_time:
            return None
        mem = _maybe(proc.memory_info)
        cpu = _maybe(proc.cpu_percent)
        # The first reading of a process has nothing to compare with: unknown, not 0 %.
        first, known.seen_before = not known.seen_before, True
        return HostInfo(
            user=known.user, name=known.name, command=known.command,
            cpu_percent=None if first else cpu, rss=mem.rss if mem is not None else None,
            create_time=known.create_time, state=_maybe(proc.status), ppid=_maybe(proc.ppid),
        )


def _asdict(info: HostInfo) -> dict[str, object]:
    return {f: getattr(info, f) for f in HostInfo.__dataclass_fields__}
