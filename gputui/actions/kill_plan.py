"""The kill workflow as a pure function: which processes the dialog offers, whether "include its
children" starts on, which PIDs would get the signal, what is refused and why, and how the outcomes
are told. No Textual, no Rich, no psutil: the live facts come in as arguments (`Protected`, `lookup`,
`descendants`), so every case is a unit test.

The dialog lists exactly what a signal would reach, each PID once, and is sent exactly that list: the
children are found when the dialog opens (in the snapshot, and live when `descendants` is given), never
again when the user confirms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gputui.actions.signals import Outcome, Protected, Target, same_start
from gputui.analyze.classify import estimated
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.units import NA, fmt_bytes, printable

Process = ProcessRow | HostProcess
Lookup = Callable[[int], HostProcess | None]  # the process behind a PID now (None: no such process)
# The live descendants of these PIDs, each described now (ppid, user, command, create time).
Descendants = Callable[[Collection[int]], Sequence[HostProcess]]

PARENT = "parent"  # the category of a parent offered in place of its defunct child
CHILD = "child"  # the category of a descendant that is no GPU process and works for none

# What each process is to the summary: a rank is in NVML's lists (a GPU process); a worker holds a
# GPU's device file without being in them, or descends from a rank (a data-loader worker); the
# rest (a launcher, a shell) are others.
RANK, WORKER, OTHER = "rank", "worker", "other"

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
    role: str = OTHER
    gpus: tuple[int, ...] = ()  # the GPUs it is on: in NVML's lists, or holding the device file
    memory_bytes: int | None = 0  # its GPU memory (NVML's, summed over its GPUs); None: unknown
    estimate: int = 0  # a likely holder's estimated share of its GPU's unaccounted memory (not NVML's)


@dataclass(frozen=True)
class Summary:
    """What a signal would reach, counted."""

    count: int
    ranks: int
    workers: int
    others: int
    gpus: tuple[int, ...]
    memory: int  # the GPU memory of those whose memory is known
    memory_unknown: int  # ranks whose memory is not known
    users: tuple[str, ...]
    foreign: tuple[tuple[str, int], ...]  # (user, processes) of users other than the plan's, most first
    estimated: int = 0  # unaccounted memory its likely holders are estimated to hold, summed

    @property
    def foreign_count(self) -> int:
        return sum(n for _, n in self.foreign)


@dataclass(frozen=True)
class KillPlan:
    entries: tuple[Entry, ...]  # the processes offered, in the order they were chosen
    # Per offered pid: its descendants (the snapshot's, and the live ones when read), deepest first (a
    # parent cannot respawn them).
    children: dict[int, tuple[int, ...]]
    gpu_children: tuple[int, ...]  # the descendants that hold a GPU (in NVML's lists, or a device file)
    include_children: bool  # the checkbox's first state: on when a descendant holds a GPU
    notes: tuple[str, ...]  # what the user should know: a defunct row, a refused row
    refused: tuple[tuple[int, str], ...]  # (pid, why) of chosen processes that are not offered
    family: dict[int, Entry] = field(default_factory=dict)  # every descendant's line, by pid
    # Per offered pid: the same descendants top-down, as they are listed (each child below its parent).
    tree: dict[int, tuple[int, ...]] = field(default_factory=dict)
    user: str | None = None  # whose kill this is: the highlighted process's user, or the job's
    left_out: str = ""  # what a job's kill leaves out (processes of other users), and why
    # An unaccounted row's kill: that its processes are only its likely holders, and why.
    estimated: str = ""

    @property
    def note(self) -> str:
        return " ".join(self.notes)

    def pids(self, include_children: bool) -> tuple[int, ...]:
        """The PIDs the signal would go to, children before their parents."""
        return tuple(e.target.pid for e in self.signalled(include_children))

    def signalled(self, include_children: bool) -> tuple[Entry, ...]:
        """Every process the signal would go to, each once, in the order it goes: with the children,
        each offered process's descendants (deepest first) before it."""
        offered = {e.target.pid: e for e in self.entries}
        out: dict[int, Entry] = {}
        for entry in self.entries:
            for pid in self.children.get(entry.target.pid, ()) if include_children else ():
                out.setdefault(pid, offered.get(pid) or self.family[pid])
            out.setdefault(entry.target.pid, entry)
        return tuple(out.values())

    def shown(self, include_children: bool) -> tuple[Entry, ...]:
        """The same processes as they are listed: each offered one, then its descendants, each child
        below its parent."""
        offered = {e.target.pid: e for e in self.entries}
        out: dict[int, Entry] = {}
        for entry in self.entries:
            out.setdefault(entry.target.pid, entry)
            for pid in self.tree.get(entry.target.pid, ()) if include_children else ():
                out.setdefault(pid, offered.get(pid) or self.family[pid])
        return tuple(out.values())

    def summary(self, include_children: bool) -> Summary:
        entries = self.signalled(include_children)
        roles = Counter(e.role for e in entries)
        foreign = Counter(e.user for e in entries if self.user is not None and e.user != self.user)
        return Summary(
            count=len(entries),
            ranks=roles[RANK],
            workers=roles[WORKER],
            others=roles[OTHER],
            gpus=tuple(sorted({g for e in entries for g in e.gpus})),
            memory=sum(e.memory_bytes or 0 for e in entries),
            memory_unknown=sum(1 for e in entries if e.memory_bytes is None),
            users=tuple(sorted({e.user for e in entries})),
            foreign=tuple(sorted(foreign.items(), key=lambda kv: (-kv[1], kv[0]))),
            estimated=sum(e.estimate for e in entries),
        )


def plan_kill(
    chosen: Sequence[Process],
    snapshot: Snapshot | None,
    protected: Protected,
    lookup: Lookup | None = None,
    descendants: Descendants | None = None,
    user: str | None = None,
    estimates: Mapping[int, int] | None = None,
) -> KillPlan:
    """What `k` on the `chosen` rows (the highlighted one, or every tagged one) would do.

    `lookup` reads a PID now: a chosen process whose PID now belongs to a process started since is
    refused, and a defunct row's parent missing from the snapshot is described from it.
    `descendants` reads the live descendants of the offered processes that are still the ones chosen
    (their start time unchanged): the children a signal would reach are those, with the snapshot's.
    `user`: whose kill this is (the highlighted row's user; a job's user); by default the first
    chosen process's. The dialog says how many processes of other users the signal would reach.
    `estimates`: by pid, the share of its GPU's unaccounted memory a likely holder is estimated to hold
    (its line shows `~4.8 GiB?` where NVML has none)."""
    known = _known(snapshot)
    rows = _gpu_rows(snapshot, chosen)
    live = _Memo(lookup)
    offered: dict[int, tuple[Process, str]] = {}  # by pid: a defunct row's parent may be tagged as well
    notes: list[str] = []
    refused: list[tuple[int, str]] = []
    for p in chosen:
        if p.state == "zombie":
            parent, note = _parent_of_defunct(p, known, protected, live)
            notes.append(note)
            if parent is not None:
                offered.setdefault(parent.pid, (parent, PARENT))
            continue
        why = _refusal(p, protected, live)
        if why:
            refused.append((p.pid, why))
            notes.append(f"{p.pid} is not offered: {why}.")
        else:
            offered[p.pid] = (p, p.category if isinstance(p, ProcessRow) else "")
    for p, _ in offered.values():
        known.setdefault(p.pid, p)  # a parent read live: its children are looked for too
    if descendants is not None and lookup is not None:
        still = [
            pid
            for pid, (p, _) in offered.items()
            if (n := live(pid)) and same_start(p.create_time, n.create_time)
        ]
        _merge_live(known, descendants(still) if still else ())
    ranks = {pid for pid, rs in rows.items() if any(r.kinds for r in rs)}
    children: dict[int, tuple[int, ...]] = {}
    tree: dict[int, tuple[int, ...]] = {}
    skipped: dict[int, str] = {}
    for pid in offered:
        deepest, top_down = _descendants(pid, known, protected, skipped)
        if deepest:
            children[pid], tree[pid] = deepest, top_down
    notes += [f"{pid} is not offered: {why}." for pid, why in skipped.items()]

    def entry(p: Process, category: str) -> Entry:
        made = _entry(p, category, rows.get(p.pid, ()), _role(p, known, ranks, rows))
        share = (estimates or {}).get(p.pid)
        if share is not None and made.memory_bytes == 0:  # NVML lists no memory for it
            return replace(made, memory=estimated(share), estimate=share)
        return made

    entries = tuple(entry(p, category) for p, category in offered.values())
    family = {pid: _descendant_entry(known[pid], entry) for kids in children.values() for pid in kids}
    # A holder the snapshot saw, still the same process (not a PID taken since by a live descendant).
    holders = {pid for pid in _gpu_holders(snapshot) if isinstance(known.get(pid), ProcessRow)}
    gpu_children = tuple(dict.fromkeys(pid for kids in children.values() for pid in kids if pid in holders))
    if user is None:
        user = next((p.user for p in chosen if p.user), None)
    return KillPlan(
        entries=entries,
        children=children,
        gpu_children=gpu_children,
        include_children=bool(gpu_children),
        notes=tuple(notes),
        refused=tuple(refused),
        family=family,
        tree=tree,
        user=printable(user) if user is not None else None,
    )


class _Memo:
    """`lookup`, each PID read once per plan."""

    def __init__(self, lookup: Lookup | None) -> None:
        self.lookup = lookup
        self.seen: dict[int, HostProcess | None] = {}

    def __call__(self, pid: int) -> HostProcess | None:
        if self.lookup is None:
            return None
        if pid not in self.seen:
            self.seen[pid] = self.lookup(pid)
        return self.seen[pid]

    def __bool__(self) -> bool:
        return self.lookup is not None


def _known(snapshot: Snapshot | None) -> dict[int, Process]:
    """Every process the snapshot describes, by pid; a GPU row wins over a host row (it has the memory)."""
    if snapshot is None:
        return {}
    known: dict[int, Process] = {p.pid: p for p in snapshot.host_processes}
    for row in snapshot.processes:
        if row.visible and not isinstance(known.get(row.pid), ProcessRow):
            known[row.pid] = row
    return known


def _gpu_rows(snapshot: Snapshot | None, chosen: Iterable[Process]) -> dict[int, list[ProcessRow]]:
    """Every GPU row of each pid (a process on two GPUs has two), the chosen ones too."""
    rows: dict[int, list[ProcessRow]] = {}
    for row in (*(snapshot.processes if snapshot is not None else ()), *chosen):
        if isinstance(row, ProcessRow) and row.visible and row not in rows.get(row.pid, ()):
            rows.setdefault(row.pid, []).append(row)
    return rows


def _merge_live(known: dict[int, Process], live: Iterable[HostProcess]) -> None:
    """The live descendants into `known`: a PID the snapshot does not know, or knows as a process that
    has ended since (another start time), is the live one; a known one keeps its GPU row with the
    parent it has now."""
    for now in live:
        if now.create_time is None:
            continue
        seen = known.get(now.pid)
        if seen is None or not same_start(seen.create_time, now.create_time):
            known[now.pid] = now
        elif seen.ppid != now.ppid:
            known[now.pid] = replace(seen, ppid=now.ppid)


def _gpu_holders(snapshot: Snapshot | None) -> set[int]:
    if snapshot is None:
        return set()
    return {p.pid for p in snapshot.processes if p.visible and p.state != "zombie" and (p.kinds or p.devices)}


def _descendants(
    pid: int, known: dict[int, Process], protected: Protected, skipped: dict[int, str]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`pid`'s descendants that a signal can reach: deepest first, and top-down (each child right below
    its parent). A defunct one is left out (it has exited: no signal reaches it); one that is never
    signalled (gputui's own, a start time unknown) is left out with its subtree, and noted in
    `skipped`; a cycle (a reused PID seen mid-change) cannot loop."""
    kids: dict[int, list[int]] = {}
    for p in known.values():
        if p.ppid is not None and p.ppid != p.pid:
            kids.setdefault(p.ppid, []).append(p.pid)
    levels: list[list[int]] = []
    top_down: list[int] = []
    seen = {pid}
    stack = [(kid, 0) for kid in sorted(kids.get(pid, ()), reverse=True)]  # no recursion: a chain may be long
    while stack:
        kid, depth = stack.pop()
        if kid in seen:
            continue
        seen.add(kid)
        why = protected.why(kid)
        if why is None and known[kid].create_time is None:
            why = "its start time is unknown, so it cannot be told apart from a reused PID"
        if why is not None:
            skipped.setdefault(kid, why)
            continue
        if known[kid].state != "zombie":
            top_down.append(kid)
            while len(levels) <= depth:
                levels.append([])
            levels[depth].append(kid)
        stack.extend((k, depth + 1) for k in sorted(kids.get(kid, ()), reverse=True) if k not in seen)
    return tuple(kid for level in reversed(levels) for kid in level), tuple(top_down)


def _refusal(p: Process, protected: Protected, lookup: _Memo) -> str | None:
    if isinstance(p, ProcessRow) and not p.visible:
        return "it is not visible in this PID namespace, so it cannot be signalled from here"
    why = protected.why(p.pid)
    if why:
        return why
    if p.create_time is None:
        return "its start time is unknown, so it cannot be told apart from a reused PID"
    # One that has exited since is still offered: sending then says "already gone", which is the news.
    live = lookup(p.pid)
    if live is not None and not same_start(p.create_time, live.create_time):
        return "the PID now belongs to another process"
    return None


def _parent_of_defunct(
    p: Process, known: dict[int, Process], protected: Protected, lookup: _Memo
) -> tuple[Process | None, str]:
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
    if parent is None and ppid:
        parent = lookup(ppid)
    if parent is None or parent.create_time is None or parent.state == "zombie":
        return None, said + " Its parent is gone."
    return parent, said + f" Its parent {ppid} is offered instead."


def _role(p: Process, known: dict[int, Process], ranks: set[int], rows: dict[int, list[ProcessRow]]) -> str:
    if p.pid in ranks:
        return RANK
    if any(r.category == WORKER for r in rows.get(p.pid, ())):
        return WORKER
    ppid, seen = p.ppid, {p.pid}
    while ppid is not None and ppid not in seen:
        if ppid in ranks:
            return WORKER  # a rank's child or grandchild: a data-loader worker, a compile worker
        seen.add(ppid)
        parent = known.get(ppid)
        ppid = parent.ppid if parent is not None else None
    return OTHER


def _entry(p: Process, category: str, rows: Sequence[ProcessRow], role: str) -> Entry:
    mine = [r for r in rows if r.create_time == p.create_time or same_start(r.create_time, p.create_time)]
    on_gpu = {r.gpu: r.used_memory for r in mine if r.kinds}  # in NVML's lists, per GPU
    if not on_gpu:
        memory, used = "-", 0
    elif any(m is None for m in on_gpu.values()):
        memory, used = NA, None
    else:
        used = sum(m for m in on_gpu.values() if m is not None)
        memory = fmt_bytes(used)
    label = printable(p.command or p.name or "")
    return Entry(
        Target(p.pid, p.create_time, label),
        printable(p.user or NA),
        category,
        memory,
        role,
        tuple(sorted({r.gpu for r in mine if r.gpu is not None})),
        used,
    )


def _descendant_entry(p: Process, entry: Callable[[Process, str], Entry]) -> Entry:
    """A descendant's line: its own class when it is a GPU row; else what it is to the job."""
    if isinstance(p, ProcessRow):
        return entry(p, p.category)
    made = entry(p, "")
    return replace(made, category=WORKER if made.role == WORKER else CHILD)


# -- a job's processes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobShare:
    """What `k` on a job's row (`J`) offers: the processes of the job's user."""

    user: str | None  # None: no process says whose it is
    kept: tuple[ProcessRow, ...]
    note: str  # what is left out and why; "" when nothing is


def job_share(members: Sequence[ProcessRow]) -> JobShare:
    """Only the job's user's processes: a SLURM job's user is in its cgroup path; a pod's or a
    container's is the user who runs most of its processes. A process of another user filed under the
    job (a sidecar, a monitoring agent, a PID the cgroup scan attributed wrongly) is left out: it is
    said, and can be picked in the processes view."""
    owner = next((p.owner for p in members if p.owner is not None), None)
    once = list({p.pid: p for p in members}.values())
    if owner is not None and owner.user:
        user, why = owner.user, f"{printable(owner.user)} is the SLURM job's user"
    else:
        counts = Counter(p.user for p in once if p.user)
        if not counts:
            return JobShare(None, tuple(members), "")
        top = max(counts.values())
        user = min(u for u, n in counts.items() if n == top)
        why = f"{printable(user)} runs most of its processes"
    kept = tuple(p for p in members if p.user == user)
    out = [p for p in once if p.user != user]
    if not out:
        return JobShare(user, kept, "")
    label = printable(replace(owner, step=None).label) if owner is not None else "this job"
    by_user = Counter(printable(p.user) if p.user else "an unknown user" for p in out)
    who = ", ".join(u for u, _ in sorted(by_user.items(), key=lambda kv: (-kv[1], kv[0])))
    pids = ", ".join(str(p.pid) for p in out[:8]) + (", …" if len(out) > 8 else "")
    s = "es" if len(out) > 1 else ""
    note = (
        f"Left out: {len(out)} process{s} of {who} filed under {label} ({pids}). A job's kill signals only "
        f"its user's processes ({why}); to signal {'them' if s else 'it'}, pick {'them' if s else 'it'} "
        "in the processes view."
    )
    return JobShare(user, kept, note)


# -- outcomes ----------------------------------------------------------------------------------------


QUIET_PIDS = 6  # a group that needs nothing done (gone, sent) names this many pids, then counts the rest


def describe_outcomes(outcomes: Sequence[Outcome], final: bool) -> tuple[str, bool]:
    """The status line for what a signal did, and whether it is a warning (something was refused, not
    permitted, or outlived it). What needs the user comes first, each of its PIDs named, with what to do
    ("still alive: 4244 — press K to send SIGKILL"); then what went as asked, a long list counted
    ("gone: 12 (4101, 4102, 4103, 4104, 4105, 4106, …)"): a narrow terminal cuts the end, never the news."""
    if not outcomes:
        return "", False
    bad = any(o.result in ("refused", "permission denied", "still alive") for o in outcomes)
    if len(outcomes) == 1:
        text = str(outcomes[0])
        if final and outcomes[0].result == "still alive":
            text += _PRESS_K
    else:
        text = f"{outcomes[0].signal} → {len(outcomes)} processes: " + "; ".join(_groups(outcomes, final))
    return text, bad


_PRESS_K = " — press K to send SIGKILL"
_NEEDS_YOU = ("still alive", "permission denied", "refused")


def _groups(outcomes: Iterable[Outcome], final: bool) -> list[str]:
    by_result: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_result.setdefault(o.result, []).append(o)
    named = [*_NEEDS_YOU, *(r for r in _RESULT_NAMES if r not in _NEEDS_YOU)]
    order = [r for r in named if r in by_result] + [r for r in by_result if r not in named]
    parts = []
    for result in order:
        group = by_result[result]
        pids = [str(o.target.pid) for o in group]
        if result not in _NEEDS_YOU and len(pids) > QUIET_PIDS:
            shown = f"{len(pids)} ({', '.join(pids[:QUIET_PIDS])}, …)"
        else:
            shown = ", ".join(pids)
        part = f"{_RESULT_NAMES.get(result, result)}: {shown}"
        if result == "refused":  # why matters: gputui itself, a reused PID, ...
            part += " (" + "; ".join(dict.fromkeys(o.detail for o in group if o.detail)) + ")"
        if result == "still alive" and final:
            part += _PRESS_K
        parts.append(part)
    return parts
