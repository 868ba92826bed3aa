"""The process table: a cursor that stays on its process, and repaints of only the cells that changed.

Why not Textual's DataTable: any cell update there invalidates every render cache of the table, so a
tick that changes one number per row re-renders every cell of every row. Measured in `make bench`
(8 GPUs, 1 Hz) that alone cost 2 % of a core, over the whole budget. Drawn on a CellCanvas, a tick costs
one line build per visible row and sends only the changed cells.
"""

from __future__ import annotations

from functools import lru_cache

from rich.style import Style
from textual.binding import Binding
from textual.message import Message

from gputui.ui.canvas import PLAIN, Line
from gputui.ui.cursor_table import CursorTable
from gputui.ui.process_rows import COLUMNS, TableRow

_GAP = 1  # spaces between columns
_MIN_COMMAND = 24
# Dropped first when the terminal is too narrow for every column and a readable command line.
_DROP_ORDER = ("bw", "time", "rss", "kinds", "state", "cpu", "user", "category")


@lru_cache(maxsize=256)
def _style(style: str | Style) -> Style:
    return style if isinstance(style, Style) else Style.parse(style) if style else PLAIN


def fit(text: str, width: int, justify: str = "left") -> str:
    if len(text) > width:
        return text[: max(0, width - 1)] + "…" if width > 0 else ""
    return text.rjust(width) if justify == "right" else text.ljust(width)


class ProcessTable(CursorTable):
    DEFAULT_CSS = "ProcessTable { height: 1fr; }"
    BINDINGS = [Binding("enter", "choose", "Detail", show=False)]

    class HeaderClicked(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[TableRow] = []
        self.sort_column = "gpu"
        self.sort_reverse = False
        self.empty_note = "no GPU processes"
        self.tagged: set[str] = set()
        self.last_label = "COMMAND"
        self.min_last_width = _MIN_COMMAND
        self.header_style = Style(bold=True)
        self.cursor_style = Style(reverse=True)
        self.tag_style = Style(bold=True, underline=True)
        # The last build's line of every row, by id: a row that did not change is the same TableRow
        # object (process_rows reuses them), so its line is reused rather than built again.
        self._built: dict[int, tuple[TableRow, tuple[object, ...], Line]] = {}

    @property
    def current(self) -> TableRow | None:
        return super().current

    def _layout(self, width: int) -> list[tuple[int, int]]:
        """(column index, width) of the columns that fit; the command line takes what is left."""
        shown = list(range(len(COLUMNS) - 1))
        drop = [i for key in _DROP_ORDER for i, c in enumerate(COLUMNS) if c.key == key]

        def used() -> int:
            return sum(COLUMNS[i].width + _GAP for i in shown)

        while drop and width - used() < self.min_last_width:
            shown.remove(drop.pop(0))
        return [(i, COLUMNS[i].width) for i in shown] + [(len(COLUMNS) - 1, max(8, width - used()))]

    def build(self, width: int) -> list[Line]:
        layout = self._layout(width)
        header = Line()
        for i, w in layout:
            col = COLUMNS[i]
            label = self.last_label if i == len(COLUMNS) - 1 else col.label
            if col.key == self.sort_column:
                label += "▼" if self.sort_reverse != col.descending else "▲"  # ▼: biggest first
            header.add(fit(label, w, col.justify) + " " * _GAP, self.header_style)
        lines = [header]
        if not self.rows:
            return [*lines, Line().add(f" {self.empty_note}", Style(dim=True))]
        focused = self.has_focus
        built: dict[int, tuple[TableRow, tuple[object, ...], Line]] = {}
        for i in self.visible_rows():
            row = self.rows[i]
            how = (
                layout,
                i == self.cursor,
                row.key in self.tagged,
                focused,
                self.cursor_style,
                self.tag_style,
            )
            last = self._built.get(id(row))
            line = last[2] if last and last[0] is row and last[1] == how else self._line(row, *how)
            built[id(row)] = (row, how, line)
            lines.append(line)
        self._built = built
        return lines

    def _line(
        self,
        row: TableRow,
        layout: list[tuple[int, int]],
        on_cursor: bool,
        tagged: bool,
        focused: bool,
        cursor_style: Style,
        tag_style: Style,
    ) -> Line:
        line = Line()
        for c, w in layout:
            cell, col = row.cells[c], COLUMNS[c]
            style = _style(cell.style)
            if tagged:
                style = style + tag_style
            if on_cursor:
                style = style + cursor_style if focused else style + Style(underline=True)
            line.add(fit(cell.plain, w, col.justify), style)
            line.add(" " * _GAP, cursor_style if on_cursor and focused else PLAIN)
        return line

    def on_header_click(self, x: int) -> None:
        left = 0
        for i, w in self._layout(self.size.width):
            if left <= x < left + w + _GAP:
                self.post_message(self.HeaderClicked(COLUMNS[i].key))
                return
            left += w + _GAP
