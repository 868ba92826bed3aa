"""The kill workflow as a pure function: which processes the dialog offers, whether "include its
children" starts on, which PIDs would get the signal, what is refused and why, and how the outcomes
are told. No Textual, no Rich, no psutil: the live facts come in as arguments (`Protected`, `lookup`),
so every case is a unit test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gputui.collect.signals import Outcome, Protected, Target, same_start
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.units import NA, fmt_bytes, printable

Process = ProcessRow | HostProcess
Lookup = Callable[[int], HostProcess | None]  # the process behind a PID now (None: no such process)

PARENT = "parent"  # the category of a parent offered in place of its defunct child

# How each result is named in the status line, in the order they are listed.
_RESULT_NAMES = {
    "gone": "gone",
    "sent": "sent",
    "still alive": "still alive",
    "already gone": "already gone",
    "permission denied": "not permitted",
    "refused": "refused",
}


@dataclass(frozen=True)
class Entry:
    """One line of the dialog: who would get the signal."""

    target: Target
    user: str
    category: str
    memory: str


@dataclass(frozen=True)
class KillPlan:
    entries: tuple[Entry, ...]  # the processes offered, in the order they were chosen
    # Per offered pid: its descendants the snapshot knows, deepest first (a parent cannot respawn them).
    children: dict[int, tuple[int, ...]]
    gpu_children: tuple[int, ...]  # the descendants that hold a GPU (in NVML's lists, or a device file)
    include_children: bool  # the checkbox's first state: on when a descendant holds a GPU
    notes: tuple[str, ...]  # what the user should know: a defunct row, a refused row
    refused: tuple[tuple[int, str], ...]  # (pid, why) of chosen processes that are not offered

    @property
    def note(self) -> str:
        return " ".join(self.notes)

    def pids(self, include_children: bool) -> tuple[int, ...]:
        """The PIDs the signal would go to, children before their parents."""
        out: list[int] = []
        for entry in self.entries:
            family = [*self.children.get(entry.target.pid, ()), entry.target.pid] if include_children else []
            for pid in family or [entry.target.pid]:
                if pid not in out:
                    out.append(pid)
        return tuple(out)


def plan_kill(
    chosen: Sequence[Process], snapshot: Snapshot | None, protected: Protected, lookup: Lookup | None = None
) -> KillPlan:
    """What `k` on the `chosen` rows (the highlighted one, or every tagged one) would do.

    `lookup` reads a PID now: a chosen process whose PID now belongs to a process started since is
    refused, and a defunct row's parent missing from the snapshot is described from it."""
    known = _known(snapshot)
    entries: dict[int, Entry] = {}  # by pid: a defunct row's parent may be tagged as well
    notes: list[str] = []
    refused: list[tuple[int, str]] = []
    for p in chosen:
        if p.state == "zombie":
            parent, note = _parent_of_defunct(p, known, protected, lookup)
            notes.append(note)
            if parent is not None:
                entries.setdefault(parent.target.pid, parent)
            continue
        why = _refusal(p, protected, lookup)
        if why:
            refused.append((p.pid, why))
            notes.append(f"{p.pid} is not offered: {why}.")
        else:
            entries[p.pid] = _entry(p, p.category if isinstance(p, ProcessRow) else "")
    # A defunct descendant is left out: it has exited, no signal reaches it.
    kids = {pid: tuple(k for k in _descendants(pid, known) if known[k].state != "zombie") for pid in entries}
    holders = _gpu_holders(snapshot)
    gpu_children = tuple(dict.fromkeys(pid for family in kids.values() for pid in family if pid in holders))
    return KillPlan(
        entries=tuple(entries.values()),
        children={pid: family for pid, family in kids.items() if family},
        gpu_children=gpu_children,
        include_children=bool(gpu_children),
        notes=tuple(notes),
        refused=tuple(refused),
    )


def _known(snapshot: Snapshot | None) -> dict[int, Process]:
    """Every process the snapshot describes, by pid; a GPU row wins over a host row (it has the memory)."""
    if snapshot is None:
        return {}
    known: dict[int, Process] = {p.pid: p for p in snapshot.host_processes}
    for row in snapshot.processes:
        if row.visible and not isinstance(known.get(row.pid), ProcessRow):
            known[row.pid] = row
    return known


def _gpu_holders(snapshot: Snapshot | None) -> set[int]:
    if snapshot is None:
        return set()
    return {p.pid for p in snapshot.processes if p.visible and p.state != "zombie" and (p.kinds or p.devices)}


def _descendants(pid: int, known: dict[int, Process]) -> tuple[int, ...]:
    """`pid`'s descendants, deepest first; a cycle (a reused PID seen mid-change) cannot loop."""
    children: dict[int, list[int]] = {}
    for p in known.values():
        if p.ppid is not None and p.ppid != p.pid:
            children.setdefault(p.ppid, []).append(p.pid)
    levels: list[list[int]] = []
    seen, level = {pid}, [pid]
    while level:
        level = [kid for parent in level for kid in sorted(children.get(parent, ())) if kid not in seen]
        seen.update(level)
        if level:
            levels.append(level)
    return tuple(kid for level in reversed(levels) for kid in level)


def _refusal(p: Process, protected: Protected, lookup: Lookup | None) -> str | None:
    if isinstance(p, ProcessRow) and not p.visible:
        return "it is not visible in this PID namespace, so it cannot be signalled from here"
    why = protected.why(p.pid)
    if why:
        return why
    if p.create_time is None:
        return "its start time is unknown, so it cannot be told apart from a reused PID"
    # One that has exited since is still offered: sending then says "already gone", which is the news.
    live = lookup(p.pid) if lookup is not None else None
    if live is not None and not same_start(p.create_time, live.create_time):
        return "the PID now belongs to another process"
    return None


def _parent_of_defunct(
    p: Process, known: dict[int, Process], protected: Protected, lookup: Lookup | None
) -> tuple[Entry | None, str]:
    """A defunct process has exited: no signal ends it, only its parent can reap it. So its parent is
    offered instead, unless that parent is gputui (which reaps its own children) or one of its
    ancestors, or init."""
    said = f"{p.pid} is defunct: it has already exited and no signal can end it; only its parent can reap it."
    ppid = p.ppid or 0
    if ppid == protected.me:
        return None, said + " Its parent is gputui itself, which reaps it: nothing to signal."
    if ppid and protected.why(ppid):
        return None, said + f" Its parent {ppid} is not offered: {protected.why(ppid)}."
    parent = known.get(ppid) if ppid else None
    if parent is None and ppid and lookup is not None:
        parent = lookup(ppid)
    if parent is None or parent.create_time is None or parent.state == "zombie":
        return None, said + " Its parent is gone."
    return _entry(parent, PARENT), said + f" Its parent {ppid} is offered instead."


def _entry(p: Process, category: str) -> Entry:
    on_gpu = isinstance(p, ProcessRow) and p.kinds and p.used_memory is not None
    memory = fmt_bytes(p.used_memory) if isinstance(p, ProcessRow) and on_gpu else "-"
    label = printable(p.command or p.name or "")
    return Entry(Target(p.pid, p.create_time, label), printable(p.user or NA), category, memory)


# -- outcomes ----------------------------------------------------------------------------------------


def describe_outcomes(outcomes: Sequence[Outcome], final: bool) -> tuple[str, bool]:
    """The status line for what a signal did, naming every PID ("gone: 4242, 4243; still alive:
    4244"), and whether it is a warning (something was refused, not permitted, or outlived it)."""
    if not outcomes:
        return "", False
    bad = any(o.result in ("refused", "permission denied", "still alive") for o in outcomes)
    if len(outcomes) == 1:
        text = str(outcomes[0])
    else:
        text = f"{outcomes[0].signal} → {len(outcomes)} processes: " + "; ".join(_groups(outcomes))
    if final and any(o.result == "still alive" for o in outcomes):
        text += " — press K to send SIGKILL"
    return text, bad


def _groups(outcomes: Iterable[Outcome]) -> list[str]:
    by_result: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_result.setdefault(o.result, []).append(o)
    order = [r for r in _RESULT_NAMES if r in by_result] + [r for r in by_result if r not in _RESULT_NAMES]
    parts = []
    for result in order:
        group = by_result[result]
        pids = ", ".join(str(o.target.pid) for o in group)
        part = f"{_RESULT_NAMES.get(result, result)}: {pids}"
        if result == "refused":  # why matters: gputui itself, a reused PID, ...
            part += " (" + "; ".join(dict.fromkeys(o.detail for o in group if o.detail)) + ")"
        parts.append(part)
    return parts
