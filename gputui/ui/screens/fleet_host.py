"""One host of the fleet (Enter on its row): its GPUs over the window, zombies, jobs, processes,
allocators."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen

from gputui.cells import pad
from gputui.export.fleet import FleetHost, FleetView, HostDetail
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import CellCanvas, Line
from gputui.ui.widgets.fleet_table import MIB, add_spark, mem_text, state_text
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.palette import Palette
from gputui.units import NA, fmt_bytes

JOB_GPUS = 11  # cells for a job's GPUs: "0,1,2,3,4,5" or "0:3,0:5"


def window_label(seconds: float) -> str:
    return f"last {seconds / 3600:g} h" if seconds >= 3600 else f"last {seconds / 60:g} min"


class HostView(CellCanvas, can_focus=True):
    """One host: its GPUs with utilization and memory over the window, its processes, zombies, agents."""

    DEFAULT_CSS = tcss("HostView")
    BINDINGS = [
        Binding("up", "scroll(-1)", show=False),
        Binding("down", "scroll(1)", show=False),
        Binding("pageup", "scroll(-10)", show=False),
        Binding("pagedown", "scroll(10)", show=False),
    ]

    # Setting either redraws (the watchers): no caller has to. `view` redraws even when equal: the
    # states' ages ("stale 42s") move with the clock.
    view: var[FleetView | None] = var(None, always_update=True, init=False)
    first_line: var[int] = var(0, init=False)  # the scroll position

    def __init__(self, name: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host_name = name

    def watch_view(self) -> None:
        self.redraw()

    def watch_first_line(self) -> None:
        self.redraw()

    @property
    def host(self) -> FleetHost | None:
        view = self.view
        return next((h for h in view.hosts if h.name == self.host_name), None) if view else None

    def action_scroll(self, delta: int) -> None:
        self.first_line = max(0, self.first_line + delta)

    def build(self, width: int) -> list[Line]:
        lines = self._content(width)
        # Kept within the content without a watcher: this runs inside redraw().
        self.set_reactive(HostView.first_line, min(self.first_line, max(0, len(lines) - self.size.height)))
        return lines[self.first_line :]

    def _content(self, width: int) -> list[Line]:
        p, host, view = self.palette, self.host, self.view
        if host is None or view is None:
            return [Line().add(f" {self.host_name}: not in Prometheus now", p.warning)]
        detail = view.detail if view.detail and view.detail.host == host.name else None
        now = view.fetched_at or time.time()
        title = Line().add(f" {host.name}", p.title).add(f"  {host.job}/{host.instance}", p.dim)
        state_style = p.error if host.down else p.warning if host.stale else p.good
        title.add("  ").add(state_text(host, now), state_style)
        lines = [title, Line()]
        spark = max(8, min(60, (width - 68) // 2))  # two sparklines right of 67 columns of numbers
        head = Line().add(
            f" {'GPU':>3} {'MODEL':<22} {'UTIL':>5} {'MEM':>13} {'TEMP':>5} {'POWER':>6} {'DIPS':>4}  ",
            p.header,
        )
        lines.append(
            head.add(pad("UTIL " + window_label(view.end - view.start), spark + 1), p.header).add(
                "MEM", p.header
            )
        )
        util_style = p.util_style(True)
        for g in host.gpus:
            line = Line().add(f" {g.gpu:>3} ", p.plain).add(pad(g.model or NA, 22) + " ", p.dim)
            line.add(f"{NA if g.util is None else f'{g.util:.0f}%':>5} ", util_style(g.util))
            mem = (
                NA
                if g.mem_used is None or g.mem_total is None
                else f"{fmt_bytes(g.mem_used * MIB, 0)}/{fmt_bytes(g.mem_total * MIB, 0)}"
            )
            line.add(f"{mem:>13} ", p.mem_style(g.mem_percent))
            line.add(
                f"{NA if g.temperature is None else f'{g.temperature:.0f}°C':>5} ",
                p.temp_style(g.temperature),
            )
            line.add(f"{NA if g.power is None else f'{g.power:.0f}W':>6} ", p.plain)
            line.add(f"{NA if g.dips is None else f'{g.dips:.0f}':>4}  ", p.warning if g.dips else p.plain)
            add_spark(line, g.series, spark, util_style, p.dip).add(" ")
            add_spark(line, detail.mem_series.get(g.gpu, ()) if detail else (), spark, p.mem_style, None)
            lines.append(line)
        lines.append(Line().add(f" {len(host.gpus)} GPUs · {mem_text(host)} used", p.dim))
        lines.append(Line())
        if not host.gputui:
            lines.append(
                Line().add(
                    " processes, zombies and dips: run `gputui export` on this host "
                    "(dcgm-exporter does not report them)",
                    p.dim,
                )
            )
            return lines
        lines.extend(self._zombies(host))
        lines.extend(self._jobs(detail))
        lines.extend(self._processes(detail))
        lines.extend(self._agents(detail))
        return lines

    def _zombies(self, host: FleetHost) -> list[Line]:
        p = self.palette
        line = Line().add(" ZOMBIES ", p.header)
        found = {k: v for k, v in sorted(host.zombies.items()) if v}
        if not found:
            return [line.add("none", p.good), Line()]
        for cls, n in found.items():
            line.add(f"{cls} {n}  ", p.error)
        return [line, Line()]

    def _jobs(self, detail: HostDetail | None) -> list[Line]:
        """Its SLURM jobs, pods and containers with their GPU memory; nothing when it runs none (or its
        exporter predates gputui_job_gpu_memory_bytes)."""
        p = self.palette
        if detail is None or not detail.jobs:
            return []
        lines = [
            Line().add(
                f" {'KIND':<10} {'GPUS':<{JOB_GPUS}} {'GPU MEM':>9} {'USER':<10} "
                "JOB  (SLURM job, pod, container)",
                p.header,
            )
        ]
        for job in detail.jobs:
            gpus = pad(",".join(job.gpus), JOB_GPUS)  # cut: however many GPUs a server made up
            lines.append(
                Line()
                .add(f" {pad(job.kind, 10)} {gpus} {fmt_bytes(job.memory):>9} ", p.plain)
                .add(pad(job.user or NA, 10) + " ", p.dim)
                .add(job.name, p.accent)
            )
        return [*lines, Line()]

    def _processes(self, detail: HostDetail | None) -> list[Line]:
        p = self.palette
        lines = [
            Line().add(f" {'GPU':>3} {'PID':>8} {'USER':<10} {'GPU MEM':>9} {'CLASS':<13} COMMAND", p.header)
        ]
        if detail is None:
            return [*lines, Line().add(" loading…", p.dim), Line()]
        if not detail.processes:
            return [*lines, Line().add(" no GPU processes", p.dim), Line()]
        for proc in detail.processes:
            style = p.plain if proc.category in ("ok", "worker") else p.error
            lines.append(
                Line()
                .add(
                    f" {proc.gpu:>3} {proc.pid:>8} {pad(proc.user or NA, 10)} {fmt_bytes(proc.memory):>9} ",
                    p.plain,
                )
                .add(pad(proc.category, 13) + " ", style)
                .add(proc.command, p.plain)
            )
        return [*lines, Line()]

    def _agents(self, detail: HostDetail | None) -> list[Line]:
        p = self.palette
        if detail is None or not detail.agents:
            return []
        lines = [
            Line().add(
                f" {'PID':>8} {'CUDA':>4} {'ALLOCATED':>10} {'RESERVED':>10} {'FRAG':>5} "
                f"{'RETRIES':>7} {'OOMS':>4}  COMMAND  (torch allocator, from the gputui agent)",
                p.header,
            )
        ]
        for a in detail.agents:
            v = a.values
            frag = v.get("fragmentation_percent")
            lines.append(
                Line()
                .add(
                    f" {a.pid:>8} {a.cuda_device:>4} {fmt_bytes(v.get('allocated_bytes')):>10} "
                    f"{fmt_bytes(v.get('reserved_bytes')):>10} {NA if frag is None else f'{frag:.0f}%':>5} "
                    f"{v.get('alloc_retries_total', 0):>7.0f} {v.get('ooms_total', 0):>4.0f}  ",
                    p.plain,
                )
                .add(a.command, p.dim)
            )
        return lines


class HostScreen(Screen[None]):
    BINDINGS = [Binding("escape,backspace,left", "dismiss", "Back"), Binding("q", "app.quit", "Quit")]

    def __init__(self, name: str, palette: Palette) -> None:
        super().__init__()
        self.host_view = HostView(name, id="host")
        self.host_view.palette = palette

    def compose(self) -> ComposeResult:
        yield self.host_view
        yield KeyBar()

    def on_mount(self) -> None:
        self.host_view.focus()

    def show(self, view: FleetView) -> None:
        self.host_view.view = view  # its watcher redraws it
