"""The fleet table: a row per host, a compact utilization sparkline per GPU. No data fetching here."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rich.style import Style
from textual.message import Message

from gputui.cells import pad
from gputui.export.fleet import FleetHost, spark_cells
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import PLAIN, Line
from gputui.ui.widgets.cursor_table import CursorTable
from gputui.ui.widgets.spark import DIP_GLYPH, glyph
from gputui.units import NA, fmt_duration

MIB = 1024 * 1024
SPARK_MIN, SPARK_MAX = 3, 16  # cells per GPU


@dataclass(frozen=True)
class FleetColumn:
    label: str
    width: int
    sort: str | None  # the sort key it stands for
    justify: str = "right"


COLUMNS = (
    FleetColumn("HOST", 16, "name", "left"),
    FleetColumn("GPUS", 5, None),
    FleetColumn("UTIL", 5, "busy"),
    FleetColumn("MEM", 11, "memory"),
    FleetColumn("POWER", 7, None),
    FleetColumn("DIPS", 5, "dips"),
    FleetColumn("ZOMB", 5, "zombies"),
    FleetColumn("STATE", 9, None, "left"),
)
FIXED_WIDTH = sum(c.width + 1 for c in COLUMNS)


def spark_glyph(value: float | None) -> str:
    return " " if value is not None and math.isnan(value) else glyph(value)


def add_spark(
    line: Line,
    series: tuple[float | None, ...],
    cells: int,
    style_for: Callable[[float | None], Style],
    dip: Style | None,
) -> Line:
    """`cells` cells of `series`, each its share's mean (export.fleet.spark_cells). With `dip` (None: a
    series without dips, memory), cells in a dip get that style laid over and the first of each dip
    DIP_GLYPH, as in the main view: a dip shows with NO_COLOR too."""
    in_dip = False
    for cell in spark_cells(series, cells, dips=dip is not None):
        text, style = spark_glyph(cell.mean), style_for(cell.mean)
        if cell.dip and dip is not None:
            text, style = (text if in_dip else DIP_GLYPH), style + dip
        in_dip = cell.dip
        line.add(text, style)
    return line


def _age(seconds: float) -> str:
    return f"{max(0, int(seconds))}s" if seconds < 60 else fmt_duration(seconds)


def state_text(host: FleetHost, now: float) -> str:
    if not host.stale:
        return "ok"
    age = "?" if host.last_seen is None else _age(now - host.last_seen)
    return f"{'down' if host.down else 'stale'} {age}"


def mem_text(host: FleetHost) -> str:
    used, total = host.mem_used, host.mem_total
    if used is None or total is None:
        return NA
    return f"{used / 1024:.0f}/{total / 1024:.0f} GiB"


class FleetTable(CursorTable):
    DEFAULT_CSS = tcss("FleetTable")

    class SortClicked(Message):
        def __init__(self, sort: str) -> None:
            super().__init__()
            self.sort = sort

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[FleetHost] = []
        self.sort = "busy"
        self.now = 0.0  # the time states ("stale 42s") are measured against
        self.window_label = ""
        self.empty_note = "no hosts yet"

    def _spark_cells(self, width: int) -> tuple[int, int]:
        """(cells per GPU, GPUs shown) for the widest host in the room left of `width`."""
        most = max((len(h.gpus) for h in self.rows), default=1) or 1
        room = max(0, width - FIXED_WIDTH)
        cells = max(SPARK_MIN, min(SPARK_MAX, room // most - 1))
        return cells, max(1, min(most, room // (cells + 1)))

    def build(self, width: int) -> list[Line]:
        p = self.palette
        header = Line()
        for col in COLUMNS:
            label = col.label
            if col.sort is not None and (col.sort == self.sort or (col.sort, self.sort) == ("busy", "idle")):
                label += "▲" if self.sort in ("idle", "name") else "▼"
            header.add(pad(label, col.width, right=col.justify == "right") + " ", p.header)
        header.add(f"UTILIZATION PER GPU, {self.window_label}".strip(", "), p.header)
        lines = [header]
        if not self.rows:
            return [*lines, Line().add(f" {self.empty_note}", p.dim)]
        cells, shown = self._spark_cells(width)
        for i in self.visible_rows():
            lines.append(self._row(self.rows[i], i == self.cursor, cells, shown))
        return lines

    def _row(self, host: FleetHost, on_cursor: bool, cells: int, shown: int) -> Line:
        p = self.palette
        faded = host.stale
        base = p.dim if faded else p.plain
        util = host.util
        zombies = host.zombie_total
        values = [
            (host.name, p.error if host.down else base),
            (f"{host.busy_gpus}/{len(host.gpus)}", base),
            (NA if util is None else f"{util:.0f}%", p.dim if faded else p.util_style(True)(util)),
            (mem_text(host), p.dim if faded else p.mem_style(host.mem_percent)),
            (
                NA
                if host.power is None
                else f"{host.power / 1000:.1f}kW"
                if host.power >= 1000
                else f"{host.power:.0f}W",
                base,
            ),
            (NA if host.dips is None else f"{host.dips:.0f}", p.warning if host.dips else base),
            (NA if zombies is None else str(zombies), p.error if zombies else base),
            (state_text(host, self.now), p.error if host.down else p.warning if faded else p.good),
        ]
        line = Line()
        focused = self.has_focus
        for (text, style), col in zip(values, COLUMNS, strict=True):
            if on_cursor:
                style = style + (p.cursor if focused else Style(underline=True))
            line.add(pad(text, col.width, right=col.justify == "right"), style)
            line.add(" ", p.cursor if on_cursor and focused else PLAIN)
        spark_style = p.util_style(True)
        for gpu in host.gpus[:shown]:
            add_spark(line, gpu.series, cells, (lambda _: p.dim) if faded else spark_style, p.dip)
            line.add(" ")
        if len(host.gpus) > shown:
            line.add(f"+{len(host.gpus) - shown}", p.dim)
        return line

    def on_header_click(self, x: int) -> None:
        left = 0
        for col in COLUMNS:
            if left <= x < left + col.width + 1:
                if col.sort:
                    self.post_message(self.SortClicked(col.sort))
                return
            left += col.width + 1
