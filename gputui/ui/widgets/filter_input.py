"""The filter box of the process table."""

from __future__ import annotations

from textual.events import Key
from textual.widgets import Input

from gputui.ui.styles import tcss
from gputui.ui.widgets.process_table import ProcessTable


class FilterInput(Input):
    """`/` opens it; typing filters live; Enter keeps the filter, Esc clears it.

    One line, no border: Input's own `Input:focus { border: tall ... }` is more specific than a plain
    `FilterInput` rule, so a focused box of height 1 drew only its top border and never the typed text.
    Not docked: docked at the bottom it lay under the key bar, docked there too (docked widgets overlap);
    in the flow, above the status line, it takes its row from the table while it is shown."""

    DEFAULT_CSS = tcss("FilterInput")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: the box goes (its row is the table's again); the status line shows the active filter,
        and `/` opens the box again with the text in it."""
        self.display = False
        self.app.set_focus(self.screen.query_one(ProcessTable))  # at once, as `/` moved it here

    def on_key(self, event: Key) -> None:
        if event.key == "escape":
            event.stop()
            self.value = ""
            self.display = False
            self.app.set_focus(self.screen.query_one(ProcessTable))
