"""The process table's columns: each one says its header, width, alignment, sort key, and how it draws
its cell for a process (or a host process in the tree) and for a job (`J`). A new column is one entry in
COLUMNS; process_rows builds a row by asking every column for its cell.

No widgets here: cells are Rich `Text` (never markup: a command line may contain "[/]")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Final, Literal, TypeAlias

from rich.console import JustifyMethod
from rich.style import Style
from rich.text import Text

from gputui.analyze.classify import OK, SUSPICIOUS, estimated
from gputui.model import Category, HostProcess, Owner, ProcessRow
from gputui.ui.widgets.canvas import PLAIN
from gputui.ui.widgets.command_line import shorten
from gputui.units import NA, fmt_bytes, fmt_duration, printable

Proc: TypeAlias = ProcessRow | HostProcess
ColumnKey = Literal[
    "gpu",
    "pid",
    "user",
    "kinds",
    "gpu_mem",
    "sm",
    "bw",
    "cpu",
    "rss",
    "time",
    "category",
    "state",
    "job",
    "command",
]
# The palette's styles a row may use (app.py hands them over from the theme).
StyleName = Literal["dim", "error", "warning"]
RowStyles: TypeAlias = Mapping[str, Style]  # by StyleName

_BAD_STATES: Final[dict[str, StyleName]] = {
    "zombie": "error",
    "disk-sleep": "warning",
    "stopped": "warning",
    "tracing-stop": "warning",
}
_CATEGORY_STYLES: Final[dict[Category, StyleName]] = {
    "defunct": "error",
    "orphan": "error",
    "stuck": "error",
    "unseen": "warning",
    "nvml-only": "warning",
    "no-permission": "dim",
    "worker": "dim",
}
NO_JOB = "no job"


def owner_of(p: Proc) -> Owner | None:
    return getattr(p, "owner", None)


def owner_label(p: Proc) -> str:
    owner = owner_of(p)
    return owner.label if owner is not None else ""


def pct(v: int | None) -> str:
    return f"{v}%" if v is not None else NA


def summed(values: list[float | None]) -> float | None:
    """The sum, or None when a value is unknown (a first sample's CPU%): a partial sum would read low."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def gpu_text(p: ProcessRow) -> str:
    """Its GPU, and on a MIG GPU its GPU instance: `0:1` (as the fleet writes it)."""
    if p.gpu is None:
        return "?"
    return f"{p.gpu}:{p.gpu_instance}" if p.gpu_instance is not None else str(p.gpu)


FORECAST_BADGE_S = 3600.0  # a GPU full within the hour earns its process a badge


def forecast_badge(p: Proc) -> str:
    """`full in ~14 min · `: its memory grows and its GPU will be full soon; `hung · ` when it looks hung."""
    if getattr(p, "hung", None):
        return "hung · "
    full_in = getattr(p, "full_in", None)
    if full_in is not None and full_in < FORECAST_BADGE_S:
        return f"full in ~{fmt_duration(full_in)} · "
    return ""


@dataclass(frozen=True)
class Workers:
    """What a rank's row says of its workers."""

    pids: tuple[int, ...]
    folded: bool
    cpu: float | None  # the rank's CPU% and RSS with its folded workers' summed in
    rss: float | None

    @property
    def mark(self) -> str:
        return f"{'+' if self.folded else '-'}{len(self.pids)} "


class CellMemo:
    """The cells (Rich Text) and shortened command lines of this build and the last, by what they show.
    A tick changes a few numbers of a row: its other cells are the same objects as the last build's
    (never changed once made: tables only read them). Two builds at most, as RowCache: no cap to grow to.
    """

    def __init__(self) -> None:
        self.last: dict[tuple[str, Style | str, JustifyMethod | None], Text] = {}
        self.now: dict[tuple[str, Style | str, JustifyMethod | None], Text] = {}
        self.commands_last: dict[str, str] = {}
        self.commands: dict[str, str] = {}

    def text(self, text: str, style: Style | str, justify: JustifyMethod | None) -> Text:
        """A column's cell; justify None: a command line's (no justify, no ellipsis of its own)."""
        key = (text, style, justify)
        cell = self.now.get(key)
        if cell is None:
            cell = self.last.get(key)
            if cell is None:
                if justify is None:
                    cell = Text(text, style=style, no_wrap=True)
                else:
                    cell = Text(text, style=style, justify=justify, no_wrap=True, overflow="ellipsis")
            self.now[key] = cell
        return cell

    def shorten(self, command: str) -> str:
        short = self.commands.get(command)
        if short is None:
            short = self.commands_last.get(command)
            if short is None:
                short = shorten(command)
            self.commands[command] = short
        return short

    def turn(self) -> None:
        self.last, self.now = self.now, {}
        self.commands_last, self.commands = self.commands, {}


@dataclass(frozen=True)
class ProcessCells:
    """What the cells of one process's row are drawn from. `share`: the part of its GPU's unaccounted
    memory it likely holds (an estimate), if any; `branch`: the tree's lines before the command; `memo`:
    the cells of the last builds, reused (see CellMemo)."""

    p: Proc
    now: float
    styles: RowStyles
    has_agent: bool
    with_reason: bool
    workers: Workers | None = None
    branch: str = ""
    share: int | None = None
    memo: CellMemo = field(default_factory=CellMemo, compare=False, repr=False)
    # Read by most cells of a row, and every one by the command's: set once here (a cached_property takes
    # a lock per read in 3.11, ~1 us; a row reads these several times, and a tick builds ~30 rows).
    invisible: bool = field(init=False, compare=False, repr=False)
    dim: Style = field(init=False, compare=False, repr=False)
    folded: bool = field(init=False, compare=False, repr=False)
    lead: str = field(init=False, compare=False, repr=False)  # fold mark, tree branches: stay on a scroll
    command: str | None = field(init=False, compare=False, repr=False)
    before: str = field(init=False, compare=False, repr=False)  # a badge, or the reason (zombies view)

    def __post_init__(self) -> None:
        p, workers = self.p, self.workers
        invisible = isinstance(p, ProcessRow) and not p.visible
        styles = self.styles
        reason = getattr(p, "reason", "")
        before = printable(f"{reason} · " if self.with_reason and reason else forecast_badge(p))
        if invisible:
            command: str | None = "(not visible here: another PID namespace, or gone)"
        else:
            command = self.memo.shorten(p.command) if p.command else p.command
        set_ = object.__setattr__
        set_(self, "invisible", invisible)
        set_(self, "dim", styles["dim"] if "dim" in styles else Style(dim=True))
        set_(self, "folded", workers is not None and workers.folded)
        set_(self, "lead", self.branch + (workers.mark if workers is not None else ""))
        set_(self, "command", command)
        set_(self, "before", before)

    def style(self, name: StyleName | Literal[""]) -> Style:
        return self.styles.get(name, PLAIN) if name else PLAIN

    @property
    def command_at(self) -> int:
        return len(self.lead) + len(self.before) if self.command and not self.invisible else -1

    def cell(self, text: str, column: ColumnKey, style: Style | str = "") -> Text:
        return self.memo.text(text, self.dim if self.invisible else style, BY_KEY[column].justify)


@dataclass(frozen=True)
class JobCells:
    """A job's processes (`J`: one row per container, pod or SLURM job), summed: a process on two GPUs
    counts its host numbers once."""

    members: tuple[ProcessRow, ...]
    styles: RowStyles
    now: float

    @cached_property
    def owner(self) -> Owner | None:
        return self.members[0].owner

    @cached_property
    def once(self) -> list[ProcessRow]:  # host numbers once per process
        return list({p.pid: p for p in self.members}.values())

    @cached_property
    def gpus(self) -> list[int]:
        return sorted({p.gpu for p in self.members if p.gpu is not None})

    @cached_property
    def started(self) -> float | None:
        return min((p.create_time for p in self.once if p.create_time), default=None)

    @cached_property
    def suspicious(self) -> list[str]:
        return sorted({p.category for p in self.members if p.category in SUSPICIOUS})

    def value(self, column: Column) -> Any:
        """What the row sorts by in `column`; None: unknown (sorts last)."""
        return column.job_value(self) if column.job_value is not None else None

    def cell(self, text: str, column: ColumnKey, style: Style | str = "") -> Text:
        return Text(text, style=style, justify=BY_KEY[column].justify, no_wrap=True, overflow="ellipsis")


# -- the cells of a process's row, column by column ------------------------------------------------------


def _on_gpu(
    listed: Callable[[ProcessRow, ProcessCells], Text], column: ColumnKey
) -> Callable[[ProcessCells], Text]:
    """An NVML column: `listed` for a process in NVML's lists; `-` for a device holder NVML says nothing
    about; blank for a host process (the tree's parents and children)."""

    def draw(c: ProcessCells) -> Text:
        p = c.p
        if not isinstance(p, ProcessRow):
            return c.cell("", column)
        return listed(p, c) if p.kinds else c.cell("-", column)

    return draw


def _gpu_cell(c: ProcessCells) -> Text:
    p = c.p
    return c.cell(gpu_text(p), "gpu") if isinstance(p, ProcessRow) else c.cell("-", "gpu", c.dim)


def _memory_cell(c: ProcessCells) -> Text:
    p = c.p
    if not isinstance(p, ProcessRow):
        return c.cell("", "gpu_mem")
    if p.kinds:
        growing = p.full_in is not None  # ↑: its memory grows toward the GPU's limit (see the badge)
        return c.cell(
            fmt_bytes(p.used_memory) + ("↑" if growing else ""),
            "gpu_mem",
            c.style("warning") if growing else "",
        )
    if c.share is not None:  # `~4.8 GiB?`: what it likely holds of its GPU's unaccounted memory
        return c.cell(estimated(c.share), "gpu_mem", c.style("warning"))
    return c.cell("-", "gpu_mem")


def _cpu_cell(c: ProcessCells) -> Text:
    cpu = c.workers.cpu if c.workers is not None and c.folded else c.p.cpu_percent
    return c.cell(f"{cpu:.1f}" if cpu is not None else NA, "cpu")


def _rss_cell(c: ProcessCells) -> Text:
    return c.cell(fmt_bytes(c.workers.rss if c.workers is not None and c.folded else c.p.rss), "rss")


def _time_cell(c: ProcessCells) -> Text:
    return c.cell(fmt_duration(c.now - c.p.create_time if c.p.create_time else None), "time")


def _category_cell(c: ProcessCells) -> Text:
    p = c.p
    if not isinstance(p, ProcessRow):
        return c.cell("", "category")
    # ok is the usual: blank, the others stand out
    return c.cell(
        "" if p.category == OK else p.category, "category", c.style(_CATEGORY_STYLES.get(p.category, ""))
    )


def _state_style(state: str | None) -> StyleName | Literal[""]:
    return _BAD_STATES.get(state or "", "")


def _command_cell(c: ProcessCells) -> Text:
    # Text, never markup: a command line may contain "[/]" or escape sequences.
    return c.memo.text(
        c.lead + c.before + printable(c.command or NA),
        c.dim if c.invisible or not isinstance(c.p, ProcessRow) else "",
        None,
    )


# -- the cells of a job's row ------------------------------------------------------------------------------


def _job_command(j: JobCells) -> Text:
    owner, n = j.owner, len(j.once)
    name = f"{owner.name}: " if owner and owner.name else ""
    return Text(
        printable(  # JOB says whose: the name and what it runs here
            f"{name}{n} process{'es' if n > 1 else ''}"
            + (f" on GPU {_compact_gpus(j.gpus)}" if j.gpus else "")
            + ("" if owner else " with no container, pod or SLURM job")
        ),
        no_wrap=True,
    )


def _compact_gpus(gpus: list[int]) -> str:
    # Imported here: the jobs view (J) is the only one that needs dip_groups, ~0.1 MiB of every start.
    from gputui.ui.widgets.dip_groups import compact_gpus

    return compact_gpus(gpus)


def _job_user(j: JobCells) -> str | None:
    owner = j.owner
    return (
        owner.user if owner and owner.user else ",".join(sorted({p.user for p in j.once if p.user}))
    ) or None


def _job_memory(j: JobCells) -> int | None:
    memory = [p.used_memory for p in j.members if p.used_memory is not None]
    return sum(memory) if memory else None


def _job_sm(j: JobCells) -> int | None:
    sm = [p.sm_util for p in j.members if p.sm_util is not None]
    return round(sum(sm) / len(sm)) if sm else None


def _job_cpu(j: JobCells) -> float | None:
    return summed([p.cpu_percent for p in j.once])


def _job_rss(j: JobCells) -> float | None:
    return summed([p.rss for p in j.once])


def _job_label(j: JobCells) -> str:
    return replace(j.owner, step=None).label if j.owner else NO_JOB  # the job, whatever its steps


def _blank(key: ColumnKey) -> Callable[[JobCells], Text]:
    return lambda j: j.cell("", key)


def _gpu_attr(name: str) -> Callable[[Proc], Any]:
    return lambda p: getattr(p, name, None)


@dataclass(frozen=True)
class Column:
    key: ColumnKey
    label: str
    width: int
    sort: Callable[[Proc], Any]
    cell: Callable[[ProcessCells], Text]  # its cell in a process's row
    job_cell: Callable[[JobCells], Text]  # its cell in a job's row
    job_value: Callable[[JobCells], Any] | None = None  # what a job's row sorts by; None: nothing
    descending: bool = False  # the natural direction: biggest first for sizes and loads
    justify: JustifyMethod = "right"
    meaning: str = ""  # for the user deciding whether to hide it (`c`); PID and COMMAND always show


COLUMNS: tuple[Column, ...] = (
    Column(
        "gpu",
        "GPU",
        4,
        _gpu_attr("gpu"),
        _gpu_cell,
        lambda j: j.cell(_compact_gpus(j.gpus), "gpu"),
        lambda j: j.gpus[0] if j.gpus else None,
        meaning="GPU index",
    ),
    Column(
        "pid",
        "PID",
        7,
        lambda p: p.pid,
        # ◆: the process runs the gputui agent (`a` opens its allocator panel).
        lambda c: c.cell(("◆" if c.has_agent else "") + str(c.p.pid), "pid"),
        lambda j: j.cell(f"{len(j.once)}p", "pid"),
        lambda j: len(j.once),
    ),
    Column(
        "user",
        "USER",
        10,
        lambda p: p.user or "",
        lambda c: c.cell(c.p.user or ("-" if c.invisible else NA), "user"),
        lambda j: j.cell(_job_user(j) or NA, "user"),
        _job_user,
        justify="left",
        meaning="the process's user",
    ),
    Column(
        "kinds",
        "T",
        2,
        _gpu_attr("kinds"),
        _on_gpu(lambda p, c: c.cell(p.kinds, "kinds"), "kinds"),
        _blank("kinds"),
        justify="left",
        meaning="C compute, G graphics (NVML's lists)",
    ),
    Column(
        "gpu_mem",
        "GPU MEM",
        9,
        _gpu_attr("used_memory"),
        _memory_cell,
        lambda j: j.cell(fmt_bytes(_job_memory(j)), "gpu_mem"),
        _job_memory,
        descending=True,
        meaning="GPU memory the process uses (~4.8 GiB?: an estimate)",
    ),
    Column(
        "sm",
        "SM%",
        4,
        _gpu_attr("sm_util"),
        _on_gpu(lambda p, c: c.cell(pct(p.sm_util), "sm"), "sm"),
        lambda j: j.cell(pct(_job_sm(j)), "sm"),
        _job_sm,
        descending=True,
        meaning="SM utilization: share of time a kernel ran",
    ),
    Column(
        "bw",
        "BW%",
        4,
        _gpu_attr("mem_util"),
        _on_gpu(lambda p, c: c.cell(pct(p.mem_util), "bw"), "bw"),
        _blank("bw"),
        descending=True,
        meaning="memory bandwidth utilization",
    ),
    Column(
        "cpu",
        "CPU%",
        5,
        lambda p: p.cpu_percent,
        _cpu_cell,
        lambda j: j.cell(f"{cpu:.1f}" if (cpu := _job_cpu(j)) is not None else NA, "cpu"),
        _job_cpu,
        descending=True,
        meaning="CPU, % of one core",
    ),
    Column(
        "rss",
        "RSS",
        9,
        lambda p: p.rss,
        _rss_cell,
        lambda j: j.cell(fmt_bytes(_job_rss(j)), "rss"),
        _job_rss,
        descending=True,
        meaning="resident host memory",
    ),
    Column(
        "time",
        "TIME",
        6,
        lambda p: p.create_time,  # oldest start first: longest running first
        _time_cell,
        lambda j: j.cell(fmt_duration(j.now - j.started) if j.started else NA, "time"),
        lambda j: j.started,
        meaning="how long it has been running",
    ),
    Column(
        "category",
        "CLASS",
        11,
        lambda p: getattr(p, "category", ""),
        _category_cell,
        # nothing for ok: it is the usual
        lambda j: j.cell(
            ",".join(j.suspicious), "category", j.styles.get("error", PLAIN) if j.suspicious else ""
        ),
        lambda j: ",".join(j.suspicious) or None,
        justify="left",
        meaning="defunct, orphan, unseen ... (blank: ok; z explains)",
    ),
    Column(
        "state",
        "STATE",
        8,
        lambda p: p.state or "",
        lambda c: c.cell(c.p.state or NA, "state", c.style(_state_style(c.p.state))),
        _blank("state"),
        justify="left",
        meaning="running, sleeping, zombie, stopped, disk wait",
    ),
    # Shown only when some process has an owner (a container, a pod, a SLURM job): see ProcessTable.
    Column(
        "job",
        "JOB",
        16,
        owner_label,
        lambda c: c.cell(owner_label(c.p), "job"),
        lambda j: j.cell(_job_label(j), "job"),
        _job_label,
        justify="left",
        meaning="its container, pod or SLURM job (when any process has one)",
    ),
    Column(
        "command",
        "COMMAND",
        400,
        lambda p: p.command or "",
        _command_cell,
        _job_command,
        justify="left",
    ),
)
COLUMN_KEYS: tuple[ColumnKey, ...] = tuple(c.key for c in COLUMNS)
BY_KEY: dict[str, Column] = {c.key: c for c in COLUMNS}
