"""The steps the monitor's keys move through: the sampling interval (+ / -), the sparklines' window
([ / ]) and the sort column (s); and how much history the app keeps."""

from __future__ import annotations

import os

from gputui.analyze.history import MAX_AGE_S
from gputui.ui.widgets.process_columns import ColumnKey

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
ZOOMS = (300.0, 900.0, 1800.0, 3600.0)
SORT_CYCLE: tuple[ColumnKey, ...] = ("gpu", "gpu_mem", "sm", "cpu", "rss", "time", "pid", "user")


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


def history_seconds() -> float:
    """How much history the app keeps: an hour, or GPUTUI_HISTORY_S (`make soak` shortens it so that a
    short run reaches the steady state where any growth is a leak)."""
    try:
        value = float(os.environ.get("GPUTUI_HISTORY_S", MAX_AGE_S))
    except ValueError:
        return MAX_AGE_S
    return value if 10.0 <= value <= MAX_AGE_S else MAX_AGE_S
