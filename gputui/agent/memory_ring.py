"""The agent's memory of its own GPU memory: one point (time, allocated, reserved) per device every
POINT_S, the last KEEP_S kept, so that a one-shot `gputui doctor --pid` can see a trend.

Standard library only; torch is read from sys.modules, never imported, and CUDA never initialized (as in
torchstats). The serve loop calls `tick()` every half second: it reads the allocator only when a point is
due (one memory_stats() per used device every POINT_S), and a stats request that read it anyway offers
its numbers instead. Points are kept on the monotonic clock, so a wall clock that jumps cannot put them
out of order; the reply gives them as wall-clock times.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from gputui.agent.torchstats import _quiet, _torch

POINT_S = 5.0
KEEP_S = 660.0  # the forecast's ten-minute window plus its one-minute envelope
MAX_POINTS = int(KEEP_S / POINT_S) + 1  # per device
MAX_DEVICES = 16  # a bounded reply: 16 x 133 points is ~100 KB of JSON

Point = tuple[int, int, int]  # (device index, allocated bytes, reserved bytes)


def read_torch() -> list[Point]:
    """The allocator's current numbers for every device this process allocated on; [] without torch or
    before the host initialized CUDA."""
    torch = _torch()
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None or not _quiet(lambda: cuda.is_initialized()):
        return []
    out = []
    for device in range(min(_quiet(lambda: cuda.device_count()) or 0, MAX_DEVICES)):
        stats = _quiet(lambda d: cuda.memory_stats(d), device) or {}
        if stats.get("reserved_bytes.all.peak"):  # a device it never allocated on has no history
            out.append(
                (
                    device,
                    int(stats.get("allocated_bytes.all.current", 0)),
                    int(stats.get("reserved_bytes.all.current", 0)),
                )
            )
    return out


class MemoryRing:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        read: Callable[[], list[Point]] = read_torch,
    ) -> None:
        self.clock, self.wall, self.read = clock, wall, read
        self._points: dict[int, deque[tuple[float, int, int]]] = {}
        self._last: float | None = None  # when the last point was taken (monotonic)
        self._lock = threading.Lock()

    def due(self) -> bool:
        return self._last is None or self.clock() - self._last >= POINT_S

    def tick(self) -> None:
        """A point from the allocator, if one is due. Never raises (it runs in the agent's thread)."""
        try:
            if self.due():
                self.add(self.read())
        except Exception:
            pass

    def offer(self, devices: Iterable[dict[str, Any]]) -> None:
        """A stats reply's allocator devices, read anyway: a point for free, if one is due."""
        if not self.due():
            return
        points = []
        for d in devices:
            index, allocated, reserved = d.get("index"), d.get("allocated"), d.get("reserved")
            if isinstance(index, int) and isinstance(allocated, int) and isinstance(reserved, int):
                points.append((index, allocated, reserved))
        self.add(points)

    def add(self, points: Iterable[Point]) -> None:
        now = self.clock()
        with self._lock:
            self._last = now  # also when there is nothing to add: no re-read before POINT_S
            for index, allocated, reserved in points:
                if index not in self._points and len(self._points) >= MAX_DEVICES:
                    continue
                ring = self._points.setdefault(index, deque(maxlen=MAX_POINTS))
                ring.append((now, allocated, reserved))
            for ring in self._points.values():
                while ring and ring[0][0] < now - KEEP_S:
                    ring.popleft()

    def reply(self) -> dict[str, Any]:
        """The `memory_history` reply: each device's points, oldest first, as [wall time, allocated,
        reserved]."""
        mono, wall = self.clock(), self.wall()
        with self._lock:
            devices = [
                {"index": index, "points": [[round(wall - (mono - t), 2), a, r] for t, a, r in ring]}
                for index, ring in sorted(self._points.items())
            ]
        return {"ok": True, "time": wall, "interval": POINT_S, "devices": devices}
