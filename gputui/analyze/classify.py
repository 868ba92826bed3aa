"""Process classes: what a user hunting GPU zombies needs to see at a glance, with a one-line reason."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeGuard, get_args

from gputui.model import Category, ProcessRow, Snapshot
from gputui.units import fmt_bytes

OK: Final = "ok"
# holds a device, not in NVML's list, but a child of a GPU process: a data-loader worker
WORKER: Final = "worker"
DEFUNCT: Final = "defunct"  # state Z: exited; only its parent can reap it
STUCK: Final = "stuck"  # state D (uninterruptible, often in the driver) or T (stopped)
ORPHAN: Final = "orphan"  # holds a device and its parent is gone (reparented to init or a subreaper)
UNSEEN: Final = "unseen"  # holds a device, NVML lists no memory for it, and no GPU process is its parent
NVML_ONLY: Final = "nvml-only"  # NVML lists it, this PID namespace cannot see it (a container), or it is gone
# its /proc/PID/fd is not readable: the device files it holds are unknown
NO_PERMISSION: Final = "no-permission"
# no progress while its GPU busy-waits (a collective): set by the sampler, see analyze.hung
HUNG: Final = "hung"

SUSPICIOUS: frozenset[Category] = frozenset({DEFUNCT, STUCK, ORPHAN, UNSEEN, NVML_ONLY, NO_PERMISSION, HUNG})
CATEGORIES: tuple[Category, ...] = get_args(Category)


def is_category(name: str) -> TypeGuard[Category]:
    return name in CATEGORIES


# Parents known to adopt orphans, by name: only a hint on top of what /proc says (Facts.adopted), which
# recognises any adopter.
SUBREAPERS = frozenset(
    {"systemd", "init", "tini", "dumb-init", "docker-init", "catatonit", "s6-svscan", "runsv", "supervisord"}
)
IDLE_NOTE_S = 60.0
# Used memory of a GPU that no listed process accounts for, below which it is the driver's own
# bookkeeping and not worth a row: the TUI's table and `--once` both use it.
UNACCOUNTED_MIN = 64 << 20


@dataclass(frozen=True, slots=True)
class Facts:
    """What the join knows of one process."""

    visible: bool
    state: str | None
    on_nvml: bool
    devices: tuple[str, ...] | None  # held device files; None: /proc/PID/fd not readable
    ppid: int | None
    parent_name: str | None  # None: no parent visible
    parent_on_gpu: bool
    idle_s: float | None  # seconds at 0 % CPU, when known
    hidden_by: str | None = None  # "hidepid=2": /proc hides other users' processes from this user
    # Why its parent cannot be the one that started it, from /proc (procs.adoption): "its parent started
    # after it", "its process group's leader 4121 has exited", ...; None: nothing says so.
    adopted: str | None = None


def _short(devices: tuple[str, ...]) -> str:
    names = [d.rsplit("/", 1)[-1] for d in devices]
    gpus = [n for n in names if n[6:].isdigit()]
    return "/dev/" + (", /dev/".join(gpus) if gpus else ", /dev/".join(names))


def classify(f: Facts) -> tuple[Category, str]:
    """(class, reason). The reason strings together the facts that matter, most telling first."""
    if not f.visible and f.hidden_by:
        return NVML_ONLY, (
            f"in NVML's list but hidden from this user by /proc's {f.hidden_by} (another "
            "user's process, or gone): run as root to see it"
        )
    if not f.visible:
        return NVML_ONLY, "in NVML's list but not visible here: another PID namespace (a container), or gone"
    notes: list[str] = []
    holds = bool(f.devices)
    if holds:
        assert f.devices is not None
        notes.append(f"holds {_short(f.devices)}")
    # A GPU process adopted by init is usually just detached (nohup, a service); a device holder that
    # NVML does not list and whose parent is gone is the classic leftover data-loader worker.
    orphaned = (
        holds
        and not f.on_nvml
        and (
            f.ppid in (0, 1) or f.parent_name is None or f.parent_name in SUBREAPERS or f.adopted is not None
        )
    )
    if orphaned:
        why = f": {f.adopted}" if f.adopted else ""
        notes.append(f"parent gone (now {f.ppid}{' ' + f.parent_name if f.parent_name else ''}{why})")
    if holds and not f.on_nvml:
        notes.append("not in NVML's list")
    if f.idle_s is not None and f.idle_s >= IDLE_NOTE_S:
        notes.append(f"0% CPU for {int(f.idle_s // 60)} min")

    if f.state == "zombie":
        return DEFUNCT, "; ".join([f"defunct: its parent {f.ppid} has not reaped it", *notes])
    if f.state in ("disk-sleep", "stopped", "tracing-stop"):
        what = (
            "uninterruptible sleep (D), often stuck in the driver"
            if f.state == "disk-sleep"
            else "stopped (T)"
        )
        return STUCK, "; ".join([what, *notes])
    if orphaned:
        return ORPHAN, "; ".join(notes)
    if holds and not f.on_nvml:
        if f.parent_on_gpu:
            return WORKER, "; ".join([*notes, "child of a GPU process (a data-loader worker?)"])
        return UNSEEN, "; ".join(notes)
    if f.on_nvml and f.devices is None:
        return NO_PERMISSION, "cannot read /proc/PID/fd (another user's process): run as root to see more"
    return OK, "; ".join(notes)


# -- leftovers: unaccounted memory and the processes that likely hold it ------------------------------


def estimated(n: int) -> str:
    """`~4.8 GiB?`: an estimate (a share of a GPU's unaccounted memory), not a measurement."""
    return f"~{fmt_bytes(n)}?"


@dataclass(frozen=True, slots=True)
class Leftover:
    """Memory in use on a GPU that no process in NVML's lists accounts for, and its likely holders:
    processes that hold that GPU's device file, are in none of NVML's lists, and whose job is over (an
    orphan; a child of a defunct parent). A CUDA context lives until the last descriptor of its device
    file closes: a forked worker that outlives its trainer keeps the trainer's memory, and NVML names no
    process for it. Which holder has how much is not known: `share` splits it evenly, an estimate."""

    gpu: int
    memory: int  # bytes no listed process accounts for
    holders: tuple[ProcessRow, ...]

    @property
    def share(self) -> int | None:
        """Each likely holder's estimated part; None: no holder to split it among."""
        return self.memory // len(self.holders) if self.holders else None


def likely_holders(processes: Iterable[ProcessRow], gpu: int) -> tuple[ProcessRow, ...]:
    """The processes that likely hold `gpu`'s unaccounted memory (see Leftover), in pid order. A worker
    of a live rank is not one: its memory is its rank's, in NVML's list. A defunct process holds nothing
    (its descriptors closed when it exited)."""
    processes = tuple(processes)
    defunct = {p.pid for p in processes if p.state == "zombie"}
    found = {
        p.pid: p
        for p in processes
        if p.gpu == gpu
        and p.visible
        and not p.kinds
        and p.state != "zombie"
        and (p.category == ORPHAN or (p.ppid is not None and p.ppid in defunct))
    }
    return tuple(found[pid] for pid in sorted(found))


def leftovers(snap: Snapshot, minimum: int = UNACCOUNTED_MIN) -> dict[int, Leftover]:
    """Per GPU with `minimum` or more of memory no listed process accounts for: that memory and its
    likely holders (none, when nothing here fits: another container's process, or the driver's)."""
    return {
        gpu: Leftover(gpu, memory, likely_holders(snap.processes, gpu))
        for gpu, memory in sorted(snap.unaccounted_memory.items())
        if memory is not None and memory >= minimum
    }
