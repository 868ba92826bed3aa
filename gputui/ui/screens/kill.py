"""The kill dialog. It is opened for fixed targets (pid + create time): the table keeps refreshing behind
it, so nothing is read from the cursor when the user confirms. What it offers is decided by
`gputui.actions.kill_plan`; this module reads the rows the user chose, draws the dialog and reads the
user's choice.

The dialog opens on its title and a summary (how many processes, ranks, workers, GPUs, GPU memory,
whose), then lists every process the signal would reach, each PID once; the title counts them, and
follows the "include its children" box. The buttons stay at the bottom, outside the scrolled list:
the focused Cancel never scrolls the summary away.

T, I and K send SIGTERM, SIGINT and SIGKILL at once (as in nvitop): the dialog itself is the
confirmation. `y` sends the chosen signal; Esc, `n` and the focused Cancel button send nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import psutil
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.geometry import Size
from textual.widgets import Button, Checkbox, RadioButton, RadioSet, Static

from gputui.actions import signals
from gputui.actions.kill_plan import Entry, KillPlan, Process, Summary, job_share, plan_kill
from gputui.actions.signals import Target
from gputui.analyze.classify import estimated
from gputui.cells import pad, width
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.ui.screens.detail import Modal
from gputui.ui.styles import tcss
from gputui.ui.widgets.dip_groups import compact_gpus
from gputui.ui.widgets.process_rows import NO_JOB, UNACCOUNTED, TableRow
from gputui.ui.widgets.wrap import wrap_cells
from gputui.units import NA, fmt_bytes, printable

__all__ = [
    "Entry",
    "EntryList",
    "KillRequest",
    "KillScreen",
    "entry_of",
    "live_descendants",
    "plan_rows",
    "wrap_cells",
]


@dataclass(frozen=True)
class KillRequest:
    targets: tuple[Target, ...]  # every process to signal, in order: from the dialog, exactly its list
    signal: str
    # Also whatever descendants `signals.send` finds then. The dialog never asks: its targets already
    # list the children it showed, and nothing it did not show may get the signal.
    include_children: bool = False


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


# -- what `k` on the chosen rows offers --------------------------------------------------------------

NO_JOB_KEY = f"job/{NO_JOB}"
NO_JOB_REFUSAL = '"no job" is not a job: never signalled as a group. Press J and pick one process'


def plan_rows(rows: Sequence[TableRow], snapshot: Snapshot | None) -> KillPlan | None:
    """What `k` on `rows` (the highlighted one, or every tagged one) offers, read against the live
    machine now. None: nothing there is a process (a GPU's unaccounted memory). A plan that offers
    nothing says why in its note.

    A job's row (`J`) stands for its user's processes on this machine (see `job_share`). The "no job"
    row is every process outside a container, pod or SLURM job, whoever runs it: it is never signalled
    as a group."""
    if any(r.key == NO_JOB_KEY for r in rows):
        return KillPlan((), {}, (), False, (NO_JOB_REFUSAL,), ())
    chosen: list[Process] = []
    left_out: list[str] = []
    user: str | None = None
    estimates: dict[int, int] = {}
    said: list[str] = []
    for row in rows:
        if row.kind == UNACCOUNTED and row.leftover is not None:
            left = row.leftover
            if not left.holders:
                left_out.append(no_holder_text(left.gpu, left.memory))
                continue
            chosen += left.holders
            if left.share is not None:
                estimates.update(dict.fromkeys((p.pid for p in left.holders), left.share))
            said.append(estimated_text(left.gpu, left.memory, len(left.holders)))
        elif row.members:
            share = job_share(row.members)
            chosen += share.kept
            left_out += [share.note] if share.note else []
            user = user or share.user
        elif row.process is not None:
            chosen.append(row.process)
            user = user or row.process.user
    if not chosen:
        return KillPlan((), {}, (), False, tuple(left_out), ()) if left_out else None
    plan = plan_kill(
        chosen,
        snapshot,
        signals.protected(),
        signals.describe,
        descendants=live_descendants,
        user=user,
        estimates=estimates,
    )
    return replace(plan, left_out=" ".join(left_out), estimated=" ".join(said))


def no_holder_text(gpu: int, memory: int) -> str:
    return (
        f"GPU {gpu}'s {fmt_bytes(memory)} unaccounted: no likely holder to signal (no orphan or child of "
        f"a defunct process here holds /dev/nvidia{gpu}; it may be another container's process, or the "
        "driver's)."
    )


def estimated_text(gpu: int, memory: int, holders: int) -> str:
    return (
        f"Estimated holders of GPU {gpu}'s {fmt_bytes(memory)} unaccounted memory ({holders}): each holds "
        f"/dev/nvidia{gpu} and NVML lists no memory for it. That the memory is theirs is likely, not "
        "known: NVML says how much is in use, not whose."
    )


def live_descendants(pids: Collection[int]) -> list[HostProcess]:
    """The live descendants of `pids`, each described now: one pass over every process's parent
    (/proc/N/stat), then only the descendants are read. A process that ends meanwhile is left out."""
    kids: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None and ppid != proc.pid:
            kids.setdefault(ppid, []).append(proc.pid)
    found: list[int] = []
    seen, level = set(pids), list(pids)
    while level:
        level = [kid for parent in level for kid in sorted(kids.get(parent, ())) if kid not in seen]
        seen.update(level)
        found += level
    return [d for d in map(signals.describe, found) if d is not None]


# -- the list of processes: the command gets every cell the dialog has -------------------------------

_HEADERS = ("PID", "USER", "CLASS", "GPU MEM")
_USER_CELLS = 12  # a longer user name is cut: the command matters more


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


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def title_text(summary: Summary) -> str:
    return f"Send a signal to {_n(summary.count, 'process', 'processes')}?"


def summary_text(summary: Summary) -> str:
    """`In all, 33 processes: 8 ranks (GPU processes), 24 workers, 1 other · GPUs 0-7 · 549.6 GiB of GPU
    memory · users alice, bob` (a word first: a line of the dialog that starts with a number is a PID's)."""
    kinds = []
    if summary.ranks:
        what = "GPU process" if summary.ranks == 1 else "GPU processes"
        kinds.append(f"{_n(summary.ranks, 'rank', 'ranks')} ({what})")
    if summary.workers:
        kinds.append(_n(summary.workers, "worker", "workers"))
    if summary.others:
        kinds.append(_n(summary.others, "other", "others"))
    gpus = compact_gpus(summary.gpus)
    if summary.estimated:  # likely holders NVML lists no memory for: never added to a measured amount
        measured = f"{fmt_bytes(summary.memory)} of GPU memory + " if summary.memory else ""
        memory = f"{measured}{estimated(summary.estimated)} estimated (unaccounted memory it likely holds)"
    elif summary.memory_unknown and summary.memory:
        memory = f"at least {fmt_bytes(summary.memory)} of GPU memory"
    elif summary.memory_unknown:
        memory = "GPU memory unknown"
    else:
        memory = f"{fmt_bytes(summary.memory)} of GPU memory" if summary.memory else "no GPU memory"
    users = ", ".join(summary.users[:6]) + (
        f" and {len(summary.users) - 6} more" if len(summary.users) > 6 else ""
    )
    return " · ".join(
        [
            f"In all, {_n(summary.count, 'process', 'processes')}: " + ", ".join(kinds),
            (f"GPU {gpus}" if len(summary.gpus) == 1 else f"GPUs {gpus}") if summary.gpus else "no GPU",
            memory,
            f"{'user' if len(summary.users) == 1 else 'users'} {users}",
        ]
    )


def others_text(summary: Summary, user: str | None) -> str:
    """`includes 16 processes of bob, root, not only alice's`: said whenever the signal reaches
    processes of users other than the one whose kill this is."""
    if user is None or not summary.foreign:
        return ""
    names = ", ".join(u for u, _ in summary.foreign)
    return f"includes {_n(summary.foreign_count, 'process', 'processes')} of {names}, not only {user}'s"


def children_note(plan: KillPlan, include_children: bool | None = None) -> str:
    """Which children the checkbox adds (each PID once: in the list when they are included, here when
    they are not), and why it starts on."""
    include = plan.include_children if include_children is None else include_children
    offered = {e.target.pid for e in plan.entries}
    kids = [e.target.pid for e in plan.shown(True) if e.target.pid not in offered]
    if not kids:
        return ""
    held = [pid for pid in plan.gpu_children if pid in kids]
    gpu = ""
    if held:
        if len(kids) == 1:
            gpu = " (it holds a GPU: left alone it would keep it)"
        else:
            gpu = f" ({len(held)} of them hold a GPU: left alone they would keep it)"
    them = _n(len(kids), "child", "children")
    if include:
        return f"its {them} {'is' if len(kids) == 1 else 'are'} in the list above{gpu}"
    shown = ", ".join(str(pid) for pid in kids)
    return f"not included: its {them}, {shown}{gpu}"


class KillScreen(Modal[KillRequest | None]):
    DEFAULT_CSS = tcss("Modal", "KillScreen")
    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel"),
        Binding("y", "send", "Send"),
        # Direct keys: no Tab, Tab, Down, Enter for the signal. No lowercase k: `k k` would SIGKILL.
        Binding("t,T", "send_now('SIGTERM')", "SIGTERM"),
        Binding("i,I", "send_now('SIGINT')", "SIGINT"),
        Binding("K", "send_now('SIGKILL')", "SIGKILL"),
    ]

    def __init__(self, plan: KillPlan) -> None:
        super().__init__()
        self.plan = plan
        self.entries = list(plan.entries)  # the processes chosen; `signalled()` adds the children
        # Held, not queried: an app that quits as the dialog opens runs on_mount after its children left.
        self.body = VerticalScroll(id="kill-body")
        self.cancel = Button("Cancel (Esc)", id="cancel")
        self.box = StateCheckbox(
            "include its children (data-loader workers, ...)", value=plan.include_children, id="children"
        )
        self.title_line = Static("", id="kill-title")
        self.summary_line = Static("", id="kill-summary")
        self.others_line = Static("", id="kill-others")
        self.grid = EntryList([])
        self.children_line = Static("", id="children-note")

    @classmethod
    def for_plan(cls, plan: KillPlan) -> KillScreen:
        return cls(plan)

    def signalled(self) -> tuple[Entry, ...]:
        """What `y` would signal now, in the order it would."""
        return self.plan.signalled(self.box.value)

    def _show(self, include_children: bool) -> None:
        summary = self.plan.summary(include_children)
        self.title_line.update(Text(title_text(summary), style="bold"))
        self.summary_line.update(Text(summary_text(summary)))
        others = others_text(summary, self.plan.user)
        self.others_line.update(Text(others, style="bold yellow"))
        self.others_line.display = bool(others)
        self.grid.entries = list(self.plan.shown(include_children))
        self.grid.refresh(layout=True)
        note = children_note(self.plan, include_children)
        self.children_line.update(Text(note))
        self.children_line.display = bool(note)

    def compose(self) -> ComposeResult:
        self._show(self.box.value)  # here, not in __init__: updating a widget needs the running app
        with self.body:
            yield self.title_line
            yield self.summary_line
            yield self.others_line
            if self.plan.estimated:  # before the list: they are only likely holders
                yield Static(Text(self.plan.estimated, style="bold yellow"), id="kill-estimated")
            if self.plan.left_out:
                yield Static(Text(self.plan.left_out, style="yellow"), id="kill-left-out")
            yield self.grid
            if self.plan.note:
                yield Static(Text(self.plan.note, style="yellow"))
            with RadioSet(id="signal"):
                for i, (name, key, what) in enumerate(_SIGNALS):
                    yield StateRadioButton(f"{name} ({key}) — {what}", value=i == 0, id=name)
            yield self.box
            yield self.children_line
            with Horizontal(id="kill-buttons"):  # docked: never scrolled to, never scrolled away
                yield Button("Send (y)", variant="error", id="send")
                yield self.cancel

    def on_mount(self) -> None:
        if self.cancel.is_attached:
            self.cancel.focus()  # a stray Enter must not be the one that kills
        self.call_after_refresh(self._to_top)

    def _to_top(self) -> None:
        """Open on the title and the summary, whatever focusing scrolled to."""
        if self.body.is_attached:
            self.body.scroll_home(animate=False, immediate=True)

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        if event.checkbox is self.box:
            event.stop()
            self._show(event.value)

    def _request(self, signal: str | None = None) -> KillRequest:
        if signal is None:
            pressed = self.query_one(RadioSet).pressed_button
            signal = pressed.id if pressed is not None and pressed.id else "SIGTERM"
        return KillRequest(tuple(e.target for e in self.signalled()), signal)

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
