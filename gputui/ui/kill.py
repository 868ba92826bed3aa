"""The kill dialog. It is opened for fixed targets (pid + create time): the table keeps refreshing behind
it, so nothing is read from the cursor when the user confirms."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Checkbox, RadioButton, RadioSet, Static

from gputui.collect.signals import Target
from gputui.model import ProcessRow
from gputui.ui.process_rows import TableRow
from gputui.ui.screens import MODAL_CSS, Modal
from gputui.units import NA, fmt_bytes, printable


@dataclass(frozen=True)
class KillRequest:
    targets: tuple[Target, ...]
    signal: str
    include_children: bool


@dataclass(frozen=True)
class Entry:
    """One line of the dialog: who would get the signal."""

    target: Target
    user: str
    category: str
    memory: str


def entry_of(row: TableRow) -> Entry:
    p = row.process
    assert p is not None
    memory = fmt_bytes(p.used_memory) if isinstance(p, ProcessRow) and p.kinds else "-"
    return Entry(
        Target(row.pid, row.create_time, printable(p.command or p.name or "")),
        printable(p.user or NA),
        getattr(p, "category", ""),
        memory,
    )


def describe_entries(entries: list[Entry]) -> Table:
    grid = Table(box=None, padding=(0, 1), show_edge=False)
    for name in ("PID", "USER", "CLASS", "GPU MEM", "COMMAND"):
        grid.add_column(name, no_wrap=True, overflow="ellipsis", max_width=60 if name == "COMMAND" else None)
    for e in entries:  # Text cells: never markup
        grid.add_row(
            Text(str(e.target.pid)),
            Text(e.user),
            Text(e.category),
            Text(e.memory),
            Text(e.target.label or NA),
        )
    return grid


class KillScreen(Modal[KillRequest | None]):
    DEFAULT_CSS = (
        MODAL_CSS
        + """
    KillScreen Horizontal { height: auto; margin-top: 1; }
    KillScreen Button { margin-right: 2; }
    KillScreen RadioSet, KillScreen Checkbox { width: auto; margin-top: 1; }
    """
    )
    BINDINGS = [Binding("escape,n", "cancel", "Cancel"), Binding("y", "send", "Send")]

    def __init__(self, entries: list[Entry], note: str = "") -> None:
        super().__init__()
        self.entries = entries
        self.note = note

    def compose(self) -> ComposeResult:
        n = len(self.entries)
        with VerticalScroll():
            yield Static(Text(f"Send a signal to {n} process{'es' if n > 1 else ''}?", style="bold"))
            yield Static(describe_entries(self.entries))
            if self.note:
                yield Static(Text(self.note, style="yellow"))
            with RadioSet(id="signal"):
                yield RadioButton("SIGTERM — ask it to exit", value=True, id="SIGTERM")
                yield RadioButton("SIGINT — like Ctrl-C: a trainer can save a checkpoint", id="SIGINT")
                yield RadioButton("SIGKILL — end it now, no cleanup", id="SIGKILL")
            yield Checkbox("include its children (data-loader workers, ...)", id="children")
            with Horizontal():
                yield Button("Send (y)", variant="error", id="send")
                yield Button("Cancel (Esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()  # a stray Enter must not be the one that kills

    def _request(self) -> KillRequest:
        pressed = self.query_one(RadioSet).pressed_button
        signal = pressed.id if pressed is not None and pressed.id else "SIGTERM"
        return KillRequest(
            tuple(e.target for e in self.entries), signal, self.query_one("#children", Checkbox).value
        )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "send":
            self.dismiss(self._request())
        else:
            self.dismiss(None)

    def action_send(self) -> None:
        self.dismiss(self._request())

    def action_cancel(self) -> None:
        self.dismiss(None)
