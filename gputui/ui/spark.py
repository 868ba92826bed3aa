"""Sparklines on a fixed 0-100 scale, one cell per time bucket.

Each cell is a bucket of `bucket_s` seconds aligned to the clock and shows the bucket's *minimum*, so a
two-second dip stays visible in a 5-second cell. The view jump-scrolls: new buckets fill the empty
right part, and only when it is full does the line shift left by a fifth of its width. A line that
shifted every tick would repaint every cell every tick, which is what makes sparklines expensive over
SSH; this way a tick usually changes one cell.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable

from rich.style import Style

from gputui.ui.canvas import PLAIN, Line

GLYPHS = " ▁▂▃▄▅▆▇█"
MIN_WINDOW_S = 300.0  # the view always covers at least five minutes


def glyph(value: float | None) -> str:
    if value is None:
        return "·"
    v = max(0.0, min(100.0, value))
    return GLYPHS[math.ceil(v / 100.0 * 8)] if v > 0 else GLYPHS[1]


def bucket_seconds(width: int, interval: float, window: float = MIN_WINDOW_S) -> float:
    """Bucket size that keeps `window` seconds visible even right after a jump (4/5 of the width)."""
    usable = max(1, width - jump_cells(width))
    return max(interval, math.ceil(window / usable))


def jump_cells(width: int) -> int:
    return max(1, width // 5)


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


class SparkView:
    """Which bucket the leftmost cell shows; moves only in jumps."""

    def __init__(self) -> None:
        self.start: int | None = None

    def place(self, latest: int | None, width: int) -> int:
        if latest is None:
            return self.start or 0
        if self.start is None or latest >= self.start + width or latest < self.start:
            self.start = latest - (width - jump_cells(width)) + 1
        return self.start


def draw(
    line: Line,
    series: BucketSeries,
    start: int,
    width: int,
    style_for: Callable[[float | None], Style],
    marked: frozenset[int] = frozenset(),
    mark: Style | None = None,
) -> Line:
    """Cells for buckets start..start+width; buckets in `marked` (dips) drawn with `mark` on top."""
    values = dict(series.buckets) if series.buckets else {}
    cells = line.cells  # appended directly: glyphs need no Line.add() sanitizing, and this runs per cell
    blank = (" ", PLAIN)
    for n in range(start, start + width):
        if n in values:
            v = values[n]
            style = style_for(v)
            cells.append((glyph(v), style + mark if mark is not None and n in marked else style))
        else:
            cells.append(blank)
    return line
