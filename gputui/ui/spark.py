"""Sparklines on a fixed 0-100 scale, one cell per time bucket.

Each cell is a bucket of `bucket_s` seconds aligned to the clock and shows the bucket's *minimum*, so a
two-second dip stays visible in a 5-second cell. The newest bucket is always the rightmost cell: the
line shifts by one cell when a new bucket starts, not every tick (the bucket is at least the interval,
and several ticks on a wide window), so most ticks still change one cell.

(It used to jump-scroll: new buckets filled the right fifth and then the line jumped left by a fifth,
so the newest sample sat anywhere from 80% to 100% of the width and the view lurched.)

A sparkline may be several rows tall: each row takes eight of the levels, the bottom row first. Dips
are marked by a glyph (DIP_GLYPH, where each dip starts) as well as the dip colour, so they still show
with NO_COLOR.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable

from rich.style import Style

from gputui.ui.canvas import PLAIN, Cell, Line

GLYPHS = " ▁▂▃▄▅▆▇█"
MIN_WINDOW_S = 300.0  # the view always covers at least five minutes
DIP_GLYPH = "▼"  # on a sparkline's top row, over the first bucket of a dip
MISSING = "·"


def glyph(value: float | None) -> str:
    return column(value, 1)[0]


def column(value: float | None, rows: int) -> tuple[str, ...]:
    """The glyphs of one bucket, top row first; a value above 0 shows at least the lowest eighth, and so
    does 0 (a flat baseline reads as "idle", a blank as "no data")."""
    if value is None:
        return (" ",) * (rows - 1) + (MISSING,)
    v = max(0.0, min(100.0, value))
    level = max(1, math.ceil(v / 100.0 * 8 * rows))
    return tuple(GLYPHS[max(0, min(8, level - 8 * row))] for row in range(rows - 1, -1, -1))


def bucket_seconds(width: int, interval: float, window: float = MIN_WINDOW_S) -> float:
    """Bucket size that keeps `window` seconds visible across `width` cells."""
    return max(interval, math.ceil(window / max(1, width)))


class BucketSeries:
    """Per-bucket minimum of a series; at most `capacity` buckets are kept."""

    def __init__(self, bucket_s: float, capacity: int) -> None:
        self.bucket_s = bucket_s
        self.buckets: deque[tuple[int, float | None]] = deque(maxlen=capacity)

    def add(self, t: float, value: float | None) -> None:
        n = int(t // self.bucket_s)
        if self.buckets and self.buckets[-1][0] == n:
            old = self.buckets[-1][1]
            if value is not None and (old is None or value < old):
                self.buckets[-1] = (n, value)
        elif not self.buckets or n > self.buckets[-1][0]:
            self.buckets.append((n, value))
        elif n < self.buckets[-1][0] - 1:  # the wall clock stepped back: start again from now
            self.buckets.clear()
            self.buckets.append((n, value))
        # (a step back within a bucket or two, as NTP makes, is ignored)

    def extend(self, samples: Iterable[tuple[float, float | None]]) -> None:
        for t, v in samples:
            self.add(t, v)

    @property
    def latest(self) -> int | None:
        return self.buckets[-1][0] if self.buckets else None


def view_start(latest: int | None, width: int) -> int:
    """The bucket the leftmost cell shows: the newest bucket is the rightmost cell."""
    return 0 if latest is None else latest - width + 1


def draw(
    line: Line,
    series: BucketSeries,
    start: int,
    width: int,
    style_for: Callable[[float | None], Style],
    marked: frozenset[int] = frozenset(),
    mark: Style | None = None,
) -> Line:
    """One row of cells for buckets start..start+width (see draw_rows)."""
    line.cells.extend(draw_rows(series, start, width, 1, style_for, marked, mark)[0])
    return line


def draw_rows(
    series: BucketSeries,
    start: int,
    width: int,
    rows: int,
    style_for: Callable[[float | None], Style],
    marked: frozenset[int] = frozenset(),
    mark: Style | None = None,
) -> list[list[Cell]]:
    """`rows` rows of cells (top first) for buckets start..start+width; buckets in `marked` (dips) get
    `mark` laid over their style, and the first bucket of each dip DIP_GLYPH on the top row (one glyph
    per dip: the other buckets keep showing how deep it went)."""
    values = dict(series.buckets) if series.buckets else {}
    out: list[list[Cell]] = [[] for _ in range(rows)]
    blank = (" ", PLAIN)
    for n in range(start, start + width):  # runs per cell: appended directly, no Line.add() sanitizing
        if n not in values:
            for row in out:
                row.append(blank)
            continue
        v = values[n]
        style = style_for(v)
        glyphs = column(v, rows)
        if n in marked:
            style = style + mark if mark is not None else style
            if n - 1 not in marked:
                glyphs = (DIP_GLYPH, *glyphs[1:])
        for row, ch in zip(out, glyphs, strict=True):
            row.append((ch, style))
    return out
