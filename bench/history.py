"""history: what an hour of the TUI's history takes (gputui.analyze.history, every GPU's samples and each
process's memory stretches), traced by tracemalloc: 8 GPUs at 1 Hz and at 4 Hz, from the fixed test
world's snapshots with their times spread over the hour."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

from gputui.analyze.history import MAX_AGE_S, History
from tests.ui import world


def hour_of_history_mib(gpus: int, hz: float) -> float:
    """The most the history held while it filled its hour (MAX_AGE_S at `hz`) and went on a quarter more."""
    snaps = world.snapshots(gpus=gpus, seconds=300, weird=False)
    history = History()
    tracemalloc.start()
    try:
        start = snaps[0].time
        for i in range(int(MAX_AGE_S * hz * 1.25)):  # full, and a quarter hour more of the oldest leaving
            history.add(replace(snaps[i % len(snaps)], time=start + i / hz))
        _, peak = tracemalloc.get_traced_memory()  # the most it held on the way, not only at the end
    finally:
        tracemalloc.stop()
    return round(peak / 2**20, 2)


def bench_history(gpus: int = 8) -> dict[str, object]:
    return {
        "gpus": gpus,
        "max_age_s": MAX_AGE_S,
        "hour_at_1hz_mib": hour_of_history_mib(gpus, 1.0),
        "hour_at_4hz_mib": hour_of_history_mib(gpus, 4.0),
    }
