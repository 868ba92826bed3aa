"""Training progress from inside the process: batches per second and the share of time spent waiting
for the DataLoader. It times DataLoader iteration by wrapping the iterator's __next__ once the host
has imported torch.utils.data (never importing it itself)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

WINDOW_S = 30.0


class Progress:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._events: deque[tuple[float, float]] = deque()  # (batch ready at, seconds waited for it)
        self._lock = threading.Lock()
        self._patched: Any = None
        self._steps = 0  # every batch since install, not only the window's: "stalled at step N"
        # Called with each batch's wait, in the training thread, while a profile is wanted (profile.py).
        self.hook: Callable[[float], None] | None = None

    def record(self, ready_at: float, waited: float) -> None:
        with self._lock:
            self._steps += 1
            self._events.append((ready_at, waited))
            while self._events and ready_at - self._events[0][0] > WINDOW_S:
                self._events.popleft()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            events = list(self._events)
            steps = self._steps
        if len(events) < 2:
            return {"batches": len(events)}
        span = events[-1][0] - events[0][0]
        waited = sum(w for _, w in events[1:])
        # The window is trimmed only when a batch arrives: a stalled job keeps its usual step time.
        gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(events))
        return {
            "batches": len(events),
            "steps_per_s": round((len(events) - 1) / span, 3) if span > 0 else None,
            "data_wait_share": round(min(1.0, waited / span), 3) if span > 0 else None,
            "window_s": round(span, 1),
            "steps": steps,
            "last_step_age_s": round(max(0.0, self.clock() - events[-1][0]), 3),
            "usual_step_s": round(gaps[len(gaps) // 2], 4),
        }

    def install(self) -> bool:
        """Wrap DataLoader iteration, if the host has imported it. Safe to call repeatedly."""
        if self._patched is not None:
            return True
        module = sys.modules.get("torch.utils.data.dataloader")
        base = getattr(module, "_BaseDataLoaderIter", None) if module else None
        if base is None:
            return False
        original = base.__next__
        progress = self

        def __next__(it: Any) -> Any:
            start = progress.clock()
            batch = original(it)  # StopIteration (end of epoch) and errors are not batches
            end = progress.clock()
            progress.record(end, end - start)
            hook = progress.hook
            if hook is not None:
                hook(end - start)
            return batch

        base.__next__ = __next__
        self._patched = (base, original)
        return True

    def set_hook(self, hook: Callable[[float], None] | None) -> bool:
        """Call `hook` after every batch (None: stop); False when there is no DataLoader to wrap yet."""
        if hook is not None and not self.install():
            return False
        self.hook = hook
        return True

    def uninstall(self) -> None:
        if self._patched is not None:
            base, original = self._patched
            base.__next__ = original
            self._patched = None
