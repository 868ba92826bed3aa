"""The header: host, versions, clock, refresh interval and the DEMO / PAUSED badges; below it the host's
CPU, memory, swap, load and uptime, as htop and nvitop show them."""

from __future__ import annotations

import time

from textual.reactive import var

from gputui import cells
from gputui.model import HostStats, Snapshot
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import CellCanvas, Line
from gputui.ui.widgets.layout import Field, fit_fields
from gputui.units import NA, fmt_bytes

HEADER_LINES = 2
HOST_EVERY_S = 2.0  # the host line changes at most this often (htop: 1.5 s): each change is ~40 bytes


class HeaderBar(CellCanvas):
    DEFAULT_CSS = tcss("HeaderBar")  # HEADER_LINES high

    # Setting any of these redraws the header (_changed): the app sets state and draws nothing. A tick
    # sets one, `snapshot`, so the header is built once per tick. always_update: the clock is the
    # snapshot's, and a replay seek shows the same snapshot at a new position.
    snapshot: var[Snapshot | None] = var(None, always_update=True, init=False)
    interval: var[float] = var(1.0, init=False)
    took: var[float | None] = var(None, init=False)  # a sample took longer than the interval: how long
    paused: var[bool] = var(False, init=False)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.note = "starting…"
        # "REPLAY 120/3600" when playing a recording: set with each snapshot, just before it, and drawn
        # with it (a watcher of its own would build the header twice a tick).
        self.replay: str | None = None
        self._host: tuple[float, HostStats | None] | None = None  # (snapshot time, stats) shown

    def _changed(self) -> None:
        self.redraw()

    watch_snapshot = watch_interval = watch_took = watch_paused = _changed

    def build(self, width: int) -> list[Line]:
        p = self.palette
        line = Line().add(" gputui ", p.title)
        snap = self.snapshot
        if snap is None:
            return [line.add(self.note, p.dim)]
        if self.replay:
            line.add(f" {self.replay} ", p.accent + p.title).add(" ")
        if snap.source == "demo":
            line.add(" DEMO ", p.warning + p.title).add(" ")
        line.add(snap.hostname, p.plain)
        versions = Line().add("  driver ", p.dim).add(snap.driver_version or NA, p.plain)
        versions.add("  CUDA ", p.dim).add(snap.cuda_driver_version or NA, p.plain)
        clock = Line().add("  ", p.dim).add(time.strftime("%H:%M:%S", time.localtime(snap.time)), p.plain)
        clock.add("  every ", p.dim).add(f"{self.interval:.3g} s", p.plain)
        if self.took is not None:
            clock.add(f" (sampling takes {self.took:.2g} s)", p.warning)
        badges = Line()
        if self.paused:
            badges.add("  ").add(" PAUSED ", p.error)
        if snap.errors:
            badges.add("  ⚠ " + snap.errors[-1], p.warning)
        # PAUSED and the latest error matter more than the versions: on a narrow terminal those go.
        if _cells(line) + _cells(versions) + _cells(clock) + min(_cells(badges), 12) > width:
            versions = Line()
        for part in (versions, clock, badges):
            line.cells.extend(part.cells)
        return [line, self._host_line(self._host_to_show(snap), width)]

    def _host_to_show(self, snap: Snapshot) -> HostStats | None:
        """This snapshot's host stats, unless the ones shown are under HOST_EVERY_S old (by the snapshot's
        clock: a replay seek or a clock step back shows the new ones at once)."""
        shown = self._host
        if (
            shown is None
            or not 0 <= snap.time - shown[0] < HOST_EVERY_S
            or (shown[1] is None) != (snap.host is None)
        ):
            self._host = shown = (snap.time, snap.host)
        return shown[1]

    def _host_line(self, host: HostStats | None, width: int) -> Line:
        line = Line().add(" ")
        for text, style in fit_fields(self.host_fields(host), width - 1, self.palette.dim):
            line.add(text, style)
        return line

    def host_fields(self, host: HostStats | None) -> list[Field]:
        """CPU and memory are never dropped; then load, swap and uptime, in that order of use."""
        p = self.palette
        if host is None:  # a recording made before host stats were sampled
            return [Field.of(0, ("host: CPU, memory and load not recorded", p.dim))]
        cpus = f" of {host.cpu_count}" if host.cpu_count else ""
        # Whole percents and few digits of memory: the line changes less often, so fewer bytes go out.
        cpu = f"{host.cpu_percent:3.0f}%" if host.cpu_percent is not None else f"{NA:>4}"
        cpu_style = p.warning if host.cpu_percent is not None and host.cpu_percent >= 90 else p.plain
        mem_pct = _share(host.mem_used, host.mem_total)
        mem_style = p.error if mem_pct >= 97 else p.warning if mem_pct >= 90 else p.plain
        swap_pct = _share(host.swap_used, host.swap_total)
        out = [
            Field.of(0, ("CPU ", p.dim), (cpu, cpu_style), (cpus, p.dim)),
            Field(
                0,
                (
                    (("  MEM ", p.dim), (_used_of(host.mem_used, host.mem_total), mem_style)),
                    (("  MEM ", p.dim), (f"{mem_pct:.0f}%" if host.mem_total else NA, mem_style)),
                ),
            ),
        ]
        if host.load is not None:
            overloaded = host.cpu_count is not None and host.load[0] > host.cpu_count
            loads = " ".join(f"{v:.2f}" for v in host.load)
            out.append(
                Field(
                    1,
                    (
                        (("  LOAD ", p.dim), (loads, p.warning if overloaded else p.plain)),
                        (("  LOAD ", p.dim), (f"{host.load[0]:.2f}", p.warning if overloaded else p.plain)),
                    ),
                )
            )
        if host.swap_total:
            swap_style = p.warning if swap_pct >= 50 else p.plain
            out.append(
                Field.of(2, ("  SWP ", p.dim), (_used_of(host.swap_used, host.swap_total), swap_style))
            )
        if host.uptime is not None:
            out.append(Field.of(3, ("  UP ", p.dim), (uptime(host.uptime), p.plain)))
        return out


def _cells(line: Line) -> int:
    return cells.width("".join(ch for ch, _ in line.cells))


def _share(used: int | None, total: int | None) -> float:
    return 100.0 * used / total if used is not None and total else 0.0


def _used_of(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return NA
    return f"{_short_bytes(used)}/{_short_bytes(total)}"


def _short_bytes(n: int) -> str:
    """Two or three significant digits: `12.3 GiB`, `503 GiB` (a decimal is noise at that size)."""
    text = fmt_bytes(n)
    number = text.split()[0]
    return fmt_bytes(n, digits=0) if "." in number and len(number) > 4 else text


def uptime(seconds: float) -> str:
    """`3d 04:12` or `04:12` (hours:minutes), as `uptime` prints it."""
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours:02d}:{minutes:02d}"
    return f"{days}d {clock}" if days else clock
