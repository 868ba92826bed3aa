"""The layout engine (gputui.ui.widgets.layout), pure: GPU count x terminal size -> where the GPUs go, and the
priority order that makes a summary line give way."""

from __future__ import annotations

import math

import pytest

from gputui import cells
from gputui.ui.widgets import layout
from gputui.ui.widgets.gpu_panes import CHROME_ROWS
from gputui.ui.widgets.layout import Field, choose, fit_fields, next_choice

SIZES = [(80, 24), (120, 40), (200, 60)]
GRID = [(n, w, h) for n in range(1, 17) for w, h in SIZES]


def shared_rows(height: int) -> int:
    """The rows the GPU area and the table share on a terminal of `height` rows."""
    return height - CHROME_ROWS


@pytest.mark.parametrize(("n", "width", "height"), GRID, ids=[f"{n}gpu-{w}x{h}" for n, w, h in GRID])
def test_every_layout_places_every_gpu_and_fills_the_width(n: int, width: int, height: int) -> None:
    lay = choose(n, width, shared_rows(height))
    assert lay.kind in layout.KINDS
    # A place for every GPU, and the time scale's row under panes (one line per GPU has none).
    assert lay.height == math.ceil(n / lay.columns) * lay.rows_per_gpu + lay.axis_rows
    assert lay.axis_rows == (0 if lay.kind == "lines" else 1)
    assert sum(lay.column_widths) + layout.GAP * (lay.columns - 1) == width  # no column left blank
    assert 1 <= lay.spark_rows <= layout.MAX_SPARK_ROWS
    assert lay.spark_width >= layout.MIN_SPARK and lay.mem_spark_width >= layout.MIN_SPARK
    if lay.kind == "lines":
        used = (
            layout.LINE_TITLE
            + lay.name_width
            + layout.LINE_SCALE
            + layout.LINE_UTIL
            + layout.LINE_MEM
            + lay.extras_width
        ) + (lay.spark_width + lay.mem_spark_width)
        assert used == width
    else:
        assert lay.spark_width == lay.column_widths[0] - layout.LABEL  # the sparkline runs to the edge
    table = shared_rows(height) - lay.height
    if n <= shared_rows(height) - layout.MIN_TABLE_ROWS:  # one line per GPU leaves the table its minimum
        assert table >= layout.MIN_TABLE_ROWS, lay


def test_8_gpus_at_120x40_show_util_and_memory_history_and_leave_20_table_rows() -> None:
    lay = choose(8, 120, shared_rows(40))
    assert lay.kind == "columns" and lay.columns == 2
    assert shared_rows(40) - lay.height >= 20
    assert lay.spark_width >= 40 and lay.mem_spark_width >= 40


def test_16_gpus_at_200x60_are_lines_with_40_cell_sparklines_across_the_whole_width() -> None:
    lay = choose(16, 200, shared_rows(60))
    assert lay.kind == "lines" and lay.height == 16
    assert lay.spark_width >= 40 and lay.mem_spark_width >= 40
    assert lay.name_width >= len("H100 80GB HBM3")  # the name is not cut to `H100 80GB HB`


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_a_few_gpus_on_a_tall_terminal_get_taller_charts(n: int) -> None:
    lay = choose(n, 200, shared_rows(60))
    assert lay.kind == "panes" and lay.spark_rows >= 2
    assert shared_rows(60) - lay.height >= 20


def test_charts_grow_with_the_room_and_stop_at_the_maximum() -> None:
    heights = [choose(1, 120, rows).spark_rows for rows in range(10, 80, 5)]
    assert heights == sorted(heights) and heights[0] < heights[-1] == layout.MAX_SPARK_ROWS


def test_a_chosen_kind_is_honoured_and_two_columns_need_the_width() -> None:
    assert choose(8, 120, 34, prefer="lines").kind == "lines"
    assert choose(8, 120, 34, prefer="panes").kind == "panes"
    assert choose(2, 200, 54, prefer="columns").kind == "columns"
    assert choose(8, 80, 18, prefer="columns").kind == "panes"  # 2 x 40 cells: too narrow for panes
    # A chosen kind may take more than its share, not the table's minimum (when one spark row fits).
    lay = choose(8, 200, 54, prefer="panes")
    assert 54 - lay.height >= layout.MIN_TABLE_ROWS and lay.height == 8 * 3 + 1  # and the time scale


def test_v_cycles_through_every_choice_and_an_unknown_name_starts_over() -> None:
    seen = ["auto"]
    for _ in range(len(layout.CHOICES)):
        seen.append(next_choice(seen[-1]))
    assert seen == ["auto", "panes", "columns", "lines", "auto"]
    assert next_choice("from-an-old-version") == "auto"


# -- fit_fields: the priority order ---------------------------------------------------------------


def text(segments: list[tuple[str, object]]) -> str:
    return "".join(t for t, _ in segments)


def fields() -> list[Field]:
    return [
        Field.of(0, ("UTIL 95%", None)),
        Field.of(2, ("  POWER", None)),
        Field.of(1, ("  TEMP", None)),
        Field.of(3, ("  FAN", None)),
    ]


def test_a_line_that_fits_is_unchanged() -> None:
    assert text(fit_fields(fields(), 100)) == "UTIL 95%  POWER  TEMP  FAN"


def test_the_least_useful_go_first_keeping_the_order_and_the_line_ends_with_an_ellipsis() -> None:
    full = "UTIL 95%  POWER  TEMP  FAN"
    assert text(fit_fields(fields(), len(full) - 1)) == "UTIL 95%  POWER  TEMP …"
    assert text(fit_fields(fields(), len("UTIL 95%  TEMP …"))) == "UTIL 95%  TEMP …"
    assert text(fit_fields(fields(), 12)) == "UTIL 95% …"


def test_a_field_is_shortened_before_it_is_dropped_and_priority_0_is_only_ever_cut() -> None:
    f = [Field.of(0, ("UTIL 95%", None)), Field(1, ((("  reasons a, b, c", None),), (("  a +2", None),)))]
    assert text(fit_fields(f, 20)) == "UTIL 95%  a +2 …"
    tiny = fit_fields(f, 6)
    assert text(tiny) == "UTIL …" and cells.width(text(tiny)) == 6


def test_a_field_whose_steps_are_out_of_order_is_refused() -> None:
    """Its steps are taken in their order: a shortening of lower priority than its dropping (or than the
    shortening after it) could never be taken before it."""
    with pytest.raises(ValueError, match="in their order"):
        Field(3, ((("631/700W", None),), (("631W", None),)), shorten=(1,))
    with pytest.raises(ValueError):
        Field(1, ((("a", None),), (("b", None),)), shorten=(1, 1))  # one step per shortening
    assert Field(1, ((("631/700W", None),), (("631W", None),)), shorten=(5,)).steps == (5, 1)


def test_width_is_counted_in_cells() -> None:
    f = [Field.of(0, ("名前", None)), Field.of(1, (" 漢字", None))]
    assert text(fit_fields(f, 9)) == "名前 漢字"
    assert text(fit_fields(f, 8)) == "名前 …"
