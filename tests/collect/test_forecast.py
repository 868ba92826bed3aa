"""The memory trend on synthetic series: a leak is growing, a sawtooth and a warm-up are not."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gputui.analyze import forecast as fc
from gputui.analyze.forecast import MIB

GIB = 1024 * MIB
LEAK = 120 * MIB / 60.0  # 120 MiB/min in bytes/s


def sampled(
    f: Callable[[float], float], end: float, step: float = 1.0, noise: float = 0.0, seed: int = 1
) -> list[tuple[float, float]]:
    """(t, f(t)) every `step` seconds from 0 to `end`, with NVML-like MiB jitter."""
    rng = random.Random(seed)
    n = int(end / step) + 1
    return [(i * step, f(i * step) + rng.uniform(-noise, noise)) for i in range(n)]


def test_linear_leak_is_growing_at_its_rate() -> None:
    series = sampled(lambda t: 10 * GIB + LEAK * t, 900.0, noise=4 * MIB)
    f = fc.forecast(series, now=900.0, born=0.0)
    assert f.enough and f.growing, f.detail
    assert f.growth == pytest.approx(LEAK, rel=0.05)


def test_leak_under_a_sawtooth_is_still_growing() -> None:
    # eval every 90 s adds 3 GiB for 20 s, on top of the leak
    series = sampled(lambda t: 10 * GIB + LEAK * t + (3 * GIB if t % 90 < 20 else 0), 900.0)
    f = fc.forecast(series, now=900.0, born=0.0)
    assert f.growing, f.detail
    assert f.growth == pytest.approx(LEAK, rel=0.1)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(lambda t: 20 * GIB + (3 * GIB if t % 90 < 20 else 0), id="eval spikes"),
        pytest.param(lambda t: 20 * GIB + 2 * GIB * ((t % 45) / 45), id="short teeth"),
        pytest.param(lambda t: 20 * GIB + 4 * GIB * ((t % 240) / 240), id="four-minute teeth"),
        pytest.param(lambda t: 20 * GIB + (6 * GIB if t % 200 < 40 else 0), id="checkpoint every 200 s"),
    ],
)
def test_sawtooth_without_a_leak_is_not_growing(shape: Callable[[float], float]) -> None:
    for now in (600.0, 777.0, 900.0, 1200.0):  # whatever phase the window starts in
        series = sampled(shape, now)
        f = fc.forecast(series, now=now, born=0.0)
        assert f.enough and not f.growing, (now, f)
        assert f.growth == 0.0


def test_warm_up_ramp_then_flat_is_not_growing() -> None:
    # loads for three minutes (well past WARMUP_S), then stays flat
    shape = lambda t: 2 * GIB + min(t, 180.0) / 180.0 * 40 * GIB  # noqa: E731
    for now in (400.0, 500.0, 600.0, 900.0):
        f = fc.forecast(sampled(shape, now, noise=2 * MIB), now=now, born=0.0)
        assert f.enough and not f.growing, (now, f)


def test_one_step_is_not_a_trend() -> None:
    f = fc.forecast(sampled(lambda t: 20 * GIB + (2 * GIB if t > 500 else 0), 800.0), now=800.0, born=0.0)
    assert f.enough and not f.growing


def test_a_slow_drift_below_the_threshold_is_flat() -> None:
    f = fc.forecast(sampled(lambda t: 20 * GIB + 0.5 * MIB / 60 * t, 900.0), now=900.0, born=0.0)
    assert f.enough and not f.growing


def test_never_from_a_few_minutes_of_data() -> None:
    leak = lambda t: 10 * GIB + 10 * LEAK * t  # noqa: E731
    # two minutes after the warm-up: too little, however steep
    assert fc.forecast(sampled(leak, 170.0), now=170.0, born=0.0) == fc.NOT_ENOUGH
    # a process seen for three minutes, but born a minute before: its first minute is warm-up
    assert not fc.forecast(sampled(leak, 200.0), now=200.0, born=0.0).enough
    assert fc.forecast(sampled(leak, 300.0), now=300.0, born=0.0).growing
    # a long-running process gputui has just met: no warm-up to skip, still three minutes needed
    old = [(t + 10_000.0, v) for t, v in sampled(leak, 200.0)]
    assert fc.forecast(old, now=10_200.0, born=0.0).growing
    assert not fc.forecast(old[:150], now=10_150.0, born=0.0).enough
    assert fc.forecast([], now=1.0) == fc.NOT_ENOUGH


def test_bad_points_are_ignored() -> None:
    series = sampled(lambda t: 10 * GIB + LEAK * t, 900.0)
    series[100] = (series[100][0], float("nan"))
    series[200] = (float("inf"), 1.0)
    assert fc.forecast(series, now=900.0, born=0.0).growing


def test_time_to_full_and_text() -> None:
    assert fc.seconds_until_full(14 * 120 * MIB, LEAK) == pytest.approx(14 * 60)
    assert fc.seconds_until_full(None, LEAK) is None
    assert fc.seconds_until_full(GIB, 0.0) is None
    assert fc.growth_text(LEAK, 14 * 60) == "growing 120 MiB/min — this GPU is full in ~14 min"
    assert fc.growth_text(LEAK, None) == "growing 120 MiB/min"
    assert fc.duration_text(3 * 3600) == "~3.0 h"


def test_split_says_which_grows() -> None:
    now = 900.0
    steady = sampled(lambda t: 20 * GIB, now)
    leaking = sampled(lambda t: 10 * GIB + LEAK * t, now)
    cache = sampled(lambda t: 30 * GIB + LEAK * t, now)
    assert fc.split(leaking, cache, now, born=0.0).verdict == fc.ALLOCATED
    s = fc.split(steady, cache, now, born=0.0)
    assert s.verdict == fc.RESERVED
    assert "fragmentation" in s.text
    assert fc.split(steady, steady, now, born=0.0).verdict is None
    # AgentHistory's untimed points, one per second
    points = [(int(a), int(r)) for (_, a), (_, r) in zip(steady, cache, strict=True)]
    assert fc.split_points(points, 1.0).verdict == fc.RESERVED


def test_memory_series_is_bounded_and_forgets() -> None:
    ms = fc.MemorySeries()
    key, other = (42, 1.0), (43, 1.0)
    for i in range(4 * 3600):  # an hour at 4 Hz
        t = i / 4
        ms.add(key, t, int(10 * GIB + LEAK * t))
        ms.add(other, t, int(GIB))
        ms.add_agent(key, t, int(GIB + LEAK * t), int(2 * GIB + LEAK * t))
    assert len(ms.series(key)) <= (fc.WINDOW_S + fc.ENVELOPE_S) / ms.POINT_S + 1
    assert fc.forecast(ms.series(key), now=3600.0, born=0.0).growth == pytest.approx(LEAK, rel=0.05)
    split = ms.split(key, 3600.0, 0.0)
    assert split is not None and split.verdict == fc.ALLOCATED
    ms.forget_except([key])
    assert ms.series(other) == [] and ms.series(key)
    ms.add(key, 3601.0, None)  # unknown memory: no point
