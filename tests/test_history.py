"""A GPU's history (gputui.analyze.history): machine numbers in arrays, read back as the values that went
in (None for unavailable, never 0), bounded by count and by age exactly as before, and a replay's absurd
value never breaks it."""

from __future__ import annotations

import pytest

from gputui.analyze.history import GpuHistory, History, Times, Values
from tests.builders import h100, snapshot


def test_values_read_back_as_written_and_unknown_stays_none() -> None:
    col = Values()
    for v in (0, 12.4, 12.6, None, 700.0, -3):
        col.append(v)
    assert list(col) == [0, 12, 13, None, 700, -3]  # 0 is a reading; None is not
    assert len(col) == 6 and col[3] is None and col[-1] == -3 and col[-6] == 0
    assert col[1:3] == [12, 13] and col[::-1] == [-3, 700, None, 13, 12, 0]
    assert list(reversed(col)) == [-3, 700, None, 13, 12, 0]
    for bad in (6, -7):
        with pytest.raises(IndexError):
            col[bad]


def test_a_replays_absurd_value_is_kept_at_the_largest_a_sample_can_hold() -> None:
    col = Values()
    for v in (1e15, -1e15, float("inf"), float("nan")):  # a hostile recording's: never an error in the tick
        col.append(v)
    assert list(col) == [2**15 - 1, -(2**15 - 1), 2**15 - 1, None]  # NaN is unknown, never a number


def test_the_oldest_samples_leave_first_and_the_rest_read_the_same_through_every_compaction() -> None:
    times, values = Times(), Values()
    kept: list[tuple[float, int | None]] = []
    for i in range(1000):
        times.append(float(i))
        values.append(None if i % 7 == 0 else i % 100)
        kept.append((float(i), None if i % 7 == 0 else i % 100))
        if len(times) > 50:
            times.drop(1)
            values.drop(1)
            kept.pop(0)
        assert list(zip(times, values, strict=True)) == kept
    assert times[0] == 950.0 and times[-1] == 999.0 and len(values) == 50


def test_a_gpu_keeps_at_most_its_capacity_newest_first_out() -> None:
    h = GpuHistory(capacity=3)
    for t in range(5):
        h.add(float(t), t, 10 * t, None, None)
    assert len(h) == 3 and list(h.times) == [2.0, 3.0, 4.0] and list(h.mem) == [20, 30, 40]
    assert list(h.power) == [None, None, None]


def test_history_drops_what_is_older_than_its_age_and_a_clock_step_back_drops_nothing_newer() -> None:
    history = History(max_age=10.0)
    for t in (100.0, 105.0, 111.0, 114.0):
        history.add(snapshot(time=t, gpus=(h100(index=0, util_gpu=int(t) % 100),), hostname="h"))
    h = history.gpus[0]
    assert list(h.times) == [105.0, 111.0, 114.0] and list(h.util) == [5, 11, 14]
    history.add(
        snapshot(time=50.0, gpus=(h100(index=0, util_gpu=50),), hostname="h")
    )  # the clock stepped back
    assert list(h.times) == [105.0, 111.0, 114.0, 50.0]  # as before: only the front is ever trimmed


def test_a_lost_gpu_is_unknown_in_every_series() -> None:
    history = History()
    history.add(snapshot(time=1.0, gpus=(h100(index=0, lost=True),), hostname="h"))
    h = history.gpus[0]
    assert [h.util[0], h.mem[0], h.power[0], h.sm[0]] == [None, None, None, None] and h.times[0] == 1.0
