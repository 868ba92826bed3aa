"""gputui.ui._sgr's Pen: fewer bytes than Textual's rendering, the same cells on the terminal."""

from __future__ import annotations

import random
import re

import pytest
from rich.console import Console
from rich.control import Control
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gputui.ui._sgr import Pen

_SGR = re.compile(r"\x1b\[([0-9;]*)m|\x1b\[(\d+);(\d+)H|([^\x1b]+)")
_OFF = {"22": {"1", "2"}, "23": {"3"}, "24": {"4", "21"}, "25": {"5", "6"}, "27": {"7"}, "28": {"8"}}
_OFF |= {"29": {"9"}, "54": {"51", "52"}, "55": {"53"}}


def _screen(written: str) -> dict[tuple[int, int], tuple[str, frozenset[str], str, str]]:
    """A terminal's cells after `written`: (text, attributes, foreground, background) by (row, column)."""
    cells: dict[tuple[int, int], tuple[str, frozenset[str], str, str]] = {}
    attrs: set[str] = set()
    fg = bg = ""
    y = x = 0
    for m in _SGR.finditer(written):
        params, row, col, text = m.groups()
        if row is not None:
            y, x = int(row), int(col)
        elif text is not None:
            for ch in text:
                cells[y, x] = (ch, frozenset(attrs), fg, bg)
                x += 1
        else:
            codes = (params or "0").split(";")
            i = 0
            while i < len(codes):
                code = codes[i]
                if code == "0":
                    attrs, fg, bg = set(), "", ""
                elif code in ("38", "48"):
                    n = 3 if codes[i + 1] == "5" else 5
                    value = ";".join(codes[i : i + n])
                    fg, bg = (value, bg) if code == "38" else (fg, value)
                    i += n - 1
                elif code in ("39", "49"):
                    fg, bg = ("", bg) if code == "39" else (fg, "")
                elif code in _OFF:
                    attrs -= _OFF[code]
                else:
                    attrs.add(code)
                i += 1
    return cells


_STYLE_ARGS: list[dict[str, object]] = [
    {},
    {"bold": True},
    {"dim": True},
    {"bold": True, "dim": True},
    {"color": "color(214)", "bgcolor": "color(233)"},
    {"color": "color(71)", "bgcolor": "color(233)"},
    {"color": "color(71)", "bgcolor": "color(233)", "bold": True},
    {"color": "#ff8000", "bgcolor": "color(233)", "italic": True},
    {"color": "color(253)", "bgcolor": "color(32)", "bold": True, "reverse": True},
    {"underline": True, "color": "red"},
    {"underline2": True, "strike": True},
    {"bgcolor": "color(233)"},
    {"color": "default", "bgcolor": "default"},
]


def _strips(seed: int) -> list[tuple[int, int, Strip]]:
    rng = random.Random(seed)
    # New objects for each test: Textual caches a style's codes on it, for the first colour system seen.
    styles = [Style(**args) for args in _STYLE_ARGS]  # type: ignore[arg-type]
    out = []
    for y in range(1, 6):
        x = rng.randrange(0, 10)
        for _ in range(rng.randrange(1, 4)):
            segments = [
                Segment(rng.choice(["7", " 42%", "TC", " ", "▅▆"]), rng.choice([*styles, None]))
                for _ in range(rng.randrange(1, 5))
            ]
            strip = Strip(segments)
            out.append((y, x, strip))
            x += strip.cell_length + rng.randrange(0, 8)
    return out


def _write(strips: list[tuple[int, int, Strip]], console: Console, pen: bool) -> str:
    if not pen:  # Textual's way: every segment in its full style, then a reset
        return "".join(Control.move_to(x, y).segment.text + strip.render(console) for y, x, strip in strips)
    writer = Pen(console, cache={})
    for y, x, strip in strips:
        writer.move(Control.move_to(x, y).segment.text)
        writer.strip(strip)
    return writer.done()


@pytest.mark.parametrize("system", ["256", "truecolor"])
@pytest.mark.parametrize("seed", range(40))
def test_the_pen_draws_the_cells_textual_draws(seed: int, system: str) -> None:
    console = Console(color_system=system, force_terminal=True, width=120)  # type: ignore[arg-type]
    strips = _strips(seed)
    textual, pen = _write(strips, console, pen=False), _write(strips, console, pen=True)
    assert _screen(pen) == _screen(textual)
    assert len(pen) <= len(textual)
    assert _screen(pen + "\x1b[9;1HX")[9, 1] == ("X", frozenset(), "", "")  # it ends in the plain style


def test_a_colour_change_sends_only_that_colour() -> None:
    console = Console(color_system="256", force_terminal=True)
    orange, green = (Style(color=f"color({c})", bgcolor="color(233)") for c in (214, 71))
    pen = Pen(console, cache={})
    pen.strip(Strip([Segment("7", orange), Segment("%", orange), Segment(" 9", green)]))
    assert pen.done() == "\x1b[38;5;214;48;5;233m7%\x1b[38;5;71m 9\x1b[0m"


def test_attributes_change_by_their_codes_or_from_a_reset_whichever_is_shorter() -> None:
    console = Console(color_system="256", force_terminal=True)
    bold, plain, blue = (
        Style(color="color(131)", bold=True),
        Style(color="color(131)"),
        Style(color="color(32)"),
    )
    pen = Pen(console, cache={})
    pen.strip(Strip([Segment("1", bold), Segment("2", plain), Segment("3", bold), Segment("4", blue)]))
    assert pen.done() == "\x1b[1;38;5;131m1\x1b[22m2\x1b[1m3\x1b[0;38;5;32m4\x1b[0m"


def test_unstyled_text_alone_is_written_as_is() -> None:
    pen = Pen(Console(color_system=None, force_terminal=True), cache={})
    pen.move(Control.move_to(7, 0).segment.text)
    pen.strip(Strip([Segment("7")]))
    assert pen.done() == Control.move_to(7, 0).segment.text + "7"


def test_the_colour_system_is_the_consoles() -> None:
    style = Style(color="#ff8000")
    written = {}
    for system in ("256", "truecolor"):
        pen = Pen(Console(color_system=system, force_terminal=True))
        pen.strip(Strip([Segment("x", style)]))
        written[system] = pen.done()
    assert written["256"] != written["truecolor"]
    assert "38;2;255;128;0" in written["truecolor"]
