"""The status line above the footer: what the last action did (for a few seconds), an active filter, and
what gputui cannot see. A message too long for one line takes a second one while it is shown (the
table gives that row back when it expires); longer still, it is cut with `…`, so a cut always shows."""

from __future__ import annotations

from rich.style import Style
from textual.reactive import var
from textual.timer import Timer

from gputui.cells import cut
from gputui.cells import width as cells
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import CellCanvas, Line
from gputui.ui.widgets.wrap import wrap_at_most, wrap_cells

# How long a message stays: long enough to read; an error a little longer. A message that was still
# shown 8 minutes later read as the current state.
EXPIRE_S = {"information": 5.0, "warning": 8.0, "error": 10.0}
MAX_LINES = 2


class StatusLine(CellCanvas):
    DEFAULT_CSS = tcss("StatusLine")  # 2 while a long message is shown

    # Processes whose open files could not be read (each snapshot's count): a new count redraws the line.
    unreadable: var[int] = var(0, init=False)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.message = ""
        self.severity = "information"
        self.filter_text = ""  # the active filter, shown until it is cleared
        self._expiry: Timer | None = None

    def watch_unreadable(self) -> None:
        self.redraw()

    def say(self, message: str, severity: str = "information", expire_s: float | None = None) -> None:
        """Show `message`; it clears itself after `expire_s` (by default EXPIRE_S[severity])."""
        self.message, self.severity = message, severity
        if self._expiry is not None:
            self._expiry.stop()
            self._expiry = None
        if message and self.is_attached:
            delay = expire_s if expire_s is not None else EXPIRE_S.get(severity, 5.0)
            self._expiry = self.set_timer(delay, self._expire)
        self.redraw()

    def _expire(self) -> None:
        self._expiry = None
        self.message = ""
        self.redraw()

    def show_filter(self, text: str) -> None:
        if text != self.filter_text:
            self.filter_text = text
            self.redraw()

    def build(self, width: int) -> list[Line]:
        p = self.palette
        line = Line()
        if self.filter_text:
            shown = cut(self.filter_text, max(8, width // 3))
            line.add(" filter: ", p.accent).add(shown, p.title).add("  Esc clears ", p.dim)
        lines = [line]
        if self.message:
            style: Style = {"error": p.error, "warning": p.warning}.get(self.severity, p.plain)
            room = max(8, width - len(line) - 1)
            first, *rest = wrap_cells(self.message, room)
            line.add(" " + first, style)
            if rest:  # the rest, wrapped in the whole width of the lines below
                more = wrap_at_most(" ".join(rest), width - 1, MAX_LINES - 1)
                lines += [Line().add(" " + text, style) for text in more]
        if self.unreadable:
            note = f"{self.unreadable} processes not readable — run as root to see every holder"
            used, room = len(line), cells(note)
            if used + room + 3 <= width:
                line.add(" " * (width - used - room - 1)).add(note, p.dim)
        self._fit_height(len(lines))
        return lines

    def _fit_height(self, rows: int) -> None:
        """One row, or two while a long message is shown: a layout change only when the count changes."""
        height = self.styles.height
        if height is None or height.value != rows:
            self.styles.height = rows
