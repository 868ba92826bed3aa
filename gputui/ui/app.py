"""The full-screen app. Data flows one way: sampler thread -> Snapshot message -> widgets."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from rich.style import Style
from textual import on, work
from textual.actions import SkipAction
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.events import Key, Resize
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input
from textual.worker import get_current_worker

from gputui.actions import signals
from gputui.actions.signals import Target
from gputui.analyze.alerts import Alerts
from gputui.analyze.classify import leftovers
from gputui.analyze.dip_causes import ProfileNote
from gputui.analyze.dips import DipDetector
from gputui.analyze.history import MAX_AGE_S, History
from gputui.collect.agents.client import AgentHistory, AgentPoller
from gputui.collect.pace import Pacer
from gputui.collect.sampler import Sampler
from gputui.collect.sources.base import SourceUnavailable
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.settings import Settings
from gputui.ui.base_app import BaseApp
from gputui.ui.widgets import layout as layouts
from gputui.ui.widgets.gpu_panes import CHROME_ROWS, GpuPanes
from gputui.ui.widgets.header import HeaderBar
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.palette import Palette
from gputui.ui.widgets.process_rows import AGENT_ONLY, BY_KEY, COLUMN_KEYS, UNACCOUNTED, TableRow, View
from gputui.ui.widgets.process_table import MIN_COMMAND, ProcessTable
from gputui.ui.widgets.row_note import RowNote
from gputui.ui.widgets.status import StatusLine
from gputui.units import printable

# The modal screens (help, detail, kill, allocator, events, doctor) are imported when first opened:
# together they added about 0.1 s to every start, before the first frame.
if TYPE_CHECKING:
    from gputui.actions.attach import Outcome, Plan
    from gputui.ui.screens.kill import KillRequest

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
SORT_CYCLE = ("gpu", "gpu_mem", "sm", "cpu", "rss", "time", "pid", "user")
ESCALATE_AFTER_S = 5.0
ZOOMS = (300.0, 900.0, 1800.0, 3600.0)
AWAIT_AGENT_S = 10.0  # after an attach, how long its panel waits for the agent's first ◆


def next_interval(current: float, step: int) -> float:
    """The next sampling interval in INTERVALS, faster (step < 0) or slower (step > 0). Never the wrong
    way: at --interval 0.1 (below every step) faster keeps 0.1, where the nearest step, 0.25, is slower."""
    if step < 0:
        faster = [v for v in INTERVALS if v < current]
        return faster[-1] if faster else current
    slower = [v for v in INTERVALS if v > current]
    return slower[0] if slower else current


def next_zoom(current: float, step: int) -> float:
    i = min(range(len(ZOOMS)), key=lambda k: abs(ZOOMS[k] - current))
    return ZOOMS[max(0, min(len(ZOOMS) - 1, i + step))]


@runtime_checkable
class FollowsSnapshots(Protocol):
    """A screen that shows live data (the allocator and events screens): each snapshot is handed to it."""

    def follow(self, snap: Snapshot) -> None: ...


def history_seconds() -> float:
    """How much history the app keeps: an hour, or GPUTUI_HISTORY_S (`make soak` shortens it so that a
    short run reaches the steady state where any growth is a leak)."""
    try:
        value = float(os.environ.get("GPUTUI_HISTORY_S", MAX_AGE_S))
    except ValueError:
        return MAX_AGE_S
    return value if 10.0 <= value <= MAX_AGE_S else MAX_AGE_S


class SnapshotReady(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class SamplerFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = printable(error)  # shown in a toast and printed at exit: it may quote /proc


class SamplingLate(Message):
    """A sample took longer than the interval (`took`), or, with None, samples keep time again."""

    def __init__(self, took: float | None, text: str) -> None:
        super().__init__()
        self.took, self.text = took, text


class FilterInput(Input):
    """`/` opens it; typing filters live; Enter keeps the filter, Esc clears it.

    One line, no border: Input's own `Input:focus { border: tall ... }` is more specific than a plain
    `FilterInput` rule, so a focused box of height 1 drew only its top border and never the typed text.
    Not docked: docked at the bottom it lay under the key bar, docked there too (docked widgets overlap);
    in the flow, above the status line, it takes its row from the table while it is shown."""

    DEFAULT_CSS = """
    FilterInput { display: none; height: 1; padding: 0 1; }
    FilterInput, FilterInput:focus, FilterInput.-invalid, FilterInput.-invalid:focus { border: none; }
    """

    def on_key(self, event: Key) -> None:
        if event.key == "escape":
            event.stop()
            self.value = ""
            self.display = False
            self.app.set_focus(self.screen.query_one(ProcessTable))


class GpuTuiApp(BaseApp):
    TITLE = "gputui"
    CSS = """
    Screen { layout: vertical; }
    """
    ENABLE_COMMAND_PALETTE = True
    BINDINGS: ClassVar[list[BindingType]] = [
        *BaseApp.BINDINGS,
        Binding("s,f6", "sort_next", "Sort", key_display="s"),
        Binding("S", "sort_reverse", "Reverse", show=False),
        # Priority: handled as the key arrives, so that the keys read with it go to the filter box.
        Binding("slash,f3,f4", "filter", "Filter", key_display="/", priority=True),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("t,f5", "tree", "Tree", key_display="t"),
        Binding("g", "choose_gpu", "GPU"),
        Binding("v", "cycle_layout", "Layout", show=False),
        Binding("c", "columns", "Columns", show=False),
        Binding("p", "pause", "Pause"),
        Binding("plus", "faster", "Faster", key_display="+", show=False),
        Binding("minus", "slower", "Slower", key_display="-", show=False),
        Binding("z", "zombies", "Zombies"),
        Binding("J", "jobs", "Jobs", show=False),
        Binding("a", "allocator", "Allocator"),
        Binding("e", "events", "Events"),
        Binding("D", "doctor", "Doctor"),
        Binding("left_square_bracket", "zoom(-1)", "Zoom in", key_display="[", show=False),
        Binding("right_square_bracket", "zoom(1)", "Zoom out", key_display="]", show=False),
        Binding("comma", "seek(-10)", "Back 10", key_display=",", show=False),
        Binding("full_stop", "seek(10)", "Forward 10", key_display=".", show=False),
        Binding("less_than_sign", "seek(-60)", "Back 60", key_display="<", show=False),
        Binding("greater_than_sign", "seek(60)", "Forward 60", key_display=">", show=False),
        Binding("k,f9", "kill", "Kill", key_display="k"),
        Binding("space", "tag", "Tag", show=False),
        Binding("K", "escalate", "SIGKILL", show=False),
    ]
    KEYS_HELP: ClassVar[list[tuple[str, str]]] = [
        ("s / S  F6", "sort by the next column / reverse the order (or click a column header)"),
        ("/  F3  F4", "filter by pid, user, command or job (job:81234, pod:trainer-); Esc clears it"),
        ("t  F5", "tree view: GPU processes with their parents and children"),
        ("g", "choose a GPU: the table shows its processes (g again: all GPUs)"),
        ("Enter", "process detail (◆ rows too): command line, cwd, CUDA_VISIBLE_DEVICES, devices, children"),
        (
            "",
            "an `unaccounted` row (memory no NVML process accounts for): Enter lists its likely holders "
            "(orphans and children of defunct processes that hold the GPU), k offers to signal them",
        ),
        (
            "~ ?",
            "`~4.8 GiB?` in GPU MEM: an estimate, not a measurement: the GPU's unaccounted memory split "
            "among its likely holders",
        ),
        ("z", "zombies: only the suspicious processes (defunct, orphaned, unseen by NVML, ...) and why"),
        ("J", "jobs: a row per container, pod or SLURM job (GPUs, memory, CPU); k: its user's processes"),
        ("space", "tag / untag the highlighted process (k then signals every tagged one)"),
        ("k  F9", "send a signal (SIGTERM, SIGINT or SIGKILL) after confirmation"),
        ("K", "SIGKILL the processes still alive 5 s after a signal"),
        (
            "a",
            "PyTorch allocator panel of a ◆ process (it runs the gputui agent); on another Python process: "
            "attach the agent to it, after confirmation",
        ),
        ("e", "events: every utilization dip (when, how long, how deep, why) and per-GPU dip rates"),
        ("D", "doctor: why isn't my GPU being used? (this machine, and the highlighted process)"),
        ("v", "GPU layout: auto, panes, two columns, one line per GPU"),
        ("c", "choose the process table's columns (hidden ones stay hidden next time)"),
        (
            "f / F",
            "show or fold the workers of the highlighted rank / of every rank (its +3; a click on it too)",
        ),
        ("← / →", "scroll the COMMAND column"),
        ("[ / ]", "zoom the sparklines in / out (5 min, 15 min, 30 min, 1 h)"),
        (", / .  < / >", "replay only: seek back / forward 10 or 60 samples (p pauses)"),
        ("p", "pause / resume sampling"),
        ("+ / -", "sample faster / slower"),
        ("Esc", "clear the filter"),
        ("?  F1", "this help"),
        ("Ctrl+P", "command palette (themes too)"),
        ("q  F10  Ctrl+C", "quit"),
    ]

    # State with derived state: a watcher keeps what derives from it in step. init=False and
    # set_reactive() in __init__: no watcher runs before compose() made the widgets (see base_app).
    interval: var[float] = var(1.0, init=False)  # -> the sampler's wait, the sparkline bucket
    window: var[float] = var(ZOOMS[0], init=False)  # -> the sparkline bucket, the dips kept
    paused: var[bool] = var(False, init=False)  # -> the header's badge
    # -> every widget. always_update: a replay seek shows the same snapshot again, and comparing two
    # snapshots field by field every tick would cost more than drawing.
    snapshot: var[Snapshot | None] = var(None, init=False, always_update=True)

    def __init__(
        self,
        sampler: Sampler | ReplaySampler,
        interval: float | None = 1.0,
        mouse: bool = True,
        devices_dir: Path | None = None,
        readonly: bool = False,
        replay: bool = False,
        config_path: Path | None = None,
    ) -> None:
        """`interval` None: the saved one (or 1 s). `config_path`: where the user's settings live (see
        gputui.settings); None (tests, replay) neither reads nor writes any."""
        super().__init__(mouse=mouse)
        self.sampler = sampler
        self.set_reactive(GpuTuiApp.interval, interval if interval is not None else 1.0)
        self._devices_dir = devices_dir
        self.history = History(max_age=history_seconds())  # the last hour
        self.agent_history = AgentHistory()
        self.dips = DipDetector()
        self.alerts = Alerts()  # processes that were filling their GPU or looked hung, and when
        self.profiles: deque[ProfileNote] = deque(maxlen=50)  # those the allocator panel saw finish
        self.replay = replay
        self.notes: list[str] = []  # said on the status line once the first frame is up
        self.view = View()
        self.frames = 0  # snapshots applied; tests and the bench wait on it
        self.error: str | None = None  # why the app gave up, for the command line to print
        self.readonly = readonly or replay  # a replay signals nothing: its pids are not this machine's
        self.tagged: set[str] = set()  # row keys
        self.escalation: tuple[Target, ...] = ()  # signalled, still alive after 5 s
        self._attaching: int | None = None  # the pid an attach is under way for
        self._abandoned: list[str] = []  # what quitting did to the attach under way, said after the app
        self._asking: int | None = None  # the pid whose agent socket is being asked whether it answers
        self._awaiting: tuple[int, Timer] | None = None  # attached: its panel opens when its agent shows
        self._row_styles: dict[str, Style] = {}
        self._failing: tuple[str, int] | None = None  # (the sampler's error, failed ticks in a row)
        self._said_late = False  # a sample longer than the interval: said once (the header keeps saying it)
        self.config_path = config_path
        self.settings = Settings()
        self._may_save = config_path is not None
        self._save_pending: Timer | None = None
        self._save_warned = False
        if config_path is not None:
            self._apply_settings(config_path, interval)

    @property
    def devices_dir(self) -> Path:
        """--devices-dir, else the source's own (the demo makes its stand-ins only when it opens)."""
        return self._devices_dir or self.sampler.source.devices_dir

    # -- layout ------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Kept as attributes: app.query_one() searches the *active* screen, which is a modal while help,
        # detail or a dialog is open, and snapshots keep coming meanwhile.
        self.header = HeaderBar(id="header")
        self.panes = GpuPanes(self.history, id="panes")
        self.table = ProcessTable(id="procs")
        self.row_note = self.table.note = RowNote(id="row-note")
        self.status = self.status_line = StatusLine(id="status")
        self.filter_box = FilterInput(placeholder="filter: pid, user or command", id="filter")
        yield self.header
        yield self.panes
        yield self.table
        yield self.row_note
        yield self.filter_box
        yield self.status
        yield KeyBar()

    def on_mount(self) -> None:
        super().on_mount()  # the palette
        self._interval_changed(self.interval)
        self.panes.set_window(self.window)
        self.panes.set_layout(self.settings.layout)
        self.table.workers_folded = self.settings.folded_workers
        self.table.hidden = frozenset(self.settings.hidden_columns)
        self.table.focus()
        self._sample_loop()

    def apply_palette(self, palette: Palette) -> None:
        for canvas in (self.header, self.panes, self.status, self.row_note):
            canvas.palette = palette
            canvas.redraw()
        self._row_styles = {"dim": palette.dim, "error": palette.error, "warning": palette.warning}
        table = self.table
        table.header_style, table.cursor_style = palette.header, palette.cursor
        self._refresh_table()

    def on_resize(self, event: Resize) -> None:
        self._choose_layout(event.size.width, event.size.height)

    def _choose_layout(self, width: int, height: int) -> None:
        """The room the GPU area shares with the process table; the layout engine (ui/layout.py) picks
        panes, two columns or one line per GPU in it."""
        self.panes.fit_room(width, max(1, height - CHROME_ROWS))

    # -- watchers: derived state -------------------------------------------------------------------

    def watch_interval(self, interval: float) -> None:
        self._interval_changed(interval)
        self._remember(interval=interval)
        self._wake.set()  # the sampler waits the new interval from now, not the old one's rest

    def _interval_changed(self, interval: float) -> None:
        header, panes = self.header, self.panes
        header.interval = interval
        header.redraw()
        # The bucket (seconds per sparkline cell) derives from interval, window and width: GpuPanes
        # recomputes it as the interval is set, not at the next resize.
        panes.interval = interval

    def watch_window(self, window: float) -> None:
        self.panes.set_window(window)
        self._remember(zoom=window)
        self.say(f"sparklines: at least the last {int(window // 60)} min")

    def watch_paused(self, paused: bool) -> None:
        header = self.header
        header.paused = paused
        header.redraw()

    # -- sampling (a single long-lived thread) -----------------------------------------------------

    @work(thread=True, exclusive=True, group="sampler")
    def _sample_loop(self) -> None:
        worker = get_current_worker()
        try:
            if self.sampler.info is None:
                self.sampler.open()
        except SourceUnavailable as err:
            self.post_message(SamplerFailed(str(err)))
            return
        # Samples start on a steady schedule: waiting a whole interval after each one made the period
        # interval + sampling time. A sample longer than the interval is said, in the header and once.
        pacer = Pacer(self.interval)
        was_late = False
        while not worker.is_cancelled and not self._stop.is_set():
            if not self.paused:
                try:
                    snap = self.sampler.tick()
                except Exception as err:  # keep drawing the last good frame; say what broke
                    self.post_message(SamplerFailed(f"sampling failed: {type(err).__name__}: {err}"))
                else:
                    self.post_message(SnapshotReady(snap))
            delay = pacer.delay_after_sample()
            if pacer.last_late != was_late:
                was_late = pacer.last_late
                self.post_message(SamplingLate(pacer.took if was_late else None, pacer.describe_late()))
            if self._wake.wait(delay):  # a key, or a new interval: sample now, the schedule from here
                pacer.restart(self.interval)
            self._wake.clear()

    def on_sampling_late(self, message: SamplingLate) -> None:
        self.header.took = message.took
        self.header.redraw()
        if message.took is not None and not self._said_late:
            self._said_late = True
            self.say(message.text, "warning")

    def on_sampler_failed(self, message: SamplerFailed) -> None:
        if self.snapshot is None:
            self.error = message.error
            self.exit(2)
            return
        last, failed = self._failing or ("", 0)
        self._failing = (message.error, failed + 1)
        if message.error != last:  # one toast per distinct error, not one per failing tick
            self.notify(message.error, severity="error", markup=False)
        # Said again at each failed tick: it stays until the next one could say it, however slow.
        self.say(
            f"{message.error} ({failed + 1} ticks in a row): the last good frame is shown",
            "error",
            expire_s=max(10.0, 2 * self.interval + 1),
        )

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        if not self.screen_stack:  # the app is closing: a snapshot that arrives now has nowhere to go
            return
        self.ingest(message.snapshot)
        self._show(message.snapshot)
        self._open_awaited(message.snapshot)
        if self._failing is not None:
            self.say(f"sampling works again, after {self._failing[1]} failed ticks")
            self._failing = None

    def ingest(self, snap: Snapshot) -> None:
        """What is kept of every snapshot: the history behind the sparklines, dips, agent history."""
        self.history.add(snap)
        self.agent_history.add(snap)
        self.dips.add(snap)
        self.alerts.add(snap)

    def _show(self, snap: Snapshot) -> None:
        self.snapshot = snap  # watch_snapshot draws it

    def watch_snapshot(self, old: Snapshot | None, snap: Snapshot | None) -> None:
        if snap is None:
            return
        panes = self.panes
        dips: dict[int, list[tuple[float, float]]] = {}
        for d in (*self.dips.dips, *self.dips.ongoing(snap.time)):
            if snap.time - d.end <= panes.window * 2:
                dips.setdefault(d.gpu, []).append((d.start, d.last if d.last is not None else d.end))
        panes.dips = dips
        with self.batch_update():
            if old is None:
                self._choose_layout(self.size.width, self.size.height)
                for note in self.notes:
                    self.say(note, "warning")
            header = self.header
            header.snapshot = snap
            header.replay = self._replay_position()
            header.redraw()
            panes.show(snap)
            self._refresh_table()
            screen = self.screen
            if isinstance(screen, FollowsSnapshots):  # the allocator and events screens
                screen.follow(snap)
            status = self.status
            if status.unreadable != snap.unreadable_fds:
                status.unreadable = snap.unreadable_fds
                status.redraw()
        self.frames += 1

    def _refresh_table(self) -> None:
        table = self.table
        table.sort_column, table.sort_reverse = self.view.sort, self.view.reverse
        table.tagged = self.tagged
        table.last_label = "REASON · COMMAND" if self.view.zombies else "COMMAND"
        table.min_last_width = 70 if self.view.zombies else MIN_COMMAND  # (reasons: the point of `z`)
        if self.view.zombies:
            table.empty_note = "no suspicious process: nothing defunct, orphaned, stuck or unseen by NVML"
        elif self.view.filter or self.view.gpu is not None:
            table.empty_note = "no process matches the filter / GPU choice"
        else:
            table.empty_note = "no GPU processes"
        if self.snapshot is not None:
            table.show(self.snapshot, self.view, self._row_styles)

    def _set_view(self, view: View) -> None:
        self.view = view
        self._refresh_table()
        descending = BY_KEY[view.sort].descending != view.reverse if view.sort in BY_KEY else False
        self._remember(sort=view.sort, sort_descending=descending, tree=view.tree)

    def _stop_sampling(self) -> None:
        self.stop_background()

    # -- actions -----------------------------------------------------------------------------------

    def action_sort_next(self) -> None:
        current = SORT_CYCLE.index(self.view.sort) if self.view.sort in SORT_CYCLE else -1
        self._set_view(replace(self.view, sort=SORT_CYCLE[(current + 1) % len(SORT_CYCLE)], reverse=False))
        self.notify(f"sorted by {BY_KEY[self.view.sort].label}", timeout=1.5, markup=False)

    def action_sort_reverse(self) -> None:
        self._set_view(replace(self.view, reverse=not self.view.reverse))

    @on(ProcessTable.HeaderClicked)
    def _header_clicked(self, event: ProcessTable.HeaderClicked) -> None:
        key = event.column
        if key in COLUMN_KEYS:
            if key == self.view.sort:
                self._set_view(replace(self.view, reverse=not self.view.reverse))
            else:
                self._set_view(replace(self.view, sort=key, reverse=False))

    def action_filter(self) -> None:
        """Textual routes each key to a widget when it arrives: the letters of `/pwned` read at once
        (SSH) were the table's before `/` was handled, and p paused, e opened the events screen. So `/`
        is a priority binding, and the focus moves at once (focus() would move it later)."""
        box = self.filter_box
        if len(self.screen_stack) > 1 or self.focused is box:
            raise SkipAction  # a `/` typed into a modal screen or into the filter itself
        box.display = True
        self.set_focus(box)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        text = event.value.strip()
        self._set_view(replace(self.view, filter=text))
        self.status.show_filter(text)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        """Enter: the box goes (its row is the table's again); the status line shows the active filter,
        and `/` opens the box again with the text in it."""
        self.filter_box.display = False
        self.set_focus(self.table)  # at once, as in action_filter

    def action_clear_filter(self) -> None:
        """Esc on the main screen: an active filter goes (the processes it hid come back)."""
        if not self.view.filter or len(self.screen_stack) > 1:
            raise SkipAction
        box = self.filter_box
        box.value = ""  # Input.Changed clears the view's filter and the status line's badge
        box.display = False
        self._set_view(replace(self.view, filter=""))
        self.status.show_filter("")
        self.set_focus(self.table)

    def action_tree(self) -> None:
        tree = not self.view.tree
        self.sampler.want_relatives = tree
        self._set_view(replace(self.view, tree=tree))
        self._wake.set()  # sample now: the tree needs the relatives

    def action_choose_gpu(self) -> None:
        if self.view.gpu is not None:
            self._select_gpu(None)
        elif self.snapshot is not None:
            from gputui.ui.screens.detail import GpuChooser

            self.push_screen(
                GpuChooser(self.snapshot.gpus, gpm_note=self.snapshot.gpm_note), self._select_gpu
            )

    def _select_gpu(self, gpu: int | None) -> None:
        panes = self.panes
        panes.selected_gpu = gpu
        panes.redraw()
        self._set_view(replace(self.view, gpu=gpu))

    def action_detail(self) -> None:
        row = self.table.current
        if row is not None:
            self._choose(row)

    @on(ProcessTable.RowChosen)
    def _row_chosen(self, event: ProcessTable.RowChosen) -> None:
        """Enter: the detail, always (a ◆ row's allocator is `a`)."""
        self._choose(event.row)

    def _choose(self, row: TableRow) -> None:
        if row.process is not None:
            self._open_detail(row.process)
        elif row.kind == UNACCOUNTED and row.leftover is not None:
            from gputui.ui.screens.leftovers import LeftoverScreen

            now = self.snapshot.time if self.snapshot is not None else None
            self.push_screen(LeftoverScreen(row.leftover, self.readonly, now), self._leftover_closed(row.key))
        elif row.kind == AGENT_ONLY:
            self.say(
                f"pid {row.pid} runs the gputui agent and holds no GPU; gputui has not read it from /proc "
                "this tick, so it has no detail: `a` opens its allocator panel",
                "warning",
            )

    def _leftover_closed(self, key: str) -> Any:
        def closed(kill: bool | None) -> None:
            if not kill:
                return
            row = next((r for r in self.table.rows if r.key == key), None)  # as it is now, not at Enter
            if row is None:
                self.say("that unaccounted memory is gone: nothing to signal")
            else:
                self._kill_rows([row])

        return closed

    def _open_detail(self, process: ProcessRow | HostProcess) -> None:
        from gputui.ui.screens.detail import DetailScreen

        # A replay's pids are the recorded machine's: what has that pid here now is another process.
        recorded_at = self.snapshot.time if self.replay and self.snapshot is not None else None
        memory: list[tuple[float, float]] = []
        split = None
        # Its memory history (each 5 s stretch's low and high, so its max is the true one; replays too)
        # and, with an agent, allocated vs reserved: a live sampler's. The sampler's thread goes on
        # adding points: a split that meets a deque changed under it is left out rather than crash Enter.
        split_of = getattr(self.sampler, "memory_split", None)
        leftover = None
        if isinstance(process, ProcessRow) and self.snapshot is not None and process.gpu is not None:
            leftover = leftovers(self.snapshot).get(process.gpu)
        if isinstance(process, ProcessRow):
            memory = self.history.memory_points(process.pid, process.create_time, process.gpu)
            if split_of is not None:
                with contextlib.suppress(RuntimeError):
                    split = split_of(process.pid, process.create_time)
        self.push_screen(
            DetailScreen(
                process,
                self.devices_dir,
                recorded_at=recorded_at,
                stacks=not (self.readonly or self.replay),
                gpus=self.snapshot.gpus if self.snapshot is not None else (),
                memory=memory,
                split=split,
                leftover=leftover,
                gpm_note=self.snapshot.gpm_note if self.snapshot is not None else None,
            )
        )

    def action_allocator(self) -> None:
        row = self.table.current
        if row is None or self.snapshot is None:
            return
        if row.pid in self.snapshot.agents:
            self._open_allocator(row.pid)
            return
        hint = "start it with `gputui run -- python train.py` or `import gputui.agent; gputui.agent.start()`"
        if row.process is None:  # a GPU's "unaccounted memory" row, a job's
            self.say(f"this row is not one process: `a` is for a process's row ({hint})", "warning")
            return
        if self.readonly:  # a replay is read-only too: its pids are the recorded machine's
            mode = "a replay" if self.replay else "read-only (--readonly)"
            self.say(f"{row.pid} runs no gputui agent, and {mode} attaches none: {hint}", "warning")
            return
        if self._attaching is not None:
            self.say(f"attaching to pid {self._attaching} …: one at a time", "warning")
            return
        if self._awaiting is not None and self._awaiting[0] == row.pid:  # `a a a`: attached already
            self.say(f"attached to pid {row.pid}: the allocator panel opens when its agent answers")
            return
        from gputui.actions import attach as attaching

        plan = attaching.check(row.pid)  # /proc reads only: a fraction of a millisecond
        if isinstance(plan, attaching.Refusal):
            self.say(f"{row.pid} runs no gputui agent and cannot be attached: {plan.reason}", "warning")
            return
        process = row.process
        command = process.command or process.name or ""
        if plan.already:  # its socket is there: an agent listens only if it answers (a socket file alone
            # may be an earlier process's with this pid, or anyone's of that user): a worker asks it
            if self._asking != row.pid:
                self._asking = row.pid
                self._ask_agent(row.pid, row.create_time, plan, command)
            return
        self._confirm_attach(row.pid, row.create_time, plan, command)

    @work(thread=True, group="attach", exit_on_error=False)
    def _ask_agent(self, pid: int, started: float | None, plan: Plan, command: str) -> None:
        from gputui.actions.attach import run

        try:
            answers = run.answers(pid, 1.0)  # as attach() and the sampler's poller ask it (SO_PEERCRED)
        except Exception:  # never raises; a bug in it is "does not answer", and attach() asks again
            answers = False
        with contextlib.suppress(RuntimeError):  # the app closed meanwhile
            self.call_from_thread(self._agent_asked, pid, started, plan, command, answers)

    def _agent_asked(self, pid: int, started: float | None, plan: Plan, command: str, answers: bool) -> None:
        self._asking = None
        if answers:  # the next polls find it (root lists new users' directories slowly)
            self._expect_agent(pid, plan.uid)
            self.say(f"{pid}'s gputui agent is listening: its allocator panel opens when it answers")
        elif plan.mechanism == "agent":  # its socket, and no way to attach here (check() said why not)
            self.say(f"{pid} has a gputui agent socket that does not answer, and cannot be attached", "error")
        else:  # as if there were none: attach, and the new agent takes the socket's place
            self._confirm_attach(pid, started, replace(plan, already=False), command)

    def _confirm_attach(self, pid: int, started: float | None, plan: Plan, command: str) -> None:
        from gputui.ui.screens.attach import AttachScreen

        uid = plan.uid

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._attaching = pid
                self.say(f"attaching to pid {pid} …", expire_s=15.0)  # gdb may take 8 s
                self._run_attach(pid, started, uid)
            else:
                self.say(f"cancelled: nothing was attached to pid {pid}")

        self.push_screen(AttachScreen(pid, plan.describe(), command), confirmed)

    @work(thread=True, group="attach", exit_on_error=False)
    def _run_attach(self, pid: int, started: float | None, uid: int) -> None:
        from gputui.actions import attach as attaching
        from gputui.ui.screens import attach as attach_dialog

        try:
            changed = attach_dialog.another_process(pid, started)
            if changed is not None:  # the dialog stayed open while the job ended and its pid was reused
                outcome = attaching.Outcome(pid, False, f"pid {pid} {changed}: nothing was attached")
            elif self._stop.is_set():  # quit came first: no debugger is started on the way out
                outcome = attaching.Outcome(pid, False, "gputui quit: nothing was attached", abandoned=True)
            else:
                outcome = attaching.attach(pid, create_time=started)
        except Exception as err:  # attach() never raises; a bug in it is one line, not a crash
            outcome = attaching.Outcome(
                pid, False, printable(f"attaching failed: {type(err).__name__}: {err}")
            )
        with contextlib.suppress(RuntimeError):  # the app closed meanwhile
            self.call_from_thread(self._attached, outcome, uid)

    # -- quitting during an attach: the job lives on -------------------------------------------------
    #
    # Every way out (q, F10, Ctrl+C, SIGTERM, SIGHUP, the terminal gone) gives the attach up at once
    # (gputui.actions.attach.run.abandon: a debugger before the job's GIL is interrupted, one inside the
    # GIL's calls is left to finish; its wrapper removes the agent's copy) and says so once the terminal
    # is back.

    async def action_quit(self) -> None:
        self._abandon_attach()
        await super().action_quit()

    def on_signal(self, sig: int) -> None:
        self._abandon_attach()
        super().on_signal(sig)

    def close_source(self) -> None:
        self._abandon_attach()  # a forced exit (the terminal hung)
        self.sampler.close()

    async def run_async(self, **kwargs: Any) -> int:
        try:
            return await super().run_async(**kwargs)
        finally:
            self._abandon_attach()
            for line in self._abandoned:  # the terminal is given back by now
                with contextlib.suppress(OSError, ValueError):  # no terminal any more
                    print(f"gputui: {line}", file=sys.stderr)
            self._abandoned = []

    def _abandon_attach(self) -> None:
        if self._attaching is not None:
            from gputui.actions.attach import run

            self._abandoned += run.abandon()
            self._attaching = None

    def _attached(self, outcome: Outcome, uid: int) -> None:
        self._attaching = None
        if outcome.pending:  # its debugger finishes on its own: the agent may yet come
            self._expect_agent(outcome.pid, uid)
            self.say(outcome.message, "warning")
            return
        if not outcome.ok:
            self.say(outcome.message, "error")
            return
        took = f" in {outcome.seconds:.2f} s" if outcome.seconds is not None else ""
        self.say(f"attached to pid {outcome.pid}{took}: the allocator panel opens when its agent answers")
        self._expect_agent(outcome.pid, uid)

    def _expect_agent(self, pid: int, uid: int) -> None:
        """Open `pid`'s panel as soon as a snapshot has its agent, if that is within AWAIT_AGENT_S."""
        poller = getattr(self.sampler, "agents", None)  # a ReplaySampler has none
        expect = getattr(poller, "expect", None)
        if callable(expect):
            expect(uid)  # root: that user's directories are looked at from the next poll
        if self._awaiting is not None:
            self._awaiting[1].stop()
        self._awaiting = (pid, self.set_timer(AWAIT_AGENT_S, self._agent_never_came))
        self._wake.set()  # sample now, not at the end of a long interval

    def _agent_never_came(self) -> None:
        if self._awaiting is not None:
            pid = self._awaiting[0]
            self._awaiting = None
            self.say(
                f"pid {pid}'s agent has not shown up in {AWAIT_AGENT_S:g} s: `a` on its row opens the panel "
                "once it has the ◆",
                "warning",
            )

    def _open_awaited(self, snap: Snapshot) -> None:
        if self._awaiting is None or self._awaiting[0] not in snap.agents:
            return
        pid, timer = self._awaiting
        self._awaiting = None
        timer.stop()
        if len(self.screen_stack) == 1:
            self._open_allocator(pid)
        else:  # the user went elsewhere meanwhile: a panel popping up over that would be a surprise
            self.say(f"pid {pid}'s gputui agent answers (◆): `a` on its row opens the allocator panel")

    def _open_allocator(self, pid: int) -> None:
        assert self.snapshot is not None
        # Read-only and replays act on no agent: the panel gets no poller to act with.
        poller = None
        if not (self.readonly or self.replay):
            poller = getattr(self.sampler, "agents", None) or AgentPoller()
        from gputui.ui.screens.allocator import AllocatorScreen

        self.push_screen(
            AllocatorScreen(pid, poller, self.snapshot, self.agent_history, on_profile=self.profiles.append)
        )

    def action_doctor(self) -> None:
        if self.replay:  # its checks read this machine's NVML and /proc, not the recorded one's
            self.say(
                "doctor: it examines the live machine, not a recording; run `gputui doctor` on the "
                "recorded machine",
                "warning",
            )
            return
        from gputui.ui.screens.doctor import DoctorScreen

        row = self.table.current
        pid = row.pid if row is not None and row.process is not None else None
        self.push_screen(DoctorScreen(pid, self.history, self.snapshot, self.devices_dir))

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_faster(self) -> None:
        self.interval = next_interval(self.interval, -1)

    def action_slower(self) -> None:
        self.interval = next_interval(self.interval, +1)

    # -- dips, zoom, replay ------------------------------------------------------------------------

    def action_events(self) -> None:
        if self.snapshot is not None:
            from gputui.ui.screens.events import EventsScreen

            # While it is open, the sampler reads the GPU processes' parents: a job's row names its launcher.
            self.sampler.want_relatives = True
            screen = EventsScreen(
                self.dips,
                self.history,
                self.snapshot,
                self.panes.window,
                tuple(self.panes.xids),
                alerts=self.alerts,
                profiles=self.profiles,
            )
            self.push_screen(screen, lambda _: setattr(self.sampler, "want_relatives", self.view.tree))

    def action_cycle_layout(self) -> None:
        choice = self.panes.cycle_layout()
        self._remember(layout=choice)
        self.say(f"GPU layout: {choice}" + (" (the engine picks for the room)" if choice == "auto" else ""))

    def action_columns(self) -> None:
        from gputui.ui.screens.columns import ColumnsScreen

        self.push_screen(ColumnsScreen(self.table.hidden), self._set_hidden_columns)

    def _set_hidden_columns(self, hidden: frozenset[str] | None) -> None:
        if hidden is None:
            return
        self.table.hidden = hidden
        self._remember(hidden_columns=tuple(sorted(self.table.hidden)))
        labels = ", ".join(BY_KEY[k].label for k in COLUMN_KEYS if k in self.table.hidden)
        self.say(f"hidden columns: {labels} (c to choose)" if labels else "every column shows")

    def action_zoom(self, step: int) -> None:
        self.window = next_zoom(self.window, step)

    # -- settings that persist ----------------------------------------------------------------------

    def _apply_settings(self, config_path: Path, interval: float | None) -> None:
        """Start as the user left it. A bad file is one note, and is not written over until fixed."""
        from gputui import settings as saved

        allowed = {
            "theme": tuple(self.available_themes),
            "layout": layouts.CHOICES,
            "sort": COLUMN_KEYS,
            "hidden_columns": COLUMN_KEYS,
        }
        self.settings, warning = saved.load(config_path, allowed)
        if warning:
            self.notes.append(f"{warning} (not written over until fixed)")
            self._may_save = False
        s = self.settings
        self.theme = s.theme
        if interval is None:  # --interval is for this run: saved only when changed in the app
            self.set_reactive(GpuTuiApp.interval, s.interval)
        self.set_reactive(GpuTuiApp.window, s.zoom)
        descending = BY_KEY[s.sort].descending if s.sort in BY_KEY else False
        self.view = View(sort=s.sort, reverse=s.sort_descending != descending, tree=s.tree)
        self.sampler.want_relatives = s.tree

    def _theme_changed(self, theme: object) -> None:
        super()._theme_changed(theme)
        self._remember(theme=self.theme)

    def _remember(self, **changes: Any) -> None:
        """A choice the user made: saved half a second after the last one (a burst of keys is one write)."""
        if self.config_path is None:
            return
        new = replace(self.settings, **changes)
        if new == self.settings:
            return
        self.settings = new
        if self._may_save:
            if self._save_pending is not None:
                self._save_pending.stop()
            self._save_pending = self.set_timer(0.5, self._save_settings)

    @work(thread=True, group="settings")
    def _save_settings(self) -> None:
        self._save_now()

    def _save_now(self) -> None:
        from gputui import settings as saved

        if self.config_path is None or not self._may_save:
            return
        self._save_pending = None
        current = replace(self.settings, folded_workers=self.table.workers_folded)
        warning = saved.save(current, self.config_path)
        if warning and not self._save_warned:  # said once: the app keeps running with what it has
            self._save_warned = True
            self.call_from_thread(self.say, warning, "warning")

    def on_unmount(self) -> None:
        if self.config_path is not None and self._may_save:
            folded = self.table.workers_folded
            if self._save_pending is not None or folded != self.settings.folded_workers:
                self.settings = replace(self.settings, folded_workers=folded)
                from gputui import settings as saved

                saved.save(self.settings, self.config_path)  # a local file: quick, and quit must not lose it
        # (BaseApp.on_unmount runs too: Textual calls the handler of every class.)

    def check_replay(self) -> bool:
        return self.replay and isinstance(self.sampler, ReplaySampler)

    def action_seek(self, delta: int) -> None:
        if not self.check_replay():
            return
        assert isinstance(self.sampler, ReplaySampler)
        self.sampler.seek(delta)
        # Rebuild everything derived from the past, as if the recording had played up to here.
        self.history = History(max_age=history_seconds())
        self.agent_history = AgentHistory()
        self.dips = DipDetector()
        self.alerts = Alerts()
        for snap in self.sampler.played:
            self.ingest(snap)
        panes = self.panes
        panes.history = self.history
        panes.rebuild()
        self._show(self.sampler.played[-1])

    def _replay_position(self) -> str | None:
        if not self.check_replay():
            return None
        assert isinstance(self.sampler, ReplaySampler)
        done, total = self.sampler.position, len(self.sampler.snapshots)
        return f"REPLAY {done}/{total}" + (" (end)" if done >= total else "")

    # -- zombies and signals -----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # --readonly: no signal can be sent, and the footer does not offer one.
        return not (self.readonly and action in ("kill", "escalate", "tag"))

    def on_key(self, event: Key) -> None:
        if self.readonly and event.key in ("k", "f9", "K", "space"):
            event.stop()  # the bindings are off (check_action): say why nothing happens
            self.say("read-only (--readonly): signals are disabled", "warning")

    def action_jobs(self) -> None:
        jobs = not self.view.jobs
        self._set_view(replace(self.view, jobs=jobs, tree=False if jobs else self.view.tree))
        if jobs and self.snapshot is not None and not any(p.owner for p in self.snapshot.processes):
            self.say("jobs: no process here is in a container, a pod or a SLURM job (J again: processes)")
        else:
            self.say(
                "jobs: a row per container, pod or SLURM job; k signals its user's processes" if jobs else ""
            )

    def action_zombies(self) -> None:
        self._set_view(replace(self.view, zombies=not self.view.zombies))
        self.say("zombies: the suspicious processes and why (z again: all)" if self.view.zombies else "")

    def action_tag(self) -> None:
        table = self.table
        row = table.current
        if row is None or (row.process is None and not row.members):
            return
        self.tagged.symmetric_difference_update({row.key})
        table.action_move(1)
        self._refresh_table()
        self.say(f"{len(self.tagged)} tagged: k signals them all" if self.tagged else "")

    def action_kill(self) -> None:
        if self.readonly:
            self.say("read-only (--readonly): signals are disabled", "warning")
            return
        table = self.table
        current = [table.current] if table.current is not None else []
        self._kill_rows([r for r in table.rows if r.key in self.tagged] or current)

    def _kill_rows(self, rows: list[TableRow]) -> None:
        from gputui.ui.screens.kill import KillScreen, plan_rows

        if self.readonly:
            self.say("read-only (--readonly): signals are disabled", "warning")
            return
        # A job's row (J) stands for its user's processes on this machine; "no job" is never signalled.
        # An unaccounted row stands for its likely holders.
        plan = plan_rows(rows, self.snapshot)
        if plan is None:
            if any(r.kind == AGENT_ONLY for r in rows):
                self.say(
                    "not signalled: gputui has not read that process from /proc, so it cannot check that "
                    "its pid is still the same process",
                    "warning",
                )
            return
        if not plan.entries:
            self.say(plan.note, "warning")
            return
        self.push_screen(KillScreen.for_plan(plan), self._confirmed)

    def _confirmed(self, request: KillRequest | None) -> None:
        if request is None:
            self.say("cancelled: nothing was sent")
            return
        self.tagged.clear()
        self._send(request)

    def action_escalate(self) -> None:
        if not self.escalation:
            self.say("nothing to escalate: no process outlived a signal")
            return
        targets, self.escalation = self.escalation, ()
        from gputui.ui.screens.kill import KillRequest

        self._send(KillRequest(targets, "SIGKILL", False))

    @work(thread=True, group="signals")
    def _send(self, request: KillRequest) -> None:
        sent = signals.send(request.targets, request.signal, request.include_children)
        self.call_from_thread(self._report, sent, False)
        waited = signals.await_outcome(sent, timeout=ESCALATE_AFTER_S)
        self.call_from_thread(self._report, [o for o in sent if o.result != "sent"] + waited, True)

    def _report(self, outcomes: list[signals.Outcome], final: bool) -> None:
        if not outcomes:
            return
        from gputui.actions.kill_plan import describe_outcomes

        if final:
            self.escalation = tuple(o.target for o in outcomes if o.result == "still alive")
        text, bad = describe_outcomes(outcomes, final)
        self.say(text, "warning" if bad else "information")
        self._wake.set()  # sample now: the table should show what changed

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Sort by next column", "Cycle the table's sort column", self.action_sort_next)
        yield SystemCommand("Reverse sort", "Reverse the process table's order", self.action_sort_reverse)
        yield SystemCommand("Filter processes", "Filter by pid, user or command", self.action_filter)
        yield SystemCommand("Tree view", "Show GPU processes with parents and children", self.action_tree)
        yield SystemCommand("Choose GPU", "Show one GPU's processes", self.action_choose_gpu)
        yield SystemCommand("Process detail", "Details of the highlighted process", self.action_detail)
        yield SystemCommand("Pause / resume", "Stop or restart sampling", self.action_pause)
        yield SystemCommand("Sample faster", "Shorter refresh interval", self.action_faster)
        yield SystemCommand("Sample slower", "Longer refresh interval", self.action_slower)
        yield SystemCommand("Zombies", "Only the suspicious processes, with reasons", self.action_zombies)
        yield SystemCommand("Jobs", "One row per container, pod or SLURM job", self.action_jobs)
        yield SystemCommand("Events", "Utilization dips and per-GPU dip rates", self.action_events)
        yield SystemCommand("Columns", "Show or hide process table columns", self.action_columns)
        yield SystemCommand("Doctor", "Why isn't my GPU being used?", self.action_doctor)
        yield SystemCommand(
            "Allocator / attach",
            "PyTorch allocator of the highlighted process; attach gputui's agent to a Python without one",
            self.action_allocator,
        )
        if not self.readonly:
            yield SystemCommand("Kill", "Signal the highlighted or tagged processes", self.action_kill)
