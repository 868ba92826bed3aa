"""The full-screen app. Data flows one way: sampler thread -> Snapshot message -> widgets."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from rich.style import Style
from textual import on, work
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.events import Key, Resize
from textual.reactive import var
from textual.widgets import Input

from gputui.analyze.alerts import Alerts
from gputui.analyze.dip_causes import ProfileNote
from gputui.analyze.dips import DipDetector
from gputui.analyze.history import History
from gputui.collect.agents.client import AgentHistory, AgentPoller
from gputui.collect.sampler import Sampling
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.ui import keys, row_chosen
from gputui.ui.attach_flow import AttachFlow
from gputui.ui.base_app import BaseApp
from gputui.ui.kill_flow import READ_ONLY, KillFlow
from gputui.ui.persist import SettingsFile
from gputui.ui.sampling import SamplerFailed, SamplingLate, SnapshotReady, sample_forever
from gputui.ui.steps import INTERVALS, SORT_CYCLE, ZOOMS, history_seconds, next_interval, next_zoom
from gputui.ui.styles import tcss
from gputui.ui.widgets.filter_input import FilterInput
from gputui.ui.widgets.gpu_panes import CHROME_ROWS, GpuPanes
from gputui.ui.widgets.header import HeaderBar
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.palette import Palette
from gputui.ui.widgets.process_rows import BY_KEY, COLUMN_KEYS, View
from gputui.ui.widgets.process_table import MIN_COMMAND, ProcessTable
from gputui.ui.widgets.row_note import RowNote
from gputui.ui.widgets.status import StatusLine

# The modal screens (help, detail, kill, allocator, events, doctor) are imported when first opened:
# together they added about 0.1 s to every start, before the first frame.
if TYPE_CHECKING:
    from gputui.collect.sampler import Seekable

# What others import from here (the messages and the steps live in their own modules).
__all__ = ["INTERVALS", "SORT_CYCLE", "ZOOMS", "GpuTuiApp", "SamplerFailed", "SnapshotReady", "next_interval"]


@runtime_checkable
class FollowsSnapshots(Protocol):
    """A screen that shows live data (the allocator and events screens): each snapshot is handed to it."""

    def follow(self, snap: Snapshot) -> None: ...


class GpuTuiApp(BaseApp):
    TITLE = "gputui"
    CSS = tcss("GpuTuiApp")
    ENABLE_COMMAND_PALETTE = True
    KEYS = keys.MONITOR  # the bindings, the help screen, the palette's commands
    BINDINGS: ClassVar[list[BindingType]] = keys.MONITOR.bindings()

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
        sampler: Sampling,
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
        self._forget_past()
        self.profiles: deque[ProfileNote] = deque(maxlen=50)  # those the allocator panel saw finish
        self.replay = replay
        self.notes: list[str] = []  # said on the status line once the first frame is up
        self.view = View()
        self.frames = 0  # snapshots applied; tests and the bench wait on it
        self.error: str | None = None  # why the app gave up, for the command line to print
        self.readonly = readonly or replay  # a replay signals nothing: its pids are not this machine's
        self.tagged: set[str] = set()  # row keys
        self.kills = KillFlow(self)
        self.attach_flow = AttachFlow(self)
        self._row_styles: dict[str, Style] = {}
        self._failing: tuple[str, int] | None = None  # (the sampler's error, failed ticks in a row)
        self._said_late = False  # a sample longer than the interval: said once (the header keeps saying it)
        self.saved = SettingsFile(self, config_path, folded=lambda: self.table.workers_folded)
        self.saved.restore(interval)

    def _forget_past(self) -> None:
        """What is kept of the snapshots (see ingest), empty: at start, and before a replay seek."""
        self.history = History(max_age=history_seconds())  # the last hour
        self.agent_history = AgentHistory()
        self.dips = DipDetector()
        self.alerts = Alerts()  # processes that were filling their GPU or looked hung, and when

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
        # (BaseApp.on_mount runs after this one: Textual calls the handler of every class in the MRO, so
        # calling it here too would start its timers twice.)
        self._interval_changed(self.interval)
        self.panes.set_window(self.window)
        self.saved.restore_widgets(self.panes, self.table)
        self.table.focus()
        self._sample_loop()

    def apply_palette(self, palette: Palette) -> None:
        for canvas in (self.header, self.panes, self.status, self.row_note):
            canvas.palette = palette  # each redraws itself with it
        self._row_styles = {"dim": palette.dim, "error": palette.error, "warning": palette.warning}
        table = self.table
        table.header_style, table.cursor_style = palette.header, palette.cursor
        self.refresh_table()

    def on_resize(self, event: Resize) -> None:
        self._choose_layout(event.size.width, event.size.height)

    def _choose_layout(self, width: int, height: int) -> None:
        """The room the GPU area shares with the process table; the layout engine (ui/layout.py) picks
        panes, two columns or one line per GPU in it."""
        self.panes.fit_room(width, max(1, height - CHROME_ROWS))

    # -- watchers: derived state -------------------------------------------------------------------

    def watch_interval(self, interval: float) -> None:
        self._interval_changed(interval)
        self.saved.remember(interval=interval)
        self.sample_now()  # the sampler waits the new interval from now, not the old one's rest

    def _interval_changed(self, interval: float) -> None:
        self.header.interval = interval  # (each widget redraws what it derives from it)
        # The bucket (seconds per sparkline cell) derives from interval, window and width: GpuPanes
        # recomputes it as the interval is set, not at the next resize.
        self.panes.interval = interval

    def watch_window(self, window: float) -> None:
        self.panes.set_window(window)
        self.saved.remember(zoom=window)
        self.say(f"sparklines: at least the last {int(window // 60)} min")

    def watch_paused(self, paused: bool) -> None:
        self.header.paused = paused

    # -- sampling (a single long-lived thread) -----------------------------------------------------

    @work(thread=True, exclusive=True, group="sampler")
    def _sample_loop(self) -> None:
        sample_forever(self)

    def on_sampling_late(self, message: SamplingLate) -> None:
        self.header.took = message.took
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
        self.attach_flow.follow(message.snapshot)
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
            header.replay = self._replay_position()  # drawn with the snapshot, set next
            header.snapshot = snap
            panes.show(snap)
            self.refresh_table()
            screen = self.screen
            if isinstance(screen, FollowsSnapshots):  # the allocator and events screens
                screen.follow(snap)
            self.status.unreadable = snap.unreadable_fds  # redrawn when the count changed
        self.frames += 1

    def refresh_table(self) -> None:
        """The process table again, from the view, the tags and the palette's row styles."""
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
        self.refresh_table()
        self.saved.remember_view(view)

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
        self.sample_now()  # the tree needs the relatives

    def action_choose_gpu(self) -> None:
        if self.view.gpu is not None:
            self._select_gpu(None)
        elif self.snapshot is not None:
            from gputui.ui.screens.detail import GpuChooser

            self.push_screen(
                GpuChooser(self.snapshot.gpus, gpm_note=self.snapshot.gpm_note), self._select_gpu
            )

    def _select_gpu(self, gpu: int | None) -> None:
        self.panes.selected_gpu = gpu
        self._set_view(replace(self.view, gpu=gpu))

    def action_detail(self) -> None:
        row = self.table.current
        if row is not None:
            row_chosen.choose(self, row)

    @on(ProcessTable.RowChosen)
    def _row_chosen(self, event: ProcessTable.RowChosen) -> None:
        """Enter: the detail, always (a ◆ row's allocator is `a`)."""
        row_chosen.choose(self, event.row)

    def _open_detail(self, process: ProcessRow | HostProcess) -> None:
        self.push_screen(row_chosen.detail_screen(self, process))

    def action_allocator(self) -> None:
        self.attach_flow.allocator()

    def open_allocator(self, pid: int) -> None:
        """The allocator panel of `pid`'s agent (`a`, or once an attached agent answers)."""
        assert self.snapshot is not None
        # Read-only and replays act on no agent: the panel gets no poller to act with.
        poller = None
        if not (self.readonly or self.replay):
            poller = self.sampler.agents or AgentPoller()
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
        self.saved.remember(layout=choice)
        self.say(f"GPU layout: {choice}" + (" (the engine picks for the room)" if choice == "auto" else ""))

    def action_columns(self) -> None:
        from gputui.ui.screens.columns import ColumnsScreen

        self.push_screen(ColumnsScreen(self.table.hidden), self._set_hidden_columns)

    def _set_hidden_columns(self, hidden: frozenset[str] | None) -> None:
        if hidden is None:
            return
        self.table.hidden = hidden
        self.saved.remember(hidden_columns=tuple(sorted(self.table.hidden)))
        labels = ", ".join(BY_KEY[k].label for k in COLUMN_KEYS if k in self.table.hidden)
        self.say(f"hidden columns: {labels} (c to choose)" if labels else "every column shows")

    def action_zoom(self, step: int) -> None:
        self.window = next_zoom(self.window, step)

    # -- settings that persist ----------------------------------------------------------------------

    def _theme_changed(self, theme: object) -> None:
        super()._theme_changed(theme)
        self.saved.remember(theme=self.theme)

    def on_unmount(self) -> None:
        self.saved.save_at_exit()
        # (BaseApp.on_unmount runs too: Textual calls the handler of every class.)

    # -- replay --------------------------------------------------------------------------------------

    @property
    def seekable(self) -> Seekable | None:
        """The play controls: a recording's (`gputui replay`), not a fixed world's."""
        return self.sampler.seekable if self.replay else None

    def action_seek(self, delta: int) -> None:
        replay = self.seekable
        if replay is None:
            return
        replay.seek(delta)
        self._forget_past()  # and kept again, as if the recording had played up to here
        for snap in replay.played:
            self.ingest(snap)
        self.panes.history = self.history
        self.panes.rebuild()
        self._show(replay.played[-1])

    def _replay_position(self) -> str | None:
        replay = self.seekable
        if replay is None:
            return None
        done, total = replay.position, len(replay.snapshots)
        return f"REPLAY {done}/{total}" + (" (end)" if done >= total else "")

    # -- zombies and signals -----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # --readonly: no signal can be sent, and the footer does not offer one.
        return not (self.readonly and action in ("kill", "escalate", "tag"))

    def on_key(self, event: Key) -> None:
        if self.readonly and event.key in ("k", "f9", "K", "space"):
            event.stop()  # the bindings are off (check_action): say why nothing happens
            self.say(READ_ONLY, "warning")

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
        self.kills.tag()

    def action_kill(self) -> None:
        self.kills.kill()

    def action_escalate(self) -> None:
        self.kills.escalate()

    # -- quitting: every way out gives up an attach under way (see attach_flow) ---------------------

    async def action_quit(self) -> None:
        self.attach_flow.abandon()
        await super().action_quit()

    def on_signal(self, sig: int) -> None:
        self.attach_flow.abandon()
        super().on_signal(sig)

    def close_source(self) -> None:
        self.attach_flow.abandon()  # a forced exit (the terminal hung)
        self.sampler.close()

    async def run_async(self, **kwargs: Any) -> int:
        try:
            return await super().run_async(**kwargs)
        finally:
            self.attach_flow.abandon()
            self.attach_flow.say_abandoned()  # the terminal is given back by now
