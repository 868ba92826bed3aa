"""Enter on an `unaccounted` row: the GPU memory no process in NVML's lists accounts for, and its likely
holders (see collect.classify.Leftover), each with what it likely holds, marked as an estimate. `k` closes
it and opens the kill dialog for those holders, read again from the table's row as it is then."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui.analyze.classify import Leftover, estimated
from gputui.ui.screens.detail import MODAL_CSS, Modal
from gputui.ui.widgets.row_note import holders_text
from gputui.units import NA, fmt_bytes, fmt_duration, printable


def render_leftover(left: Leftover, readonly: bool, now: float | None = None) -> Group:
    title = Text(f"GPU {left.gpu}: {fmt_bytes(left.memory)} in use that no NVML process accounts for", "bold")
    parts: list[Text | Table] = [title, Text(holders_text(left).split(". Enter ")[0] + ".")]
    if left.holders:
        table = Table(box=None, padding=(0, 1), header_style="bold")
        for name in ("PID", "USER", "CLASS", "STATE", "UP", "GPU MEM", "COMMAND · WHY"):
            table.add_column(name, justify="right" if name in ("PID", "GPU MEM") else "left")
        share = estimated(left.share) if left.share is not None else NA
        for p in left.holders:
            up = fmt_duration(now - p.create_time) if now is not None and p.create_time else NA
            table.add_row(
                str(p.pid),
                Text(printable(p.user or NA)),
                p.category,
                p.state or NA,
                up,
                Text(share, style="yellow"),
                Text(printable(f"{p.command or p.name or NA}\n{p.reason}".strip())),
            )
        parts += [Text(""), table, Text("")]
        parts.append(
            Text(
                f"{share} is an estimate (~), not a measurement (?): NVML says how much is in use, not "
                "whose; it is split evenly among the likely holders.",
                style="dim",
            )
        )
        if readonly:
            parts.append(Text("read-only: no signal can be sent from here.", style="dim"))
        else:
            parts.append(Text("k: signal them (the kill dialog lists them first) · Esc: close", style="dim"))
    else:
        parts.append(Text("Esc: close", style="dim"))
    return Group(*parts)


class LeftoverScreen(Modal[bool]):
    """Dismissed with True when the user asked to signal the holders (`k`)."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,enter", "close", "Close"), Binding("k", "kill", "Signal them")]

    def __init__(self, left: Leftover, readonly: bool = False, now: float | None = None) -> None:
        super().__init__()
        self.left, self.readonly, self.now = left, readonly, now

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(render_leftover(self.left, self.readonly, self.now), markup=False)

    def action_close(self) -> None:
        self.dismiss(False)

    def action_kill(self) -> None:
        self.dismiss(True)  # the app plans it, or says in one line why not (read-only, no holder)
