"""The Events pane: the GPUs' health (each Xid with its meaning and what to do), the processes whose
memory fills their GPU soon or that look hung, then every utilization dip, newest first, and per-GPU dip
rates over the visible window.
The dips of one job that happen together (eight ranks waiting on one all-reduce) are one row: see
gputui.ui.widgets.dip_groups. The summary still counts each GPU's own dips."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui import cells
from gputui.analyze.alerts import HUNG, Alerts
from gputui.analyze.dip_causes import ProfileNote, profile_causes
from gputui.analyze.dips import DipDetector
from gputui.analyze.health import ERROR, problems
from gputui.analyze.history import History
from gputui.analyze.xid import describe
from gputui.model import Snapshot, XidEvent
from gputui.ui.screens.detail import MODAL_CSS, Modal
from gputui.ui.widgets.command_line import shorten
from gputui.ui.widgets.dip_groups import DipGroup, Jobs, compact_gpus, group_dips, sample_interval
from gputui.units import NA, printable

SHOWN = 200  # rows (a group of dips is one)
MAX_XID_ROWS = 50
MAX_ALERT_ROWS = 50
COMMAND_CELLS = 40


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class EventsScreen(Modal[None]):
    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,e", "dismiss", "Close")]

    def __init__(
        self,
        dips: DipDetector,
        history: History,
        snapshot: Snapshot,
        window: float,
        xids: tuple[XidEvent, ...] = (),
        alerts: Alerts | None = None,
        profiles: Sequence[ProfileNote] = (),
    ) -> None:
        super().__init__()
        self.body = Static(id="events", markup=False)
        self.dips, self.history, self.snapshot, self.window = dips, history, snapshot, window
        self.xids = list(xids)  # the recent Xid errors (the GPU panes keep an hour of them)
        # The app's, fed every snapshot; without one (a test), this snapshot's own.
        self.alerts = alerts if alerts is not None else Alerts()
        self.own_alerts = alerts is None
        self.profiles = profiles  # the profiles the allocator panel saw finish: a dip's reason

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield self.body

    def on_mount(self) -> None:
        self.follow(self.snapshot)

    def follow(self, snap: Snapshot) -> None:
        """Called by the app with every new snapshot while this screen is on top."""
        if snap is not self.snapshot:
            self.xids.extend(snap.xids)
        if self.own_alerts:
            self.alerts.add(snap)
        self.snapshot = snap
        self.body.update(self.render_events())  # held: see AllocatorScreen.follow

    def summary_table(self) -> Table:
        now = self.snapshot.time
        since = now - self.window
        table = Table(
            title=f"last {int(self.window // 60)} min",
            title_justify="left",
            box=None,
            padding=(0, 2),
            header_style="bold",
        )
        for name in ("GPU", "mean util", "dips", "dips/min", "mean dip"):
            table.add_column(name, justify="right")
        for g in self.snapshot.gpus:
            mean_util, covered = self.history.busy_seconds(g.index, since)
            s = self.dips.summary(g.index, now - covered if covered else since, now, 0.0)
            table.add_row(
                str(g.index),
                f"{mean_util:.0f}%",
                str(s["dips"]),
                f"{s['dips_per_min']:.2f}",
                f"{s['mean_dip_s']:.1f} s" if s["mean_dip_s"] is not None else NA,
            )
        return table

    def groups(self) -> list[DipGroup]:
        """The rows, newest first: ongoing dips, then the ended ones from the newest, grouped by job."""
        snap = self.snapshot
        everything = [*self.dips.ongoing(snap.time), *reversed(self.dips.dips)]
        jobs = Jobs(snap)
        times = max((h.times for h in self.history.gpus.values()), key=len, default=())
        return group_dips(everything, lambda d: jobs.of(d.gpu, d.start), sample_interval(times))

    def dips_table(self) -> Table:
        rows = self.groups()[:SHOWN]
        with_job = any(g.job is not None for g in rows)
        # A job's label (launcher and pid) is never cut or broken: the "why" wraps instead.
        label_cells = max((cells.width(g.job.label) for g in rows if g.job is not None), default=0)
        repeated = any(g.job is not None and len(g.dips) > len(g.gpus) for g in rows)  # a GPU dipped twice
        table = Table(box=None, padding=(0, 1), header_style="bold")
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("time", "left"),
            ("GPU", "right"),
            *((("job", "left"),) if with_job else ()),  # only when a row is a job's group
            *((("dips", "right"),) if repeated else ()),  # the group's dips, when more than its GPUs
            ("duration", "right"),
            ("depth", "right"),
            ("kind", "left"),
            ("why", "left"),
        )
        for name, justify in columns:
            # Short values stay on one line: the long "why" takes the wrapping.
            table.add_column(
                name,
                justify=justify,
                no_wrap=name != "why",
                min_width=label_cells if name == "job" else None,
            )
        for g in rows:
            deepest = g.deepest
            kind = g.kind + (" (now)" if g.ongoing else "")
            job = []
            if with_job:
                job = [Text(g.job.label if g.job is not None else "", no_wrap=True)]
            if repeated:
                job.append(Text(str(len(g.dips)) if len(g.dips) > len(g.gpus) else ""))
            table.add_row(
                _clock(g.start),
                compact_gpus(g.gpus),
                *job,
                f"{g.duration:.0f} s",
                f"-{deepest.depth:.0f} pts ({deepest.fell()})",  # `SM 88→6%` when measured on SM activity
                Text(kind, style="yellow" if g.kind == "long" else "red"),
                Text(g.explanation(profile_causes(self.profiles, g.gpus, g.start, g.end))),
            )
        return table

    def health_parts(self) -> list[Text | Table]:
        """The GPUs' health problems (each Xid with its meaning and what to do), the processes whose memory
        fills their GPU soon, and the ones that look hung: before the dips, since they matter more."""
        parts: list[Text | Table] = []
        snap = self.snapshot
        found = [p for g in snap.gpus for p in problems(g, self.xids)]
        if found or self.xids:
            parts.append(Text("GPU health", style="bold"))
            table = Table(box=None, padding=(0, 2), header_style="bold")
            for name in ("GPU", "problem", "what to do"):
                table.add_column(name)
            for p in found:
                table.add_row(
                    str(p.gpu), Text(p.text, style="red" if p.severity == ERROR else "yellow"), p.fix
                )
            parts.append(table)
            if self.xids:
                xids = Table(box=None, padding=(0, 2), header_style="bold")
                for name in ("time", "GPU", "Xid", "what happened", "what to do"):
                    xids.add_column(name)
                for x in sorted(self.xids, key=lambda e: e.time, reverse=True)[:MAX_XID_ROWS]:
                    info = describe(x.xid)
                    xids.add_row(
                        _clock(x.time),
                        str(x.gpu),
                        str(x.xid),
                        Text(f"{info.name}: {info.what}"),
                        Text(info.fix),
                    )
                parts.append(xids)
            parts.append(Text(""))
        alerts = self.alerts.newest_first()[:MAX_ALERT_ROWS]
        if alerts:
            parts.append(Text("Before it breaks", style="bold"))
            table = Table(box=None, padding=(0, 2), header_style="bold")
            for name in ("since", "until", "GPU", "pid", "command", "what"):
                table.add_column(name, justify="right" if name in ("GPU", "pid") else "left")
            table.columns[4].max_width = COMMAND_CELLS
            for a in alerts:
                style = ("red" if a.kind == HUNG else "yellow") if a.ongoing else "dim"
                table.add_row(
                    _clock(a.first),
                    "now" if a.ongoing else _clock(a.last),
                    str(a.gpu) if a.gpu is not None else NA,
                    str(a.pid),
                    Text(printable(shorten(a.command or NA)), no_wrap=True, overflow="ellipsis"),
                    Text(printable(a.text), style=style),
                )
            parts.append(table)
            parts.append(Text(""))
        return parts

    def render_events(self) -> Group:
        parts: list[Text | Table] = [
            *self.health_parts(),
            Text("Utilization dips", style="bold"),
            Text(
                "Under half the recent busy median and 20+ points below it, for 2 s or more, with a process "
                "on the GPU. stall: shorter than 5 s (often the data loader); long: end of epoch, "
                "evaluation, checkpoint. The GPUs of one job (ranks of one launcher) that dip together "
                "share a row; the per-GPU table counts each GPU's own dips. SM: measured on SM activity "
                "(GPM, Hopper and newer), which falls when a starved loop runs tiny kernels and NVML's "
                "utilization stays near 100%.",
                style="dim",
            ),
            self.summary_table(),
            Text(""),
        ]
        if self.dips.dips or self.dips.ongoing(self.snapshot.time):
            parts.append(self.dips_table())
        else:
            parts.append(Text("no dip so far", style="dim"))
        return Group(*parts)
