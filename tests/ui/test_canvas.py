"""CellCanvas: what it hands Textual (segments, styles) and what it costs over time (Rich's caches)."""

from __future__ import annotations

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.color import Color
from textual.geometry import Region
from textual.strip import Strip

from gputui.cells import width
from gputui.ui.widgets.canvas import (
    _NOT_ONE_CELL,
    PLAIN,
    WIDE_TAIL,
    CellCanvas,
    Line,
    _segments,
    changed_spans,
)


class Board(CellCanvas):
    DEFAULT_CSS = "Board { height: 3; }"

    def __init__(self) -> None:
        super().__init__()
        self.text = ["gpu 0  util  42%  python train.py --epochs 9…"]

    def build(self, width: int) -> list[Line]:
        return [Line().add(t, Style(bold=True)) for t in self.text]


class BoardApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Board()


def test_plain_text_is_one_segment_and_other_characters_stand_alone() -> None:
    bold = Style(bold=True)
    assert _segments("UTIL  42%  °C ▁▂▃█", bold) == [Segment("UTIL  42%  °C ▁▂▃█", bold)]
    parts = _segments("python train.py --r… ⚠ hot", bold)
    assert "".join(s.text for s in parts) == "python train.py --r… ⚠ hot"
    assert [s.text for s in parts] == ["python train.py --r", "…", " ", "⚠", " hot"]
    assert all(s.style is bold for s in parts)


async def test_redrawn_lines_with_an_ellipsis_leave_richs_split_cache_alone() -> None:
    app = BoardApp()
    async with app.run_test(size=(60, 5)) as pilot:
        board = app.query_one(Board)
        before = Segment._split_cells.cache_info().currsize
        for n in range(300):  # a number that changes every tick, on a line with a truncated command
            board.text = [f"gpu 0  util {n:>3}%  python train.py --epochs 9…"]
            board.redraw()
            strip = board.render_line(0)
            for cut in (5, 17, 33, 41):  # how Textual crops a line to the changed span
                strip.crop(cut, cut + 9)
        await pilot.pause()
        assert Segment._split_cells.cache_info().currsize == before
        assert "".join(s.text for s in board.render_line(0)).startswith("gpu 0  util 299%  python")


async def test_the_base_style_follows_a_change_of_the_widgets_css() -> None:
    app = BoardApp()
    async with app.run_test(size=(60, 5)) as pilot:
        board = app.query_one(Board)
        board.redraw()
        first = board.render_line(0)
        board.styles.background = Color(200, 0, 0)
        await pilot.pause()
        again = board.render_line(0)
        assert first != again
        assert all(
            s.style is not None and s.style.bgcolor is not None and s.style.bgcolor.triplet == (200, 0, 0)
            for s in again
            if s.text.strip()
        )


def test_the_fast_path_takes_only_characters_of_one_cell() -> None:
    """Line.add gives each character of a text without _NOT_ONE_CELL one cell, unmeasured."""
    taken = [chr(c) for c in range(0x20, 0x3000) if not _NOT_ONE_CELL.search(chr(c))]
    assert "…" in taken and "⚠" in taken and "▅" in taken and "訓" not in taken
    assert all(width(ch) == 1 for ch in taken)
    line = Line().add("util 42% ▼ … ⚠")
    assert len(line) == width("util 42% ▼ … ⚠")


def test_padding_uses_the_one_plain_style() -> None:
    cells = Line().add("ab").pad_to(5).fit(8)
    assert [c for c, _ in cells] == list("ab      ")
    assert all(style is PLAIN for _, style in cells)


# -- wide and combining characters ------------------------------------------------------------------

CJK_COMMAND = "python 訓練.py --データ /data/日本語 --name café\u0301 --tag e\u0301\u0302"


def test_a_wide_character_takes_two_cells_and_a_combining_mark_none() -> None:
    line = Line().add("a訓b").add("e\u0301x")
    assert len(line) == width("a訓b") + width("e\u0301x") == 6
    assert [c for c, _ in line.cells] == ["a", "訓", WIDE_TAIL, "b", "e\u0301", "x"]
    line = Line().add("訓").add("\u0301")  # a mark after a wide character joins its first cell
    assert [c for c, _ in line.cells] == ["訓\u0301", WIDE_TAIL]
    assert [c for c, _ in Line().add("\u0301a").cells] == [" \u0301", "a"]


@pytest.mark.parametrize("cut", range(0, 30))
def test_fit_never_draws_half_a_wide_character_or_past_the_width(cut: int) -> None:
    cells = Line().add(CJK_COMMAND).fit(cut)
    text = "".join(c for c, _ in cells)
    assert len(cells) == cut
    assert width(text) == cut
    assert cells[0][0] != WIDE_TAIL if cells else True


def test_two_changes_are_one_span_only_where_the_cells_between_cost_less_than_a_move() -> None:
    value, label = Style(color="green"), Style(color="grey50")

    def gpu(sm: int, tc: int) -> list[tuple[str, Style]]:
        return Line().add(f"SM {sm:2d}%", value).add(" TC ", label).add(f"{tc:2d}%", value).fit(20)

    # Between 93 and 59: `%`, ` TC ` in another colour, and back: two colour codes, more than a move.
    assert changed_spans(gpu(93, 59), gpu(94, 58)) == [(4, 5), (11, 12)]
    same = [(ch, value) for ch in "93 of 59            "]
    other = [(ch, value) for ch in "94 of 58            "]
    assert changed_spans(same, other) == [(1, 8)]  # four cells of one style: cheaper than a move
    far = [(ch, value) for ch in "9 ........ 5        "]
    assert changed_spans(far, [(ch, value) for ch in "8 ........ 4        "]) == [(0, 1), (11, 12)]


def test_a_changed_span_covers_whole_wide_characters() -> None:
    old = Line().add("ab訓練cd").fit(8)
    new = Line().add("ab訓棟cd").fit(8)
    (span,) = changed_spans(old, new)
    assert span == (4, 6)
    new = Line().add("abc練cd").fit(8)  # 'c' where the first wide character's tail was
    for start, end in changed_spans(old, new):
        for line in (old, new):
            assert start >= len(line) or line[start][0] != WIDE_TAIL
            assert end >= len(line) or line[end][0] != WIDE_TAIL


class Wide(Board):
    def __init__(self) -> None:
        super().__init__()
        self.text = [CJK_COMMAND * 3, "ascii " * 30]


class WideApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Wide()


@pytest.mark.parametrize("cols", [40, 41, 57, 120])
async def test_a_cjk_and_combining_command_line_stays_inside_the_canvas(cols: int) -> None:
    app = WideApp()
    async with app.run_test(size=(cols, 5)) as pilot:
        board = app.query_one(Wide)
        board.redraw()
        await pilot.pause()
        for y in range(2):
            strip = board.render_line(y)
            assert strip.cell_length == cols
            assert sum(width(s.text) for s in strip) == cols
        # The screen shows the command's start, wide characters and all.
        assert "python 訓練.py --データ" in "".join(s.text for s in board.render_line(0))


def test_spaces_between_values_take_the_ink_before_them() -> None:
    """A gap's foreground is invisible: it joins the run before it, so the line is fewer colour codes."""
    value, label = Style(color="green", bold=True), Style(color="grey50")
    line = Line().add("61°C", value).add("  ", label).add("647 W", value)
    assert [style for _, style in line.cells] == [value] * len("61°C  647 W")


@pytest.mark.parametrize(
    "visible", [Style(underline=True), Style(reverse=True), Style(bgcolor="red"), Style(strike=True)]
)
def test_spaces_keep_a_style_that_shows_on_a_blank(visible: Style) -> None:
    """Underline, reverse, a background, a strike: a space draws them, so it keeps its own style, and a
    space never takes such a style from the cell before it."""
    after_visible = Line().add("x", visible).add("  ", PLAIN)
    assert [s for _, s in after_visible.cells] == [visible, PLAIN, PLAIN]
    visible_spaces = Line().add("x", PLAIN).add("  ", visible)
    assert [s for _, s in visible_spaces.cells] == [PLAIN, visible, visible]


class Counted(Board):
    """Records what each refresh() asked to repaint: () is the whole widget."""

    def __init__(self) -> None:
        super().__init__()
        self.text = ["gpu 0", "gpu 1"]
        self.asked: list[tuple[Region, ...]] = []

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Counted:
        self.asked.append(regions)
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


class CountedApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Counted()


async def test_a_line_more_or_less_repaints_that_line_not_the_widget() -> None:
    """A row coming or going in a table (a process started) sends that row, not every row again."""
    app = CountedApp()
    async with app.run_test(size=(40, 5)) as pilot:
        board = app.query_one(Counted)
        board.redraw()
        await pilot.pause()
        board.asked.clear()
        board.text = ["gpu 0", "gpu 1", "gpu 2"]
        board.redraw()
        board.text = ["gpu 0", "gpu 9"]
        board.redraw()
        assert board.asked == [(Region(0, 2, 5, 1),), (Region(4, 1, 1, 1), Region(0, 2, 5, 1))]
        await pilot.pause()
        assert "".join(s.text for s in board.render_line(2)).strip() == ""


class Framed(Board):
    DEFAULT_CSS = "Framed { height: 5; border: round red; padding: 0 1; }"


class TwoBoardsApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Board()
        yield Framed()


def texts(strips: list[Strip]) -> list[str]:
    return ["".join(s.text for s in strip) for strip in strips]


async def test_a_plain_canvas_hands_over_its_own_strips_as_textual_would_draw_them() -> None:
    """Lines straight from the canvas (StylesCache bypassed), the same segments and styles as Textual's
    own path, the app's colour filter applied and the crop honoured; a changed line drawn anew."""
    app = TwoBoardsApp()
    async with app.run_test(size=(60, 9)) as pilot:
        board, framed = app.query_one(Board), app.query_one(Framed)
        for canvas in (board, framed):
            canvas.redraw()
        await pilot.pause()
        for crop in (Region(0, 0, 60, 3), Region(7, 0, 9, 1)):
            mine = board.render_lines(crop)
            theirs = board._styles_cache.render_widget(board, crop)
            assert texts(mine) == texts(theirs) and [list(s) for s in mine] == [list(s) for s in theirs]
        assert texts(board.render_lines(Region(7, 0, 9, 1))) == ["util  42%"]
        board.text = ["gpu 0  util  43%  python train.py --epochs 9…"]
        board.redraw()
        assert texts(board.render_lines(Region(7, 0, 9, 1))) == ["util  43%"]
        # A border and padding are Textual's to draw: that canvas goes the usual way.
        drawn = texts(framed.render_lines(Region(0, 0, 60, 3)))
        assert drawn[0].startswith("╭") and drawn[1].startswith("│ gpu 0")


class Colours(CellCanvas):
    """The 16 ANSI colours, dim and not, on an ANSI background: what the true-colour filter turns."""

    DEFAULT_CSS = "Colours { height: 2; background: ansi_blue; }"

    def build(self, width: int) -> list[Line]:
        names = ["red", "bright_green", "yellow", "magenta", "cyan", "white", "#7f7f7f", "default"]
        top, bottom = Line(), Line()
        for name in names:
            top.add(f"{name[:4]} ", Style(color=name))
            bottom.add(f"{name[:4]} ", Style(color=name, dim=True, bgcolor="black" if "e" in name else None))
        return [top, bottom]


class ColoursApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Colours()


async def test_ansi_colours_come_out_as_textuals_true_colour_filter_turns_them() -> None:
    """The canvas applies the filter as it draws each strip; it must give what the filter gives, and
    draw again with a new theme's filter."""
    app = ColoursApp()
    async with app.run_test(size=(50, 4)) as pilot:
        app.ansi_color = False  # the filter is on: a terminal not known to take true colour
        canvas = app.query_one(Colours)
        canvas.redraw()
        await pilot.pause()
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await pilot.pause()
            crop = Region(0, 0, 50, 2)
            mine = canvas.render_lines(crop)
            theirs = canvas._styles_cache.render_widget(canvas, crop)
            assert [list(s) for s in mine] == [list(s) for s in theirs]
            styles = {seg.style for strip in mine for seg in strip}
            assert all(s is not None and (s.color is None or s.color.triplet is not None) for s in styles)
            assert not any(s.dim for s in styles if s is not None)  # dim ink is mixed into the colour
        app.ansi_color = True  # and off again: the terminal's own colours
        await pilot.pause()
        mine = canvas.render_lines(Region(0, 0, 50, 2))
        assert [list(s) for s in mine] == [list(s) for s in canvas._styles_cache.render_widget(canvas, crop)]
        assert any(seg.style and seg.style.color and seg.style.color.triplet is None for seg in mine[0])
