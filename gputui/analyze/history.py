"""Bounded per-GPU history for the sparklines: the last hour (at most MAX_SAMPLES samples per GPU).

Values are whole numbers (percent; watts) kept as machine numbers in arrays (Column): 16 bytes a sample
for a GPU's time and four series, so an hour at 1 Hz for 8 GPUs is ~0.7 MiB (2.1 as deques of Python
numbers; `make bench`, history), and every dip survives at full resolution. Beside NVML's utilization,
each GPU keeps its SM activity (GPM, Hopper and newer: the share of SMs with work, the more honest "how
busy"); None where it is unknown (no GPM, a tick without a reading), never 0.

Also each GPU process's memory over the detail's window (PROCESS_WINDOW_S), for its sparkline and its
`min … max`: one stretch per POINT_S keeps its lowest and its highest sample with their times, so a 3 s
spike every 30 s is in it at its height (the sampler's series keeps only the lows: its trend wants the
floor), and a replay has it too.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, overload

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


T = TypeVar("T")
UNKNOWN = -(2**15)  # a value's "None" in its array: no reading can be it (values are clamped above it)
_MOST = 2**15 - 1  # percent and watts fit with room to spare


class Column(Sequence[T]):
    """One series of a GPU's history as an array of machine numbers, read as a sequence. Samples leave from
    the front only: `drop` moves a start mark, and the array is compacted once an eighth of it is dropped,
    so a full hour is not copied each tick and holds at most an eighth more than it keeps."""

    __slots__ = ("_a", "_start")

    def __init__(self, typecode: str) -> None:
        self._a: array[Any] = array(typecode)
        self._start = 0

    def __len__(self) -> int:
        return len(self._a) - self._start

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        if isinstance(i, slice):
            return [self._read(v) for v in self._a[self._start :][i]]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("history index out of range")
        return self._read(self._a[self._start + (i if i >= 0 else n + i)])

    def __iter__(self) -> Iterator[T]:
        return map(self._read, itertools.islice(self._a, self._start, None))

    def _read(self, v: float) -> T:
        raise NotImplementedError

    def drop(self, n: int) -> None:
        """The oldest `n` samples go."""
        self._start += n
        if self._start * 8 >= len(self._a):
            del self._a[: self._start]
            self._start = 0


class Times(Column[float]):
    def __init__(self) -> None:
        super().__init__("d")

    def append(self, t: float) -> None:
        self._a.append(t)

    def _read(self, v: float) -> float:
        return v


class Values(Column["int | None"]):
    """Whole numbers or None (unavailable), 2 bytes each."""

    def __init__(self) -> None:
        super().__init__("h")

    def append(self, v: float | None) -> None:
        if v is None or math.isnan(v):  # NaN from a bad reading is unknown, never a number
            self._a.append(UNKNOWN)
        else:
            self._a.append(round(max(-_MOST, min(_MOST, v))))

    def _read(self, v: float) -> int | None:
        return None if v == UNKNOWN else int(v)


class GpuHistory:
    """One GPU's samples, at most `capacity`; None marks a sample that was unavailable."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.times = Times()
        self.util = Values()
        self.mem = Values()
        self.power = Values()
        self.sm = Values()  # GPM's SM activity, percent

    def __len__(self) -> int:
        return len(self.times)

    def add(
        self, t: float, util: float | None, mem: float | None, power: float | None, sm: float | None
    ) -> None:
        self.times.append(t)
        self.util.append(util)
        self.mem.append(mem)
        self.power.append(power)
        self.sm.append(sm)
        if len(self.times) > self.capacity:
            self._drop(len(self.times) - self.capacity)

    def trim(self, oldest: float) -> None:
        """Drop the samples before `oldest`, from the front (a wall clock that stepped back leaves newer
        samples behind older ones: they stay until they too are the oldest)."""
        n = 0
        for t in self.times:
            if t >= oldest:
                break
            n += 1
        self._drop(n)

    def _drop(self, n: int) -> None:
        if n:
            for series in (self.times, self.util, self.mem, self.power, self.sm):
                series.drop(n)


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
            if gpu.lost:
                h.add(snap.time, None, None, None, None)
            else:
                sm = gpu.gpm.sm_active if gpu.gpm is not None else None
                h.add(snap.time, gpu.util_gpu, gpu.mem_percent, gpu.power, sm)
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
