"""Pacer: samples start every interval on a steady clock, whatever sampling takes; a sample longer than
the interval skips the slots it ran over and is counted. And `gputui record`'s loop on it (record_paced)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from gputui.collect.pace import Pacer
from gputui.model import Snapshot
from gputui.output.record import Recorder, late_note, read_recording, record_paced
from tests import builders


class Clock:
    """A monotonic clock that moves only when told: by the sample's work, or by a sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s > 0
        self.sleeps.append(s)
        self.now += s


def samples(pacer: Pacer, clock: Clock, works: list[float]) -> list[float]:
    starts = []
    for work in works:
        starts.append(clock.now)
        clock.now += work
        delay = pacer.delay_after_sample()
        if delay > 0:
            clock.sleep(delay)
    return starts


def test_the_period_is_the_interval_not_interval_plus_sampling() -> None:
    clock = Clock()
    pacer = Pacer(1.0, clock)
    starts = samples(pacer, clock, [0.3, 0.05, 0.9, 0.0, 0.5])
    assert starts == pytest.approx([100.0, 101.0, 102.0, 103.0, 104.0])
    assert clock.sleeps == pytest.approx([0.7, 0.95, 0.1, 1.0, 0.5])
    assert (pacer.late, pacer.skipped, pacer.last_late) == (0, 0, False)


def test_a_late_sample_skips_the_slots_it_ran_over_and_is_counted() -> None:
    clock = Clock()
    pacer = Pacer(1.0, clock)
    starts = samples(pacer, clock, [1.3, 0.2, 2.5, 0.2])
    # 1.3 s: the slot at 101 is missed, the next sample waits for 102 (no burst to catch up)
    assert starts == pytest.approx([100.0, 102.0, 103.0, 106.0])
    assert pacer.late == 2
    assert pacer.skipped == 1 + 2
    assert pacer.last_late is False  # the last one kept its slot
    assert pacer.took == pytest.approx(0.2)


def test_the_last_late_sample_is_described() -> None:
    clock = Clock()
    pacer = Pacer(0.5, clock)
    clock.now += 1.3
    assert pacer.delay_after_sample() == pytest.approx(0.2)
    assert pacer.last_late
    assert pacer.describe_late() == (
        "sampling took 1.30 s, longer than the 0.5 s interval: 2 samples skipped so far"
    )


def test_a_sample_that_ends_on_a_slot_is_not_late() -> None:
    clock = Clock()
    pacer = Pacer(0.25, clock)
    clock.now += 0.25
    assert pacer.delay_after_sample() == 0.0
    assert pacer.late == 0


def test_no_drift_over_many_slots() -> None:
    clock = Clock()
    pacer = Pacer(0.1, clock)
    starts = samples(pacer, clock, [0.013] * 10_000)
    assert starts[-1] == pytest.approx(100.0 + 9_999 * 0.1, abs=1e-6)


def test_restart_starts_the_schedule_now_with_a_new_interval() -> None:
    clock = Clock()
    pacer = Pacer(1.0, clock)
    clock.now += 0.2
    pacer.delay_after_sample()  # waits for 101...
    clock.now = 100.5  # ...but is woken at 100.5 (a key, a new interval)
    pacer.restart(2.0)
    clock.now += 0.4
    assert pacer.delay_after_sample() == pytest.approx(1.6)  # the next at 100.5 + 2
    with pytest.raises(ValueError):
        pacer.restart(0.0)
    with pytest.raises(ValueError):
        Pacer(-1.0, clock)


# -- gputui record --------------------------------------------------------------------------------------


def snapshot(t: float) -> Snapshot:
    return builders.snapshot(time=t, hostname="h")


def test_record_keeps_its_pace_with_a_slow_source(tmp_path: Path) -> None:
    clock = Clock()
    recorder = Recorder(tmp_path / "rec.jsonl")
    said: list[str] = []

    def tick() -> Snapshot:  # a source that takes 0.4 s a sample (a slow driver, many GPUs)
        t = clock.now
        clock.now += 0.4
        return snapshot(t)

    pacer = record_paced(
        recorder, tick, 1.0, duration=10.0, warn=said.append, monotonic=clock, sleep=clock.sleep
    )
    recorder.close()
    times = [s.time for s in read_recording(tmp_path / "rec.jsonl")[0]]
    assert times == pytest.approx([100.0 + i for i in range(10)])  # not every 1.4 s (7 in 10 s)
    assert said == [] and pacer.late == 0 and late_note(pacer) == ""


def test_record_says_once_when_sampling_takes_longer_than_the_interval(tmp_path: Path) -> None:
    clock = Clock()
    recorder = Recorder(tmp_path / "rec.jsonl")
    said: list[str] = []

    def tick() -> Snapshot:
        t = clock.now
        clock.now += 1.5
        return snapshot(t)

    pacer = record_paced(
        recorder, tick, 1.0, duration=8.0, warn=said.append, monotonic=clock, sleep=clock.sleep
    )
    recorder.close()
    times = [s.time for s in read_recording(tmp_path / "rec.jsonl")[0]]
    assert times == pytest.approx([100.0, 102.0, 104.0, 106.0])  # every other slot
    assert len(said) == 1
    assert said[0].startswith("sampling took 1.50 s, longer than the 1 s interval")
    assert late_note(pacer) == " (4 samples took longer than the 1 s interval; 4 were skipped)"


def test_record_on_the_real_clock(tmp_path: Path) -> None:
    """0.05 s of work a sample at 0.1 s: the old wait-a-full-interval loop made 7 samples in 1 s."""
    recorder = Recorder(tmp_path / "rec.jsonl")

    def tick() -> Snapshot:
        t = time.monotonic()
        time.sleep(0.05)
        return snapshot(t)

    record_paced(recorder, tick, 0.1, duration=1.0)
    recorder.close()
    times = [s.time for s in read_recording(tmp_path / "rec.jsonl")[0]]
    assert 9 <= len(times) <= 10, times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.1, abs=0.02)
