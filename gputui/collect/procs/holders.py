"""Who holds the NVIDIA device files open: /dev/nvidia[0-9]*, /dev/nvidiactl, /dev/nvidia-uvm, and the
MIG capabilities /dev/nvidia-caps/nvidia-cap[0-9]* (a process in a MIG instance holds the cap of its GPU
instance and of its compute instance; /proc/driver/nvidia-caps/mig-minors says which cap is which).

This finds what nvidia-smi does not show: data-loader workers that outlived their trainer, processes in
other containers, processes stuck in the driver. A naive scan of every /proc/*/fd costs ~50 ms at 1,000
processes (one readlink per descriptor), so the scan is incremental:

- every tick: new PIDs are looked at in full; known holders have their device descriptors re-checked;
- every `rescan_s`: every process's descriptor list is read again, and only a process whose list
  changed since we last looked has its links read (a process that opened a device since then has a new
  descriptor);
- every `deep_every` rescans: a full scan with every link read, for the rare reuse of a closed
  descriptor number.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gputui.collect.procs import procfs

_DEVICE = re.compile(r"^nvidia(\d+|ctl|-uvm)$")
CAPS_DIR = "nvidia-caps"  # under the devices dir
_CAP = re.compile(r"^nvidia-cap(\d{1,7})$")
MIG_MINORS = "driver/nvidia-caps/mig-minors"  # under /proc
# Lines of mig-minors: "config 1", "monitor 2", "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13".
_MIG_LINE = re.compile(
    rb"^(?:(config|monitor)|gpu(\d{1,4})/gi(\d{1,4})(?:/ci(\d{1,4}))?/access)\s+(\d{1,7})$"
)
_MIG_MINORS_MAX = 1 << 20  # ~25 KB for 8 GPUs; more is not the driver's file


@dataclass(frozen=True, slots=True)
class MigCap:
    """What one /dev/nvidia-caps/nvidia-capN grants. kind: "gi" (access to a GPU instance), "ci" (to a
    compute instance), "config" or "monitor" (MIG-wide), "unknown" (mig-minors unreadable or silent)."""

    minor: int
    kind: str = "unknown"
    gpu_minor: int | None = None  # N of the /dev/nvidiaN whose instance it is
    gpu_instance: int | None = None
    compute_instance: int | None = None

    @property
    def label(self) -> str:
        if self.kind == "ci":
            return f"MIG {self.gpu_instance}/{self.compute_instance}"
        if self.kind == "gi":
            return f"MIG {self.gpu_instance}"
        if self.kind in ("config", "monitor"):
            return f"MIG {self.kind}"
        return "a MIG capability"


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    devices: tuple[str, ...]  # the device file paths it holds, sorted
    minors: tuple[int, ...]  # N of each /dev/nvidiaN it holds, or whose MIG instance it holds: which GPUs
    mig: tuple[MigCap, ...] = ()  # the MIG capabilities it holds, by minor

    @property
    def instances(self) -> tuple[tuple[int, int, int], ...]:
        """(GPU minor, GPU instance, compute instance) of each compute instance it holds."""
        return tuple(
            (c.gpu_minor, c.gpu_instance, c.compute_instance)
            for c in self.mig
            if c.kind == "ci"
            and c.gpu_minor is not None
            and c.gpu_instance is not None
            and c.compute_instance is not None
        )


@dataclass(frozen=True, slots=True)
class HolderScan:
    holders: dict[int, Holder]
    unreadable: frozenset[int]  # PIDs whose /proc/PID/fd we may not read: holders may be among them
    full: bool  # this scan looked at every process
    zombies: frozenset[int] = frozenset()  # defunct processes (they hold nothing: their fds are closed)


def device_paths(devices_dir: Path) -> frozenset[str]:
    """The device files to look for, as the fd symlinks name them."""
    real = os.path.realpath(devices_dir)  # the fd links name the resolved, absolute path
    try:
        names = os.listdir(real)
    except OSError:
        return frozenset()
    found = {os.path.join(real, n) for n in names if _DEVICE.match(n)}
    caps = os.path.join(real, CAPS_DIR)
    with contextlib.suppress(OSError):  # no MIG capabilities on this machine
        found.update(os.path.join(caps, n) for n in os.listdir(caps) if _CAP.match(n))
    return frozenset(found)


def cap_minor(path: str) -> int | None:
    """N of /dev/nvidia-caps/nvidia-capN; None for any other device file."""
    head, _, name = path.rpartition("/")
    found = _CAP.match(name)
    return int(found.group(1)) if found and head.endswith("/" + CAPS_DIR) else None


def read_mig_minors(path: str) -> dict[int, MigCap]:
    """The driver's cap minor -> what it grants. Unreadable, absent (no MIG) or odd lines: left out."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        data, chunk = b"", b"x"
        while chunk and len(data) < _MIG_MINORS_MAX:
            chunk = os.read(fd, 65536)
            data += chunk
    except OSError:
        return {}
    finally:
        os.close(fd)
    out: dict[int, MigCap] = {}
    for line in data[:_MIG_MINORS_MAX].splitlines():
        m = _MIG_LINE.match(line.strip())
        if m is None:
            continue
        wide, gpu, gi, ci, minor = m.groups()
        n = int(minor)
        if wide:
            out[n] = MigCap(n, wide.decode())
        else:
            kind = "gi" if ci is None else "ci"
            out[n] = MigCap(n, kind, int(gpu), int(gi), int(ci) if ci is not None else None)
    return out


def minor_of(path: str) -> int | None:
    name = path.rsplit("/", 1)[-1]
    return int(name[6:]) if name[6:].isdigit() else None


class HolderScanner:
    def __init__(
        self,
        devices_dir: Path,
        rescan_s: float = 5.0,
        deep_every: int = 12,
        proc: str = "/proc",
        monotonic: Callable[[], float] = time.monotonic,
        mig_minors: str | None = None,
    ) -> None:
        """`mig_minors`: the driver's map of MIG capabilities (default: under `proc`)."""
        self.devices_dir = devices_dir
        self.rescan_s = rescan_s
        self.deep_every = deep_every
        self.proc = proc
        self.monotonic = monotonic
        self.mig_minors = mig_minors if mig_minors is not None else f"{proc}/{MIG_MINORS}"
        self._paths: frozenset[str] = frozenset()
        self._caps: dict[int, MigCap] = {}  # from mig-minors, read on rescans while cap files exist
        self._fd_lists: dict[int, int] = {}  # pid -> hash of its descriptor numbers when last looked at
        self._holders: dict[int, tuple[Holder, tuple[str, ...]]] = {}  # pid -> (holder, its device fds)
        self._unreadable: set[int] = set()
        self._zombies: set[int] = set()
        self._last_rescan: float | None = None
        self._rescans = 0

    def scan(self) -> HolderScan:
        now = self.monotonic()
        rescan = self._last_rescan is None or now - self._last_rescan >= self.rescan_s
        deep = rescan and self._rescans % self.deep_every == 0
        if rescan:
            self._last_rescan = now
            self._rescans += 1
            paths = device_paths(self.devices_dir)  # device files may appear (a driver load)
            if paths != self._paths:
                self._fd_lists.clear()  # an unchanged descriptor list may now hold a new device
                self._paths = paths
            # Instances are made and destroyed by an admin's hand: the map is re-read each rescan.
            has_caps = any(cap_minor(p) is not None for p in paths)
            self._caps = read_mig_minors(self.mig_minors) if has_caps else {}
        try:
            pids = {int(name) for name in os.listdir(self.proc) if name.isdigit()}
        except OSError:
            pids = set()
        for gone in [p for p in self._fd_lists if p not in pids]:
            del self._fd_lists[gone]
        for gone in [p for p in self._holders if p not in pids]:
            del self._holders[gone]
        self._unreadable &= pids
        self._zombies &= pids
        if deep:
            self._fd_lists.clear()
            self._holders.clear()
            self._unreadable.clear()
            self._zombies.clear()
        for pid in pids:
            if pid in self._holders and not rescan:
                self._recheck(pid)
            elif rescan or pid not in self._fd_lists:
                self._look(pid)
        holders = {pid: h for pid, (h, _) in self._holders.items()}
        return HolderScan(holders, frozenset(self._unreadable), rescan, frozenset(self._zombies))

    def _look(self, pid: int) -> None:
        fd_dir = f"{self.proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            self._unreadable.add(pid)
            self._fd_lists[pid] = 0
            return
        except OSError:  # gone
            return
        self._unreadable.discard(pid)
        signature = hash(tuple(fds))
        if self._fd_lists.get(pid) == signature and pid not in self._holders:
            return  # the same descriptors as when we last read their links: no device among them
        self._fd_lists[pid] = signature
        self._holders.pop(pid, None)
        if not fds:  # a kernel thread, or a zombie: its descriptors were closed when it exited
            if self._is_zombie(pid):
                self._zombies.add(pid)
            return
        self._record(pid, fd_dir, fds)

    def _recheck(self, pid: int) -> None:
        """A known holder: do its device descriptors still point at devices? (No full listing.)"""
        holder, fds = self._holders.pop(pid)
        prefix, readlink = f"{self.proc}/{pid}/fd/", os.readlink
        try:
            same = {readlink(prefix + fd) for fd in fds} == set(holder.devices)
        except OSError:
            same = False
        if same:  # the common case, every tick: keep the Holder as it was
            self._holders[pid] = (holder, fds)
            return
        self._record(pid, prefix[:-1], fds)
        if pid not in self._holders and self._is_zombie(pid):  # it exited: defunct until reaped
            self._zombies.add(pid)

    def _is_zombie(self, pid: int) -> bool:
        try:
            stat = procfs.read(f"{self.proc}/{pid}/stat")
        except OSError:
            return False
        return stat[stat.rfind(b")") + 2 :][:1] == b"Z"  # the state follows the command in parentheses

    def _record(self, pid: int, fd_dir: str, fds: list[str] | tuple[str, ...]) -> None:
        paths, readlink = self._paths, os.readlink
        held: dict[str, str] = {}
        prefix = fd_dir + "/"
        for fd in fds:
            try:
                target = readlink(prefix + fd)
            except OSError:
                continue
            if target in paths:
                held[fd] = target
        if held:
            devices = tuple(sorted(set(held.values())))
            cap_minors = sorted({c for d in devices if (c := cap_minor(d)) is not None})
            caps = tuple(self._caps.get(n, MigCap(n)) for n in cap_minors)
            gpus = {m for d in devices if (m := minor_of(d)) is not None}
            gpus |= {c.gpu_minor for c in caps if c.gpu_minor is not None}
            self._holders[pid] = (Holder(pid, devices, tuple(sorted(gpus)), caps), tuple(held))
