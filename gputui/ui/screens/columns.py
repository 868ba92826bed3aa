"""`c`: choose which columns of the process table show. The choice applies when the chooser closes and
persists (the `hidden_columns` setting)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import SelectionList, Static
from textual.widgets.selection_list import Selection

from gputui.ui.screens.detail import Modal
from gputui.ui.styles import tcss
from gputui.ui.widgets.process_columns import COLUMNS, ColumnKey
from gputui.ui.widgets.process_table import ALWAYS_SHOWN

CHOOSABLE = tuple(c for c in COLUMNS if c.key not in ALWAYS_SHOWN)


class ColumnsScreen(Modal[frozenset[str]]):
    """Space (or Enter, or a click) shows or hides a column; Esc or `c` closes with the new choice."""

    DEFAULT_CSS = tcss("Modal", "ColumnsScreen")
    BINDINGS = [Binding("escape,c,q", "close", "Close")]

    def __init__(self, hidden: frozenset[str]) -> None:
        super().__init__()
        self.hidden = hidden

    def compose(self) -> ComposeResult:
        choices = [
            Selection(Text.assemble((f"{c.label:<8}", "bold"), c.meaning), c.key, initial_state=shown)
            for c in CHOOSABLE
            for shown in [c.key not in self.hidden]
        ]
        with Vertical():
            yield Static(Text("Columns of the process table", style="bold"), markup=False)
            yield SelectionList[ColumnKey](*choices, id="columns")
            note = "space shows / hides · Esc closes · PID and COMMAND always show"
            yield Static(Text(note, style="dim"), markup=False)

    def action_close(self) -> None:
        shown = set(self.query_one("#columns", SelectionList).selected)
        self.dismiss(frozenset(c.key for c in CHOOSABLE if c.key not in shown))
