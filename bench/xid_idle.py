"""xid_events_idle: the Xid event thread's wake-ups and CPU while no event comes."""

from __future__ import annotations

import time

import psutil


def bench_xid_idle(gpus: int = 8, seconds: float = 10.0) -> dict[str, object]:
    """The Xid event thread while no event comes. The fake NVML's wait blocks as the driver's does, for
    the whole timeout (WAIT_MS) unless an event arrives: what is measured is gputui's loop around it."""
    import pytest

    from gputui.collect.sources.xid_events import WAIT_MS, XidWatcher
    from tests.collect.fake_nvml import FakeHandle, FakeNvml

    patch = pytest.MonkeyPatch()
    fake = FakeNvml(n_gpus=gpus).install(patch)
    fake.event_wait_cap = WAIT_MS / 1000
    try:
        fake.nvmlInit()
        watcher = XidWatcher([(i, FakeHandle(i)) for i in range(gpus)])
        assert watcher.start()
        thread = watcher._thread
        assert thread is not None and thread.native_id is not None

        def cpu() -> float:
            t = next(t for t in psutil.Process().threads() if t.id == thread.native_id)
            return t.user_time + t.system_time

        time.sleep(0.1)
        waits0, cpu0, t0 = fake.event_sets[0].waits, cpu(), time.monotonic()
        time.sleep(seconds)
        waits, spent, elapsed = fake.event_sets[0].waits - waits0, cpu() - cpu0, time.monotonic() - t0
        watcher.close(wait=WAIT_MS / 1000 + 1)
        fake.nvmlShutdown()
    finally:
        patch.undo()
    return {
        "gpus": gpus,
        "seconds": round(elapsed, 1),
        "wakeups_per_s": round(waits / elapsed, 2),
        "cpu_ms_per_min": round(spent * 1000 / elapsed * 60, 1),  # clock-tick resolution: 0 is "under 10 ms"
    }
