"""Where the GPUs go: a pure function of the GPU count and the room, no Textual.

Three kinds, richest first:
- ``panes``: one pane per GPU, one above the other: a summary line, then util and memory sparklines
  of ``spark_rows`` rows each (taller when there is room: 1-4 GPUs on a tall terminal), and under the
  last pane a time scale (``-5m … now``), on the row that separates the GPU area from the table.
- ``columns``: the same panes, two side by side (8 GPUs at 120x40), a time scale under each column.
- ``lines``: one line per GPU with a util *and* a memory sparkline (16 GPUs, short terminals); no row
  of its own for the scale or a margin (8 GPUs at 80x24 leave the table 11 rows: every rank of an
  8-GPU job), the first line says how far back its sparklines reach (``-5m``) before them.

The process table is what people come for, so panes get at most about two fifths of the rows shared
with it (`GPU_SHARE`) and leave the table at least `MIN_TABLE_ROWS`; one line per GPU is the fallback
(with many GPUs on a short terminal it may leave less: the table scrolls). The widths always add up
to the whole width: no column is left blank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gputui import cells

KINDS = ("panes", "columns", "lines")
AUTO = "auto"
CHOICES = (AUTO, *KINDS)  # what `v` cycles through; the name is what settings persist

GPU_SHARE = 0.4  # of the rows shared with the process table
MIN_TABLE_ROWS = 10
MAX_SPARK_ROWS = 4
LABEL = 8  # "    util" before a pane's sparkline
AXIS_ROWS = 1  # the time scale under the panes (where a margin was)
GAP = 0  # between two columns of panes: each pane starts with a blank (its selection marker)
MIN_PANE_WIDTH = 56  # a pane narrower than this shows little but its sparklines: use lines
MIN_SPARK = 8
# One line per GPU: "▶ 0 " + name + " " | "-15m " | util spark | " 100%" | " " mem spark | " 100/100G" |
# extras
LINE_TITLE = 5  # marker, two-digit index, spaces around the name
LINE_SCALE = 5  # "-15m ": how far back the sparklines reach (on the first line; blank on the others)
LINE_UTIL = 5  # " 100%"
LINE_MEM = 10  # "  80/80G" and the space before the mem sparkline
LINE_EXTRAS = 18  # " 91°C ⚠ thermal …"; a wide line gives more (power, fan, PCIe), up to MAX_LINE_EXTRAS
MAX_LINE_EXTRAS = 40
MIN_NAME = 9  # "H100 80GB": a name gives way, to this, before the sparklines get under LINE_SPARK
LINE_SPARK = 14


@dataclass(frozen=True)
class GpuLayout:
    kind: str  # one of KINDS
    columns: int  # panes side by side (1 or 2)
    column_widths: tuple[int, ...]  # cells of each column; with the gaps they add up to the width
    spark_rows: int  # rows of each sparkline
    spark_width: int  # cells of the util sparkline (of the first column for panes)
    mem_spark_width: int  # cells of the memory sparkline
    height: int  # rows the GPU area takes (with the time scale's row, if any)
    name_width: int  # cells for the GPU's name on a `lines` line
    extras_width: int  # cells after the memory value on a `lines` line (temperature, power, ...)

    @property
    def rows_per_gpu(self) -> int:
        return 1 if self.kind == "lines" else 1 + 2 * self.spark_rows

    @property
    def axis_rows(self) -> int:
        """The time scale's row under the panes; one line per GPU has none (its first line says)."""
        return 0 if self.kind == "lines" else AXIS_ROWS


def pane_height(n_gpus: int, columns: int, spark_rows: int) -> int:
    return math.ceil(n_gpus / columns) * (1 + 2 * spark_rows) + AXIS_ROWS


def _split(width: int, columns: int) -> tuple[int, ...]:
    if columns == 1:
        return (width,)
    left = (width - GAP + 1) // 2
    return (left, width - GAP - left)


def _panes(n_gpus: int, width: int, columns: int, budget: int) -> GpuLayout | None:
    """Panes with the tallest sparklines that fit `budget` rows; None when not even one row fits."""
    widths = _split(width, columns)
    rows = max(
        (r for r in range(1, MAX_SPARK_ROWS + 1) if pane_height(n_gpus, columns, r) <= budget), default=0
    )
    if rows == 0:
        return None
    spark = max(1, widths[0] - LABEL)
    kind = "panes" if columns == 1 else "columns"
    return GpuLayout(kind, columns, widths, rows, spark, spark, pane_height(n_gpus, columns, rows), 0, 0)


def _area(layout: GpuLayout) -> int:
    return layout.spark_rows * layout.spark_width


def _lines(n_gpus: int, width: int, name_width: int) -> GpuLayout:
    """One line per GPU; the two sparklines share what the text leaves. The name gives way first (to
    MIN_NAME: `H100 80GB`), so that the extras keep room for the temperature and a throttle reason;
    on a very narrow line the extras, then the rest of the name."""
    name = max(1, name_width)
    extras = min(MAX_LINE_EXTRAS, LINE_EXTRAS + max(0, (width - 160) // 2))
    fixed = LINE_TITLE + LINE_SCALE + LINE_UTIL + LINE_MEM
    while width - fixed - name - extras < 2 * LINE_SPARK and name > MIN_NAME:
        name -= 1
    while width - fixed - name - extras < 2 * MIN_SPARK and (extras > 0 or name > 1):
        if extras > 0:
            extras = max(0, extras - 1)
        else:
            name -= 1
    free = max(2, width - fixed - name - extras)
    util = free // 2
    mem = free - util
    # Whatever the sparklines cannot use (a very narrow terminal) is still accounted for in extras.
    extras = width - fixed - name - util - mem
    return GpuLayout("lines", 1, (width,), 1, util, mem, n_gpus, name, extras)


def choose(
    n_gpus: int,
    width: int,
    rows: int,
    *,
    name_width: int = 14,
    prefer: str = AUTO,
    gpu_share: float = GPU_SHARE,
    min_table_rows: int = MIN_TABLE_ROWS,
) -> GpuLayout:
    """The layout for `n_gpus` in `width` cells, with `rows` rows shared by the GPU area and the table.

    `name_width`: the widest GPU name in cells. `prefer`: a kind the user chose with `v` (its sparklines
    still fit the room), or AUTO: the richest kind that leaves the table its share.
    """
    n = max(1, n_gpus)
    width = max(1, width)
    budget = max(0, min(int(rows * gpu_share), rows - min_table_rows))
    if prefer in KINDS:
        return _preferred(prefer, n, width, budget, name_width)
    candidates = [
        layout
        for columns in (1, 2)
        if min(_split(width, columns)) >= MIN_PANE_WIDTH
        for layout in [_panes(n, width, columns, budget)]
        if layout is not None
    ]
    if candidates:  # the most sparkline (rows x cells); on a tie, one column
        return max(candidates, key=_area)
    return _lines(n, width, name_width)


def _preferred(kind: str, n: int, width: int, budget: int, name_width: int) -> GpuLayout:
    if kind == "lines":
        return _lines(n, width, name_width)
    columns = 1 if kind == "panes" or width < 2 * MIN_PANE_WIDTH + GAP else 2
    # Chosen by hand: the sparklines grow within the GPU area's share as in AUTO; when not even one row
    # each fits that share, they get one row each anyway (the table gives way, down to what is left).
    layout = _panes(n, width, columns, budget) or _panes(n, width, columns, pane_height(n, columns, 1))
    assert layout is not None
    return layout


def next_choice(current: str) -> str:
    """What `v` switches to after `current` (an unknown name, from an old settings file, starts over)."""
    i = CHOICES.index(current) if current in CHOICES else -1
    return CHOICES[(i + 1) % len(CHOICES)]


# -- a line of fields that gives way by priority ------------------------------------------------------

Segment = tuple[str, Any]  # text and its style (a Rich Style in the UI; anything here)


class Field:
    """One item of a summary line. `priority`: 0 is never dropped (only shortened), higher goes first.
    `variants`: the item from its full form to its shortest. `shorten`: the priority of each step from
    one variant to the next (default: the field's own), so that a field may shorten long before it is
    dropped (`631/700W` → `631W` before the clocks go) or keep its telling short form long after
    (`⚠ thermal` outlives the temperature; only then `⚠`).

    Every GPU makes ~11 of them a tick: what fit_fields needs (each step's priority, each variant's width)
    is worked out once, here."""

    __slots__ = ("_widths", "priority", "shorten", "steps", "variants", "width")

    def __init__(
        self, priority: int, variants: tuple[tuple[Segment, ...], ...], shorten: tuple[int, ...] = ()
    ) -> None:
        self.priority, self.variants, self.shorten = priority, variants, shorten
        # The priority of each way it gives room: each shortening, then (unless priority 0) dropping.
        if len(variants) == 1 and not shorten:  # most fields (Field.of): nothing to check
            self.steps: tuple[int, ...] = (priority,) if priority > 0 else ()
        else:
            steps = list(shorten) if shorten else [priority] * (len(variants) - 1)
            if priority > 0:
                steps.append(priority)
            if (shorten and len(shorten) != len(variants) - 1) or steps != sorted(steps, reverse=True):
                raise ValueError(f"a field's steps are taken in their order: {steps} ({variants})")
            self.steps = tuple(steps)
        self.width = segments_width(variants[0])  # in full; the shorter variants' only when a line overflows
        self._widths: tuple[int, ...] | None = None

    @property
    def widths(self) -> tuple[int, ...]:
        """Each variant's width."""
        if self._widths is None:
            self._widths = (self.width, *map(segments_width, self.variants[1:]))
        return self._widths

    def __repr__(self) -> str:
        return f"Field({self.priority}, {self.variants}, {self.shorten})"

    @staticmethod
    def of(priority: int, *segments: Segment) -> Field:
        return Field(priority, (segments,))


def segments_width(segments: Sequence[Segment]) -> int:
    return sum(cells.width(text) for text, _ in segments)


def fit_fields(fields: Sequence[Field], width: int, ellipsis_style: Any = None) -> list[Segment]:
    """The fields, in their order, in at most `width` cells: the steps of the highest priority are
    taken first (each field's shortening, then its dropping; on a tie the later field's first), until
    the rest fit; a line that lost anything ends with ` …`."""
    total = sum(f.width for f in fields)
    if total <= width:
        return [s for f in fields for s in f.variants[0]]
    chosen = [0] * len(fields)  # index into the field's variants; len(variants): dropped
    room = width - 2  # " …"
    steps = sorted(
        ((p, k, i) for k, f in enumerate(fields) for i, p in enumerate(f.steps)),
        key=lambda step: (-step[0], -step[1], step[2]),
    )
    for _, k, i in steps:
        if total <= room:
            break
        if chosen[k] == i:  # (a field's steps are taken in their order)
            widths = fields[k].widths
            total -= widths[i] - (widths[i + 1] if i + 1 < len(widths) else 0)
            chosen[k] = i + 1
    out = [s for f, i in zip(fields, chosen, strict=True) if i < len(f.variants) for s in f.variants[i]]
    out.append((" …", ellipsis_style))
    return _cut_segments(out, width, ellipsis_style)


def _cut_segments(segments: list[Segment], width: int, ellipsis_style: Any) -> list[Segment]:
    """Even the fields that are never dropped may not fit a very narrow line: cut, ending with `…`."""
    if segments_width(segments) <= width:
        return segments
    if width <= 0:
        return []
    out: list[Segment] = []
    used = 0
    for text, style in segments:
        room = width - 1 - used
        if room <= 0:
            break
        part = cells.cut(text, room, ellipsis="")
        out.append((part, style))
        used += cells.width(part)
    return [*out, (" " * (width - 1 - used) + "…", ellipsis_style)]
