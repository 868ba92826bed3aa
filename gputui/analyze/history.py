"""Bounded per-GPU history for the sparklines: the last hour (at most MAX_SAMPLES samples per GPU).

Values are stored as small ints (percent; watts), which Python keeps as shared objects, so an hour at
1 Hz for 8 GPUs is well under a megabyte, and every dip survives at full resolution. Beside NVML's
utilization, each GPU keeps its SM activity (GPM, Hopper and newer: the share of SMs with work, the more
honest "how busy"); None where it is unknown (no GPM, a tick without a reading), never 0.

Also each GPU process's memory over the detail's window (PROCESS_WINDOW_S), for its sparkline and its
`min … max`: one stretch per POINT_S keeps its lowest and its highest sample with their times, so a 3 s
spike every 30 s is in it at its height (the sampler's series keeps only the lows: its trend wants the
floor), and a replay has it too.
"""

from __future__ import annotations

from collections import deque

from gputui.analyze.forecast import WINDOW_S
from gputui.model import Snapshot

MAX_AGE_S = 3700.0
MAX_SAMPLES = 15_000  # an hour at 4 Hz
POINT_S = 5.0
PROCESS_WINDOW_S = WINDOW_S + POINT_S

ProcessKey = tuple[int, float | None, int | None]  # pid, create time, GPU


class _Stretch:
    """POINT_S of one process's memory: its lowest and highest sample, each with its time."""

    __slots__ = ("high", "low", "start", "t_high", "t_low")

    def __init__(self, t: float, value: float) -> None:
        self.start = self.t_low = self.t_high = t
        self.low = self.high = value

    def add(self, t: float, value: float) -> None:
        if value < self.low:
            self.low, self.t_low = value, t
        if value > self.high:
            self.high, self.t_high = value, t


class GpuHistory:
    """One GPU's samples; None marks a sample that was unavailable."""

    def __init__(self, capacity: int) -> None:
        self.times: deque[float] = deque(maxlen=capacity)
        self.util: deque[int | None] = deque(maxlen=capacity)
        self.mem: deque[int | None] = deque(maxlen=capacity)
        self.power: deque[int | None] = deque(maxlen=capacity)
        self.sm: deque[int | None] = deque(maxlen=capacity)  # GPM's SM activity, percent

    def __len__(self) -> int:
        return len(self.times)

    def trim(self, oldest: float) -> None:
        while self.times and self.times[0] < oldest:
            for series in (self.times, self.util, self.mem, self.power, self.sm):
                series.popleft()


def _int(v: float | None) -> int | None:
    return None if v is None else round(v)


class History:
    def __init__(self, capacity: int = MAX_SAMPLES, max_age: float = MAX_AGE_S) -> None:
        self.capacity = capacity
        self.max_age = max_age
        self.gpus: dict[int, GpuHistory] = {}
        self.processes: dict[ProcessKey, deque[_Stretch]] = {}

    def add(self, snap: Snapshot) -> None:
        self._add_processes(snap)
        for gpu in snap.gpus:
            h = self.gpus.get(gpu.index)
            if h is None:
                h = self.gpus[gpu.index] = GpuHistory(self.capacity)
            h.times.append(snap.time)
            h.util.append(None if gpu.lost else _int(gpu.util_gpu))
            h.mem.append(None if gpu.lost else _int(gpu.mem_percent))
            h.power.append(None if gpu.lost else _int(gpu.power))
            h.sm.append(None if gpu.lost or gpu.gpm is None else _int(gpu.gpm.sm_active))
            h.trim(snap.time - self.max_age)

    def busy_seconds(self, gpu: int, since: float) -> tuple[float, float]:
        """(mean utilization %, seconds covered) over the samples since `since`."""
        h = self.gpus.get(gpu)
        if h is None:
            return 0.0, 0.0
        values = [u for t, u in zip(h.times, h.util, strict=True) if t >= since and u is not None]
        covered = (h.times[-1] - max(since, h.times[0])) if h.times else 0.0
        return (sum(values) / len(values) if values else 0.0), max(0.0, covered)

    def _add_processes(self, snap: Snapshot) -> None:
        now, oldest = snap.time, snap.time - PROCESS_WINDOW_S
        for row in snap.processes:
            if row.used_memory is None or row.gpu is None:
                continue
            stretches = self.processes.setdefault((row.pid, row.create_time, row.gpu), deque())
            if stretches and now < stretches[-1].start:  # the wall clock stepped back: start again
                stretches.clear()
            if stretches and now < stretches[-1].start + POINT_S:
                stretches[-1].add(now, float(row.used_memory))
            else:
                stretches.append(_Stretch(now, float(row.used_memory)))
        for key in list(self.processes):
            stretches = self.processes[key]
            while stretches and stretches[0].start < oldest:
                stretches.popleft()
            if not stretches:
                del self.processes[key]

    def memory_points(
        self, pid: int, create_time: float | None, gpu: int | None
    ) -> list[tuple[float, float]]:
        """(time, bytes) of the process's memory on `gpu` over the last PROCESS_WINDOW_S: each stretch's
        lowest and highest sample, where they were; so their min and max are the true ones."""
        out: list[tuple[float, float]] = []
        for s in self.processes.get((pid, create_time, gpu), ()):
            out.append((s.t_low, s.low))
            if s.t_high != s.t_low:
                out.append((s.t_high, s.high))
        return sorted(out)
