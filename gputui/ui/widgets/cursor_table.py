"""A table drawn on a CellCanvas whose cursor stays on its row (by key), not on an index.

Rows are refreshed under the user's eyes; a cursor that kept its index would move to another process
(or host) after a re-sort, next to a kill key. Subclasses draw the header and the visible rows.
"""

from __future__ import annotations

from typing import Any, Protocol

from textual import events
from textual.binding import Binding
from textual.message import Message

from gputui.ui.widgets.canvas import CellCanvas


class Keyed(Protocol):
    @property
    def key(self) -> str: ...


class CursorTable(CellCanvas, can_focus=True):
    """One header line, then `rows` from `top`; the cursor is an index kept on its row's key."""

    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000)", "First", show=False),
        Binding("end", "move(1000000)", "Last", show=False),
        Binding("enter", "choose", "Open", show=False),
    ]

    class RowChosen(Message):
        """Enter or a double click on a row."""

        def __init__(self, row: Any) -> None:
            super().__init__()
            self.row = row

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Any] = []
        self.cursor = 0
        self.top = 0  # index of the first visible row

    @property
    def current(self) -> Any | None:
        """The row under the cursor: its process (or host), not its index."""
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def apply(self, rows: list[Any], cursor_to: str = "") -> None:
        """Show `rows` in this order; the cursor follows its row if it is still there, or goes to the row
        keyed `cursor_to` when one is (a worker folded away: the cursor goes to its rank)."""
        keep = self.current
        self.rows = rows
        for key in (cursor_to, keep.key if keep is not None else ""):
            index = next((i for i, r in enumerate(rows) if r.key == key), None) if key else None
            if index is not None:
                self.cursor = index
                break
        self._clamp()
        self.redraw()

    @property
    def _rows_that_fit(self) -> int:
        return max(1, self.size.height - 1)

    def _clamp(self) -> None:
        self.cursor = max(0, min(self.cursor, len(self.rows) - 1))
        if self.cursor < self.top:
            self.top = self.cursor
        elif self.cursor >= self.top + self._rows_that_fit:
            self.top = self.cursor - self._rows_that_fit + 1
        self.top = max(0, min(self.top, max(0, len(self.rows) - self._rows_that_fit)))

    def visible_rows(self) -> range:
        """The indices of the rows drawn now. (Not `visible`: that is Textual's visibility property,
        read by its layout, focus chain and hit-testing.)"""
        return range(self.top, min(len(self.rows), self.top + self._rows_that_fit))

    def on_resize(self) -> None:
        self._clamp()  # then CellCanvas.on_resize redraws (Textual calls each class's handler)

    def on_focus(self) -> None:
        self.redraw()

    def on_blur(self) -> None:
        self.redraw()

    def action_move(self, delta: int) -> None:
        self.cursor += delta
        self._clamp()
        self.redraw()

    def action_page(self, direction: int) -> None:
        self.action_move(direction * self._rows_that_fit)

    def action_choose(self) -> None:
        row = self.current
        if row is not None:
            self.post_message(self.RowChosen(row))

    def on_header_click(self, x: int) -> None:
        """A click on the header line, `x` cells from the left."""

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            self.on_header_click(event.x)
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
