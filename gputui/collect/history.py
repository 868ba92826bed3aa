"""Bounded per-GPU history for the sparklines. Memory never grows past the capacity."""

from __future__ import annotations

from collections import deque

from gputui.model import Snapshot


class GpuHistory:
    """The last `capacity` samples of one GPU; None marks a sample that was unavailable."""

    def __init__(self, capacity: int) -> None:
        self.times: deque[float] = deque(maxlen=capacity)
        self.util: deque[float | None] = deque(maxlen=capacity)
        self.mem: deque[float | None] = deque(maxlen=capacity)
        self.power: deque[float | None] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.times)


class History:
    def __init__(self, capacity: int = 600) -> None:
        self.capacity = capacity
        self.gpus: dict[int, GpuHistory] = {}

    def add(self, snap: Snapshot) -> None:
        for gpu in snap.gpus:
            h = self.gpus.get(gpu.index)
            if h is None:
                h = self.gpus[gpu.index] = GpuHistory(self.capacity)
            h.times.append(snap.time)
            h.util.append(None if gpu.lost else gpu.util_gpu)
            h.mem.append(None if gpu.lost else gpu.mem_percent)
            h.power.append(None if gpu.lost else gpu.power)
