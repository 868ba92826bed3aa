"""The monitor's sampler thread (one, long-lived) and what it posts to the app: SnapshotReady each tick,
SamplerFailed when the source cannot open or a tick raises, SamplingLate when samples fall behind the
interval (and again when they keep time). The app's handlers draw them; this thread draws nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message
from textual.worker import get_current_worker

from gputui.collect.pace import Pacer
from gputui.collect.sources.base import SourceUnavailable
from gputui.model import Snapshot
from gputui.units import printable

if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp


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


def sample_forever(app: GpuTuiApp) -> None:
    """On the app's sampler worker, until the app stops: open the source, then a tick per interval
    (none while paused); a key that wants fresh data (sample_now) starts the next one at once."""
    worker = get_current_worker()
    sampler = app.sampler
    try:
        if sampler.info is None:
            sampler.open()
    except SourceUnavailable as err:
        app.post_message(SamplerFailed(str(err)))
        return
    # Samples start on a steady schedule: waiting a whole interval after each one made the period
    # interval + sampling time. A sample longer than the interval is said, in the header and once.
    pacer = Pacer(app.interval)
    was_late = False
    while not worker.is_cancelled and not app.stopping:
        if not app.paused:
            try:
                snap = sampler.tick()
            except Exception as err:  # keep drawing the last good frame; say what broke
                app.post_message(SamplerFailed(f"sampling failed: {type(err).__name__}: {err}"))
            else:
                app.post_message(SnapshotReady(snap))
        delay = pacer.delay_after_sample()
        if pacer.last_late != was_late:
            was_late = pacer.last_late
            app.post_message(SamplingLate(pacer.took if was_late else None, pacer.describe_late()))
        if app.sleep_unless_woken(delay):  # a key, or a new interval: sample now, the schedule from here
            pacer.restart(app.interval)
