"""The kill dialog. It is opened for fixed targets (pid + create time): the table keeps refreshing behind
it, so nothing is read from the cursor when the user confirms. What it offers is decided by
`gputui.ui.kill_plan`; this module only draws it and reads the user's choice.

T, I and K send SIGTERM, SIGINT and SIGKILL at once (as in nvitop): the dialog itself is the
confirmation. `y` sends the chosen signal; Esc, `n` and the focused Cancel button send nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.geometry import Size
from textual.widgets import Button, Checkbox, RadioButton, RadioSet, Static

from gputui.cells import pad, width
from gputui.collect.signals import Target
from gputui.model import ProcessRow
from gputui.ui.kill_plan import Entry, KillPlan
from gputui.ui.process_rows import TableRow
from gputui.ui.screens import MODAL_CSS, Modal
from gputui.units import NA, fmt_bytes, printable

__all__ = ["Entry", "EntryList", "KillRequest", "KillScreen", "entry_of", "wrap_cells"]


@dataclass(frozen=True)
class KillRequest:
    targets: tuple[Target, ...]
    signal: str
    include_children: bool


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


# -- the list of processes: the command gets every cell the dialog has -------------------------------

_HEADERS = ("PID", "USER", "CLASS", "GPU MEM")
_USER_CELLS = 12  # a longer user name is cut: the command matters more


def wrap_cells(text: str, cells: int) -> list[str]:
    """`text` in lines of at most `cells` terminal cells, broken after a space where one is near (a
    command's arguments stay whole), never inside a wide character."""
    if cells <= 0:
        return [text]
    lines: list[str] = []
    line, used, last_space = "", 0, -1
    for ch in text:
        w = width(ch)
        if used + w > cells and line:
            if 0 <= last_space < len(line) - 1 and last_space >= len(line) // 2:
                lines.append(line[: last_space + 1].rstrip())
                line = line[last_space + 1 :]
            else:
                lines.append(line)
                line = ""
            used, last_space = width(line), line.rfind(" ")
        line += ch
        used += w
        if ch == " ":
            last_space = len(line) - 1
    return [*lines, line] if line or not lines else lines


def _grid_lines(entries: list[Entry], cells: int) -> list[str]:
    rows = [
        (str(e.target.pid), e.user, e.category, e.memory, e.target.label or NA) for e in entries
    ]  # every string is printable(): no control character reaches the screen
    widths = [
        min(_USER_CELLS, max(width(h), *(width(r[i]) for r in rows)))
        if i == 1
        else max(width(h), *(width(r[i]) for r in rows))
        for i, h in enumerate(_HEADERS)
    ]
    left = sum(widths) + len(widths)  # one space after each column
    room = max(20, cells - left)
    lines = [
        " ".join(pad(h, w, right=h == "GPU MEM") for h, w in zip(_HEADERS, widths, strict=True)) + " COMMAND"
    ]
    for row in rows:
        fixed = " ".join(
            pad(c, w, right=i == 3) for i, (c, w) in enumerate(zip(row[:4], widths, strict=True))
        )
        command = wrap_cells(row[4], room)
        lines.append(f"{fixed} {command[0]}")
        lines.extend(" " * left + more for more in command[1:])
    return lines


class EntryList(Static):
    """PID, USER, CLASS and GPU MEM, then the whole command line, wrapped in the cells that are left."""

    def __init__(self, entries: list[Entry]) -> None:
        super().__init__()
        self.entries = entries

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(_grid_lines(self.entries, width))

    def render(self) -> Text:
        lines = _grid_lines(self.entries, self.size.width or 80)
        text = Text("\n".join(lines), no_wrap=True, overflow="crop")
        text.stylize("bold", 0, len(lines[0]))
        return text


# -- toggles that show their state by their glyph, not only by colour --------------------------------


class StateCheckbox(Checkbox):
    """Textual's checkbox draws ▐X▌ on and off alike (only the colour differs, which NO_COLOR, a
    monochrome terminal or a screenshot lose): this one draws the X only when checked. Measured on
    Textual 8.2.8, where ToggleButton draws BUTTON_INNER whatever the value (by design, no upstream
    issue); tests/ui/test_kill_dialog.py fails once Textual draws the state itself."""

    ON = "X"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._show_state()  # the value set in __init__ may not reach the watcher

    def _show_state(self) -> None:
        self.BUTTON_INNER = self.ON if self.value else " "

    def watch_value(self) -> None:
        self._show_state()
        super().watch_value()


class StateRadioButton(RadioButton):
    """The same for a radio button: ● only on the chosen one."""

    ON = "●"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._show_state()

    def _show_state(self) -> None:
        self.BUTTON_INNER = self.ON if self.value else " "

    def watch_value(self) -> None:
        self._show_state()
        super().watch_value()


# -- the dialog --------------------------------------------------------------------------------------

_SIGNALS = (
    ("SIGTERM", "T", "ask it to exit"),
    ("SIGINT", "I", "like Ctrl-C: a trainer can save a checkpoint"),
    ("SIGKILL", "K", "end it now, no cleanup"),
)


class KillScreen(Modal[KillRequest | None]):
    DEFAULT_CSS = (
        MODAL_CSS
        + """
    KillScreen Horizontal { height: auto; margin-top: 1; }
    KillScreen Button { margin-right: 2; }
    KillScreen RadioSet, KillScreen Checkbox { width: auto; margin-top: 1; }
    KillScreen EntryList { width: 100%; }
    """
    )
    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel"),
        Binding("y", "send", "Send"),
        # Direct keys: no Tab, Tab, Down, Enter for the signal. No lowercase k: `k k` would SIGKILL.
        Binding("t,T", "send_now('SIGTERM')", "SIGTERM"),
        Binding("i,I", "send_now('SIGINT')", "SIGINT"),
        Binding("K", "send_now('SIGKILL')", "SIGKILL"),
    ]

    def __init__(
        self,
        entries: list[Entry],
        note: str = "",
        *,
        include_children: bool = False,
        children_note: str = "",
    ) -> None:
        super().__init__()
        self.entries = entries
        self.note = note
        self.include_children = include_children
        self.children_note = children_note
        self.cancel = Button("Cancel (Esc)", id="cancel")

    @classmethod
    def for_plan(cls, plan: KillPlan) -> KillScreen:
        return cls(
            list(plan.entries),
            plan.note,
            include_children=plan.include_children,
            children_note=children_note(plan),
        )

    def compose(self) -> ComposeResult:
        n = len(self.entries)
        with VerticalScroll():
            yield Static(Text(f"Send a signal to {n} process{'es' if n > 1 else ''}?", style="bold"))
            yield EntryList(self.entries)
            if self.note:
                yield Static(Text(self.note, style="yellow"))
            with RadioSet(id="signal"):
                for i, (name, key, what) in enumerate(_SIGNALS):
                    yield StateRadioButton(f"{name} ({key}) — {what}", value=i == 0, id=name)
            yield StateCheckbox(
                "include its children (data-loader workers, ...)", value=self.include_children, id="children"
            )
            if self.children_note:
                yield Static(Text(self.children_note), id="children-note")
            with Horizontal():
                yield Button("Send (y)", variant="error", id="send")
                yield self.cancel

    def on_mount(self) -> None:
        # Held, not queried: an app that quits as the dialog opens runs on_mount after its children left.
        if self.cancel.is_attached:
            self.cancel.focus()  # a stray Enter must not be the one that kills

    def _request(self, signal: str | None = None) -> KillRequest:
        if signal is None:
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

    def action_send_now(self, signal: str) -> None:
        self.dismiss(self._request(signal))

    def action_cancel(self) -> None:
        self.dismiss(None)


def children_note(plan: KillPlan) -> str:
    """Which children the checkbox adds, and why it starts on."""
    kids = [pid for entry in plan.entries for pid in plan.children.get(entry.target.pid, ())]
    if not kids:
        return ""
    shown = ", ".join(str(pid) for pid in kids)
    text = f"its children: {shown}"
    if plan.gpu_children:
        held = ", ".join(str(pid) for pid in plan.gpu_children)
        text += (
            f" ({held} hold{'s' if len(plan.gpu_children) == 1 else ''} a GPU: left alone they would keep it)"
        )
    return text
