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
        line.add("  driver ", p.dim).add(snap.driver_version or NA, p.plain)
        line.add("  CUDA ", p.dim).add(snap.cuda_driver_version or NA, p.plain)
        line.add("  ", p.dim).add(time.strftime("%H:%M:%S", time.localtime(snap.time)), p.plain)
        line.add("  every ", p.dim).add(f"{self.interval:.3g} s", p.plain)
        if self.paused:
            line.add("  ").add(" PAUSED ", p.error)
        if snap.errors:
            line.add("  ⚠ " + snap.errors[-1], p.warning)
        return [line]
