"""One pane per GPU: a summary line, then utilization and memory sparklines (or one line when compact)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rich.style import Style

from gputui.collect.history import History
from gputui.model import GpuSample, Snapshot
from gputui.ui.canvas import Cell, CellCanvas, Line
from gputui.ui.palette import Palette
from gputui.ui.spark import BucketSeries, SparkView, bucket_seconds, draw
from gputui.units import NA

FULL_LINES = 3
_LABEL = 8  # "    util" before a sparkline (its value is on the summary line: shown once, sent once)
_REASONS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sw_thermal": "thermal",
    "hw_thermal": "HW thermal",
    "hw_power_brake": "power brake",
    "sync_boost": "sync boost",
}


@dataclass
class _Track:
    util: BucketSeries
    mem: BucketSeries
    view: SparkView = field(default_factory=SparkView)
    _drawn: dict[str, tuple[tuple[object, ...], list[Cell]]] = field(default_factory=dict)

    def cells(
        self,
        name: str,
        series: BucketSeries,
        start: int,
        width: int,
        style_for: Callable[[float | None], Style],
        marked: frozenset[int] = frozenset(),
        mark: Style | None = None,
    ) -> list[Cell]:
        """The sparkline's cells, redrawn only when its newest bucket, view, style or dips changed."""
        key = (
            series.buckets[-1] if series.buckets else None,
            len(series.buckets),
            start,
            width,
            style_for,
            marked,
            mark,
        )
        drawn = self._drawn.get(name)
        if drawn is None or drawn[0] != key:
            cells = draw(Line(), series, start, width, style_for, marked, mark).cells
            drawn = self._drawn[name] = (key, cells)
        return drawn[1]


def short_name(name: str | None) -> str:
    return (name or NA).removeprefix("NVIDIA ").removeprefix("Tesla ")


def throttled(g: GpuSample) -> list[str]:
    return [_REASONS[r] for r in g.throttle_reasons or () if r in _REASONS]


class GpuPanes(CellCanvas):
    DEFAULT_CSS = "GpuPanes { height: auto; }"

    def __init__(self, history: History, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history = history
        self.snapshot: Snapshot | None = None
        self.compact = False
        self.selected_gpu: int | None = None
        self.interval = 1.0
        self.window = 300.0  # seconds the sparklines show at least; [ and ] zoom
        # gpu -> (first, last sample time) of the recent dips
        self.dips: dict[int, list[tuple[float, float]]] = {}
        self.palette = Palette.default()
        self._tracks: dict[int, _Track] = {}
        self._bucket_s = 0.0

    # -- data in -----------------------------------------------------------------------------------

    def show(self, snap: Snapshot) -> None:
        self.snapshot = snap
        for g in snap.gpus:
            track = self._tracks.get(g.index)
            if track is None:
                self._tracks[g.index] = self._new_track(g.index)  # built from history: has this sample
            else:
                util, mem = (None, None) if g.lost else (g.util_gpu, g.mem_percent)
                track.util.add(snap.time, util)
                track.mem.add(snap.time, mem)
        lines = len(snap.gpus) * (1 if self.compact else FULL_LINES)
        if self.styles.height is None or self.styles.height.value != lines:
            self.styles.height = lines
        self.redraw()

    def set_mode(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self._tracks.clear()  # the sparkline width changes: rebuild buckets from history
            if self.snapshot is not None:
                self.show(self.snapshot)

    def _spark_width(self, width: int) -> int:
        return max(10, min(40, width // 4)) if self.compact else max(10, width - _LABEL - 1)

    def _new_track(self, index: int) -> _Track:
        capacity = 4 * max(self.size.width, 80)  # buckets: several screens' worth
        bucket = self._bucket_s or 5.0
        track = _Track(BucketSeries(bucket, capacity), BucketSeries(bucket, capacity))
        h = self.history.gpus.get(index)
        if h is not None:
            track.util.extend(zip(h.times, h.util, strict=True))
            track.mem.extend(zip(h.times, h.mem, strict=True))
        return track

    def set_window(self, seconds: float) -> None:
        """Zoom: the time the sparklines cover (at least; they jump-scroll)."""
        self.window = seconds
        self.on_resize()

    def rebuild(self) -> None:
        """History was replaced (a replay seek): draw every sparkline from it again."""
        self._tracks.clear()
        self._bucket_s = 0.0
        self.on_resize()

    def marked_buckets(self, gpu: int) -> frozenset[int]:
        """The util buckets a dip touches, for the sparkline markers."""
        b = self._bucket_s or 5.0
        return frozenset(
            n for start, last in self.dips.get(gpu, ()) for n in range(int(start // b), int(last // b) + 1)
        )

    def on_resize(self) -> None:
        bucket = bucket_seconds(self._spark_width(self.size.width), self.interval, self.window)
        if bucket != self._bucket_s:
            self._bucket_s = bucket
            self._tracks.clear()
            if self.snapshot is not None:
                for g in self.snapshot.gpus:
                    self._tracks[g.index] = self._new_track(g.index)
        super().on_resize()

    # -- drawing -----------------------------------------------------------------------------------

    def build(self, width: int) -> list[Line]:
        if self.snapshot is None:
            return []
        out: list[Line] = []
        for g in self.snapshot.gpus:
            track = self._tracks.get(g.index)
            if self.compact:
                out.append(self._compact_line(g, track, width))
            else:
                out.extend(self._full_lines(g, track, width))
        return out

    def _busy(self, g: GpuSample) -> bool:
        return self.snapshot is not None and any(p.gpu == g.index for p in self.snapshot.processes)

    def _title(self, g: GpuSample, line: Line, name_width: int) -> None:
        p = self.palette
        marker = "▶" if g.index == self.selected_gpu else " "
        line.add(f"{marker}{g.index:>2} {short_name(g.name)[:name_width]:<{name_width}} ", p.title)

    def _full_lines(self, g: GpuSample, track: _Track | None, width: int) -> list[Line]:
        p = self.palette
        head = Line()
        self._title(g, head, 22)
        if g.lost:
            head.add("LOST", p.error).add(" — NVML lost this GPU (off the bus?); it needs a reset", p.dim)
            return [head, Line(), Line()]
        self._metrics(g, head)
        spark_w = self._spark_width(width)
        lines = [head]
        for label, series, style_for in (
            ("util", track.util if track else None, p.util_style(self._busy(g))),
            ("mem", track.mem if track else None, p.mem_style),
        ):
            line = Line().add(f"    {label:<4}", p.dim)
            if series is not None and track is not None:
                start = track.view.place(series.latest, spark_w)
                marked = self.marked_buckets(g.index) if label == "util" else frozenset()
                line.cells.extend(track.cells(label, series, start, spark_w, style_for, marked, p.dip))
            else:
                line.add(" " * spark_w)
            lines.append(line)
        return lines

    def _metrics(self, g: GpuSample, line: Line) -> None:
        p = self.palette
        line.add("UTIL ", p.dim).add(_pct(g.util_gpu), p.util_style(self._busy(g))(g.util_gpu))
        line.add("  MEM ", p.dim).add(_mem(g), p.mem_style(g.mem_percent))
        line.add("  ", p.dim).add(_num(g.temperature, "°C", 3), p.temp_style(g.temperature))
        line.add("  ", p.dim).add(_power(g), p.power_style(g))
        line.add("  SM ", p.dim).add(_num(g.sm_clock, " MHz", 4), p.plain)
        line.add("  ", p.dim).add(f"P{g.pstate}" if g.pstate is not None else NA, p.plain)
        reasons = throttled(g)
        if reasons:
            line.add("  ⚠ " + ", ".join(reasons), p.warning)
        if g.enc_util or g.dec_util:
            line.add(f"  ENC {_pct(g.enc_util)} DEC {_pct(g.dec_util)}", p.plain)

    def _compact_line(self, g: GpuSample, track: _Track | None, width: int) -> Line:
        p = self.palette
        line = Line()
        self._title(g, line, 12)
        if g.lost:
            return line.add("LOST", p.error).add(" — needs a reset", p.dim)
        spark_w = self._spark_width(width)
        style_for = p.util_style(self._busy(g))
        if track is not None:
            start = track.view.place(track.util.latest, spark_w)
            line.cells.extend(
                track.cells(
                    "util", track.util, start, spark_w, style_for, self.marked_buckets(g.index), p.dip
                )
            )
        line.add(" ").add(_pct(g.util_gpu), style_for(g.util_gpu))
        line.add(" ").add(_mem(g, short=True), p.mem_style(g.mem_percent))
        line.add(" ").add(_num(g.temperature, "°C", 3), p.temp_style(g.temperature))
        line.add(" ").add(_num(g.power, "W", 4), p.power_style(g))
        if throttled(g):
            line.add(" ⚠", p.warning)
        return line


def _pct(v: float | None) -> str:
    return f"{v:>3.0f}%" if v is not None else f"{NA:>4}"


def _num(v: float | None, unit: str, width: int) -> str:
    return f"{v:>{width}.0f}{unit}" if v is not None else f"{NA:>{width}}{' ' * len(unit)}"


def _mem(g: GpuSample, short: bool = False) -> str:
    if g.mem_used is None or g.mem_total is None:
        return f"{NA:>13}" if not short else f"{NA:>9}"
    used, total = g.mem_used / 2**30, g.mem_total / 2**30
    return f"{used:>3.0f}/{total:.0f}G" if short else f"{used:>5.1f}/{total:.1f} GiB"


def _power(g: GpuSample) -> str:
    if g.power is None:
        return f"{NA:>9}"
    limit = f"/{g.power_limit:.0f}" if g.power_limit is not None else ""
    return f"{g.power:>3.0f}{limit} W"
