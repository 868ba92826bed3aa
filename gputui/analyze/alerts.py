"""The processes that were about to break something: those whose memory was filling their GPU, and those
that looked hung. Each is one alert from the sample it was first seen in to the last one, so the Events
pane still lists a warning after the process died of it (the OOM came, the job was killed). Fed every
snapshot, live or replayed; pure."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from gputui.analyze.forecast import growth_text
from gputui.model import ProcessRow, Snapshot

HUNG = "hung"
FILLING = "filling"
MAX_ALERTS = 200


@dataclass(frozen=True, slots=True)
class Alert:
    kind: str  # HUNG or FILLING
    pid: int
    gpu: int | None
    first: float  # the time of the first sample that showed it
    last: float  # ... and of the newest one
    text: str  # the newest: "stalled at step 41,230 for 3 min ...", "growing 120 MiB/min — ..."
    command: str | None = None
    ongoing: bool = True  # the newest sample still shows it


def _text(kind: str, row: ProcessRow) -> str | None:
    if kind == HUNG:
        return row.hung
    if row.full_in is not None and row.memory_growth is not None:
        return growth_text(row.memory_growth, row.full_in)
    return None


class Alerts:
    def __init__(self) -> None:
        # (kind, pid, create time) -> its alert; oldest first, so the oldest ended one goes first.
        self.alerts: OrderedDict[tuple[str, int, float | None], Alert] = OrderedDict()

    def add(self, snap: Snapshot) -> None:
        now = snap.time
        seen = set()
        for row in snap.processes:
            for kind in (HUNG, FILLING):
                text = _text(kind, row)
                if text is None:
                    continue
                key = (kind, row.pid, row.create_time)
                seen.add(key)
                old = self.alerts.get(key)
                if old is None:
                    self.alerts[key] = Alert(kind, row.pid, row.gpu, now, now, text, row.command or row.name)
                else:
                    self.alerts[key] = replace(old, last=now, text=text, gpu=row.gpu, ongoing=True)
        for key, alert in list(self.alerts.items()):
            if alert.ongoing and key not in seen:
                self.alerts[key] = replace(alert, ongoing=False)
        while len(self.alerts) > MAX_ALERTS:
            self.alerts.popitem(last=False)

    def newest_first(self) -> list[Alert]:
        """Ongoing ones first (hung before filling), then the ended ones, the newest first."""
        return sorted(self.alerts.values(), key=lambda a: (not a.ongoing, a.kind != HUNG, -a.last))
