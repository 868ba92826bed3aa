"""Join the GPU source's processes with what the host knows of them (psutil).

NVML reports PIDs of the host's PID namespace, and a process may exit between NVML's list and our
lookup: both simply give a row with ``visible=False``, never an error.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import psutil

from gputui.model import GpuProcess, HostProcess, ProcessDetail, ProcessRow

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

    def join(self, procs: Iterable[GpuProcess], relatives: bool = False
             ) -> tuple[tuple[ProcessRow, ...], tuple[HostProcess, ...]]:
        """Rows for the GPU processes and, if asked, their parents and descendants."""
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
        hosts = self._relatives(rows) if relatives else ()
        for pid in set(self._known) - set(infos) - {h.pid for h in hosts}:  # forget the departed
            del self._known[pid]
        return tuple(rows), hosts

    def _relatives(self, rows: list[ProcessRow]) -> tuple[HostProcess, ...]:
        on_gpu = {r.pid for r in rows if r.visible}
        children: dict[int, list[int]] = defaultdict(list)
        for proc in psutil.process_iter(["ppid"]):  # one pass over /proc for the whole tree
            if proc.info["ppid"] is not None:
                children[proc.info["ppid"]].append(proc.pid)
        wanted: set[int] = {r.ppid for r in rows if r.visible and r.ppid}
        stack = list(on_gpu)
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in wanted:
                    wanted.add(child)
                    stack.append(child)
        hosts = []
        for pid in sorted(wanted - on_gpu):
            info = self.lookup(pid)
            if info is not None:
                hosts.append(HostProcess(pid=pid, ppid=info.ppid, user=info.user, name=info.name,
                                         command=info.command, cpu_percent=info.cpu_percent, rss=info.rss,
                                         create_time=info.create_time, state=info.state))
        return tuple(hosts)

    def lookup(self, pid: int) -> HostInfo | None:
        """What psutil can see of `pid`, or None if it is not visible here (gone, other namespace)."""
        known = self._known.get(pid)
        # is_running() compares create times: a reused PID is a new process, not the one we knew.
        if known is not None and not _running(known.proc):
            known = None
        try:
            if known is None:
                proc = psutil.Process(pid)
                with proc.oneshot():
                    cmdline = _maybe(proc.cmdline)
                    name = _maybe(proc.name)
                    known = self._known[pid] = _Known(
                        proc, _maybe(proc.create_time), _maybe(proc.username), name,
                        " ".join(cmdline) if cmdline else (f"[{name}]" if name else None))
            with known.proc.oneshot():
                return self._read(known)
        except (psutil.NoSuchProcess, ValueError):
            self._known.pop(pid, None)
            return None

    @staticmethod
    def _read(known: _Known) -> HostInfo:
        proc = known.proc
        mem = _maybe(proc.memory_info)
        cpu = _maybe(proc.cpu_percent)
        # The first reading of a process has nothing to compare with: unknown, not 0 %.
        first, known.seen_before = not known.seen_before, True
        return HostInfo(
            user=known.user, name=known.name, command=known.command,
            cpu_percent=None if first else cpu, rss=mem.rss if mem is not None else None,
            create_time=known.create_time, state=_maybe(proc.status), ppid=_maybe(proc.ppid),
        )


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running()
    except psutil.Error:
        return False


def _asdict(info: HostInfo) -> dict[str, object]:
    return {f: getattr(info, f) for f in HostInfo.__dataclass_fields__}


def device_files(pid: int, devices_dir: Path) -> tuple[str, ...] | None:
    """The nvidia device files under `devices_dir` that `pid` holds open; None if /proc/PID/fd is not
    readable (another user's process, unless we are root)."""
    fd_dir = f"/proc/{pid}/fd"
    prefix = str(devices_dir).rstrip("/") + "/nvidia"
    try:
        fds = os.listdir(fd_dir)
    except (PermissionError, FileNotFoundError, ProcessLookupError):
        return None
    held = set()
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            held.add(target)
    return tuple(sorted(held))


def describe(pid: int, create_time: float | None, devices_dir: Path) -> ProcessDetail:
    """Everything the detail view shows; reads /proc, so call it off the UI thread."""
    empty = ProcessDetail(pid=pid, command=None, cwd=None, cuda_visible_devices=None,
                          environ_readable=False, device_files=None, children=())
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > 0.01:
            return replace(empty, error="the PID now belongs to another process")
        cmdline = _maybe(proc.cmdline)
        env = _maybe(proc.environ)
        kids = []
        for child in _maybe(lambda: proc.children(recursive=True)) or ():
            with child.oneshot():
                cl = _maybe(child.cmdline)
                mem = _maybe(child.memory_info)
                kids.append(HostProcess(
                    pid=child.pid, ppid=_maybe(child.ppid), user=_maybe(child.username),
                    name=_maybe(child.name),
                    command=" ".join(cl) if cl else None, cpu_percent=None, rss=mem.rss if mem else None,
                    create_time=_maybe(child.create_time), state=_maybe(child.status)))
        return ProcessDetail(
            pid=pid, command=" ".join(cmdline) if cmdline else None, cwd=_maybe(proc.cwd),
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES") if env is not None else None,
            environ_readable=env is not None, device_files=device_files(pid, devices_dir),
            children=tuple(kids))
    except (psutil.NoSuchProcess, ValueError):
        return replace(empty, error="the process is gone")

