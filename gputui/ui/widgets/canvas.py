"""A widget drawn as a grid of styled cells that repaints only the cells that changed.

Over SSH every repainted cell costs bytes. Textual repaints whole widgets on `refresh()`; a CellCanvas
instead compares the new lines with the last ones and marks only the changed spans dirty, so a tick
that changes three digits sends three digits.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import compress, count, groupby, repeat
from operator import itemgetter, ne
from typing import TYPE_CHECKING

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import ANSIToTruecolor
from textual.geometry import Region
from textual.reactive import var
from textual.strip import Strip
from textual.widget import Widget

from gputui.cells import width as cells_of
from gputui.ui._textual_compat import forget_dirty_regions
from gputui.ui.widgets.palette import Palette
from gputui.units import printable

if TYPE_CHECKING:
    from typing_extensions import Self

# One terminal cell: its text and style. A wide character (CJK) takes its cell and the next, whose text is
# WIDE_TAIL; a combining mark joins the text of the cell before it. So a line's length is its width.
Cell = tuple[str, Style]
WIDE_TAIL = ""


@lru_cache(maxsize=1024)
def _combine(base: Style, style: Style | None) -> Style:
    return base + style


@lru_cache(maxsize=1024)
def _ink(base: Style, style: Style, truecolor: ANSIToTruecolor, background: RichColor) -> Style:
    """`style` on the canvas's base, as Textual's true-colour filter would turn it (see render_lines)."""
    return truecolor.truecolor_style(_combine(base, style), background)


# The one empty style: cells compare by identity first, so a new Style() per cell would make unchanged
# lines compare unequal cell by cell in Python.
PLAIN = Style()
# Two changes on a line are sent as one span when re-sending the unchanged cells between them costs
# fewer bytes than a cursor move (ESC[row;colH) to the second: the cells' text, and a colour code
# (~11 bytes, ESC[38;5;246m) at each change of style among them. So `SM 93% TC 59%` with both numbers
# changed sends `93`, a move, `59`: not `% TC ` and two colour changes between them.
_MOVE_BYTES = 8
_STYLE_BYTES = 11
# Characters Rich measures and splits without a cache (ASCII, Latin, box drawing and blocks). A
# segment with any other character (an ellipsis, a warning sign) is split through Rich's 16,384-entry
# cache of split results; a line whose numbers change every tick would add an entry per tick and grow
# memory for hours (`make soak`). So those characters get segments of their own.
_FAST = "\x20-\x7e\xa0-\xac\xae-\u02ff\u2500-\u25fc"  # a regular expression's character ranges
_SLOW = re.compile(f"[^{_FAST}]")
# Not one cell wide, or not known to be: neither _FAST's nor a mark the widgets draw. (Expressions, not
# sets of ~1,000 one-character strings: those took ~170 KiB of the resident memory.)
_MARKS = "…⚠✖→←↑↓—"  # one cell each (tests/ui/test_canvas.py)
_NOT_ONE_CELL = re.compile(f"[^{_FAST}{_MARKS}]")


@lru_cache(maxsize=256)
def _ink_only(style: Style) -> bool:
    """Whether the style changes nothing on a blank cell: only its foreground, weight or slant, none of
    background, underline, reverse, strike, overline or link."""
    return not (
        style.bgcolor or style.underline or style.reverse or style.strike or style.overline or style.link
    )


def _segments(text: str, style: Style) -> list[Segment]:
    if not _SLOW.search(text):
        return [Segment(text, style)]
    out, start = [], 0
    for match in _SLOW.finditer(text):
        i = match.start()
        if start < i:
            out.append(Segment(text[start:i], style))
        out.append(Segment(text[i], style))
        start = i + 1
    if start < len(text):
        out.append(Segment(text[start:], style))
    return out


class Line:
    """Builds one line of terminal cells (see Cell): wide and combining characters take their cells."""

    __slots__ = ("cells",)

    def __init__(self) -> None:
        self.cells: list[Cell] = []

    def add(self, text: str, style: Style = PLAIN) -> Line:
        text = printable(text)  # a control character would move the terminal's cursor
        cells = self.cells
        if cells and not text.strip(" ") and _ink_only(style) and _ink_only(cells[-1][1]):
            # Spaces look the same in any ink: in the run before them, they cost no colour codes of their
            # own (a gap between two values that change every tick is ~25 bytes less on the wire).
            style = cells[-1][1]
        # Nearly every call, every frame: one cell per character, in C.
        if text.isascii() or not _NOT_ONE_CELL.search(text):
            self.cells.extend(zip(text, repeat(style)))
        else:
            self._add_wide(text, style)
        return self

    def _add_wide(self, text: str, style: Style) -> None:
        cells = self.cells
        for ch in text:
            n = cells_of(ch)
            if n == 1:
                cells.append((ch, style))
            elif n == 2:
                cells += [(ch, style), (WIDE_TAIL, style)]
            else:  # a combining mark: onto the character it follows (a wide one's first cell)
                at = len(cells) - 1 - (len(cells) > 1 and cells[-1][0] == WIDE_TAIL)
                if at < 0:
                    cells.append((" " + ch, style))
                else:
                    cells[at] = (cells[at][0] + ch, cells[at][1])

    def pad_to(self, width: int, style: Style = PLAIN) -> Line:
        if len(self.cells) < width:
            self.cells.extend([(" ", style)] * (width - len(self.cells)))
        return self

    def __len__(self) -> int:
        return len(self.cells)

    def fit(self, width: int) -> list[Cell]:
        cells = self.cells[:width]
        if len(self.cells) > width > 0 and self.cells[width][0] == WIDE_TAIL:
            cells[-1] = (" ", cells[-1][1])  # never half a wide character
        return cells + [(" ", PLAIN)] * (width - len(cells))


def changed_spans(old: list[Cell], new: list[Cell]) -> list[tuple[int, int]]:
    """[start, end) spans where the two lines differ; two spans are one where the cells between them cost
    fewer bytes than a cursor move (see _MOVE_BYTES)."""
    spans: list[tuple[int, int]] = []
    start = last = -1
    # The columns that differ, found in C (a changed line is mostly unchanged cells): Python then walks
    # only those.
    for x in compress(count(), map(ne, old, new)):
        if start < 0:
            start = x
        elif x - last > _MOVE_BYTES or _gap_bytes(new, last, x) >= _MOVE_BYTES:
            spans.append((start, last + 1))
            start = x
        last = x
    if start >= 0:
        spans.append((start, last + 1))
    if len(old) != len(new):
        spans.append((min(len(old), len(new)), max(len(old), len(new))))
    return [_whole_characters(span, old, new) for span in spans]


def _gap_bytes(line: list[Cell], last: int, x: int) -> int:
    """What re-sending the unchanged cells last+1..x-1 costs: their text, and a style code at each change
    of style from the changed cell `last` through them to the changed cell `x`."""
    cost, style = 0, line[last][1]
    for text, next_style in line[last + 1 : x + 1]:
        if next_style != style:
            cost += _STYLE_BYTES
            style = next_style
        cost += len(text.encode())
    return cost - len(line[x][0].encode())  # (cell x itself is sent either way)


def _whole_characters(span: tuple[int, int], old: list[Cell], new: list[Cell]) -> tuple[int, int]:
    """The span widened to whole wide characters: repainting half of one breaks it on the terminal."""
    start, end = span
    if any(start < len(line) and line[start][0] == WIDE_TAIL for line in (old, new)):
        start -= 1
    if any(end < len(line) and line[end][0] == WIDE_TAIL for line in (old, new)):
        end += 1
    return start, end


class CellCanvas(Widget):
    """Subclasses implement `build(width)` and redraw themselves when their state changes (a `var`
    whose watcher calls `redraw()`): whoever sets the state draws nothing."""

    # The theme's styles (the app hands a new one out on a theme change): the widget redraws with them.
    palette: var[Palette] = var(Palette.default, init=False)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._lines: list[list[Cell]] = []
        self._width = -1
        self._base: Style | None = None  # rich_style walks every ancestor's CSS: once per style change
        self._strips: dict[int, Strip] = {}  # each line's strip, made when first drawn after a change
        # The app's true-colour filter and the background that the strips in _strips were drawn for
        # (render_lines): a new theme brings a new filter.
        self._drawn_for: tuple[ANSIToTruecolor | None, Color | None] = (None, None)
        self._background: Color | None = None  # background_colors also walks the ancestors' CSS

    def watch_palette(self) -> None:
        self.redraw()

    def notify_style_update(self) -> None:  # the stylesheet changed (a theme, a pseudo-class)
        self._base = self._background = None
        self._strips.clear()
        super().notify_style_update()

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Self:
        if repaint and not regions:  # a whole repaint: how Textual applies an inline style change
            self._base = self._background = None
            self._strips.clear()
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    @property
    def base_style(self) -> Style:
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def build(self, width: int) -> list[Line]:
        raise NotImplementedError

    def redraw(self) -> None:
        width = self.size.width
        if width <= 0:
            return
        new = [line.fit(width) for line in self.build(width)]
        if width != self._width:
            self._width, self._lines, self._base = width, new, None
            self.refresh()
            return
        # A line not built is drawn blank (render_line): a row more or less in a table repaints the lines
        # that changed, not the widget.
        blank = [(" ", PLAIN)] * width
        olds = self._lines + [blank] * (len(new) - len(self._lines))
        # An unchanged line is the common case: one comparison in C, not a loop over its cells.
        regions = [
            Region(x0, y, x1 - x0, 1)
            for y, (old, line) in enumerate(zip(olds, new + [blank] * (len(olds) - len(new)), strict=True))
            if old != line
            for x0, x1 in changed_spans(old, line)
        ]
        self._lines = new
        for region in regions:
            self._strips.pop(region.y, None)
        if regions:
            self.refresh(*regions)
            # Textual also keeps the regions in a set only its own render_line empties (_textual_compat 5)
            forget_dirty_regions(self)

    def on_resize(self) -> None:
        self.redraw()

    def render_lines(self, crop: Region) -> list[Strip]:
        """The lines in `crop`, straight from this canvas's own strips. Textual's StylesCache would draw
        borders, padding, tint and opacity around each line and keep a second copy of it: a canvas has
        none of those (`_plain`), and knows which of its lines changed (redraw). On the bench's box
        that cache's work was an eighth of a tick. The app's true-colour filter (on where the terminal
        is not known to take true colour) is applied as each strip is drawn, to each distinct style once,
        not to every segment of every changed line as a second strip."""
        if not self._plain():
            return super().render_lines(crop)
        filters = self.get_line_filters()
        truecolor = next((f for f in filters if isinstance(f, ANSIToTruecolor)), None)
        background = self._background_color() if filters else None
        if (truecolor, background) != self._drawn_for:
            self._drawn_for = (truecolor, background)
            self._strips.clear()
        strips = [self._strip(y) for y in crop.line_range]
        for line_filter in filters:
            if line_filter is not truecolor and background is not None:
                strips = [strip.apply_filter(line_filter, background) for strip in strips]
        x1, x2 = crop.column_span
        if (x1, x2) != (0, self.size.width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _background_color(self) -> Color:
        if self._background is None:
            self._background = self.background_colors[1]
        return self._background

    def _plain(self) -> bool:
        """Drawn as its lines and nothing else: no border, outline, padding, title, tint, hatch or
        transparency (what StylesCache would add)."""
        styles = self.styles
        return (
            not any(edge for edge, _ in styles.border)
            and not any(edge for edge, _ in styles.outline)
            and not any(styles.padding)
            and self._border_title is None
            and self._border_subtitle is None
            and not styles.tint.a
            and self.opacity == 1.0
            and styles.text_opacity == 1.0
            and not (styles.has_rule("hatch") and styles.hatch != "none")
        )

    def _strip(self, y: int) -> Strip:
        strip = self._strips.get(y)
        if strip is None:
            strip = self._strips[y] = self._draw(y, *self._drawn_for)
        return strip

    def render_line(self, y: int) -> Strip:  # Textual's way in, when the canvas is not plain
        return self._draw(y, None, None)

    def _draw(self, y: int, truecolor: ANSIToTruecolor | None, background: Color | None) -> Strip:
        width = self.size.width
        if y >= len(self._lines) or width != self._width:
            return Strip.blank(width, self.base_style)
        base = self.base_style
        segments: list[Segment] = []
        # Runs of one style, grouped in C: the cells of a run share one Style object (Line.add).
        runs = groupby(self._lines[y], key=itemgetter(1))
        if truecolor is not None and background is not None:
            under = background.rich_color
            for style, run in runs:
                segments += _segments("".join(map(itemgetter(0), run)), _ink(base, style, truecolor, under))
        else:
            for style, run in runs:
                segments += _segments("".join(map(itemgetter(0), run)), _combine(base, style))
        return Strip(segments, width)
