"""The GPU area: panes (a summary line, util and memory sparklines), two columns of panes, or one line
per GPU with both sparklines. Which one, and how tall the sparklines are, is gputui.ui.widgets.layout's call.

The summary line holds more fields than a narrow terminal has room for. Each field has a priority: the
least useful go first, and a line that lost any ends with `…` (see `fit_fields`). What explains a number
goes last: the drop order is `GpuPanes.fields`'s docstring.

Utilization cells show their bucket's mean and memory cells their peak; a time scale sits under the
panes (`-5m … now`), or before the first line's sparkline in one line per GPU (see gputui.ui.widgets.spark).

A GPU with GPM (Hopper and newer) shows its SM activity (`SM 88%`: the share of SMs with work) and tensor
activity (`TC 61%`) beside NVML's utilization (a kernel ran: one tiny kernel reads 100 %), and its pane's
sparkline is SM activity's, labelled `SM act` (its dips are measured on it too); a GPU "busy" by NVML with
its SMs nearly empty is called out, `⚠ busy but starved: SM 6%`, as long as a throttle reason is. A GPU
without GPM shows none of it: an old GPU's line is unchanged.

A MIG-enabled GPU's pane lists its instances, one a row, to the right of its sparklines (which give up
the room; the pane keeps the height the layout gave it, so the last row says how many did not fit); a
one-line GPU shows their count and the busiest."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.style import Style
from textual.reactive import var

from gputui import cells
from gputui.analyze.dip_causes import starved_sm
from gputui.analyze.dips import SIGNAL_GRACE
from gputui.analyze.health import ERROR, problems
from gputui.analyze.history import History
from gputui.model import GpuSample, MigInstance, Snapshot, XidEvent
from gputui.ui.styles import tcss
from gputui.ui.widgets import layout as layouts
from gputui.ui.widgets.canvas import Cell, CellCanvas, Line
from gputui.ui.widgets.layout import AUTO, LABEL, LINE_SCALE, Field, GpuLayout, Segment, fit_fields
from gputui.ui.widgets.palette import Palette
from gputui.ui.widgets.spark import (
    BucketSeries,
    Keep,
    axis,
    bucket_seconds,
    draw_rows,
    redraw_newest,
    span_label,
    view_start,
)
from gputui.units import NA

FULL_LINES = 3  # a pane with one-row sparklines: summary, util, mem
PANE_NAME = 22
# What a pane's name leaves to its fields: UTIL, MEM, temperature and power with its limit (and ` …`) fit a
# two-column pane of 60 cells (120 columns) with `H100 80GB` as its name.
PANE_FIELDS = 50
# The instance column of a MIG GPU's pane: "MIG 1/0 3g.40gb  mem 12.1/39.2G util n/a" on a wide pane,
# "1/0 3g.40gb  12.1/39G  n/a" on a narrower one (two columns of panes); none below MIG_NARROW_PANE.
MIG_WIDE, MIG_NARROW = 44, 28
XID_MARK_S = 3600.0  # an Xid marks its GPU for an hour (the history's span)
XIDS_KEPT = 256
MIG_WIDE_PANE, MIG_NARROW_PANE = 110, 60
MIG_CELL = 20  # "13/0 1g.10gb 0/10G": an instance when more than one share a row
CHROME_ROWS = 5  # header (2), the table's header, status line, key bar (the time scale is the panes')
# Most telling first: two thermal reasons must not be the ones a narrow line loses. Each with its short
# form: `⚠ thermal` says why for both thermal reasons in 9 cells.
_REASONS = {
    "hw_thermal": ("HW thermal", "thermal"),
    "sw_thermal": ("thermal", "thermal"),
    "hw_slowdown": ("HW slowdown", "slowdown"),
    "hw_power_brake": ("power brake", "power"),
    "sw_power_cap": ("power cap", "power"),
    "sync_boost": ("sync boost", "sync"),
}
# Drop order (priority: the highest goes first; 0 is never dropped, only shortened). See `fields`.
P_MODES, P_ECC_OK, P_NVLINK, P_PSTATE, P_PCIE, P_FAN, P_CLOCK, P_EXTRA = 15, 14, 13, 12, 11, 10, 9, 8
P_SHORTER = 7  # power without its limit; the throttle reasons and the starved callout in their short form
P_POWER = 6
P_MEM_DECIMALS = 5  # MEM 74.3/79.6G → MEM 74/80G; a one-line MIG GPU's busiest instance
P_TC = 4  # GPM's tensor activity
P_SM = 3  # GPM's SM activity: outlives the power (the honest "how busy"), not the temperature
P_TEMP = 2
P_WHY = 1  # throttle reasons, health, starved: kept longest in their shortest telling form; then ⚠ / ✖
SM_LABEL = "  SM act"  # a pane's sparkline of SM activity (LABEL cells, as `    util`)


@dataclass
class _Track:
    util: BucketSeries
    mem: BucketSeries
    sm: BucketSeries  # GPM's SM activity
    # Samples in a row without SM activity: a pane draws SM activity's sparkline until SIGNAL_GRACE of
    # them say GPM is gone (DCGM took the counters), as the dips do (one reading may fail, or come too soon).
    sm_missing: int = SIGNAL_GRACE
    _drawn: dict[str, tuple[tuple[object, ...], list[list[Cell]]]] = field(default_factory=dict)

    @property
    def shows_sm(self) -> bool:
        return self.sm_missing < SIGNAL_GRACE

    def add(self, t: float, g: GpuSample) -> None:
        util, mem = (None, None) if g.lost else (g.util_gpu, g.mem_percent)
        sm = None if g.lost or g.gpm is None else g.gpm.sm_active
        self.util.add(t, util)
        self.mem.add(t, mem)
        self.sm.add(t, sm)
        self.sm_missing = 0 if sm is not None else self.sm_missing + 1

    def rows(
        self,
        name: str,
        series: BucketSeries,
        width: int,
        rows: int,
        style_for: Callable[[float | None], Style],
        marked: frozenset[int] = frozenset(),
        mark: Style | None = None,
    ) -> list[list[Cell]]:
        """The sparkline's rows, newest bucket at the right edge; redrawn only when its newest bucket,
        size, style or dips changed, and only its newest cell when that bucket's value alone did."""
        newest = series.buckets[-1] if series.buckets else None
        key = (newest, width, rows, style_for, marked, mark)
        drawn = self._drawn.get(name)
        if drawn is not None and drawn[0] == key:
            return drawn[1]
        start = view_start(series.latest, width)
        if drawn is not None and _same_bucket(drawn[0], key):
            cells_ = redraw_newest(drawn[1], series, start, rows, style_for, marked, mark)
        else:
            cells_ = draw_rows(series, start, width, rows, style_for, marked, mark)
        self._drawn[name] = (key, cells_)
        return cells_


def _same_bucket(was: tuple[object, ...], now: tuple[object, ...]) -> bool:
    """Two keys of _Track.rows that differ at most in the newest bucket's value, not in which it is."""
    old, new = was[0], now[0]
    return isinstance(old, tuple) and isinstance(new, tuple) and old[0] == new[0] and was[1:] == now[1:]


def short_name(name: str | None) -> str:
    return (name or NA).removeprefix("NVIDIA ").removeprefix("Tesla ")


def fit_name(name: str, width: int) -> str:
    """`name` in `width` cells, padded: whole words from the left first (`H100 80GB HBM3` → `H100 80GB`:
    the memory type is what says least), cut with `…` only when one word is too long."""
    words = name.split(" ")
    while len(words) > 1 and cells.width(" ".join(words)) > width:
        words.pop()
    return cells.pad(" ".join(words), width)


def throttled(g: GpuSample) -> list[str]:
    reasons = set(g.throttle_reasons or ())
    return [full for key, (full, _) in _REASONS.items() if key in reasons]


def starved_variants(g: GpuSample) -> list[str]:
    """The callout from its whole to `⚠`: `⚠ busy but starved: SM 6%`, `⚠ starved SM 6%`, `⚠ starved`."""
    sm = starved_sm(g)
    if sm is None:
        return []
    return [f"⚠ busy but starved: SM {sm:.0f}%", f"⚠ starved SM {sm:.0f}%", "⚠ starved", "⚠"]


def throttle_variants(g: GpuSample) -> list[str]:
    """The throttle reasons from all of them to `⚠` alone, each shorter than the one before: `⚠ HW
    thermal, thermal`, `⚠ HW thermal +1`, `⚠ thermal`, `⚠`. Empty: not throttled."""
    reasons = set(g.throttle_reasons or ())
    full = [f for key, (f, _) in _REASONS.items() if key in reasons]
    short = list(dict.fromkeys(s for key, (_, s) in _REASONS.items() if key in reasons))
    if not full:
        return []
    forms = [
        ", ".join(full[:k]) + (f" +{len(full) - k}" if k < len(full) else "") for k in range(len(full), 0, -1)
    ]
    forms += [
        ", ".join(short[:k]) + (f" +{len(short) - k}" if k < len(short) else "")
        for k in range(len(short), 0, -1)
    ]
    out: list[str] = []
    for text in sorted(dict.fromkeys("⚠ " + f for f in forms), key=cells.width, reverse=True):
        if not out or cells.width(text) < cells.width(out[-1]):
            out.append(text)
    return [*out, "⚠"]


class GpuPanes(CellCanvas):
    DEFAULT_CSS = tcss("GpuPanes")

    selected_gpu: var[int | None] = var(None, init=False)  # marked ▶ (g); setting it redraws

    def __init__(self, history: History, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history = history
        self.snapshot: Snapshot | None = None
        self._interval = 1.0
        self.window = 300.0  # seconds the sparklines show at least; [ and ] zoom
        # gpu -> (first, last sample time) of the recent dips
        self.dips: dict[int, list[tuple[float, float]]] = {}
        self.choice = AUTO  # what `v` picked (persisted by name); AUTO: the engine decides
        self.gpu_layout: GpuLayout = layouts.choose(1, 80, 20)
        self._room: tuple[int, int] | None = None  # (width, rows shared with the table), from fit_room()
        self._tracks: dict[int, _Track] = {}
        self._bucket_s = 0.0
        self.xids: deque[XidEvent] = deque(maxlen=XIDS_KEPT)  # the recent Xid errors: a GPU's health mark
        self._names = 14  # cells of the widest GPU name

    def watch_selected_gpu(self) -> None:
        self.redraw()

    # -- layout ------------------------------------------------------------------------------------

    @property
    def compact(self) -> bool:
        """One line per GPU."""
        return self.gpu_layout.kind == "lines"

    @property
    def layout_name(self) -> str:
        """The user's choice, for the settings file: "auto", "panes", "columns" or "lines"."""
        return self.choice

    def fit_room(self, width: int, rows: int) -> None:
        """The room: the terminal's width and the rows the GPU area shares with the process table."""
        self._room = (width, rows)
        self._relayout()

    def set_layout(self, name: str) -> None:
        """A saved or picked choice; an unknown name (an old settings file) is AUTO."""
        self.choice = name if name in layouts.CHOICES else AUTO
        self._relayout()

    def cycle_layout(self) -> str:
        """The `v` key: auto → panes → columns → lines → auto, skipping a kind that would draw what is
        on screen already (two columns on a narrow terminal are one). Returns the new choice."""
        choice = layouts.next_choice(self.choice)
        while choice != AUTO and self._layout_for(choice) == self.gpu_layout:
            choice = layouts.next_choice(choice)
        self.set_layout(choice)
        return self.choice

    def _layout_for(self, choice: str) -> GpuLayout:
        snap = self.snapshot
        width, rows = self._room or (max(self.size.width, 1), 40)
        n = len(snap.gpus) if snap else 1
        self._names = max((cells.width(short_name(g.name)) for g in snap.gpus), default=4) if snap else 14
        return layouts.choose(n, width, rows, name_width=self._names, prefer=choice)

    def _relayout(self) -> None:
        new = self._layout_for(self.choice)
        if new != self.gpu_layout:
            self.gpu_layout = new
            if self.styles.height is None or self.styles.height.value != new.height:
                self.styles.height = new.height
            self._rebucket()
            self.redraw()

    # -- data in -----------------------------------------------------------------------------------

    @property
    def interval(self) -> float:
        return self._interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        """A new refresh interval changes the bucket size: the sparklines are rebuilt at once."""
        if seconds != self._interval:
            self._interval = seconds
            self._rebucket()

    def show(self, snap: Snapshot) -> None:
        old = self.snapshot
        self.snapshot = snap
        if snap is not old:  # a replay's end shows its last snapshot again: its Xids are not new
            self.xids.extend(snap.xids)
        while self.xids and self.xids[0].time < snap.time - XID_MARK_S:
            self.xids.popleft()
        if old is None or len(old.gpus) != len(snap.gpus):
            self._relayout()
        for g in snap.gpus:
            track = self._tracks.get(g.index)
            if track is None:
                self._tracks[g.index] = self._new_track(g.index)  # built from history: has this sample
            else:
                track.add(snap.time, g)
        if self.styles.height is None or self.styles.height.value != self.gpu_layout.height:
            self.styles.height = self.gpu_layout.height
        self.redraw()

    def _new_track(self, index: int) -> _Track:
        capacity = 4 * max(self.gpu_layout.column_widths[0], 80)  # buckets: several screens' worth
        bucket = self._bucket_s or 5.0
        # Utilization and SM activity at their mean level (dips are marked apart), memory at its peak: what
        # runs out of memory.
        track = _Track(
            BucketSeries(bucket, capacity, Keep.MEAN),
            BucketSeries(bucket, capacity, Keep.PEAK),
            BucketSeries(bucket, capacity, Keep.MEAN),
        )
        h = self.history.gpus.get(index)
        if h is not None:
            track.util.extend(zip(h.times, h.util, strict=True))
            track.mem.extend(zip(h.times, h.mem, strict=True))
            track.sm.extend(zip(h.times, h.sm, strict=True))
            recent = list(h.sm)[-SIGNAL_GRACE:]
            known = [k for k, v in enumerate(reversed(recent)) if v is not None]
            track.sm_missing = known[0] if known else SIGNAL_GRACE
        return track

    def set_window(self, seconds: float) -> None:
        """Zoom: the time the sparklines cover (at least)."""
        self.window = seconds
        self._rebucket()
        self.redraw()

    def rebuild(self) -> None:
        """History was replaced (a replay seek): draw every sparkline from it again."""
        self._bucket_s = 0.0
        self._rebucket(force=True)
        self.redraw()

    def _rebucket(self, force: bool = False) -> None:
        """Bucket size from the sparkline width, the interval and the window; a new size (or a new
        width, whose capacity differs) rebuilds every series from history."""
        spark = min(self.gpu_layout.spark_width, self.gpu_layout.mem_spark_width)
        bucket = bucket_seconds(spark, self._interval, self.window)
        if force or bucket != self._bucket_s or self._tracks_too_short():
            self._bucket_s = bucket
            self._tracks.clear()
            if self.snapshot is not None:
                for g in self.snapshot.gpus:
                    self._tracks[g.index] = self._new_track(g.index)

    def _tracks_too_short(self) -> bool:
        capacity = 4 * max(self.gpu_layout.column_widths[0], 80)
        return any(t.util.buckets.maxlen != capacity for t in self._tracks.values())

    def marked_buckets(self, gpu: int) -> frozenset[int]:
        """The util buckets a dip touches, for the sparkline markers."""
        b = self._bucket_s or 5.0
        return frozenset(
            n for start, last in self.dips.get(gpu, ()) for n in range(int(start // b), int(last // b) + 1)
        )

    def on_resize(self) -> None:
        if self._room is not None and self._room[0] != self.size.width and self.size.width > 0:
            self._room = (self.size.width, self._room[1])
            self._relayout()
        # (then CellCanvas.on_resize redraws: Textual calls the handler of every class in the MRO)

    # -- drawing -----------------------------------------------------------------------------------

    def build(self, width: int) -> list[Line]:
        snap = self.snapshot
        if snap is None:
            return []
        lay = self.gpu_layout
        if lay.kind == "lines":
            return [
                self._gpu_line(g, self._tracks.get(g.index), first=k == 0) for k, g in enumerate(snap.gpus)
            ]
        if lay.columns == 1:
            panes = [ln for g in snap.gpus for ln in self._pane(g, self._tracks.get(g.index), width)]
            return [*panes, self._axis(width)]
        return [*self._two_columns(snap.gpus, lay.column_widths), self._axis(*lay.column_widths)]

    def _axis(self, *widths: int) -> Line:
        """The time scale under each column's sparklines: `-5m … -1m  now`, from the bucket and the
        width, so it says what the cells cover at every zoom. (A MIG pane's sparklines are shorter: its
        instances take the right; its cells are the same size, so the scale's left end is further back
        than its own.)"""
        line = Line()
        for w in widths:
            spark_w = max(1, w - LABEL)
            part = Line().add(" " * LABEL).add(axis(spark_w, self._bucket_s or 5.0), self.palette.dim)
            line.cells += part.fit(w)
        return line

    def _two_columns(self, gpus: tuple[GpuSample, ...], widths: tuple[int, ...]) -> list[Line]:
        """GPUs down the left column first, then the right (index order reads top to bottom)."""
        per_pane = self.gpu_layout.rows_per_gpu
        half = math.ceil(len(gpus) / 2)
        left, right = widths
        out: list[Line] = []
        for slot in range(half):
            a = self._pane(gpus[slot], self._tracks.get(gpus[slot].index), left)
            b = (
                self._pane(gpus[half + slot], self._tracks.get(gpus[half + slot].index), right)
                if half + slot < len(gpus)
                else [Line() for _ in range(per_pane)]
            )
            for la, lb in zip(a, b, strict=True):
                line = Line()
                line.cells = la.fit(left) + lb.fit(right)
                out.append(line)
        return out

    def _busy(self, g: GpuSample) -> bool:
        return self.snapshot is not None and any(p.gpu == g.index for p in self.snapshot.processes)

    def _title(self, g: GpuSample, name_width: int) -> Segment:
        marker = "▶" if g.index == self.selected_gpu else " "
        return (f"{marker}{g.index:>2} {fit_name(short_name(g.name), name_width)} ", self.palette.title)

    def _pane(self, g: GpuSample, track: _Track | None, width: int) -> list[Line]:
        p = self.palette
        rows = self.gpu_layout.spark_rows
        mig_w = _mig_column(g, width)
        mig_rows = self._mig_rows(g, 2 * rows, mig_w - 1) if mig_w else []
        # Both columns of panes line up: the name's room comes from the first column's width, and what
        # the fields need first (a narrow pane's name keeps its first words: `H100 80GB`).
        name_w = max(4, min(PANE_NAME, self._names, self.gpu_layout.column_widths[0] - PANE_FIELDS))
        title = self._title(g, name_w)
        head = Line()
        if g.lost:
            head.add(*title)
            lost = (
                Field.of(0, ("LOST", p.error)),
                # The short form fits a two-column pane: what to do must never be the part that is cut.
                Field(
                    1,
                    (((" — NVML lost this GPU; it needs a reset", p.dim),), ((" — needs a reset", p.dim),)),
                ),
            )
            for text, style in fit_fields(lost, width - cells.width(title[0]), p.dim):
                head.add(text, style)
            return [head] + [Line() for _ in range(2 * rows)]
        for text, style in fit_fields((Field.of(0, title), *self.fields(g)), width, p.dim):
            head.add(text, style)
        spark_w = max(1, width - LABEL - mig_w)
        out = [head]
        sm = track is not None and track.shows_sm  # SM activity's sparkline, said so, where GPM has it
        for label, series, style_for in (
            (
                "sm" if sm else "util",
                (track.sm if sm else track.util) if track else None,
                p.util_style(self._busy(g)),
            ),
            ("mem", track.mem if track else None, p.mem_style),
        ):
            name = SM_LABEL if label == "sm" else f"    {label:<4}"
            if series is None or track is None:
                out.extend(Line().add(name if r == 0 else "", p.dim) for r in range(rows))
                continue
            marked = self.marked_buckets(g.index) if label != "mem" else frozenset()
            drawn = track.rows(label, series, spark_w, rows, style_for, marked, p.dip)
            for r, cells_ in enumerate(drawn):
                line = Line().add(name if r == 0 else " " * LABEL, p.dim)
                line.cells.extend(cells_)
                out.append(line)
        for k, segments in enumerate(mig_rows):  # beside the sparklines, one instance a row
            line = out[1 + k].pad_to(LABEL + spark_w).add(" ")
            for text, style in segments:
                line.add(text, style)
        return out

    def _mig_rows(self, g: GpuSample, rows: int, width: int) -> list[list[Segment]]:
        """A MIG GPU's instances for the pane's column, at most `rows`; the last says how many more."""
        p = self.palette
        if not g.mig:
            return [[(cells.pad("MIG on: no instances", width), p.dim)]]
        per_row = (width + 1) // (MIG_CELL + 1)
        if len(g.mig) > rows and per_row > 1:
            return self._mig_packed(g, rows, width, per_row)
        shown = list(g.mig) if len(g.mig) <= rows else list(g.mig[: rows - 1])
        wide = width >= MIG_WIDE - 1
        # Ids and profiles padded to the longest shown: the memory and utilization columns line up.
        ids = [f"{m.gpu_instance}/{m.compute_instance}" for m in shown]
        id_w = max(map(len, ids))
        profile_w = min(12, max(cells.width(m.profile or NA) for m in shown))
        out = []
        for m, id_ in zip(shown, ids, strict=True):
            pct = 100.0 * m.mem_used / m.mem_total if m.mem_used is not None and m.mem_total else None
            name = ("MIG " if wide else "") + id_.ljust(id_w) + " "
            mem = _mig_mem(m, wide)
            segs: list[Segment] = [
                (name, p.dim),
                (cells.pad(m.profile or NA, profile_w), p.plain),
                ("  mem " if wide else " ", p.dim),
                (mem, p.mem_style(pct)),
                *_mig_busy(m, wide, p),
            ]
            out.append(_cut_to(segs, width))
        if len(g.mig) > len(shown):
            out.append([(cells.pad(f"+{len(g.mig) - len(shown)} more MIG instances", width), p.dim)])
        return out

    def _mig_packed(self, g: GpuSample, rows: int, width: int, per_row: int) -> list[list[Segment]]:
        """More instances than rows: several a row, ids, profile and memory (and utilization if known)."""
        p = self.palette
        room = rows * per_row
        shown = list(g.mig) if len(g.mig) <= room else list(g.mig[: room - 1])
        cells_: list[list[Segment]] = []
        for m in shown:
            pct = 100.0 * m.mem_used / m.mem_total if m.mem_used is not None and m.mem_total else None
            mem = _mig_mem(m, False).strip() + (f" {m.util}%" if m.util is not None else "")
            ids = f"{m.gpu_instance}/{m.compute_instance} "
            cells_.append(
                _cut_to([(ids, p.dim), (f"{m.profile or NA} ", p.plain), (mem, p.mem_style(pct))], MIG_CELL)
            )
        if len(g.mig) > len(shown):
            cells_.append([(cells.pad(f"+{len(g.mig) - len(shown)} more", MIG_CELL), p.dim)])
        out = []
        for start in range(0, len(cells_), per_row):
            row: list[Segment] = []
            for k, cell in enumerate(cells_[start : start + per_row]):
                row += ([(" ", p.dim)] if k else []) + cell
            out.append(_cut_to(row, width))
        return out

    def _gpu_line(self, g: GpuSample, track: _Track | None, first: bool = False) -> Line:
        p = self.palette
        lay = self.gpu_layout
        line = Line().add(*self._title(g, lay.name_width))
        # How far back both sparklines reach, said once, before the first line's (the right end is now).
        scale = span_label(self._bucket_s or 5.0, lay.spark_width) if first else ""
        line.add(cells.pad(scale, LINE_SCALE - 1, right=True) + " ", p.dim)
        if g.lost:
            room = (
                lay.spark_width
                + lay.mem_spark_width
                + layouts.LINE_UTIL
                + layouts.LINE_MEM
                + lay.extras_width
            )
            return line.add(cells.cut("LOST — NVML lost this GPU; it needs a reset", room), p.error)
        style_for = p.util_style(self._busy(g))
        for label, series, spark_w, value in (
            (
                "util",
                track.util if track else None,
                lay.spark_width,
                (" " + _pct(g.util_gpu), style_for(g.util_gpu)),
            ),
            (
                "mem",
                track.mem if track else None,
                lay.mem_spark_width,
                (" " + _mem_short(g), p.mem_style(g.mem_percent)),
            ),
        ):
            if label == "mem":
                line.add(" ")
            if series is not None and track is not None:
                marked = self.marked_buckets(g.index) if label == "util" else frozenset()
                colour = style_for if label == "util" else p.mem_style
                line.cells.extend(track.rows(label, series, spark_w, 1, colour, marked, p.dip)[0])
            else:
                line.add(" " * spark_w)
            text, style = value
            line.add(text, style)
        for text, style in fit_fields(self.line_extras(g), lay.extras_width, p.dim):
            line.add(text, style)
        return line

    # -- the fields of a summary line, most useful first to keep ------------------------------------

    def fields(self, g: GpuSample) -> list[Field]:
        """The pane's summary line after the title, each field with its priority (0 kept longest).

        What explains a number is kept longest, so a narrow line gives way in this order (first to go
        first): compute/persistence modes, `ECC ok`, NVLink, P-state, PCIe, fan, SM clock, ENC/DEC and the
        MIG count; then the long form of the throttle reasons (`⚠ HW thermal, thermal` → `⚠ thermal`),
        of the starved callout (`⚠ busy but starved: SM 6%` → `⚠ starved SM 6%`) and the power limit
        (`631/700W` → `631W`); the power; the memory's decimals (`74.3/79.6G` → `74/80G`); GPM's tensor
        activity (`TC 61%`), then its SM activity (`SM 88%`); the temperature; and last the throttle
        reasons, health warnings and the starved callout, down to a bare `⚠` / `✖`. UTIL and MEM are
        never dropped. At 120 columns (two columns of panes, 60 cells) a GPU with GPM reads `UTIL  94%
        SM 88% TC 61%  MEM 70/80G   66°C …`, a throttled one `UTIL  14%  MEM 74/80G   91°C  ⚠ thermal …`
        and a starved one `UTIL  98%  MEM 51/80G  ⚠ starved SM 6% …`.

        Display order: the fields every tick has first, then the ones that come and go (throttle reasons,
        ENC/DEC, ECC errors), so that one appearing does not move the others: over SSH every moved cell
        is repainted."""
        p = self.palette
        busy = self._busy(g)
        mem_style = p.mem_style(g.mem_percent)
        out = [
            Field.of(0, ("UTIL ", p.dim), (_pct(g.util_gpu), p.util_style(busy)(g.util_gpu))),
            *self._gpm_fields(g, ("  SM", " TC")),
            Field(
                0,
                tuple((("  MEM ", p.dim), (text, mem_style)) for text in _mems(g)),
                (P_MEM_DECIMALS,) * (len(_mems(g)) - 1),
            ),
            Field.of(P_TEMP, ("  ", p.dim), (_num(g.temperature, "°C", 3), p.temp_style(g.temperature))),
            _shortening(
                P_POWER, P_SHORTER, [(("  ", p.dim), (text, p.power_style(g))) for text in _power(g)]
            ),
        ]
        if g.mig_mode:  # steady, so among the first; the instances themselves are beside the sparklines
            n = len(g.mig)
            out.append(
                Field.of(P_EXTRA, ("  MIG ", p.dim), (f"{n} instance{'s' if n != 1 else ''}", p.plain))
            )
        if g.fan is not None:
            out.append(Field.of(P_FAN, ("  FAN ", p.dim), (f"{g.fan:>3}%", p.plain)))
        out.append(Field.of(P_CLOCK, ("  SM ", p.dim), (_num(g.sm_clock, " MHz", 4), p.plain)))
        out.append(
            Field.of(P_PSTATE, ("  ", p.dim), (f"P{g.pstate}" if g.pstate is not None else NA, p.plain))
        )
        if g.pcie_rx is not None or g.pcie_tx is not None:
            out.append(Field.of(P_PCIE, ("  PCIe ", p.dim), (_rates(g.pcie_rx, g.pcie_tx), p.plain)))
        if g.nvlink_rx is not None or g.nvlink_tx is not None:
            out.append(Field.of(P_NVLINK, ("  NVLink ", p.dim), (_rates(g.nvlink_rx, g.nvlink_tx), p.plain)))
        if g.ecc_errors == 0:
            out.append(Field.of(P_ECC_OK, ("  ECC ok", p.dim)))
        modes = _modes(g)
        if modes:
            out.append(Field.of(P_MODES, ("  " + modes, p.dim)))
        out.extend(self._warnings(g, "  "))
        if g.enc_util or g.dec_util:
            enc_dec = (
                ("  ENC ", p.dim),
                (_pct(g.enc_util), p.plain),
                (" DEC ", p.dim),
                (_pct(g.dec_util), p.plain),
            )
            out.append(Field.of(P_EXTRA, *enc_dec))
        return out

    def _gpm_fields(self, g: GpuSample, labels: tuple[str, str]) -> list[Field]:
        """SM and tensor activity (GPM) where the GPU has them; nothing on a GPU without GPM (no `n/a` on
        every line of a box of older GPUs). SM is coloured as utilization; a starved GPU's is the callout's
        too."""
        m = g.gpm
        if m is None or g.lost:
            return []
        p = self.palette
        out = []
        if m.sm_active is not None:
            style = p.warning if starved_sm(g) is not None else p.util_style(self._busy(g))(m.sm_active)
            out.append(Field.of(P_SM, (labels[0], p.dim), (_pct(m.sm_active), style)))
        if m.tensor is not None:
            out.append(Field.of(P_TC, (labels[1], p.dim), (_pct(m.tensor), p.plain)))
        return out

    def _starved(self, g: GpuSample, gap: str) -> Field | None:
        """`⚠ busy but starved: SM 6%`: NVML's utilization is high only because some kernel always runs. Its
        long form gives way early; `⚠ starved SM 6%` outlives the SM field; `⚠ starved` and `⚠` last."""
        variants = starved_variants(g)
        if not variants:
            return None
        style = self.palette.warning
        steps = (P_SHORTER, P_WHY, P_WHY)
        return Field(P_WHY, tuple(((gap + text, style),) for text in variants), steps)

    def _reasons(self, g: GpuSample, gap: str) -> Field | None:
        """The throttle reasons: the long forms give way early, the short telling one (`⚠ thermal`) is
        kept longest, then `⚠` alone."""
        variants = throttle_variants(g)
        if not variants:
            return None
        style = self.palette.warning
        steps = (P_SHORTER,) * (len(variants) - 2) + (P_WHY,)
        return Field(P_WHY, tuple(((gap + text, style),) for text in variants), steps)

    def _warnings(self, g: GpuSample, sep: str) -> list[Field]:
        """Health, throttle reasons and the starved callout: what a GPU line keeps last as it shortens."""
        return [f for f in (self._health_mark(g, sep), self._reasons(g, sep), self._starved(g, sep)) if f]

    def _health_mark(self, g: GpuSample, gap: str) -> Field | None:
        """The worst of the GPU's health problems (Xid, ECC, row remapping, PCIe link), and how many more:
        ` ✖ Xid 79 +1`; `e` lists them with what to do."""
        found = problems(g, self.xids)
        if not found:
            return None
        worst = found[0]
        glyph, style = ("✖", self.palette.error) if worst.severity == ERROR else ("⚠", self.palette.warning)
        more = f" +{len(found) - 1}" if len(found) > 1 else ""
        return Field(P_WHY, (((f"{gap}{glyph} {worst.short}{more}", style),), ((f"{gap}{glyph}", style),)))

    def line_extras(self, g: GpuSample) -> list[Field]:
        """What a one-line GPU shows after its memory: the same priorities, the same steady-first order
        (` SM 88% TC 61% 66°C 631/700W`, ` 91°C ⚠ thermal`, ` ⚠ starved SM 6%`). Its sparkline stays
        NVML's utilization, the number beside it: a line has no room for a label that would say it is
        SM activity's."""
        p = self.palette
        power = [((" " + text, p.power_style(g)),) for text in _power(g)]
        out = [
            *self._gpm_fields(g, (" SM", " TC")),
            Field.of(P_TEMP, (" " + _num(g.temperature, "°C", 3), p.temp_style(g.temperature))),
            _shortening(P_POWER, P_SHORTER, power),
        ]
        if g.fan is not None:
            out.append(Field.of(P_FAN, (f" FAN{g.fan:>3}%", p.plain)))
        if g.pcie_rx is not None or g.pcie_tx is not None:
            out.append(Field.of(P_PCIE, (" PCIe " + _rates(g.pcie_rx, g.pcie_tx), p.plain)))
        out.extend(self._warnings(g, " "))
        if g.enc_util or g.dec_util:
            out.append(Field.of(P_EXTRA, (f" ENC{_pct(g.enc_util)} DEC{_pct(g.dec_util)}", p.plain)))
        if g.mig_mode:
            out.insert(0, _mig_summary(g, p))  # first: what a one-line MIG GPU is made of
        return out


def _shortening(priority: int, shorten: int, variants: Sequence[tuple[Segment, ...]]) -> Field:
    """A field whose every shorter form is taken at `shorten`, and which is dropped at `priority`."""
    return Field(priority, tuple(variants), (shorten,) * (len(variants) - 1))


def _mig_column(g: GpuSample, width: int) -> int:
    """Cells of a MIG GPU's instance column in a pane `width` wide (with its leading space); 0: none."""
    if not g.mig_mode:
        return 0
    if width >= MIG_WIDE_PANE:
        return MIG_WIDE
    return MIG_NARROW if width >= MIG_NARROW_PANE else 0


def _mig_busy(m: MigInstance, wide: bool, p: Palette) -> list[Segment]:
    """An instance's utilization; NVML has none per instance, so where GPM measured it, its SM activity,
    labelled (`   SM  88%`, as wide as ` util  n/a`; a narrow row has no room for the label: n/a)."""
    sm = m.gpm.sm_active if m.gpm is not None else None
    if m.util is None and sm is not None and wide:
        return [("   SM ", p.dim), (_pct(sm), p.plain)]
    return [(" util " if wide else " ", p.dim), (_pct(m.util) if m.util is not None else f"{NA:>4}", p.plain)]


def _mig_mem(m: MigInstance, wide: bool) -> str:
    if m.mem_used is None or m.mem_total is None:
        return f"{NA:>10}" if wide else f"{NA:>7}"
    used, total = m.mem_used / 2**30, m.mem_total / 2**30
    return f"{used:>4.1f}/{total:.1f}G" if wide else f"{used:>2.0f}/{total:.0f}G".rjust(7)


def _busiest(g: GpuSample) -> MigInstance | None:
    """The instance with the highest utilization where the driver reports it (else its SM activity, where
    GPM measures it), else the fullest memory."""

    def load(m: MigInstance) -> tuple[float, float]:
        mem = m.mem_used / m.mem_total if m.mem_used is not None and m.mem_total else -1.0
        busy = m.util if m.util is not None else m.gpm.sm_active if m.gpm is not None else None
        return (busy if busy is not None else -1.0, mem)

    return max(g.mig, key=load, default=None)


def _mig_summary(g: GpuSample, p: Palette) -> Field:
    """A one-line MIG GPU: ` 3 MIG (1/0 3g.40gb 31G)` (the busiest), then ` 3 MIG` when the line is short."""
    busiest = _busiest(g)
    count = f" {len(g.mig)} MIG"
    if busiest is None:
        return Field.of(3, (count, p.plain))
    used = f" {busiest.mem_used / 2**30:.0f}G" if busiest.mem_used is not None else ""
    label = f" ({busiest.gpu_instance}/{busiest.compute_instance} {busiest.profile or NA}{used})"
    return Field(3, (((count, p.plain), (label, p.dim)), ((count, p.plain),)))


def _cut_to(segments: list[Segment], width: int) -> list[Segment]:
    """Segments filling exactly `width` cells: cut at the right (with …), or padded."""
    out: list[Segment] = []
    room = width
    for text, style in segments:
        w = cells.width(text)
        if w > room:
            out.append((cells.cut(text, room), style))
            return out
        out.append((text, style))
        room -= w
    if room:
        out.append((" " * room, segments[-1][1] if segments else None))
    return out


def _pct(v: float | None) -> str:
    return f"{v:>3.0f}%" if v is not None else f"{NA:>4}"


def _num(v: float | None, unit: str, width: int) -> str:
    return f"{v:>{width}.0f}{unit}" if v is not None else f"{NA:>{width}}{' ' * len(unit)}"


def _mem(g: GpuSample) -> str:
    if g.mem_used is None or g.mem_total is None:
        return f"{NA:>10}"
    used, total = g.mem_used / 2**30, g.mem_total / 2**30
    return f"{used:>4.1f}/{total:.1f}G"


def _mems(g: GpuSample) -> tuple[str, ...]:
    """The memory to a tenth of a GiB, then to a GiB (`74/80G`: for a narrow line)."""
    if g.mem_used is None or g.mem_total is None:
        return (_mem(g),)
    return (_mem(g), f"{g.mem_used / 2**30:>2.0f}/{g.mem_total / 2**30:.0f}G")


def _mem_short(g: GpuSample) -> str:
    if g.mem_used is None or g.mem_total is None:
        return f"{NA:>8}"
    used, total = g.mem_used / 2**30, g.mem_total / 2**30
    return f"{used:>3.0f}/{total:.0f}G"[:8].rjust(8)


def _rate(v: float | None) -> str:
    """Bytes per second in four cells, two significant digits: ` 8.4G`, `730M`. Few digits change
    from tick to tick, so few cells are sent."""
    if v is None:
        return f"{NA:>4}"
    value = max(0.0, float(v))
    for unit in "BKMGT":
        if round(value, 1) < 9.95:
            return f"{value:3.1f}{unit}"
        if round(value) < 999.5 or unit == "T":
            return f"{value:>3.0f}{unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _rates(rx: float | None, tx: float | None) -> str:
    return f"↓{_rate(rx)} ↑{_rate(tx)}/s"


def _modes(g: GpuSample) -> str:
    parts = []
    if g.persistence_mode is not None:
        parts.append("persist " + ("on" if g.persistence_mode else "off"))
    if g.compute_mode:
        parts.append(g.compute_mode)
    return "  ".join(parts)


def _power(g: GpuSample) -> tuple[str, ...]:
    """The draw and its limit, then the draw alone (for a narrow line)."""
    if g.power is None:
        return (f"{NA:>4}",)
    draw = f"{g.power:>3.0f}W"
    if g.power_limit is None:
        return (draw,)
    return (f"{g.power:>3.0f}/{g.power_limit:.0f}W", draw)
