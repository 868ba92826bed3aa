"""The process table: a cursor that stays on its process, and repaints of only the cells that changed.

Why not Textual's DataTable: any cell update there invalidates every render cache of the table, so a
tick that changes one number per row re-renders every cell of every row. Measured in `make bench`
(8 GPUs, 1 Hz) that alone cost 2 % of a core, over the whole budget. Drawn on a CellCanvas, a tick costs
one line build per visible row and sends only the changed cells.
"""

from __future__ import annotations

from functools import lru_cache

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.message import Message

from gputui.ui.canvas import CellCanvas, Line
from gputui.ui.process_rows import COLUMNS, TableRow

_GAP = 1  # spaces between columns
_MIN_COMMAND = 24
# Dropped first when the terminal is too narrow for every column and a readable command line.
_DROP_ORDER = ("bw", "time", "rss", "kinds", "state", "cpu", "user", "category")


@lru_cache(maxsize=256)
def _style(style: str | Style) -> Style:
    return style if isinstance(style, Style) else Style.parse(style) if style else Style()


def _fit(text: str, width: int, justify: str) -> str:
    if len(text) > width:
        return text[: max(0, width - 1)] + "…" if width > 0 else ""
    return text.rjust(width) if justify == "right" else text.ljust(width)


class ProcessTable(CellCanvas, can_focus=True):
    DEFAULT_CSS = "ProcessTable { height: 1fr; }"
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
        Binding("enter", "choose", "Detail", show=False),
    ]

    class RowChosen(Message):
        """Enter or a double click on a row."""

        def __init__(self, row: TableRow) -> None:
            super().__init__()
            self.row = row

    class HeaderClicked(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[TableRow] = []
        self.cursor = 0
        self.top = 0  # index of the first visible row
        self.sort_column = "gpu"
        self.sort_reverse = False
        self.empty_note = "no GPU processes"
        self.tagged: set[str] = set()
        self.last_label = "COMMAND"
        self.min_last_width = _MIN_COMMAND
        self.header_style = Style(bold=True)
        self.cursor_style = Style(reverse=True)
        self.tag_style = Style(bold=True, underline=True)

    # -- data --------------------------------------------------------------------------------------

    @property
    def current(self) -> TableRow | None:
        """The row under the cursor: its process, not its index."""
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def apply(self, rows: list[TableRow]) -> None:
        """Show `rows` in this order; the cursor follows its process if it is still there."""
        keep = self.current
        self.rows = rows
        if keep is not None:
            index = next((i for i, r in enumerate(rows) if r.key == keep.key), None)
            if index is not None:
                self.cursor = index
        self._clamp()
        self.redraw()

    # -- geometry ----------------------------------------------------------------------------------

    @property
    def _visible_rows(self) -> int:
        return max(1, self.size.height - 1)

    def _clamp(self) -> None:
        self.cursor = max(0, min(self.cursor, len(self.rows) - 1))
        if self.cursor < self.top:
            self.top = self.cursor
        elif self.cursor >= self.top + self._visible_rows:
            self.top = self.cursor - self._visible_rows + 1
        self.top = max(0, min(self.top, max(0, len(self.rows) - self._visible_rows)))

    def _layout(self, width: int) -> list[tuple[int, int]]:
        """(column index, width) of the columns that fit; the command line takes what is left."""
        shown = list(range(len(COLUMNS) - 1))
        drop = [i for key in _DROP_ORDER for i, c in enumerate(COLUMNS) if c.key == key]

        def used() -> int:
            return sum(COLUMNS[i].width + _GAP for i in shown)

        while drop and width - used() < self.min_last_width:
            shown.remove(drop.pop(0))
        return [(i, COLUMNS[i].width) for i in shown] + [(len(COLUMNS) - 1, max(8, width - used()))]

    # -- drawing -----------------------------------------------------------------------------------

    def build(self, width: int) -> list[Line]:
        layout = self._layout(width)
        header = Line()
        for i, w in layout:
            col = COLUMNS[i]
            label = self.last_label if i == len(COLUMNS) - 1 else col.label
            if col.key == self.sort_column:
                label += "▼" if self.sort_reverse != col.descending else "▲"  # ▼: biggest first
            header.add(_fit(label, w, col.justify) + " " * _GAP, self.header_style)
        lines = [header]
        if not self.rows:
            return [*lines, Line().add(f" {self.empty_note}", Style(dim=True))]
        focused = self.has_focus
        for i in range(self.top, min(len(self.rows), self.top + self._visible_rows)):
            on_cursor = i == self.cursor
            line = Line()
            cells = self.rows[i].cells
            tagged = self.rows[i].key in self.tagged
            for c, w in layout:
                cell, col = cells[c], COLUMNS[c]
                style = _style(cell.style)
                if tagged:
                    style = style + self.tag_style
                if on_cursor:
                    style = style + self.cursor_style if focused else style + Style(underline=True)
                line.add(_fit(cell.plain, w, col.justify), style)
                line.add(" " * _GAP, self.cursor_style if on_cursor and focused else Style())
            lines.append(line)
        return lines

    def on_resize(self) -> None:
        self._clamp()
        super().on_resize()

    def on_focus(self) -> None:
        self.redraw()

    def on_blur(self) -> None:
        self.redraw()

    # -- input -------------------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        self.cursor += delta
        self._clamp()
        self.redraw()

    def action_page(self, direction: int) -> None:
        self.action_move(direction * self._visible_rows)

    def action_choose(self) -> None:
        row = self.current
        if row is not None:
            self.post_message(self.RowChosen(row))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 0
            for i, w in self._layout(self.size.width):
                if x <= event.x < x + w + _GAP:
                    self.post_message(self.HeaderClicked(COLUMNS[i].key))
                    return
                x += w + _GAP
            return
        index = self.top + event.y - 1
        if 0 <= index < len(self.rows):
            self.cursor = index
            self.redraw()
            if event.chain >= 2:
                self.action_choose()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_move(3)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_move(-3)

