"""Dips of one job, grouped: eight ranks of a torchrun job waiting on the same all-reduce dip together,
and the Events pane shows that as one row ("GPU 0-7, torchrun pid 4242", with an en dash), not eight.

A *job* is a set of GPU processes (a ProcessRow with an NVML kind and a known GPU, what the dip detector
counts as a job on a GPU) tied together by their parents, as far as the snapshot knows them (each row's
ppid; the host processes when the tree view asked for them; nothing here reads /proc):

- processes with the same parent (torchrun's, mpirun's or a shell script's ranks), and
- a process and its GPU-process ancestor (a Python launcher that is rank 0 and spawned the others).

Pid 0 and 1 are no launcher: every orphan is init's child. Two jobs started by one parent (two
`python x.py &` from one shell) read as one job: the snapshot cannot tell them apart.

Two dips belong together when their GPUs are in the same job and they overlap in time, or start within one
sample interval of each other; a group is a connected set of such dips. A process started after a dip
began was not the job that dipped, so a dip from before the current job keeps a row of its own.

Pure: no Textual, no Rich; `Jobs` is built from one Snapshot, `group_dips` takes any dips.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gputui import cells
from gputui.analyze.dip_causes import Cause, combine, merge
from gputui.analyze.dips import LONG_DIP_S, Dip
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.ui.widgets.command_line import _OPTIONS_WITH_VALUE, _PYTHON, shorten  # one reading of argv
from gputui.units import printable

LABEL_CELLS = 20  # the launcher's name in the job label; its pid follows
JOB_CELLS = LABEL_CELLS + 12  # the whole label: name, " pid ", and a pid of up to seven digits
RANGE = "\N{EN DASH}"  # 0-7 as typography writes a range: not a minus, not a hyphen in a name
GPUS_CELLS = 32  # the GPU list (0-7, "0,2,5"): room for any sensible count, bounded for a huge box
MAX_DEPTH = 64  # ancestors walked per process: a ppid loop (pid reuse) or a deep tree ends here
CLOCK_SLACK_S = 1.0  # psutil's create time and the sample clock can disagree by about this much


@dataclass(frozen=True, slots=True)
class Job:
    """GPU processes that share a launcher. `launcher` is their nearest common ancestor (None when the
    known parents do not meet); `label` is printable and at most JOB_CELLS cells."""

    key: int  # the smallest pid in the job: stable while the job runs
    launcher: int | None
    label: str
    gpus: frozenset[int]
    pids: frozenset[int]


@dataclass(frozen=True, slots=True)
class DipGroup:
    """One row of the Events pane: one dip, or the dips of one job that happened together."""

    dips: tuple[Dip, ...]  # in the order they were given (newest first, from the Events pane)
    job: Job | None  # None for a single dip: its row stays as it was

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted({d.gpu for d in self.dips}))

    @property
    def start(self) -> float:
        return min(d.start for d in self.dips)

    @property
    def end(self) -> float:
        return max(d.end for d in self.dips)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def ongoing(self) -> bool:
        """A dip still running keeps its group open."""
        return any(d.ongoing for d in self.dips)

    @property
    def kind(self) -> str:
        """Of the whole span, so the kind agrees with the duration the row shows."""
        return "long" if self.duration >= LONG_DIP_S else "stall"

    @property
    def deepest(self) -> Dip:
        """The row shows one real dip's baseline and lowest point, not a mix of several GPUs' numbers."""
        return max(self.dips, key=lambda d: (d.depth, -d.gpu))

    def wait_text(self) -> str:
        """The data-loader verdict: the members' own when they agree; otherwise the rank waiting most
        (a starving rank holds every rank of a synchronous job back) and the one waiting least."""
        with_share = [d for d in self.dips if d.wait_share is not None]
        texts = {d.wait_text() for d in with_share}
        if len(texts) <= 1:
            return texts.pop() if texts else ""
        most = max(with_share, key=lambda d: (d.wait_share or 0.0, -d.gpu))
        least = min(with_share, key=lambda d: (d.wait_share or 0.0, d.gpu))
        low = round(100 * (least.wait_share or 0.0))
        return f"{most.wait_text()} on GPU {most.gpu} ({low}% on GPU {least.gpu})"

    def explanation(self, extra: Iterable[Cause] = ()) -> str:
        """Everything its dips saw, in one line; `extra`: what only the caller knows (a profile)."""
        seen: dict[str, Cause] = {}
        merge(seen, (c for d in self.dips for c in d.causes))  # the host's CPUs once, at their peak
        return combine((*seen.values(), *extra), self.wait_text())


def compact_gpus(gpus: Iterable[int]) -> str:
    """`0-7` (RANGE, not a hyphen) for a run of three or more, `0,2,5` otherwise, mixed as needed
    (`0-3,6,7`); bounded."""
    ordered = sorted(set(gpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ordered[i]}{RANGE}{ordered[j]}")
        else:
            parts.extend(str(g) for g in ordered[i : j + 1])
        i = j + 1
    return cells.cut(",".join(parts), GPUS_CELLS)


def short_name(command: str | None, name: str | None) -> str:
    """The launcher as a person names it: `torchrun`, `mpirun`, `python launch.py`, `python -m
    torch.distributed.run`; printable and at most LABEL_CELLS cells."""
    words = [w for w in shorten(command or "").split(" ") if w]
    if not words:
        return cells.cut(printable(name or ""), LABEL_CELLS)
    short = words[:1]
    if _PYTHON.fullmatch(words[0]):  # the interpreter alone says nothing: add its script or module
        rest = words[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[2:] if rest[0] in _OPTIONS_WITH_VALUE else rest[1:]
        short += rest[:2] if rest[:1] == ["-m"] else rest[:1]
    return cells.cut(printable(" ".join(short)), LABEL_CELLS)


class Jobs:
    """The jobs among one snapshot's GPU processes."""

    def __init__(self, snap: Snapshot) -> None:
        self._on_gpu: dict[int, list[ProcessRow]] = {}
        for p in snap.processes:
            if p.kinds and p.gpu is not None:
                self._on_gpu.setdefault(p.gpu, []).append(p)
        self.rows = [p for rows in self._on_gpu.values() for p in rows]
        known: dict[int, ProcessRow | HostProcess] = {h.pid: h for h in snap.host_processes}
        known.update({p.pid: p for p in snap.processes})  # a GPU process is known by its own row
        self._known = known
        gpu_pids = {p.pid for p in self.rows}
        chains = {pid: self._chain(pid) for pid in gpu_pids}
        parent = {pid: pid for pid in gpu_pids}

        def root(pid: int) -> int:
            while parent[pid] != pid:
                parent[pid] = parent[parent[pid]]
                pid = parent[pid]
            return pid

        def union(a: int, b: int) -> None:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        by_ppid: dict[int, int] = {}
        for pid in sorted(gpu_pids):
            chain = chains[pid]
            if len(chain) > 1:  # siblings: the same launcher
                union(pid, by_ppid.setdefault(chain[1], pid))
            for ancestor in chain[1:]:  # a launcher that is on a GPU itself
                if ancestor in gpu_pids:
                    union(pid, ancestor)
        members: dict[int, set[int]] = {}
        for pid in gpu_pids:
            members.setdefault(root(pid), set()).add(pid)
        self.jobs: dict[int, Job] = {}  # by pid of every member
        for pids in members.values():
            gpus = frozenset(p.gpu for p in self.rows if p.pid in pids and p.gpu is not None)
            launcher = _common_ancestor([chains[p] for p in sorted(pids)])
            job = Job(min(pids), launcher, self._label(launcher), gpus, frozenset(pids))
            for pid in pids:
                self.jobs[pid] = job

    def _chain(self, pid: int) -> list[int]:
        """`pid`, its parent, its grandparent... as far as the snapshot knows, stopping before init."""
        chain = [pid]
        while len(chain) < MAX_DEPTH:
            node = self._known.get(chain[-1])
            ppid = node.ppid if node is not None else None
            if ppid is None or ppid <= 1 or ppid in chain:
                break
            chain.append(ppid)
        return chain

    def _label(self, launcher: int | None) -> str:
        if launcher is None:
            return "no common parent"
        node = self._known.get(launcher)
        name = short_name(node.command, node.name) if node is not None else ""
        return cells.cut(f"{name} pid {launcher}" if name else f"pid {launcher}", JOB_CELLS)

    def of(self, gpu: int, at: float) -> Job | None:
        """The job on `gpu` that was already running at `at`; of several, the one on the most GPUs (a
        stray process beside the job's rank does not hide the job)."""
        jobs = {
            self.jobs[p.pid]
            for p in self._on_gpu.get(gpu, ())
            if _started_by(p.create_time, at) and p.pid in self.jobs
        }
        if not jobs:
            return None
        return max(jobs, key=lambda j: (len(j.gpus), -j.key))


def _started_by(create_time: float | None, at: float) -> bool:
    if create_time is None or not math.isfinite(create_time):
        return True  # unknown: the process is assumed to have been there
    return create_time <= at + CLOCK_SLACK_S


def _common_ancestor(chains: Sequence[list[int]]) -> int | None:
    """The first pid of the first chain that every chain holds (a chain starts with the process itself)."""
    if not chains:
        return None
    rest = [set(c) for c in chains[1:]]
    for pid in chains[0]:
        if all(pid in c for c in rest):
            return pid
    return None


def sample_interval(times: Sequence[float], default: float = 1.0) -> float:
    """The median gap of the last samples: the sampling interval, whatever the app was started with."""
    recent = list(itertools.islice(reversed(times), 21))[::-1]  # the newest, without copying an hour
    gaps = [b - a for a, b in itertools.pairwise(recent) if b > a and math.isfinite(b - a)]
    return statistics.median(gaps) if gaps else default


def group_dips(dips: Sequence[Dip], job_of: Callable[[Dip], Job | None], slack: float) -> list[DipGroup]:
    """The rows of the Events pane, in the order of each group's first dip in `dips` (newest first in,
    newest first out). Dips of one job join when they overlap in time or start within `slack` seconds
    of each other; a dip with no job (no process on its GPU any more, or a job started after it) and a
    job's lone dip are groups of one with no job."""
    jobs: dict[int, list[tuple[int, Dip]]] = {}
    singles: list[tuple[int, ...]] = []
    job_by_key: dict[int, Job] = {}
    for n, d in enumerate(dips):
        job = job_of(d)
        if job is None:
            singles.append((n,))
            continue
        job_by_key[job.key] = job
        jobs.setdefault(job.key, []).append((n, d))
    found: list[tuple[tuple[int, ...], Job | None]] = [(s, None) for s in singles]
    for key, items in jobs.items():
        items.sort(key=lambda item: (item[1].start, item[0]))
        current: list[int] = []
        reach = last_start = -math.inf
        for n, d in items:
            # Sorted by start, a dip touches the group so far iff it starts before the group's latest end
            # (half-open: the first sample back is not in a dip) or within `slack` of its latest start.
            if current and (d.start < reach or d.start - last_start <= slack):
                current.append(n)
                reach = max(reach, d.end)
            else:
                if current:
                    found.append((tuple(current), job_by_key[key]))
                current, reach = [n], d.end
            last_start = d.start
        if current:
            found.append((tuple(current), job_by_key[key]))
    groups = []
    for indices, job in sorted(found, key=lambda f: min(f[0])):
        ordered = sorted(indices)
        groups.append(DipGroup(tuple(dips[n] for n in ordered), job if len(ordered) > 1 else None))
    return groups
