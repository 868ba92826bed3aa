"""Memory growth and time to full: a robust trend of a process's GPU memory.

A two-point slope lies: a training process ramps up while it loads (warm-up), and evaluation or a
checkpoint adds memory for a while and gives it back (a sawtooth). The trend here is:

1. Only the last WINDOW_S of samples, and none from the first WARMUP_S of the process's life.
2. The lower envelope: the trailing minimum over ENVELOPE_S, taken every BUCKET_S. A spike or a tooth
   shorter than ENVELOPE_S never reaches it; a leak lifts it (by the same slope, a little later).
3. The Theil-Sen slope of the envelope (the median of all pairwise slopes): one outlier or a step
   moves it far less than a least-squares fit.
4. "Growing" only when the trend explains the data: the slopes of the envelope's older and recent
   halves each pass GROWTH_MIN (a warm-up that has flattened, or one step, fails in one half), and
   the recent half's lowest point is above the older half's (a longer sawtooth's troughs stay level,
   a leak's do not). And never from less than MIN_DATA_S of samples.

The reported rate is the lower of the whole window's slope and the recent half's: a slowing ramp is
not called faster than it now is. Pure: no clocks, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gputui.model import GpuSample

MIB = 1 << 20
WINDOW_S = 600.0  # the trend looks at the last ten minutes
WARMUP_S = 60.0  # a process's first minute is its warm-up ramp, never a trend
ENVELOPE_S = 60.0  # spikes and teeth shorter than this (eval, a checkpoint) are ignored
BUCKET_S = 15.0  # one envelope point per this many seconds: ~40 points, so Theil-Sen stays cheap
MIN_DATA_S = 180.0  # at least three minutes of samples after the warm-up
GROWTH_MIN = MIB / 60.0  # bytes/s: below 1 MiB/min a process is not called growing
ALLOCATED = "allocated"
RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Forecast:
    """growth: bytes/s (0.0 when not growing); enough: the data could say; growing: it says so."""

    growth: float
    enough: bool
    growing: bool
    detail: str = ""  # why not growing, or how sure: for doctor and tests


NOT_ENOUGH = Forecast(0.0, enough=False, growing=False, detail="not enough data")


def theil_sen(points: Sequence[tuple[float, float]]) -> float:
    """The median of the slopes between every pair of points with different times (0 with fewer)."""
    slopes = []
    n = len(points)
    for i in range(n):
        ti, vi = points[i]
        for j in range(i + 1, n):
            tj, vj = points[j]
            if tj != ti:
                slopes.append((vj - vi) / (tj - ti))
    if not slopes:
        return 0.0
    slopes.sort()
    mid = len(slopes) // 2
    return slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2.0


def envelope(series: Sequence[tuple[float, float]], span: float = ENVELOPE_S) -> list[tuple[float, float]]:
    """The trailing minimum over `span`, one point per BUCKET_S, starting once a full span is covered."""
    if not series:
        return []
    start, end = series[0][0], series[-1][0]
    out: list[tuple[float, float]] = []
    window: deque[tuple[float, float]] = deque()  # a monotonic queue: the minimum is at its left
    next_t = start + span
    for t, v in series:
        while t > next_t and window:  # emit every bucket boundary passed before this sample
            out.append((next_t, window[0][1]))
            next_t += BUCKET_S
        while window and window[-1][1] >= v:
            window.pop()
        window.append((t, v))
        while window[0][0] < t - span:
            window.popleft()
    if end >= next_t and window:
        out.append((end, window[0][1]))
    return out


def forecast(
    series: Iterable[tuple[float, float]],
    now: float,
    born: float | None = None,
    threshold: float = GROWTH_MIN,
) -> Forecast:
    """The trend of `series` ((time, bytes), oldest first) at `now`; `born`: the process's create time
    (its warm-up is skipped), None when unknown (then the series' own start counts as its birth)."""
    data = [(t, float(v)) for t, v in series if math.isfinite(t) and math.isfinite(v) and t <= now]
    if not data:
        return NOT_ENOUGH
    first = data[0][0] if born is None else min(born, data[0][0])
    since = max(now - WINDOW_S, first + WARMUP_S)
    data = [p for p in data if p[0] >= since]
    if len(data) < 3 or data[-1][0] - data[0][0] < MIN_DATA_S:
        return NOT_ENOUGH
    env = envelope(data)
    if len(env) < 6:
        return NOT_ENOUGH
    half = len(env) // 2
    older, recent = env[:half], env[half:]
    whole, s_old, s_new = theil_sen(env), theil_sen(older), theil_sen(recent)
    rate = min(whole, s_new)
    if s_old < threshold or s_new < threshold:
        why = "flat" if max(s_old, s_new, whole) < threshold else "not steady (a warm-up or one step)"
        return Forecast(0.0, enough=True, growing=False, detail=why)
    # A sawtooth's troughs stay level: the recent half must sit higher, by about the trend.
    rise = min(v for _, v in recent) - min(v for _, v in older)
    if rise < 0.5 * rate * (recent[0][0] - older[0][0]):
        return Forecast(0.0, enough=True, growing=False, detail="its lowest level does not rise")
    return Forecast(rate, enough=True, growing=True, detail=f"{len(env)} envelope points")


def seconds_until_full(free: int | None, growth: float) -> float | None:
    """At `growth` bytes/s, when `free` bytes are used up; None: not growing, or free unknown."""
    if free is None or growth <= 0.0:
        return None
    return max(0.0, free / growth)


@dataclass(frozen=True, slots=True)
class Split:
    """Which of the agent's numbers grows: allocated (live tensors: a leak), or only reserved (the
    caching allocator's cache: fragmentation), or neither."""

    allocated: Forecast
    reserved: Forecast

    @property
    def verdict(self) -> str | None:
        if self.allocated.growing:
            return ALLOCATED
        if self.reserved.growing:
            return RESERVED
        return None

    @property
    def text(self) -> str:
        v = self.verdict
        if v == ALLOCATED:
            return f"allocated grows {rate_text(self.allocated.growth)}: tensors leak (kept references)"
        if v == RESERVED:
            return (
                f"only reserved grows {rate_text(self.reserved.growth)}: the allocator's cache grows "
                "(fragmentation), allocated is steady"
            )
        return ""


def split(
    allocated: Sequence[tuple[float, float]],
    reserved: Sequence[tuple[float, float]],
    now: float,
    born: float | None = None,
) -> Split:
    """Allocated vs reserved trend, from the agent's series ((time, bytes), oldest first)."""
    return Split(forecast(allocated, now, born), forecast(reserved, now, born))


def split_points(points: Sequence[tuple[int, int]], interval: float) -> Split:
    """The same from AgentHistory's untimed (allocated, reserved) points, one per `interval` seconds."""
    n = len(points)
    alloc = [(i * interval, float(a)) for i, (a, _) in enumerate(points)]
    res = [(i * interval, float(r)) for i, (_, r) in enumerate(points)]
    now = (n - 1) * interval if n else 0.0
    return split(alloc, res, now, born=-WARMUP_S)  # an agent's points are past the warm-up already


def free_bytes(gpu: GpuSample, instance: int | None = None) -> int | None:
    """Free memory of the GPU, or of a process's MIG instance on it: what a growing process fills."""
    if instance is not None:
        for mig in gpu.mig:
            if mig.gpu_instance == instance and mig.mem_total is not None and mig.mem_used is not None:
                return max(0, mig.mem_total - mig.mem_used)
    if gpu.mem_total is None or gpu.mem_used is None:
        return None
    return max(0, gpu.mem_total - gpu.mem_used)


def rate_text(growth: float) -> str:
    """`120 MiB/min`, `1.4 GiB/min`."""
    per_min = growth * 60.0
    if per_min >= 1024 * MIB:
        return f"{per_min / (1024 * MIB):.1f} GiB/min"
    return f"{per_min / MIB:.0f} MiB/min"


def duration_text(seconds: float) -> str:
    """`~14 min`, `~2.5 h`, `< 1 min`."""
    if seconds < 60:
        return "< 1 min"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def growth_text(growth: float, full_in: float | None) -> str:
    """`growing 120 MiB/min — this GPU is full in ~14 min`."""
    text = f"growing {rate_text(growth)}"
    return text + (f" — this GPU is full in {duration_text(full_in)}" if full_in is not None else "")


class MemorySeries:
    """Per process (pid, create time): its GPU memory, CPU% and agent numbers over the last WINDOW_S,
    kept as one point per POINT_S (the lowest of that stretch: the envelope needs no more), so 32
    processes at 4 Hz cost a few thousand small tuples."""

    POINT_S = 5.0

    def __init__(self) -> None:
        self.mem: dict[tuple[int, float | None], deque[tuple[float, float]]] = {}
        self.agent: dict[tuple[int, float | None], deque[tuple[float, float, float]]] = {}

    def _trim(
        self, series: deque[tuple[float, float]] | deque[tuple[float, float, float]], now: float
    ) -> None:
        while series and series[0][0] < now - WINDOW_S - ENVELOPE_S:
            series.popleft()

    def add(self, key: tuple[int, float | None], now: float, used: int | None) -> None:
        if used is None:
            return
        s = self.mem.setdefault(key, deque())
        if s and now - s[-1][0] < self.POINT_S:  # the same stretch: keep its lowest value
            s[-1] = (s[-1][0], min(s[-1][1], float(used)))
        else:
            s.append((now, float(used)))
        self._trim(s, now)

    def add_agent(self, key: tuple[int, float | None], now: float, allocated: int, reserved: int) -> None:
        s = self.agent.setdefault(key, deque())
        if s and now - s[-1][0] < self.POINT_S:
            t, a, r = s[-1]
            s[-1] = (t, min(a, float(allocated)), min(r, float(reserved)))
        else:
            s.append((now, float(allocated), float(reserved)))
        self._trim(s, now)

    def series(self, key: tuple[int, float | None]) -> list[tuple[float, float]]:
        return list(self.mem.get(key, ()))

    def split(self, key: tuple[int, float | None], now: float, born: float | None) -> Split | None:
        points = self.agent.get(key)
        if not points:
            return None
        return split([(t, a) for t, a, _ in points], [(t, r) for t, _, r in points], now, born)

    def forget_except(self, keys: Iterable[tuple[int, float | None]]) -> None:
        keep = set(keys)
        for key in [k for k in self.mem if k not in keep]:
            del self.mem[key]
        for key in [k for k in self.agent if k not in keep]:
            del self.agent[key]
