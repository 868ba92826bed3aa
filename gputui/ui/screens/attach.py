"""The confirmation before gputui's agent is attached to a running Python process (`a` on a row without
the ◆ badge). It says what will happen (the plan's one line) and which process it is; nothing is attached
unless the user answers `a` or Enter. Esc and `n` cancel.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui.cells import cut
from gputui.ui.screens.detail import Modal
from gputui.ui.styles import tcss
from gputui.units import printable


class CommandLine(Static):
    """The process's command line on one line, cut to the cells the dialog has (a training job's
    arguments can fill a screen; the start of it says which job it is)."""

    def __init__(self, command: str) -> None:
        super().__init__(id="attach-command")
        self.command = printable(command)  # it came from /proc: another user chose it

    def render(self) -> Text:
        return Text(cut(self.command, self.size.width or 80), no_wrap=True, overflow="crop")


class AttachScreen(Modal[bool]):
    """Dismissed with True to attach, False to leave the process alone."""

    DEFAULT_CSS = tcss("Modal", "AttachScreen")
    BINDINGS = [
        Binding("a,enter", "attach", "Attach"),
        Binding("escape,n", "cancel", "Cancel"),
    ]

    def __init__(self, pid: int, description: str, command: str) -> None:
        super().__init__()
        self.pid = pid
        self.description = printable(description)
        self.command = command

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"Attach gputui's agent to pid {self.pid}?", style="bold"), markup=False)
            yield CommandLine(self.command or "(command line unknown)")
            yield Static(Text(self.description), id="attach-plan", markup=False)
            yield Static(
                Text.assemble(
                    ("a", "bold"),
                    " / ",
                    ("Enter", "bold"),
                    " attach    ",
                    ("Esc", "bold"),
                    " / ",
                    ("n", "bold"),
                    " cancel",
                ),
                id="attach-keys",
                markup=False,
            )

    def action_attach(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


def another_process(pid: int, started: float | None) -> str | None:
    """Why `pid` is no longer the process the user confirmed (the dialog may stay open while the job ends
    and its pid is reused), or None when it still is."""
    import psutil

    from gputui.actions.signals import same_start

    try:
        live = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return "has ended"
    except psutil.Error as err:
        return f"cannot be read: {printable(str(err))}"
    if started is not None and not same_start(started, live):
        return "now belongs to another process"
    return None
