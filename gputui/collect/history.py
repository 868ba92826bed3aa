"""Bounded per-GPU history for the sparklines: the last hour (at most MAX_SAMPLES samples per GPU).

Values are stored as small ints (percent; watts), which Python keeps as shared objects, so an hour at
1 Hz for 8 GPUs is well under a megabyte, and every dip survives at full resolution.
"""

from __future__ import annotations

from collections import deque

from gputui.model import Snapshot

MAX_AGE_S = 3700.0
MAX_SAMPLES = 15_000  # an hour at 4 Hz


class GpuHistory:
    """One GPU's samples; None marks a sample that was unavailable."""

    def __init__(self, capacity: int) -> None:
        self.times: deque[float] = deque(maxlen=capacity)
        self.util: deque[int | None] = deque(maxlen=capacity)
        self.mem: deque[int | None] = deque(maxlen=capacity)
        self.power: deque[int | None] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.times)

    def trim(self, oldest: float) -> None:
        while self.times and self.times[0] < oldest:
            for series in (self.times, self.util, self.mem, self.power):
                series.popleft()


def _int(v: float | None) -> int | None:
    return None if v is None else round(v)


class History:
    def __init__(self, capacity: int = MAX_SAMPLES, max_age: float = MAX_AGE_S) -> None:
        self.capacity = capacity
        self.max_age = max_age
        self.gpus: dict[int, GpuHistory] = {}

    def add(self, snap: Snapshot) -> None:
        for gpu in snap.gpus:
            h = self.gpus.get(gpu.index)
            if h is None:
                h = self.gpus[gpu.index] = GpuHistory(self.capacity)
            h.times.append(snap.time)
            h.util.append(None if gpu.lost else _int(gpu.util_gpu))
            h.mem.append(None if gpu.lost else _int(gpu.mem_percent))
            h.power.append(None if gpu.lost else _int(gpu.power))
            h.trim(snap.time - self.max_age)

    def busy_seconds(self, gpu: int, since: float) -> tuple[float, float]:
        """(mean utilization %, seconds covered) over the samples since `since`."""
        h = self.gpus.get(gpu)
        if h is None:
            return 0.0, 0.0
        values = [u for t, u in zip(h.times, h.util, strict=True) if t >= since and u is not None]
        covered = (h.times[-1] - max(since, h.times[0])) if h.times else 0.0
        return (sum(values) / len(values) if values else 0.0), max(0.0, covered)
