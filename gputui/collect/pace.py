"""A steady sampling schedule: samples start every `interval` seconds on a monotonic clock, whatever the
sampling itself takes. Waiting a full interval after each sample made the period interval + sampling time
(2 ms per NVML call on 8 GPUs: 0.77 samples/s at "every 1 s").

A sample that takes longer than the interval is late: the slots it ran over are skipped (the next sample
starts on the schedule, never in a burst to catch up), and `late` counts it, for the caller to say so."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class Pacer:
    """Call delay_after_sample() after each sample and wait what it returns. The schedule starts when the
    Pacer is made (or restart() is called): just before the first sample."""

    def __init__(self, interval: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, not {interval}")
        self.monotonic = monotonic
        self.interval = interval
        # Slot n starts at anchor + n * interval: counted, not summed, so no rounding error builds up.
        self._anchor = monotonic()
        self._slot = 0  # the slot of the sample now running
        self.late = 0  # samples that took longer than the interval
        self.skipped = 0  # slots no sample started in, because the one before ran over
        self.took: float | None = None  # seconds from the last sample's slot to its end
        self.last_late = False  # whether the last sample took longer than the interval

    def restart(self, interval: float | None = None) -> None:
        """The schedule starts again now (the next sample runs at once: woken up, or a new interval)."""
        if interval is not None:
            if not interval > 0:
                raise ValueError(f"interval must be positive, not {interval}")
            self.interval = interval
        self._anchor, self._slot = self.monotonic(), 0

    def delay_after_sample(self) -> float:
        """Seconds to wait until the next slot of the schedule: the first one at or after now."""
        now = self.monotonic()
        due = self._anchor + self._slot * self.interval
        self.took = max(0.0, now - due)
        ahead = max(1, math.ceil(self.took / self.interval))
        self.last_late = self.took > self.interval
        if self.last_late:
            self.late += 1
            self.skipped += ahead - 1
        self._slot += ahead
        return max(0.0, self._anchor + self._slot * self.interval - now)

    def describe_late(self) -> str:
        """One line about the last late sample, for a status line or stderr."""
        took = self.took or 0.0
        return (
            f"sampling took {took:.2f} s, longer than the {self.interval:g} s interval: "
            f"{self.skipped} samples skipped so far"
        )
