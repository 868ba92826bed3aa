"""Join the GPU source's processes with what the host knows of them (psutil).

NVML reports PIDs of the host's PID namespace, and a process may exit between NVML's list and our
lookup: both simply give a row with ``visible=False``, never an error.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import psutil

from gputui import cells
from gputui.analyze.classify import Facts, classify
from gputui.collect.procs import procfs
from gputui.collect.procs.holders import HolderScan
from gputui.model import GpuProcess, HostProcess, ProcessDetail, ProcessRow
from gputui.units import printable

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
    ns_pid: int | None = None
    idle_s: float | None = None  # seconds it has been at 0 % CPU
    pgid: int | None = None  # its process group (0: a group outside this PID namespace)
    start_ticks: int | None = None  # clock ticks after boot it started: older and younger, exactly


# What a row says of a process the host cannot see (another PID namespace, or gone): nothing.
_UNKNOWN_HOST = HostInfo(None, None, None, None, None, None, None, None)


def _maybe(fn: Callable[[], T]) -> T | None:
    """One psutil field; None when it is not ours to read. A vanished process still raises."""
    try:
        return fn()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return None


MAX_COMMAND = 4096  # characters kept of a command line (up to 2 MiB on Linux); enough to recognise it


def _text(value: str | None, limit: int = MAX_COMMAND) -> str | None:
    """A string another user controls (argv, a process name, cwd, an environment value), made safe once
    here for every screen, label and file downstream: cut short, control characters and undecodable
    bytes (psutil's surrogate escapes) replaced."""
    return None if value is None else printable(value[:limit])


def _command(cmdline: list[str] | None, name: str | None) -> str | None:
    if cmdline:
        return _text(" ".join(cmdline))
    return f"[{name}]" if name else None


def _ns_pid(pid: int) -> int | None:
    """The PID inside the process's own PID namespace (a container's), when it differs from ours."""
    try:
        # Its Name: line is the raw process name, which need not be UTF-8.
        with open(f"/proc/{pid}/status", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    return int(ids[-1]) if len(ids) > 1 else None
    except OSError:
        pass
    return None


_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk-sleep",
    "Z": "zombie",
    "T": "stopped",
    "t": "tracing-stop",
    "X": "dead",
    "I": "idle",
    "W": "waking",
    "P": "parked",
}
_PF_KTHREAD = 0x00200000  # of /proc/PID/stat's flags (include/linux/sched.h)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class _Stat:
    """The fields of /proc/PID/stat a tick needs: one read instead of psutil's several."""

    state: str
    ppid: int
    cpu_ticks: int  # user + system time
    start_ticks: int  # since boot: with the PID, the identity of a process
    rss: int
    pgid: int = 0  # its process group; 0: unknown, or outside this PID namespace
    comm: bytes = b""  # its name as the kernel keeps it: changes when the process execs
    kernel: bool = False  # a kernel thread (PF_KTHREAD): its command line is empty for good


_UNREADABLE = "unreadable"  # /proc/PID/stat exists but is not ours to read (/proc mounted hidepid=1)


def _read_stat(pid: int) -> _Stat | str | None:
    """Its stat fields; _UNREADABLE when permission is denied; None when it is gone."""
    try:
        data = procfs.read(f"/proc/{pid}/stat")
    except PermissionError:
        return _UNREADABLE
    except OSError:
        return None
    # The command (field 2) is in parentheses and may contain anything: split after the last ")".
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        state = rest[0].decode()
        return _Stat(
            _STATES.get(state, state),
            int(rest[1]),
            int(rest[11]) + int(rest[12]),
            int(rest[19]),
            int(rest[21]) * _PAGE_SIZE,
            int(rest[2]),
            data[data.find(b"(") + 1 : data.rfind(b")")],
            bool(int(rest[6]) & _PF_KTHREAD),
        )
    except (IndexError, ValueError):
        return None


@dataclass
class _Known:
    start_ticks: int
    create_time: float | None
    user: str | None
    name: str | None
    command: str | None
    ns_pid: int | None
    cpu_ticks: int
    read_at: float
    cpu_percent: float | None = None  # over the interval between the last two readings
    seen_before: bool = False
    idle_since: float | None = None
    comm: bytes = b""
    # Its command line read empty while it ran: caught inside an exec (the kernel names the new program
    # before it writes its arguments) or before Python set it. Read again each tick until it is there.
    command_unread: bool = False


class ProcessJoiner:
    """Joins NVML's processes and the device holders with psutil. Keeps psutil.Process objects across
    ticks: %CPU needs the previous reading of the same process, and user and command line, read once
    per process, cost most of a lookup."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._known: dict[int, _Known] = {}
        self.monotonic = monotonic
        self.hidden_by = procfs.hidepid()  # a mount option: read once

    def join(
        self,
        procs: Iterable[GpuProcess],
        holders: HolderScan | None = None,
        minors: dict[int, int] | None = None,
        relatives: bool = False,
        extra: Iterable[int] = (),
    ) -> tuple[tuple[ProcessRow, ...], tuple[HostProcess, ...]]:
        """One row per (GPU, process) of NVML's lists and of the device holders (`holders`, with
        `minors` mapping /dev/nvidiaN's N to the GPU index), classified; and, if asked, the parents and
        descendants of those processes. `extra`: pids to describe as host processes too when they have
        no row (a process that runs the gputui agent and holds no GPU: the table shows it)."""
        procs = list(procs)
        infos: dict[int, HostInfo | None] = {}

        def info(pid: int) -> HostInfo | None:
            if pid not in infos:
                infos[pid] = self.lookup(pid)
            return infos[pid]

        on_nvml = {p.pid for p in procs}
        rows = [self._row(p.gpu, p.pid, p, info, holders, on_nvml) for p in procs]
        if holders is not None:
            for pid, h in sorted(holders.holders.items()):
                if pid in on_nvml:
                    continue
                # None: it holds only /dev/nvidiactl or /dev/nvidia-uvm, so its GPU is unknown
                gpus: Sequence[int | None] = sorted({minors[m] for m in h.minors if minors and m in minors})
                rows += [self._row(g, pid, None, info, holders, on_nvml) for g in gpus or [None]]
            rows += self._defunct_children(holders, rows, info, on_nvml)
        present = [r for r in rows if r is not None]
        hosts = self._relatives(present, info) if relatives else ()
        described = {r.pid for r in present} | {h.pid for h in hosts}
        hosts += tuple(
            found for pid in sorted(set(extra) - described) if (found := _host(pid, info(pid))) is not None
        )
        for pid in set(self._known) - set(infos) - {h.pid for h in hosts}:  # forget the departed
            del self._known[pid]
        return tuple(present), hosts

    def _defunct_children(
        self,
        holders: HolderScan,
        rows: list[ProcessRow | None],
        info: Callable[[int], HostInfo | None],
        on_nvml: set[int],
    ) -> list[ProcessRow | None]:
        """Zombies whose parent is on a GPU: the parent is not reaping its children (its workers?). One
        that NVML lists, or that holds a device, has its row already: not a second one."""
        gpu_of = {r.pid: r.gpu for r in rows if r is not None and r.visible}
        listed = {r.pid for r in rows if r is not None}
        out: list[ProcessRow | None] = []
        for pid in sorted(holders.zombies - listed):
            host = info(pid)
            if host is not None and host.ppid in gpu_of:
                out.append(self._row(gpu_of[host.ppid], pid, None, info, holders, on_nvml))
        return out

    def _row(
        self,
        gpu: int | None,
        pid: int,
        listed: GpuProcess | None,
        info: Callable[[int], HostInfo | None],
        holders: HolderScan | None,
        on_nvml: set[int],
    ) -> ProcessRow | None:
        """`listed`: NVML's entry for it; None for a device holder (or zombie) NVML does not list,
        whose `gpu` is None when it holds only /dev/nvidiactl or /dev/nvidia-uvm."""
        host = info(pid)
        kinds = listed.kinds if listed is not None else ""
        if host is None and not kinds:
            return None  # a holder (or zombie) that ended since the scan
        if holders is None:
            devices: tuple[str, ...] | None = None
        elif pid in holders.holders:
            devices = holders.holders[pid].devices
        else:
            # Not visible here: what it holds is unknown (null in --json), not nothing.
            devices = None if host is None or pid in holders.unreadable else ()
        parent = info(host.ppid) if host is not None and host.ppid and devices else None
        category, reason = classify(
            Facts(
                visible=host is not None,
                state=host.state if host else None,
                on_nvml=bool(kinds),
                devices=devices if holders is not None else (),
                ppid=host.ppid if host else None,
                parent_name=(parent.name or "?") if parent else None,  # "?": alive, its name unreadable
                parent_on_gpu=host is not None and host.ppid in on_nvml,
                idle_s=host.idle_s if host else None,
                hidden_by=self.hidden_by,
                # Only a holder NVML does not list can be an orphan: the reads are not spent on others.
                adopted=adoption(host, parent) if host is not None and devices and not kinds else None,
            )
        )
        known = host if host is not None else _UNKNOWN_HOST
        return ProcessRow(
            gpu=gpu,
            pid=pid,
            kinds=kinds,
            used_memory=listed.used_memory if listed is not None else None,
            sm_util=listed.sm_util if listed is not None else None,
            mem_util=listed.mem_util if listed is not None else None,
            visible=host is not None,
            user=known.user,
            name=known.name,
            command=known.command,
            cpu_percent=known.cpu_percent,
            rss=known.rss,
            create_time=known.create_time,
            state=known.state,
            ppid=known.ppid,
            ns_pid=known.ns_pid,
            devices=devices,
            category=category,
            reason=reason,
            gpu_instance=listed.gpu_instance if listed is not None else None,
            compute_instance=listed.compute_instance if listed is not None else None,
        )

    def _relatives(
        self, rows: list[ProcessRow], info: Callable[[int], HostInfo | None]
    ) -> tuple[HostProcess, ...]:
        """`info`: this tick's lookups. A parent was already read for its child's row; reading it again
        a few milliseconds later measured %CPU over that gap (gputui itself, busy with this very tick,
        showed 69-183 %)."""
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
        return tuple(h for pid in sorted(wanted - on_gpu) if (h := _host(pid, info(pid))) is not None)

    def lookup(self, pid: int) -> HostInfo | None:
        """What the host can see of `pid`, or None if it is not visible here (gone, other namespace).
        Each tick costs one read of /proc/PID/stat; user and command line are read once (psutil)."""
        stat = _read_stat(pid)
        if stat is None:
            self._known.pop(pid, None)
            return None
        if isinstance(stat, str):  # there, but nothing of it is readable: every field unknown
            return HostInfo(None, None, None, None, None, None, None, None)
        now = self.monotonic()
        known = self._known.get(pid)
        # New, the PID reused, or the process exec'd since its first sight (seen between fork and exec, it
        # had its parent's command line): each is read afresh.
        if known is None or known.start_ticks != stat.start_ticks or known.comm != stat.comm:
            known = self._first_sight(pid, stat, now)
            if known is None:
                return None
        else:
            self._measure_cpu(known, stat.cpu_ticks, now)
            if known.command_unread:
                self._read_command(pid, known, stat)
        return HostInfo(
            user=known.user,
            name=known.name,
            command=known.command,
            cpu_percent=known.cpu_percent,  # None after a first reading: unknown, not 0 %
            rss=stat.rss,
            create_time=known.create_time,
            state=stat.state,
            ppid=stat.ppid,
            ns_pid=known.ns_pid,
            idle_s=None if known.idle_since is None else now - known.idle_since,
            pgid=stat.pgid,
            start_ticks=stat.start_ticks,
        )

    @staticmethod
    def _measure_cpu(known: _Known, cpu_ticks: int, now: float) -> None:
        # %CPU counts clock ticks (1/100 s): over a few milliseconds one tick reads as 100 %+. So a
        # process is read once per tick (join's `info`), and a clock that did not move keeps the last value.
        elapsed = now - known.read_at
        if elapsed <= 0:
            return
        known.cpu_percent = 100.0 * (cpu_ticks - known.cpu_ticks) / _CLOCK_TICKS / elapsed
        known.cpu_ticks, known.read_at = cpu_ticks, now
        if known.cpu_percent > 0.0:
            known.idle_since = None
        elif known.idle_since is None:
            known.idle_since = now

    def _first_sight(self, pid: int, stat: _Stat, now: float) -> _Known | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name, cmdline = _names(proc)
                known = _Known(
                    stat.start_ticks,
                    _maybe(proc.create_time),
                    _text(_maybe(proc.username)),
                    name,
                    _command(cmdline, name),
                    _ns_pid(pid),
                    stat.cpu_ticks,
                    now,
                    idle_since=now,
                    comm=stat.comm,
                    command_unread=_unread(cmdline, stat),
                )
        except (psutil.NoSuchProcess, ValueError):
            self._known.pop(pid, None)
            return None
        self._known[pid] = known
        return known

    def _read_command(self, pid: int, known: _Known, stat: _Stat) -> None:
        """Its name and command line again, while they read empty (`_Known.command_unread`). The same
        process (start time and comm unchanged), so what else was read of it stands. A PID reused since the
        stat read is the race `_first_sight` has too: the next tick's stat tells, and reads it afresh."""
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name, cmdline = _names(proc)
        except (psutil.NoSuchProcess, ValueError):
            return
        known.command_unread = _unread(cmdline, stat)
        if cmdline:
            known.name, known.command = name, _command(cmdline, name)


def _names(proc: psutil.Process) -> tuple[str | None, list[str] | None]:
    """Its name (psutil's: the kernel's 15 characters, made whole from the command line) and command line."""
    return _text(_maybe(proc.name)), _maybe(proc.cmdline)


def _unread(cmdline: list[str] | None, stat: _Stat) -> bool:
    """Whether an empty command line may still be filled in: not a zombie's or a kernel thread's, empty for
    good; not one we may not read (None). A zombie's is told by its state: recent psutil raises
    ZombieProcess for it, the oldest we support (test-min) returns []."""
    return cmdline == [] and stat.state not in ("zombie", "dead") and not stat.kernel


def _host(pid: int, host: HostInfo | None) -> HostProcess | None:
    if host is None:
        return None
    return HostProcess(
        pid=pid,
        ppid=host.ppid,
        user=host.user,
        name=host.name,
        command=host.command,
        cpu_percent=host.cpu_percent,
        rss=host.rss,
        create_time=host.create_time,
        state=host.state,
    )


def adoption(host: HostInfo, parent: HostInfo | None) -> str | None:
    """Why /proc shows that `host`'s parent is not the one that started it (it was reparented to init or
    a subreaper, whatever its name); None when nothing shows it. `parent`: its parent's HostInfo.

    - its parent is the init of a PID namespace (a container's PID 1: `python3`, `bash`, `sleep`...),
      which adopts the namespace's orphans;
    - its parent started after it: no process is forked by a younger one;
    - its process group's leader has exited and its parent is of another group: the job it was started
      in is gone (a process group's id is not reused while the group has members, so an absent leader
      is the group's own). Not shown: an orphan still in its adopter's group with an adopter older than
      it (a subreaper that spawned the whole job in its own group)."""
    if parent is None:
        return None
    if parent.ns_pid == 1:
        return "its parent is the init of a PID namespace (a container's), which adopts orphans"
    if (
        parent.start_ticks is not None
        and host.start_ticks is not None
        and parent.start_ticks > host.start_ticks
    ):
        return "its parent started after it"
    pgid = host.pgid
    if pgid and parent.pgid is not None and pgid != parent.pgid and _read_stat(pgid) is None:
        return f"the leader of its process group, {pgid}, has exited"
    return None


def device_files(pid: int, devices_dir: Path) -> tuple[str, ...] | None:
    """The nvidia device files under `devices_dir` that `pid` holds open; None if /proc/PID/fd is not
    readable (another user's process, unless we are root)."""
    fd_dir = f"/proc/{pid}/fd"
    prefix = os.path.realpath(devices_dir) + "/nvidia"  # fd links name resolved paths
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


# /proc/PID/environ is usually a few KiB, but execve() lets a process start with MiBs of it: the
# detail reads at most this much, so a huge one cannot stall the worker or fill memory.
MAX_ENVIRON = 1 << 20
MAX_ENV_VALUE = 200  # cells of a value shown (PYTORCH_CUDA_ALLOC_CONF is a few dozen)
MAX_ENV_NAME = 64  # cells of a name (NCCL_ is a prefix: the rest of the name is anyone's)
MAX_ENV_VARS = 64
# Only these are shown: an environment holds tokens and passwords. Exact names, not MASTER_*: a
# MASTER_PASSWORD is no training variable.
TRAINING_NAMES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PYTORCH_CUDA_ALLOC_CONF",
    }
)
TRAINING_PREFIXES = ("NCCL_",)
_NAMES = frozenset(n.encode() for n in TRAINING_NAMES)
_PREFIXES = tuple(p.encode() for p in TRAINING_PREFIXES)


@dataclass(frozen=True, slots=True)
class Environ:
    """What the detail shows of an environment: made safe here, like every other string of a process."""

    cuda_visible_devices: str | None
    training: tuple[tuple[str, str], ...]
    more: int  # matching variables beyond MAX_ENV_VARS
    cut: bool  # the environment is larger than MAX_ENVIRON: the variables past it are not seen


def _read_bounded(path: str, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of `path`, and whether there was more."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(1 << 16, limit - size))
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), os.read(fd, 1) != b""
    finally:
        os.close(fd)


def _env_value(raw: bytes, cells_max: int) -> str:
    # Decode no more than could fill the cells (4 bytes a character), then cut to cells: a 128 KiB
    # value costs the same as a short one. Zero-width characters can outlast the bytes: mark the cut.
    head = raw[: 4 * cells_max]
    text = printable(head.decode("utf-8", errors="replace"))
    if len(head) < len(raw):
        return cells.cut(text, cells_max - 1, "") + cells.ELLIPSIS
    return cells.cut(text, cells_max)


def read_environ(pid: int, limit: int = MAX_ENVIRON) -> Environ | None:
    """The variables of /proc/PID/environ the detail shows; None when it is not readable: another
    user's process (EACCES), or hidden by hidepid or gone (ENOENT: psutil's reads tell which)."""
    try:
        data, cut = _read_bounded(f"/proc/{pid}/environ", limit)
    except OSError:
        return None
    entries = data.split(b"\0")
    if cut:
        entries.pop()  # the last one is cut short: `RANK=1` of `RANK=12` would be a wrong value
    seen: dict[bytes, bytes] = {}
    for entry in entries:
        name, eq, value = entry.partition(b"=")
        if (
            eq
            and name not in seen
            and (name in _NAMES or name.startswith(_PREFIXES) or name == b"CUDA_VISIBLE_DEVICES")
        ):
            seen[name] = value  # the first of two with one name: the one getenv() returns
    cvd = seen.pop(b"CUDA_VISIBLE_DEVICES", None)
    shown = sorted((_env_value(n, MAX_ENV_NAME), _env_value(v, MAX_ENV_VALUE)) for n, v in seen.items())
    return Environ(
        cuda_visible_devices=None if cvd is None else _text(cvd.decode("utf-8", errors="replace")),
        training=tuple(shown[:MAX_ENV_VARS]),
        more=max(0, len(shown) - MAX_ENV_VARS),
        cut=cut,
    )


def describe(pid: int, create_time: float | None, devices_dir: Path) -> ProcessDetail:
    """Everything the detail view shows; reads /proc, so call it off the UI thread."""
    empty = ProcessDetail(
        pid=pid,
        command=None,
        cwd=None,
        cuda_visible_devices=None,
        environ_readable=False,
        device_files=None,
        children=(),
    )
    try:
        proc = psutil.Process(pid)
        started = _maybe(proc.create_time)
        if create_time is not None and started is not None and abs(started - create_time) > 0.01:
            return replace(empty, error="the PID now belongs to another process")
        cmdline = _maybe(proc.cmdline)
        env = read_environ(pid)
        kids = []
        for child in _maybe(lambda: proc.children(recursive=True)) or ():
            with child.oneshot():
                mem = _maybe(child.memory_info)
                kids.append(
                    HostProcess(
                        pid=child.pid,
                        ppid=_maybe(child.ppid),
                        user=_text(_maybe(child.username)),
                        name=_text(_maybe(child.name)),
                        command=_command(_maybe(child.cmdline), None),
                        cpu_percent=None,
                        rss=mem.rss if mem else None,
                        create_time=_maybe(child.create_time),
                        state=_maybe(child.status),
                    )
                )
        return ProcessDetail(
            pid=pid,
            command=_command(cmdline, None),
            cwd=_text(_maybe(proc.cwd)),
            cuda_visible_devices=env.cuda_visible_devices if env is not None else None,
            environ_readable=env is not None,
            training_env=env.training if env is not None else (),
            training_env_more=env.more if env is not None else 0,
            environ_cut=env.cut if env is not None else False,
            device_files=device_files(pid, devices_dir),
            children=tuple(kids),
        )
    except (psutil.NoSuchProcess, ValueError):
        return replace(empty, error="the process is gone")
