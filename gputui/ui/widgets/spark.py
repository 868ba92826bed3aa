"""Sparklines on a fixed 0-100 scale, one cell per time bucket.

Each cell is a bucket of `bucket_s` seconds aligned to the clock. What a cell keeps of its bucket
depends on what the series is for (`Keep`):

- memory keeps the bucket's PEAK: the peak is what runs out of memory, so a 3 s spike reads at its
  height at every zoom;
- utilization keeps the bucket's MEAN: a GPU at 80 % on average reads at 80 % when zoomed out, even if
  a data-loader stall falls in every bucket. Dips are not averaged away: the buckets a detected dip
  touches are drawn in the dip colour, and the first of each run of them carries DIP_GLYPH (`▼`, a
  glyph: it shows with NO_COLOR and on 16 colours) on the sparkline's top row.

      util ▇▇▇▇▼▇▇▇▇▇▇▁▁▼▇▇▇    ▼ where a dip starts; a long dip also draws low (its mean is)
      mem  ▅▅█▅▅▅▅█▅▅▅▅▅█▅▅▅    █ each cell that held a spike, however short

The newest bucket is always the rightmost cell: the line shifts by one cell when a new bucket starts,
not every tick (the bucket is at least the interval, and several ticks on a wide window), so most ticks
still change one cell. `axis` draws the time scale under a sparkline (`-5m    -4m  …  now`) and
`span_label` its short form (`-5m`), from the bucket and the width: what the cells really cover.

(It used to jump-scroll: new buckets filled the right fifth and then the line jumped left by a fifth,
so the newest sample sat anywhere from 80% to 100% of the width and the view lurched.)

A sparkline may be several rows tall: each row takes eight of the levels, the bottom row first.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable, Iterable

from rich.style import Style

from gputui.ui.widgets.canvas import PLAIN, Cell, Line

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


class Keep(enum.Enum):
    """What a bucket keeps of its samples."""

    PEAK = "peak"  # memory: the highest
    MEAN = "mean"  # utilization: the level it ran at (dips are marked apart)
    LOW = "low"  # the lowest


class BucketSeries:
    """One value per bucket (see Keep; samples that were unavailable, None, count for nothing, and a
    bucket of only those is None); at most `capacity` buckets are kept."""

    def __init__(self, bucket_s: float, capacity: int, keep: Keep = Keep.PEAK) -> None:
        self.bucket_s = bucket_s
        self.keep = keep
        self.buckets: deque[tuple[int, float | None]] = deque(maxlen=capacity)
        self._sum = 0.0  # of the newest bucket's known samples: its mean is kept exact
        self._count = 0

    def add(self, t: float, value: float | None) -> None:
        n = int(t // self.bucket_s)
        if self.buckets and self.buckets[-1][0] == n:
            if value is not None:
                self.buckets[-1] = (n, self._merge(self.buckets[-1][1], value))
        elif not self.buckets or n > self.buckets[-1][0]:
            self._start(n, value)
        elif n < self.buckets[-1][0] - 1:  # the wall clock stepped back: start again from now
            self.buckets.clear()
            self._start(n, value)
        # (a step back within a bucket or two, as NTP makes, is ignored)

    def _start(self, n: int, value: float | None) -> None:
        self._sum, self._count = (0.0, 0) if value is None else (float(value), 1)
        self.buckets.append((n, value))

    def _merge(self, old: float | None, value: float) -> float:
        if old is None:
            self._sum, self._count = float(value), 1
            return value
        if self.keep is Keep.PEAK:
            return max(old, value)
        if self.keep is Keep.LOW:
            return min(old, value)
        self._sum += value
        self._count += 1
        return self._sum / self._count

    def extend(self, samples: Iterable[tuple[float, float | None]]) -> None:
        for t, v in samples:
            self.add(t, v)

    @property
    def latest(self) -> int | None:
        return self.buckets[-1][0] if self.buckets else None


TICKS_S = (10, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200)
TICK_GAP = 10  # cells at least between two tick labels of an axis


def ago(seconds: float) -> str:
    """`-45s`, `-5m`, `-15m`, `-1h`, `-1.5h`: a time before now, to the nearest unit shown."""
    if seconds < 90:
        return f"-{round(seconds)}s"
    if seconds < 3570:  # (59.5 min: under that, minutes read closer than "1h")
        return f"-{round(seconds / 60)}m"
    hours = round(seconds / 1800) / 2
    return f"-{hours:g}h"


def _tick(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"-{seconds // 3600}h"
    return f"-{seconds // 60}m" if seconds % 60 == 0 else f"-{seconds}s"


def span_label(bucket_s: float, width: int) -> str:
    """How far back the leftmost of `width` cells of `bucket_s` reaches: `-5m`."""
    return ago(bucket_s * max(1, width))


def axis(width: int, bucket_s: float) -> str:
    """A time scale for a sparkline of `width` cells of `bucket_s` (newest at the right), exactly `width`
    cells: the left end's age, ticks at round ages, `now` at the right end; a label that would touch
    another is left out. Narrower than its end labels: the left end's only, or nothing."""
    left = span_label(bucket_s, width)
    row = [" "] * max(0, width)
    if width < len(left):
        return "".join(row)
    row[: len(left)] = left
    if width < len(left) + 1 + len("now"):
        return "".join(row)
    row[width - 3 :] = "now"
    taken = [(0, len(left)), (width - 3, width)]  # [start, end) of each label placed
    # Whole minutes once the span is two minutes or more: `-4m`, never `-270s`.
    least = 60 if width * bucket_s >= 120 else 0
    step = next((t for t in TICKS_S if t >= least and t / bucket_s >= TICK_GAP), None)
    k = 1
    while step is not None:
        x = width - 1 - round(k * step / bucket_s)  # the cell of the bucket that old
        label = _tick(k * step)
        a = x - len(label) // 2
        if a <= 0 or k * step > width * bucket_s - step / 2:  # (too near the left end's own label)
            break
        if all(a + len(label) < lo - 1 or a > hi + 1 for lo, hi in taken):  # two spaces either side
            row[a : a + len(label)] = label
            taken.append((a, a + len(label)))
        k += 1
    return "".join(row)


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
    `mark` laid over their style, and the first of each run of them DIP_GLYPH on the top row: one glyph
    per run, so that the others keep showing their level (zoomed out, stalls may touch every bucket). A
    run cut by the left edge gets its glyph on the edge: without colour, the glyph is all that says dip."""
    values = dict(series.buckets) if series.buckets else {}
    out: list[list[Cell]] = [[] for _ in range(rows)]
    blank = (" ", PLAIN)
    for n in range(start, start + width):  # runs per cell: appended directly, no Line.add() sanitizing
        if n not in values:
            for row in out:
                row.append(blank)
            continue
        for row, cell in zip(out, _bucket(values[n], n, start, rows, style_for, marked, mark), strict=True):
            row.append(cell)
    return out


def redraw_newest(
    drawn: list[list[Cell]],
    series: BucketSeries,
    start: int,
    rows: int,
    style_for: Callable[[float | None], Style],
    marked: frozenset[int] = frozenset(),
    mark: Style | None = None,
) -> list[list[Cell]]:
    """draw_rows' rows when, since `drawn` was drawn with the same arguments, only the value of the newest
    bucket (the rightmost cell) changed: most ticks, as a bucket spans several. Its column alone is drawn
    again."""
    n, value = series.buckets[-1]
    cells = _bucket(value, n, start, rows, style_for, marked, mark)
    return [[*row[:-1], cell] for row, cell in zip(drawn, cells, strict=True)]


def _bucket(
    value: float | None,
    n: int,
    start: int,
    rows: int,
    style_for: Callable[[float | None], Style],
    marked: frozenset[int],
    mark: Style | None,
) -> list[Cell]:
    """The cells of bucket `n`, top row first (see draw_rows)."""
    style = style_for(value)
    glyphs = column(value, rows)
    if n in marked:
        style = style + mark if mark is not None else style
        if n - 1 not in marked or n == start:  # a dip that began left of the view: marked at its edge
            glyphs = (DIP_GLYPH, *glyphs[1:])
    return [(ch, style) for ch in glyphs]
