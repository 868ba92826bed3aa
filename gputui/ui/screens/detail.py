"""Modal screens: help, process detail, GPU chooser, GPU detail.

The GPU detail (`i` in the GPU chooser) lists NVML's utilization beside every GPM metric (SM, occupancy,
tensor pipes, DRAM, fp pipes, PCIe and NVLink bytes; Hopper and newer), each with what it means, `n/a`
for one that failed, the verdicts the doctor draws from them, and each MIG instance's; on a GPU without
GPM it says why there is none (`Snapshot.gpm_note`: DCGM holds the counters, `--gpm off`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from gputui.actions.stacks import is_python, py_spy_dump
from gputui.analyze.classify import Leftover, estimated
from gputui.analyze.dip_causes import gpm_findings, gpm_of, gpm_reading
from gputui.analyze.forecast import GROWTH_MIN, WINDOW_S, MemorySeries, Split, growth_text, rate_text
from gputui.collect.procs.join import MAX_ENVIRON, TRAINING_NAMES, TRAINING_PREFIXES, describe
from gputui.model import (
    GPM_RATES,
    GPM_RATIOS,
    GpmMetrics,
    GpuSample,
    HostProcess,
    Owner,
    ProcessDetail,
    ProcessRow,
)
from gputui.output.oneshot import GPM_LABELS, GPM_MEANINGS, gpm_value
from gputui.ui._textual_compat import DismissOnce
from gputui.ui.styles import tcss
from gputui.ui.widgets import spark
from gputui.units import NA, fmt_bytes, fmt_pct, printable

MODAL_CSS = tcss("Modal")  # every modal screen's (gputui.tcss)


# A modal screen that closes once (see _textual_compat: Textual's dismiss() pops whatever is on top).
Modal = DismissOnce


class HelpScreen(Modal[None]):
    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for key, description in self.keys:
            table.add_row(key, description)
        with VerticalScroll():
            yield Static(Text("gputui keys", style="bold"), markup=False)
            yield Static(table)
            yield Static(
                Text("Ctrl+P opens the command palette (also: change theme).  Esc closes this.", style="dim"),
                markup=False,
            )


class DetailScreen(Modal[None]):
    """Everything about one process. It was opened for a PID and create time: never the cursor's now.

    `recorded_at`: the row is a replay's, shown as recorded; the live machine is never read for it (its
    pid may be another process here, or no process). `stacks`: py-spy may read the Python stacks; not
    in read-only mode, since py-spy stops the process while it reads them."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close")]
    clock = staticmethod(time.time)  # the process's age is counted on it (a snapshot test's is fixed)

    def __init__(
        self,
        process: ProcessRow | HostProcess,
        devices_dir: Path,
        recorded_at: float | None = None,
        stacks: bool = True,
        gpus: tuple[GpuSample, ...] = (),
        memory: Sequence[tuple[float, float]] = (),
        split: Split | None = None,
        leftover: Leftover | None = None,
        gpm_note: str | None = None,
    ) -> None:
        super().__init__()
        self.gpm_note = gpm_note  # why the GPUs have no GPM metrics (Snapshot.gpm_note), if they have none
        self.leftover = leftover  # its GPU's unaccounted memory, when it may be one of the holders
        self.gpus = gpus  # the GPUs as the row saw them: a MIG process's instance is named from them
        # Its GPU memory history and the agent's allocated/reserved verdict, as the sampler had them
        # when the detail was opened (copies: the sampler goes on on its own thread).
        self.memory = list(memory)
        self.split = split
        self.process = process
        self.devices_dir = devices_dir
        self.recorded_at = recorded_at
        self.stacks = stacks
        self.detail: ProcessDetail | None = None
        self.stack: str | None = None
        # Held, not queried: an app that quits as the detail opens runs on_mount after its children left.
        first = render_recorded(process, recorded_at) if recorded_at is not None else None
        self.body = Static(
            Text("reading /proc …", style="dim") if first is None else first, id="detail-body", markup=False
        )
        self.stack_view = Static("", id="detail-stack", markup=False)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"process {self.process.pid}", style="bold"), markup=False)
            yield self.body
            yield self.stack_view

    def on_mount(self) -> None:
        self.stack_view.display = False  # until there is a Python stack to show
        if self.recorded_at is None:
            self._load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def _load(self) -> None:
        try:
            detail = describe(self.process.pid, self.process.create_time, self.devices_dir)
        except Exception as err:  # whatever /proc says, the detail is a message, never a crash
            detail = ProcessDetail(
                pid=self.process.pid,
                command=None,
                cwd=None,
                cuda_visible_devices=None,
                environ_readable=False,
                device_files=None,
                children=(),
                error=f"cannot read it: {type(err).__name__}: {err}",
            )
        self.app.call_from_thread(self._show, detail)
        p = self.process
        if detail.error is None and is_python(p.name, detail.command or p.command):
            if not self.stacks:
                self.app.call_from_thread(self._show_stack, PY_SPY_READ_ONLY)
                return
            self.app.call_from_thread(self._show_stack, "reading the Python stacks with py-spy …")
            self.app.call_from_thread(self._show_stack, py_spy_dump(p.pid))

    def _show(self, detail: ProcessDetail) -> None:
        self.detail = detail
        body = render_detail(
            self.process,
            detail,
            now=self.clock(),
            gpus=self.gpus,
            memory=self.memory,
            split=self.split,
            leftover=self.leftover,
            gpm_note=self.gpm_note,
        )
        self.body.update(body)

    def _show_stack(self, text: str) -> None:
        self.stack = text
        body = Text("\nPython stacks (py-spy dump)\n", style="bold")
        body.append("\n".join(printable(line) for line in text.splitlines()))
        self.stack_view.update(body)
        self.stack_view.display = True


PY_SPY_READ_ONLY = "not read in read-only mode: py-spy stops the process while it reads its stacks"


class _Grid:
    """Label and value rows. Values are Text, never markup, and no control character of a process's
    argv (or of a recording) reaches the terminal."""

    def __init__(self) -> None:
        self.table = Table.grid(padding=(0, 2))
        self.table.add_column(style="bold", no_wrap=True)
        self.table.add_column()

    def add(self, label: str, value: str | None, style: str = "") -> None:
        text = "\n".join(printable(line) for line in value.split("\n")) if value is not None else NA
        self.table.add_row(label, Text(text, style=style))


def _when(t: float | None) -> str | None:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t is not None else None
    except (OverflowError, ValueError, OSError):
        return None


def _ago(seconds: float) -> str:
    m = int(seconds) // 60
    if m < 1:
        return f"{int(seconds)} s ago"
    if m < 60:
        return f"{m} min ago"
    if m < 24 * 60:
        return f"{m // 60} h {m % 60} min ago"
    return f"{m // 1440} d {m % 1440 // 60} h ago"


def _started(t: float | None, now: float) -> str | None:
    """`2026-11-24 06:31:02  (3 h 12 min ago)`: local time, and how long it has run."""
    when = _when(t)
    if t is None or when is None:
        return None
    if t > now + 1:  # a clock set back since it started: the date alone, no negative age
        return when
    return f"{when}  ({_ago(max(0.0, now - t))})"


_NO_TRAINING_ENV = (
    "(none set of " + ", ".join([f"{p}*" for p in TRAINING_PREFIXES] + sorted(TRAINING_NAMES)) + ")"
)


def _training_env(d: ProcessDetail) -> str:
    lines = [f"{name}={value}" for name, value in d.training_env]
    if d.training_env_more:
        lines.append(f"… {d.training_env_more} more")
    if d.environ_cut:
        lines.append(f"(only its first {fmt_bytes(MAX_ENVIRON, 0)} read: variables past it not seen)")
    return "\n".join(lines) or _NO_TRAINING_ENV


def _gpu_line(
    p: ProcessRow | HostProcess, gpus: tuple[GpuSample, ...] = (), leftover: Leftover | None = None
) -> str | None:
    if not isinstance(p, ProcessRow) or p.gpu is None:
        return None
    if not p.kinds:  # a device holder NVML does not list: no memory NVML counts as its own
        share = leftover.share if leftover is not None and p in leftover.holders else None
        if leftover is not None and share is not None:
            return (
                f"{p.gpu}  (holds its device file; NVML lists no memory for it; likely holds "
                f"{estimated(share)} of GPU {p.gpu}'s {fmt_bytes(leftover.memory)} unaccounted, an estimate)"
            )
        return f"{p.gpu}  (holds its device file; not in NVML's list: no GPU memory of its own)"
    line = f"{p.gpu}  ({p.kinds})  memory {fmt_bytes(p.used_memory)}"
    if p.gpu_instance is not None:
        ci = p.compute_instance if p.compute_instance is not None else "?"
        line += f"\nMIG instance {p.gpu_instance}/{ci}"
        instances = next((g.mig for g in gpus if g.index == p.gpu), ())
        ids = (p.gpu_instance, p.compute_instance)
        mig = next((m for m in instances if (m.gpu_instance, m.compute_instance) == ids), None)
        if mig is not None:
            line += f" ({mig.profile or NA}, {mig.uuid or NA})"
    return line


def _gpu_activity(
    p: ProcessRow | HostProcess, gpus: tuple[GpuSample, ...], gpm_note: str | None
) -> tuple[str, str] | None:
    """What GPM says of the GPU (its MIG instance, for a process in one) the process runs on: `SM 88% ·
    occupancy 50% · tensor 61% · DRAM 48% (GPM over 1 s)` and the verdict, if any; or why there is none
    when it could have some (gpm_note). None: nothing to say (a GPU without GPM: an old GPU's detail is
    as it was). With its style."""
    if not isinstance(p, ProcessRow) or p.gpu is None:
        return None
    g = next((x for x in gpus if x.index == p.gpu), None)
    m = gpm_of(g, p.gpu_instance) if g is not None else None
    if m is None:
        return (f"GPM n/a: {gpm_note}", "dim") if gpm_note else None
    whose = f", MIG instance {p.gpu_instance}" if p.gpu_instance is not None and g and g.mig else ""
    span = f" over {m.interval:.2g} s" if m.interval is not None else ""
    text = f"{gpm_reading(m)}  (GPM{span}{whose})"
    util = g.util_gpu if g is not None and not whose else None  # NVML has no utilization per instance
    findings = gpm_findings(m, util)
    if findings:
        return text + "\n" + "\n".join(f.text for f in findings), "yellow"
    return text, ""


def describe_owner(o: Owner) -> str:
    """Whose job it is, in words: `SLURM job 81234, step 0: train (user alice)`."""
    if o.kind == "slurm":
        text = f"SLURM job {o.id}" + (f", step {o.step}" if o.step else "")
        return text + (f": {o.name}" if o.name else "") + (f" (user {o.user})" if o.user else "")
    if o.kind == "kubernetes":
        pod = f"{o.namespace}/{o.name}" if o.name and o.namespace else o.name or "(name unknown)"
        text = f"Kubernetes pod {pod}, UID {o.id}" + (f", QoS {o.qos}" if o.qos else "")
        return text + (f", container {o.container[:12]}" if o.container else "")
    return f"{o.kind} container " + (f"{o.name} ({o.id[:12]})" if o.name else o.id[:12])


def memory_trend(p: ProcessRow | HostProcess) -> str | None:
    """`growing 120 MiB/min — this GPU is full in ~14 min` (as Events and doctor say it), or the trend when
    it does not grow."""
    growth = getattr(p, "memory_growth", None)
    if growth is None:
        return None
    if abs(growth) < GROWTH_MIN:
        return "flat (under 1 MiB/min)"
    if growth < 0:
        return f"shrinking {rate_text(-growth)}"
    return growth_text(growth, getattr(p, "full_in", None))


SPARK_CELLS = 40  # the memory sparkline's most cells: it fits the modal at 120 columns with its labels


def _span_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.0f} min"


def memory_spark(points: Sequence[tuple[float, float]], cells: int = SPARK_CELLS) -> str | None:
    """`▁▂▃▅▆▇█  min 2.1 GiB, max 3.4 GiB over 10 min`: the last WINDOW_S of (time, bytes) points, each cell
    the highest of its stretch (as the main memory sparklines: a peak is what runs out of memory), scaled
    from the lowest point to the highest; min and max are of every point, so with History.memory_points
    (each stretch's low and high) they are the true ones. None: under two cells of data yet. Points are
    checked: a NaN or a clock step back must not break the detail."""
    data = sorted((t, v) for t, v in points if math.isfinite(t) and math.isfinite(v) and v >= 0)
    if not data:
        return None
    end = data[-1][0]
    data = [(t, v) for t, v in data if t >= end - WINDOW_S]
    span = end - data[0][0]
    bucket_s = max(MemorySeries.POINT_S, span / max(1, cells - 1))
    width = int(span // bucket_s) + 1
    if width < 2:
        return None
    lo, hi = min(v for _, v in data), max(v for _, v in data)
    scale = 100.0 / (hi - lo) if hi > lo else 0.0
    series = spark.BucketSeries(bucket_s, capacity=width, keep=spark.Keep.PEAK)
    series.extend((t - data[0][0], (v - lo) * scale) for t, v in data)
    values = dict(series.buckets)
    line = "".join(spark.glyph(values.get(n)) for n in range(width))  # a gap (no sample) shows ·
    if hi == lo:
        return f"{line}  {fmt_bytes(lo)}, steady over {_span_text(span)}"
    return f"{line}  min {fmt_bytes(lo)}, max {fmt_bytes(hi)} over {_span_text(span)}"


def _memory_rows(grid: _Grid, memory: Sequence[tuple[float, float]], split: Split | None) -> None:
    """The GPU memory sparkline and, with an agent, which of its numbers grows."""
    if memory:
        line = memory_spark(memory)
        grid.add("GPU memory", line or "collecting …", "" if line else "dim")
    if split is None:  # no agent in the process: it has no allocated/reserved numbers
        return
    if split.verdict is not None:
        grid.add("allocated vs reserved", split.text, "yellow")
    elif split.allocated.enough and split.reserved.enough:
        grid.add("allocated vs reserved", "allocated and reserved steady")
    else:
        grid.add("allocated vs reserved", "collecting the agent's numbers …", "dim")


def render_detail(
    p: ProcessRow | HostProcess,
    d: ProcessDetail,
    now: float | None = None,
    gpus: tuple[GpuSample, ...] = (),
    memory: Sequence[tuple[float, float]] = (),
    split: Split | None = None,
    leftover: Leftover | None = None,
    gpm_note: str | None = None,
) -> Table:
    """`now`: the clock the age is counted on (a test's fixed one); the wall clock by default. `gpus`: the
    snapshot's, for a MIG process's instance and its GPU's activity (GPM). `memory`: its GPU memory's
    (time, bytes) points; `split`: the agent's allocated vs reserved trend (None: it runs no agent);
    `leftover`: its GPU's memory that no listed process accounts for (an orphan is told its likely
    share); `gpm_note`: why the GPUs have no GPM metrics, when they have none."""
    grid = _Grid()
    add = grid.add
    if d.error:
        add("error", d.error, "red")
    add("command", d.command or p.command)
    add("user", p.user)
    if (owner := getattr(p, "owner", None)) is not None:
        add("job", describe_owner(owner))
    # CPU and RSS are the row's, of the last tick: the detail does not measure them again.
    add("started", _started(p.create_time, time.time() if now is None else now))
    add("CPU", fmt_pct(p.cpu_percent))
    add("RSS", fmt_bytes(p.rss))
    add("cwd", d.cwd)
    if d.environ_readable:
        cvd = d.cuda_visible_devices
        add("CUDA_VISIBLE_DEVICES", cvd if cvd is not None else "(unset)")
        add("training env", _training_env(d))
    elif d.error is None:  # once for every variable: none of them can be read
        add("environment", "(environment not readable: another user's process)", "dim")
    if d.device_files is None:
        add("device files", "(not readable: run as root to see them)", "dim")
    else:
        add("device files", "\n".join(d.device_files) or "(none)")
    if (gpu := _gpu_line(p, gpus, leftover)) is not None:
        add("GPU", gpu)
        if (activity := _gpu_activity(p, gpus, gpm_note)) is not None:
            add("GPU activity", *activity)
    if (trend := memory_trend(p)) is not None:
        add("memory trend", trend, "yellow" if getattr(p, "full_in", None) is not None else "")
    _memory_rows(grid, memory, split)
    if hung := getattr(p, "hung", None):
        add("hung?", hung, "red")
    add("state", p.state)
    add("parent", str(p.ppid) if p.ppid is not None else None)
    kids = "\n".join(f"{c.pid}  {c.state or NA:<9} {c.command or c.name or NA}" for c in d.children)
    add(f"children ({len(d.children)})", kids or "(none)")
    return grid.table


def render_recorded(p: ProcessRow | HostProcess, recorded_at: float) -> Table:
    """A replay's row: only what the recording holds."""
    grid = _Grid()
    add = grid.add
    add(
        "recording",
        f"as recorded at {_when(recorded_at) or NA}: this machine is not read for it "
        f"(pid {p.pid} here may be another process now)",
        "yellow",
    )
    add("command", p.command or p.name)
    add("user", p.user)
    if (gpu := _gpu_line(p)) is not None:
        add("GPU", gpu)
    if hasattr(p, "devices"):
        devices = getattr(p, "devices", None)
        add("device files", "\n".join(devices) or "(none)" if devices is not None else "(not readable)")
    category = getattr(p, "category", "ok")
    if category != "ok":
        add("class", f"{category}: {getattr(p, 'reason', '')}")
    add("state", p.state)
    add("parent", str(p.ppid) if p.ppid is not None else None)
    add("started", _when(p.create_time))
    add("not recorded", "cwd, environment, children, Python stacks", "dim")
    return grid.table


_NO_GPM = "n/a: this GPU or its driver serves no GPM (Hopper and newer GPUs do), or this tick had no reading"


def _gpm_why(g: GpuSample, gpm_note: str | None) -> str:
    if g.lost:
        return "n/a: the GPU is lost"
    return f"n/a: {gpm_note}" if gpm_note else _NO_GPM


def render_gpu_detail(g: GpuSample, gpm_note: str | None = None) -> Table:
    """One GPU: NVML's utilization, then every GPM metric with what it means (`n/a` where one failed or
    is unsupported, never 0), the verdicts drawn from them, and each MIG instance's reading; on a GPU
    without GPM one line says why (`gpm_note`, else that the GPU or driver serves none)."""
    grid = _Grid()
    add = grid.add
    add("GPU", f"{g.index}  {g.name or NA}  {g.uuid or ''}".rstrip())
    add(
        "utilization",
        f"{fmt_pct(g.util_gpu)}  NVML's: the share of time a kernel ran (one tiny kernel reads 100%)",
    )
    m = g.gpm if not g.lost else None
    if m is None:
        add("GPM", _gpm_why(g, gpm_note), "dim")
    else:
        span = f"over {m.interval:.2g} s" if m.interval is not None else "interval n/a"
        add("GPM", f"{span}: how much of the GPU the work used (Hopper and newer)")
        for name in (*GPM_RATIOS, *GPM_RATES):
            value = gpm_value(m, name)
            add(GPM_LABELS[name][1], f"{value:>11}  {GPM_MEANINGS[name]}", "dim" if value == NA else "")
        for finding in gpm_findings(m, g.util_gpu):
            add("verdict", f"{finding.text}: {finding.fix}", "yellow")
    for inst in g.mig:
        label = f"MIG {inst.gpu_instance}/{inst.compute_instance} {inst.profile or NA}"
        im = inst.gpm
        if im is None:
            add(label, "GPM n/a", "dim")
            continue
        verdicts = [f.text for f in gpm_findings(im, inst.util)]
        add(label, _instance_text(im) + "".join(f"\n{v}" for v in verdicts), "yellow" if verdicts else "")
    return grid.table


def _instance_text(m: GpmMetrics) -> str:
    """A MIG instance's every metric on two lines: the ratios, then the rates."""
    ratios = "  ".join(f"{GPM_LABELS[n][0]} {gpm_value(m, n)}" for n in GPM_RATIOS)
    rates = "  ".join(f"{GPM_LABELS[n][0]} {gpm_value(m, n)}" for n in GPM_RATES)
    return f"{ratios}\n{rates}"


class GpuDetailScreen(Modal[None]):
    """One GPU as the tick it was opened on saw it (render_gpu_detail)."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,enter,i", "dismiss", "Close")]

    def __init__(self, gpu: GpuSample, gpm_note: str | None = None) -> None:
        super().__init__()
        self.gpu = gpu
        self.gpm_note = gpm_note

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"GPU {self.gpu.index}", style="bold"), markup=False)
            yield Static(render_gpu_detail(self.gpu, self.gpm_note), id="gpu-detail-body")


class GpuChooser(Modal[int | None]):
    """Which GPU the table shows; `i` opens the highlighted GPU's detail."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q", "cancel", "Cancel"), Binding("i", "gpu_detail", "GPU detail")]

    def __init__(self, gpus: tuple[GpuSample, ...], gpm_note: str | None = None) -> None:
        super().__init__()
        self.gpus = gpus
        self.gpm_note = gpm_note  # Snapshot.gpm_note, for the detail

    def compose(self) -> ComposeResult:
        options = [Option(Text("all GPUs"), id="all")]
        options += [Option(Text(f"GPU {g.index}  {g.name or NA}"), id=str(g.index)) for g in self.gpus]
        chooser = OptionList(*options)
        chooser.border_subtitle = "enter: its processes · i: GPU detail (SM, tensor…)"  # else `i` is unseen
        yield chooser

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        choice = event.option.id
        self.dismiss(None if choice in (None, "all") else int(choice))

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_gpu_detail(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return
        choice = options.get_option_at_index(options.highlighted).id
        gpu = next((g for g in self.gpus if str(g.index) == choice), None)
        if gpu is not None:
            self.app.push_screen(GpuDetailScreen(gpu, self.gpm_note))
