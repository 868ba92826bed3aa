"""The one-line header: host, versions, clock, refresh interval, and the DEMO / PAUSED badges."""

from __future__ import annotations

import time

from gputui.model import Snapshot
from gputui.ui.canvas import CellCanvas, Line
from gputui.ui.palette import Palette
from gputui.units import NA


class HeaderBar(CellCanvas):
    DEFAULT_CSS = "HeaderBar { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.interval = 1.0
        self.paused = False
        self.note = "starting…"
        self.replay: str | None = None  # "REPLAY 120/3600" when playing a recording
        self.palette = Palette.default()

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
        badges = Line()
        if self.paused:
            badges.add("  ").add(" PAUSED ", p.error)
        if snap.errors:
            badges.add("  ⚠ " + snap.errors[-1], p.warning)
        # PAUSED and the latest error matter more than the versions: on a narrow terminal those go.
        if len(line) + len(versions) + len(clock) + min(len(badges), 12) > width:
            versions = Line()
        for part in (versions, clock, badges):
            line.cells.extend(part.cells)
        return [line]
