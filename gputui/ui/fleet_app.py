"""`gputui fleet`: every host and GPU Prometheus knows, a row per host; Enter opens one host.

Data flows one way, as in the single-host app: one long-lived thread refreshes the FleetReader and
posts each FleetView; widgets draw from it. A failed refresh keeps the last view on screen under a
banner and is retried sooner (2, 4, 8 s ... up to the interval).
"""

from __future__ import annotations

import time
from typing import ClassVar, Protocol, runtime_checkable

from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.message import Message
from textual.reactive import var
from textual.worker import get_current_worker

from gputui.export.fleet import SORTS, FleetHost, FleetReader, FleetView, sort_hosts
from gputui.ui import keys
from gputui.ui.base_app import BaseApp
from gputui.ui.screens.fleet_host import HostScreen, window_label
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import CellCanvas, Line
from gputui.ui.widgets.fleet_table import FleetTable
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.palette import Palette


@runtime_checkable
class FollowsFleet(Protocol):
    """A screen that shows the live fleet (one host's screen): each view is handed to it."""

    def show(self, view: FleetView) -> None: ...


class FleetReady(Message):
    def __init__(self, view: FleetView, retry_at: float | None = None) -> None:
        super().__init__()
        self.view = view
        self.retry_at = retry_at  # monotonic time of the next attempt


class FleetHeader(CellCanvas):
    DEFAULT_CSS = tcss("FleetHeader")

    # Setting either redraws the header. `view` even when equal: its clock is the fetch's.
    view: var[FleetView | None] = var(None, always_update=True, init=False)
    sort: var[str] = var("busy", init=False)

    def __init__(self, url: str, *, tls_verified: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.url = url  # Prometheus.shown_url: no credentials in it
        self.tls_verified = tls_verified

    def _changed(self) -> None:
        self.redraw()

    watch_view = watch_sort = _changed

    def build(self, width: int) -> list[Line]:
        p = self.palette
        line = Line().add(" gputui fleet ", p.title).add(self.url, p.plain)
        if not self.tls_verified:  # --insecure: whoever answers could be anyone
            line.add("  TLS not verified", p.warning)
        view = self.view
        if view is None or view.fetched_at is None:
            return [line.add("  connecting…", p.dim)]
        busy = sum(h.busy_gpus for h in view.hosts)
        line.add(f"  {len(view.hosts)} hosts · {view.gpu_count} GPUs · {busy} busy", p.plain)
        line.add("  at ", p.dim).add(time.strftime("%H:%M:%S", time.localtime(view.fetched_at)), p.plain)
        line.add("  sort ", p.dim).add(self.sort, p.accent)
        return [line]


class Banner(CellCanvas):
    """Why the data may be old: Prometheus unreachable, slow or refusing; hosts gone stale."""

    DEFAULT_CSS = tcss("Banner")

    view: var[FleetView | None] = var(None, always_update=True, init=False)  # setting it redraws

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # Monotonic time of the next attempt: set before each view and drawn with it (no watcher: the
        # banner would be built twice), then counted down each second.
        self.retry_at: float | None = None
        self.selector = ""

    def on_mount(self) -> None:
        self.set_interval(1.0, self.redraw)  # the "retry in N s" countdown

    def watch_view(self) -> None:
        self.redraw()

    def build(self, width: int) -> list[Line]:
        p, view = self.palette, self.view
        line = Line()
        if view is None:
            return [line]
        if view.error:
            line.add(" ⚠ " + view.error, p.error)
            if view.fetched_at is not None:
                line.add(
                    " · showing data from " + time.strftime("%H:%M:%S", time.localtime(view.fetched_at)),
                    p.warning,
                )
            if self.retry_at is not None and not view.refused:
                line.add(f" · retry in {max(0, round(self.retry_at - time.monotonic()))} s", p.warning)
            return [line]
        stale = [h for h in view.hosts if h.stale]
        if stale:
            names = ", ".join(h.name for h in stale[:5]) + (" …" if len(stale) > 5 else "")
            line.add(f" {len(stale)} host{'s' if len(stale) > 1 else ''} not scraped now: {names}", p.warning)
        elif not view.hosts:
            where = f" matching {{{self.selector}}}" if self.selector else ""
            line.add(
                f" no DCGM_FI_DEV_GPU_UTIL series{where} in Prometheus: is gputui export or "
                "dcgm-exporter being scraped?",
                p.warning,
            )
        return [line]


class FleetApp(BaseApp):
    TITLE = "gputui fleet"
    CSS = tcss("FleetApp")
    KEYS = keys.FLEET  # the bindings, the help screen, the palette's commands
    BINDINGS: ClassVar[list[BindingType]] = keys.FLEET.bindings()

    sort: var[str] = var("busy", init=False)  # -> the header, the table's order

    def __init__(
        self, reader: FleetReader, interval: float = 5.0, sort: str = "busy", mouse: bool = True
    ) -> None:
        super().__init__(mouse=mouse)
        self.reader = reader
        self.interval = interval
        self.set_reactive(FleetApp.sort, sort)
        self.view: FleetView = reader.view
        self.frames = 0  # views applied; tests wait on it

    def compose(self) -> ComposeResult:
        prometheus = self.reader.prometheus
        self.header = FleetHeader(prometheus.shown_url, tls_verified=prometheus.tls_verified, id="header")
        self.header.sort = self.sort  # (watch_sort hands on the changes)
        self.banner = Banner(id="banner")
        self.banner.selector = self.reader.matchers
        self.table = FleetTable(id="hosts")
        self.table.window_label = window_label(self.reader.window)
        yield self.header
        yield self.banner
        yield self.table
        yield KeyBar()

    def on_mount(self) -> None:  # (BaseApp.on_mount runs too, after it: see GpuTuiApp.on_mount)
        self.table.focus()
        self._refresh_loop()

    def apply_palette(self, palette: Palette) -> None:
        for canvas in (self.header, self.banner, self.table):
            canvas.palette = palette  # each redraws itself with it

    def watch_sort(self, sort: str) -> None:
        self.header.sort = sort  # (it redraws itself; the view is the same)
        self._order()

    @work(thread=True, exclusive=True, group="fleet")
    def _refresh_loop(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled and not self._stop.is_set():
            view = self.reader.refresh()
            # After a failure retry sooner, backing off: 2, 4, 8 ... seconds, never past the interval.
            delay = self.interval if view.error is None else min(self.interval, 2.0 ** min(view.failures, 6))
            try:
                self.post_message(FleetReady(view, time.monotonic() + delay))
            except RuntimeError:  # the app closed its loop while this thread waited on Prometheus
                return
            self.sleep_unless_woken(delay)

    def on_fleet_ready(self, message: FleetReady) -> None:
        self.banner.retry_at = message.retry_at  # (set here, not by the thread: widgets are the UI's)
        self.show(message.view)

    def show(self, view: FleetView) -> None:
        self.view = view
        self.frames += 1
        with self.batch_update():
            self.header.view = self.banner.view = view  # each redraws itself
            self._order()
            screen = self.screen
            if isinstance(screen, FollowsFleet):
                screen.show(view)

    def _order(self) -> None:
        """The table: the view's hosts in the chosen order."""
        view, table = self.view, self.table
        table.sort = self.sort
        table.now = view.fetched_at or time.time()
        table.empty_note = "waiting for Prometheus…" if view.fetched_at is None else "no hosts"
        table.apply(sort_hosts(view.hosts, self.sort))

    def action_sort(self, key: str) -> None:
        self.sort = key  # watch_sort shows the view in the new order

    def action_sort_next(self) -> None:
        self.action_sort(SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)])

    @on(FleetTable.SortClicked)
    def _sort_clicked(self, event: FleetTable.SortClicked) -> None:
        same = event.sort == self.sort or (event.sort, self.sort) == ("busy", "busy")
        self.action_sort("idle" if same and event.sort == "busy" else event.sort)

    def action_refresh(self) -> None:
        self._wake.set()

    @on(FleetTable.RowChosen)
    def _open_host(self, event: FleetTable.RowChosen) -> None:
        host: FleetHost = event.row
        self.reader.focus = host.name
        screen = HostScreen(host.name, self.table.palette)
        self.push_screen(screen, callback=self._host_closed)
        screen.show(self.view)
        self._wake.set()  # fetch its processes and memory now

    def _host_closed(self, _result: None) -> None:
        self.reader.focus = None
        self.table.focus()

    def close_source(self) -> None:
        self.reader.prometheus.close()

    def on_unmount(self) -> None:
        # However the app ends, the refresh thread must not sleep out its interval, nor wait out a
        # request that hangs: it is abandoned (a daemon thread), and its request is cut now.
        self.stop_background()  # first, so the cut request reads as the end (BaseApp's, after, again)
        self.close_source()
