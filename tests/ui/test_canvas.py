"""CellCanvas: what it hands Textual (segments, styles) and what it costs over time (Rich's caches)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.color import Color

from gputui.ui.canvas import PLAIN, CellCanvas, Line, _segments


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
            s.style.bgcolor is not None and s.style.bgcolor.triplet == (200, 0, 0)
            for s in again
            if s.text.strip()
        )


def test_padding_uses_the_one_plain_style() -> None:
    cells = Line().add("ab").pad_to(5).fit(8)
    assert [c for c, _ in cells] == list("ab      ")
    assert all(style is PLAIN for _, style in cells)
