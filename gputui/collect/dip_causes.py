"""Why a GPU dipped: what else was true while it was low, the strongest cause first, in one line.

The dip detector asks `observe` on every sample inside a dip and keeps what it saw (a later text for the
same thing replaces the earlier one; the host's CPU keeps its peak). The data loader's share of step time
stays the detector's own (Dip.wait_share): it is the most common answer. A profile recorded near the dip
comes from the app, which alone knows of it (`profile_causes`). Pure: no clocks, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gputui.collect.hung import STALL_FACTOR
from gputui.collect.xid import xid_name
from gputui.model import Snapshot, XidEvent

# The ranks: a lower one is the stronger reason, listed first.
HEALTH = 0  # an Xid, clocks held down by the hardware
HUNG = 1  # the job looks hung, or made no step for many of its usual steps
DATA = 2  # the data loader (the detector's wait share)
HOST = 3  # the host's CPUs are saturated
PROFILE = 4  # a profile of a process on the GPU, recorded near the dip

HOST_CPU_BUSY = 90.0  # percent of all CPUs
NO_STEP_MIN_S = 10.0  # a pause shorter than this is the dip itself, not news
XID_NEAR_S = 60.0  # an Xid this long before a dip began may be why
PROFILE_NEAR_S = 600.0  # a profile this close to a dip says what the job was like then
# Clock event reasons (gputui.collect.nvml) that slow a GPU down against the job's will.
SLOWDOWNS = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal": "hardware thermal limit",
    "sw_thermal": "thermal limit",
    "hw_power_brake": "power brake",
}


@dataclass(frozen=True, slots=True)
class Cause:
    rank: int
    key: str  # one per thing seen: its newest text replaces an older one
    text: str
    peak: float = 0.0  # for the host's CPU: the highest is kept, not the newest


@dataclass(frozen=True, slots=True)
class ProfileNote:
    """A profile the allocator panel saw finish: when it ran, on which GPU, and its verdict."""

    pid: int
    gpu: int | None
    start: float
    end: float
    verdict: str  # input-bound, host-bound, launch-bound, gpu-bound


def observe(snap: Snapshot, gpu: int, xids: Iterable[XidEvent] = ()) -> list[Cause]:
    """What this sample says about why `gpu` is low. `xids`: the recent Xid events (the one that took the
    job down may have come a tick before the dip began); this sample's own are read from it too."""
    out: list[Cause] = []
    for x in (*xids, *snap.xids):
        if x.gpu == gpu:
            out.append(Cause(HEALTH, f"xid {gpu} {x.xid}", f"GPU {gpu} Xid {x.xid}: {xid_name(x.xid)}"))
    sample = next((g for g in snap.gpus if g.index == gpu), None)
    slow = [SLOWDOWNS[r] for r in (sample.throttle_reasons or ()) if r in SLOWDOWNS] if sample else []
    if slow:
        out.append(Cause(HEALTH, f"clocks {gpu}", f"GPU {gpu} clocks held down ({', '.join(slow)})"))
    for p in snap.processes:
        if p.gpu != gpu:
            continue
        if p.hung:
            out.append(Cause(HUNG, f"hung {p.pid}", f"pid {p.pid} {p.hung}"))
            continue
        report = snap.agents.get(p.pid)
        progress = report.progress if report is not None and report.ok else None
        if progress is not None and progress.last_step_age_s is not None and progress.usual_step_s:
            age, usual = progress.last_step_age_s, progress.usual_step_s
            if age >= max(NO_STEP_MIN_S, STALL_FACTOR * usual):
                took = f"{age:.0f} s" if age < 120 else f"{age / 60:.0f} min"
                text = f"pid {p.pid} made no step for {took} (usual step {usual:.2g} s)"
                out.append(Cause(HUNG, f"no step {p.pid}", text))
    cpu = snap.host.cpu_percent if snap.host is not None else None
    if cpu is not None and cpu >= HOST_CPU_BUSY:
        out.append(Cause(HOST, "host cpu", f"host CPUs {cpu:.0f}% busy", peak=cpu))
    return out


def merge(seen: dict[str, Cause], new: Iterable[Cause]) -> None:
    for c in new:
        old = seen.get(c.key)
        if old is None or c.peak >= old.peak:
            seen[c.key] = c


def profile_causes(
    notes: Iterable[ProfileNote], gpus: Iterable[int], start: float, end: float
) -> list[Cause]:
    """The newest profile of each process on `gpus` that ran within PROFILE_NEAR_S of [start, end]."""
    on = set(gpus)
    newest: dict[int, ProfileNote] = {}
    for n in notes:
        near = n.start <= end + PROFILE_NEAR_S and n.end >= start - PROFILE_NEAR_S
        if n.gpu in on and near and (n.pid not in newest or n.end > newest[n.pid].end):
            newest[n.pid] = n
    return [
        Cause(PROFILE, f"profile {n.pid}", f"profile of pid {n.pid}: {n.verdict}") for n in newest.values()
    ]


def combine(causes: Iterable[Cause], wait: str = "") -> str:
    """One line: the causes by rank (each once), the data loader's verdict at its own rank."""
    parts = [(c.rank, c.text) for c in causes]
    if wait:
        parts.append((DATA, wait))
    seen: set[str] = set()
    out = []
    for _, text in sorted(parts, key=lambda p: p[0]):  # stable: the order seen within a rank
        if text not in seen:
            seen.add(text)
            out.append(text)
    return "; ".join(out)
