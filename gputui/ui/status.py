"""The status line above the footer: what the last action did, and what gputui cannot see."""

from __future__ import annotations

from rich.style import Style

from gputui.ui.canvas import CellCanvas, Line
from gputui.ui.palette import Palette


class StatusLine(CellCanvas):
    DEFAULT_CSS = "StatusLine { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.message = ""
        self.severity = "information"
        self.unreadable = 0
        self.palette = Palette.default()

    def say(self, message: str, severity: str = "information") -> None:
        self.message, self.severity = message, severity
        self.redraw()

    def build(self, width: int) -> list[Line]:
        p = self.palette
        line = Line()
        if self.message:
            style: Style = {"error": p.error, "warning": p.warning}.get(self.severity, p.plain)
            line.add(" " + self.message, style)
        if self.unreadable:
            note = f"{self.unreadable} processes not readable — run as root to see every holder"
            if len(line) + len(note) + 3 <= width:
                line.add(" " * (width - len(line) - len(note) - 1)).add(note, p.dim)
        return [line]
