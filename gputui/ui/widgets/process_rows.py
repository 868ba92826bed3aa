"""The process table's rows, built from a Snapshot: filter, sort, tree, workers folded under their rank.
No widgets here: the cache of built rows belongs to the table that shows them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from rich.style import Style
from rich.text import Text

from gputui.analyze.classify import SUSPICIOUS, UNACCOUNTED_MIN, WORKER, Leftover, leftovers
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.ui.widgets.canvas import PLAIN
from gputui.ui.widgets.process_columns import (
    BY_KEY,
    COLUMN_KEYS,
    COLUMNS,
    NO_JOB,
    CellMemo,
    Column,
    ColumnKey,
    JobCells,
    ProcessCells,
    RowStyles,
    Workers,
    forecast_badge,
    owner_of,
    summed,
)
from gputui.units import NA, fmt_bytes, fmt_duration, printable

# Re-exported from process_columns and classify: the table, the app and the tests read them here.
__all__ = ["BY_KEY", "COLUMNS", "COLUMN_KEYS", "NO_JOB", "UNACCOUNTED_MIN", "Column", "forecast_badge"]

# What a row stands for.
RowKind = Literal["process", "job", "unaccounted", "agent only"]
PROCESS: Final = "process"
JOB: Final = "job"
UNACCOUNTED: Final = "unaccounted"
AGENT_ONLY: Final = "agent only"
NO_GPU = "no-gpu"  # the class of a process that runs the gputui agent and holds no GPU


@dataclass(frozen=True)
class TableRow:
    key: str
    pid: int
    create_time: float | None
    process: ProcessRow | HostProcess | None  # None: not a process (a GPU's unaccounted memory)
    cells: tuple[Text, ...]
    workers: tuple[int, ...] = ()  # the pids of this rank's workers, folded into it or shown below it
    folded: bool = False  # its workers are folded into this row: its CPU% and RSS are theirs summed in
    rank: str = ""  # a worker shown below its rank: the rank's row key
    lead: int = 0  # characters at the start of COMMAND that stay when it scrolls (fold mark, tree branches)
    members: tuple[ProcessRow, ...] = ()  # a job's row (`J`): its processes, which `k` signals
    kind: RowKind = PROCESS
    # Where the command line starts in the last cell's text (after the lead, a badge or a reason), for
    # the table to squeeze it (see command_fit); -1: the last cell is no command line.
    command_at: int = -1
    leftover: Leftover | None = None  # an unaccounted row's memory and its likely holders


@dataclass(frozen=True)
class Folding:
    """Which ranks show their workers: none by default (a rank's row says `+3`), all, or some by row key."""

    expand_all: bool = False
    expanded: frozenset[str] = frozenset()

    def shows_workers_of(self, rank_key: str) -> bool:
        return self.expand_all or rank_key in self.expanded


@dataclass(frozen=True)
class View:
    """What the user chose to see."""

    sort: ColumnKey = "gpu"
    reverse: bool = False
    filter: str = ""
    gpu: int | None = None
    tree: bool = False
    zombies: bool = False  # only the suspicious processes, each with its reason
    jobs: bool = False  # one row per job (container, pod, SLURM job), its processes summed


def row_key(p: ProcessRow | HostProcess) -> str:
    gpu = getattr(p, "gpu", "h")
    return f"{gpu}/{p.pid}/{p.create_time or 0:.2f}"


def matches(p: ProcessRow | HostProcess, needle: str) -> bool:
    """A substring of the pid, user, command or job; `job:81234` and `pod:trainer-` look at the owner only
    (`job:` any job's id or name, `pod:` a pod's name, namespace or UID)."""
    if not needle:
        return True
    needle = needle.lower()
    owner = owner_of(p)
    kind, _, rest = needle.partition(":")
    if rest and kind in ("job", "pod"):
        if owner is None or (kind == "pod" and owner.kind != "kubernetes"):
            return False
        fields = (owner.id, owner.name, owner.namespace) if kind == "pod" else (owner.id, owner.name)
        return any(rest in f.lower() for f in fields if f)
    # An unknown user is drawn as n/a, and a user who sees n/a can type it.
    haystack = (str(p.pid), p.user or NA, p.command or "", owner.label if owner else "")
    return any(needle in s.lower() for s in haystack)


def _sort_key(column: Column) -> Callable[[ProcessRow | HostProcess], tuple[Any, ...]]:
    def key(p: ProcessRow | HostProcess) -> tuple[Any, ...]:
        value = column.sort(p)
        # Unknown values sort last in either direction; ties keep a stable, meaningful order.
        return (value is None, value if value is not None else 0, getattr(p, "gpu", -1), p.pid)

    return key


def _ordered(
    procs: list[Any], view: View, totals: Callable[[Any], tuple[float | None, float | None]] | None = None
) -> list[Any]:
    """`procs` sorted by the view's column. `totals`: a rank's CPU% and RSS with its folded workers',
    which is what its row shows and so what it sorts by."""
    column = BY_KEY.get(view.sort, BY_KEY["gpu"])
    if totals is not None and column.key in ("cpu", "rss"):
        index = 0 if column.key == "cpu" else 1
        column = replace(column, sort=lambda p: totals(p)[index])
    reverse = column.descending != view.reverse
    known = [p for p in procs if column.sort(p) is not None]
    unknown = [p for p in procs if column.sort(p) is None]
    return sorted(known, key=_sort_key(column), reverse=reverse) + sorted(unknown, key=_sort_key(column))


def build_rows(
    snap: Snapshot,
    view: View,
    styles: RowStyles | None = None,
    cache: RowCache | None = None,
    folding: Folding | None = None,
) -> list[TableRow]:
    """The rows to show, in order. `cache`: the rows of the last build, reused where nothing they show
    changed (the table that shows them owns it; without one every row is built anew)."""
    styles = styles or {}
    cache = cache if cache is not None else RowCache()
    folding = folding or Folding()
    procs = [
        p
        for p in snap.processes
        if (view.gpu is None or p.gpu == view.gpu)
        and matches(p, view.filter)
        and (not view.zombies or p.category in SUSPICIOUS)
    ]
    if view.jobs:
        rows = _job_rows(procs, view, styles, snap.time)
        cache.turn()
        return rows
    workers = workers_by_rank(procs)
    make = _RowMaker(snap, view, styles, cache, workers, folding)
    if view.tree:
        folded = {id(w) for rank, ws in workers.items() if not folding.shows_workers_of(rank) for w in ws}
        rows = _tree_rows([p for p in procs if id(p) not in folded], snap, view, make)
    else:
        rows = _flat_rows(procs, view, make, workers, folding)
    if not view.zombies and view.gpu is None:
        rows += _agent_rows(snap, view, make)
    if not view.filter:
        rows += _unaccounted_rows(make.leftovers, view, styles)
    cache.turn()
    return rows


def workers_by_rank(procs: list[ProcessRow]) -> dict[str, list[ProcessRow]]:
    """The workers (class `worker`: a device holder NVML does not list, child of a GPU process) of each
    shown rank, by the rank's row key. A worker's rank is its nearest ancestor among `procs` that is not a
    worker, on the worker's GPU when the rank holds several. Orphans and defunct processes are not of
    class worker: they are never folded away. A worker whose rank is not shown (filtered out) is its own
    row."""
    ranks: dict[int, list[ProcessRow]] = {}
    worker_parent: dict[int, int | None] = {}
    for p in procs:
        if p.category == WORKER:
            worker_parent[p.pid] = p.ppid
        else:
            ranks.setdefault(p.pid, []).append(p)
    out: dict[str, list[ProcessRow]] = {}
    for p in procs:
        if p.category != WORKER:
            continue
        ppid, seen = p.ppid, {p.pid}
        while ppid is not None and ppid not in ranks and ppid in worker_parent and ppid not in seen:
            seen.add(ppid)  # a worker's own worker: fold it under the same rank
            ppid = worker_parent[ppid]
        candidates = ranks.get(ppid) if ppid is not None else None
        if candidates:
            rank = next((r for r in candidates if r.gpu == p.gpu), candidates[0])
            out.setdefault(row_key(rank), []).append(p)
    return out


def _flat_rows(
    procs: list[ProcessRow],
    view: View,
    make: _RowMaker,
    workers: dict[str, list[ProcessRow]],
    folding: Folding,
) -> list[TableRow]:
    """Every shown process, sorted; a rank's workers right below it when shown, else folded into it."""
    placed = {id(w) for ws in workers.values() for w in ws}
    rows: list[TableRow] = []
    for p in _ordered([p for p in procs if id(p) not in placed], view, make.totals):
        rows.append(make.row(p))
        key = row_key(p)
        if key in workers and folding.shows_workers_of(key):
            below = _ordered(workers[key], view)
            for i, w in enumerate(below):
                rows.append(make.row(w, "└─ " if i == len(below) - 1 else "├─ ", rank=key))
    return rows


def _job_rows(procs: list[ProcessRow], view: View, styles: RowStyles, now: float) -> list[TableRow]:
    """`J`: one row per job on this machine, its processes' GPUs, GPU memory, CPU and RSS summed (a
    process on two GPUs counts its host numbers once); the processes with no owner are one last row."""
    groups: dict[tuple[str, str], list[ProcessRow]] = {}
    for p in procs:
        key = (p.owner.kind, p.owner.id) if p.owner is not None else ("", "")
        groups.setdefault(key, []).append(p)
    jobs = [JobCells(tuple(members), styles, now) for members in groups.values()]
    column = BY_KEY.get(view.sort, BY_KEY["gpu"])
    made = [(_job_row(job), job.value(column)) for job in jobs]
    known = [r for r in made if r[1] is not None]
    ordered = sorted(known, key=lambda r: r[1], reverse=column.descending != view.reverse)
    ordered += [r for r in made if r[1] is None]
    rows = [row for row, _ in ordered]
    return [r for r in rows if r.key != f"job/{NO_JOB}"] + [r for r in rows if r.key == f"job/{NO_JOB}"]


def _job_row(job: JobCells) -> TableRow:
    owner = job.owner
    cells = tuple(column.job_cell(job) for column in COLUMNS)
    key = f"job/{owner.kind}/{owner.id}" if owner else f"job/{NO_JOB}"
    return TableRow(key, 0, None, None, cells, members=job.members, kind=JOB)


def _unaccounted_rows(found: dict[int, Leftover], view: View, styles: RowStyles) -> list[TableRow]:
    """Per GPU: memory in use that no listed process accounts for, and who likely holds it (see
    classify.Leftover): Enter lists them, `k` offers to signal them."""
    rows = []
    for gpu, left in found.items():
        if view.gpu not in (None, gpu):
            continue
        style = styles.get("warning", PLAIN)
        cells = [Text("", no_wrap=True) for _ in COLUMNS]
        cells[COLUMN_KEYS.index("gpu")] = Text(str(gpu), justify="right")
        cells[COLUMN_KEYS.index("pid")] = Text("-", justify="right")
        cells[COLUMN_KEYS.index("gpu_mem")] = Text(fmt_bytes(left.memory), style=style, justify="right")
        cells[COLUMN_KEYS.index("category")] = Text(UNACCOUNTED, style=style)
        cells[-1] = Text(printable(unaccounted_text(left)), style=style)
        rows.append(
            TableRow(f"{gpu}/unaccounted", 0, None, None, tuple(cells), kind=UNACCOUNTED, leftover=left)
        )
    return rows


def unaccounted_text(left: Leftover) -> str:
    """What the unaccounted row says: who likely holds the memory, or that nothing here does."""
    if not left.holders:
        return (
            "no listed process accounts for it, and no orphan here holds the GPU: another container's "
            "process, or the driver's"
        )
    pids = ", ".join(str(p.pid) for p in left.holders[:4]) + (", …" if len(left.holders) > 4 else "")
    return f"likely held by {pids} · Enter, k"


def _agent_rows(snap: Snapshot, view: View, make: _RowMaker) -> list[TableRow]:
    """A process that runs the gputui agent but holds no GPU (CPU-only, or CUDA not started yet): a row of
    its own, so that `a` reaches its panel. Described from the host processes when the sampler read it;
    else only its pid is known."""
    on_gpu = {p.pid for p in snap.processes}
    hosts = {h.pid: h for h in snap.host_processes}
    rows = []
    for pid in sorted(set(snap.agents) - on_gpu):
        host = hosts.get(pid)
        if host is None and view.filter and view.filter.lower() not in str(pid):
            continue
        if host is not None and not matches(host, view.filter):
            continue
        rows.append(make.agent_row(pid, host))
    return rows


def _tree_rows(procs: list[ProcessRow], snap: Snapshot, view: View, make: _RowMaker) -> list[TableRow]:
    """GPU processes with their parents above and their descendants below, as an indented forest."""
    nodes: list[ProcessRow | HostProcess] = [*procs, *_related(procs, snap.host_processes)]
    by_pid: dict[int, list[ProcessRow | HostProcess]] = {}
    for n in nodes:
        by_pid.setdefault(n.pid, []).append(n)
    kids: dict[int, list[ProcessRow | HostProcess]] = {}
    roots: list[ProcessRow | HostProcess] = []
    for n in nodes:
        if n.ppid in by_pid and n.ppid != n.pid:
            kids.setdefault(n.ppid, []).append(n)
        else:
            roots.append(n)
    rows: list[TableRow] = []
    seen: set[str] = set()

    def walk(n: ProcessRow | HostProcess, prefix: str, last: bool, depth: int) -> None:
        key = row_key(n)
        if key in seen:
            return
        seen.add(key)
        branch = "" if depth == 0 else ("└─ " if last else "├─ ")
        rows.append(make.row(n, prefix + branch, in_tree=True))
        children = _ordered(kids.get(n.pid, []), view, make.totals)
        child_prefix = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        for i, child in enumerate(children):
            walk(child, child_prefix, i == len(children) - 1, depth + 1)

    for root in _ordered(roots, view, make.totals):
        walk(root, "", True, 0)
    return rows


def _related(procs: list[ProcessRow], hosts: tuple[HostProcess, ...]) -> list[HostProcess]:
    """The host processes that are parents or descendants of the shown GPU processes (the filter and
    the GPU choice apply to the tree too)."""
    shown = {p.pid for p in procs}
    parents = {p.ppid for p in procs}
    by_pid = {h.pid: h for h in hosts}

    def descends(h: HostProcess) -> bool:
        seen: set[int] = set()
        ppid = h.ppid
        while ppid is not None and ppid not in seen:
            if ppid in shown:
                return True
            seen.add(ppid)
            parent = by_pid.get(ppid)
            ppid = parent.ppid if parent is not None else None
        return False

    return [h for h in hosts if h.pid in parents or descends(h)]


class RowCache:
    """The rows of the last build and of this one. Most rows (workers, idle holders) are the same tick
    after tick, and building their cells is most of a refresh; a row not shown in the last build is
    dropped, so the cache holds two builds' rows at most. (A cache with a size cap instead grew for
    hours before its cap: `make soak` read it as a leak.)"""

    def __init__(self) -> None:
        self.last: dict[tuple[object, ...], TableRow] = {}
        self.now: dict[tuple[object, ...], TableRow] = {}
        self.memo = CellMemo()  # the cells themselves, for a row that changed in a few of them

    def get(self, key: tuple[object, ...], make: Callable[[], TableRow]) -> TableRow:
        row = self.now.get(key) or self.last.get(key) or make()
        self.now[key] = row
        return row

    def turn(self) -> None:
        self.last, self.now = self.now, {}
        self.memo.turn()


class _RowMaker:
    """Rows of one build: each from the cache when nothing it shows has changed."""

    def __init__(
        self,
        snap: Snapshot,
        view: View,
        styles: RowStyles,
        cache: RowCache,
        workers: dict[str, list[ProcessRow]],
        folding: Folding,
    ) -> None:
        self.snap, self.view, self.styles, self.cache = snap, view, styles, cache
        self.styles_key = tuple(styles.items())
        self.leftovers = leftovers(snap, UNACCOUNTED_MIN)  # the threshold --once uses too
        # (GPU, pid) -> the share of its GPU's unaccounted memory a likely holder is estimated to hold
        self.shares = {
            (gpu, p.pid): left.share
            for gpu, left in self.leftovers.items()
            if left.share is not None
            for p in left.holders
        }
        self.workers: dict[str, Workers] = {}
        for rank_key, ws in workers.items():
            # Each pid once (a worker that holds two GPUs is two rows, one process); the rank's own
            # values are added in `of`.
            by_pid = {w.pid: w for w in ws}
            self.workers[rank_key] = Workers(
                tuple(by_pid),
                not folding.shows_workers_of(rank_key),
                summed([w.cpu_percent for w in by_pid.values()]),
                summed([w.rss for w in by_pid.values()]),
            )

    def of(self, p: ProcessRow | HostProcess) -> Workers | None:
        """`p`'s workers, with `p`'s own CPU% and RSS summed in when they are folded into its row."""
        ws = self.workers.get(row_key(p)) if isinstance(p, ProcessRow) else None
        if ws is None or not ws.folded:
            return ws
        return replace(ws, cpu=summed([p.cpu_percent, ws.cpu]), rss=summed([p.rss, ws.rss]))

    def totals(self, p: ProcessRow | HostProcess) -> tuple[float | None, float | None]:
        ws = self.of(p)
        return (ws.cpu, ws.rss) if ws is not None and ws.folded else (p.cpu_percent, p.rss)

    def row(
        self, p: ProcessRow | HostProcess, branch: str = "", rank: str = "", in_tree: bool = False
    ) -> TableRow:
        """`branch`: the tree's lines before the command; `rank`: the row key of the rank `p` works for,
        when it is shown below it."""
        now = self.snap.time
        run = fmt_duration(now - p.create_time) if p.create_time else None
        has_agent = p.pid in self.snap.agents
        with_reason = self.view.zombies and not in_tree
        ws = self.of(p)
        share = self.shares.get((p.gpu, p.pid)) if isinstance(p, ProcessRow) and p.gpu is not None else None
        key = (p, run, branch, rank, ws, has_agent, with_reason, self.styles_key, share)
        return self.cache.get(
            key,
            lambda: _make_row(
                ProcessCells(p, now, self.styles, has_agent, with_reason, ws, branch, share, self.cache.memo),
                rank,
            ),
        )

    def agent_row(self, pid: int, host: HostProcess | None) -> TableRow:
        """A process with the gputui agent and no GPU: see _agent_rows."""
        if host is not None:
            made = self.row(host)
            cells = list(made.cells)
            cells[COLUMN_KEYS.index("category")] = Text(NO_GPU, no_wrap=True)
            return replace(made, key=f"agent/{pid}", cells=tuple(cells), kind=AGENT_ONLY)
        dim = self.styles.get("dim", Style(dim=True))
        cells = [Text("", no_wrap=True) for _ in COLUMNS]
        cells[COLUMN_KEYS.index("gpu")] = Text("-", style=dim, justify="right")
        cells[COLUMN_KEYS.index("pid")] = Text(f"◆{pid}", justify="right")
        cells[COLUMN_KEYS.index("category")] = Text(NO_GPU)
        for key in ("user", "cpu", "rss", "time", "state"):
            cells[COLUMN_KEYS.index(key)] = Text(NA, style=dim, justify=BY_KEY[key].justify)
        cells[-1] = Text("runs the gputui agent, holds no GPU (a: its allocator panel)", style=dim)
        return TableRow(f"agent/{pid}", pid, None, None, tuple(cells), kind=AGENT_ONLY)


def _make_row(c: ProcessCells, rank: str) -> TableRow:
    """A process's row: every column draws its cell."""
    p, workers = c.p, c.workers
    cells = tuple(column.cell(c) for column in COLUMNS)
    pids = workers.pids if workers is not None else ()
    return TableRow(
        row_key(p), p.pid, p.create_time, p, cells, pids, c.folded, rank, len(c.lead), command_at=c.command_at
    )
