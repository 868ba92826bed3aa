"""Xid events through NVML: the watcher thread, against the fake NVML's event sets (real c_nvmlEventData_t,
real NVMLError_Timeout / NotSupported)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from gputui.collect.sources.nvml import NvmlSource
from gputui.collect.sources.xid_events import XidWatcher
from gputui.model import XidEvent
from tests.collect.fake_nvml import FakeHandle, FakeNvml


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    f = FakeNvml(n_gpus=3).install(monkeypatch)
    yield f
    # every watcher is closed by now: no thread may still call the fake once monkeypatch undoes it
    assert not [t for t in threading.enumerate() if t.name == "gputui-xid-events"]
    assert f.violations == []


def wait_for(predicate: Any, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def stop(w: XidWatcher) -> None:
    w.close()
    wait_for(lambda: not w.running)


def watcher(fake: FakeNvml, gpus: range | list[int] | None = None, **kw: Any) -> XidWatcher:
    fake.nvmlInit()  # as NvmlSource.open does before it
    indices = range(len(fake.gpus)) if gpus is None else gpus
    return XidWatcher([(i, FakeHandle(i)) for i in indices], clock=lambda: 1234.5, **kw)


def test_events_arrive_with_their_gpu_and_xid(fake: FakeNvml) -> None:
    w = watcher(fake)
    assert w.start() and w.running and w.watched == [0, 1, 2]
    assert w.take() == ()
    fake.send_xid(2, 79)
    fake.send_xid(0, 94)
    wait_for(lambda: len(w._events) == 2)
    assert w.take() == (XidEvent(gpu=2, xid=79, time=1234.5), XidEvent(gpu=0, xid=94, time=1234.5))
    assert w.take() == ()  # handed over once
    stop(w)
    assert fake.event_sets[0].freed and w.notes() == []
    fake.nvmlShutdown()
    assert fake.initialized == 0  # its own reference was given back


def test_not_supported_gpus_are_said_once_and_skipped(fake: FakeNvml) -> None:
    fake.gpus[0].xid_events = fake.gpus[2].xid_events = False
    w = watcher(fake)
    assert w.start() and w.watched == [1]
    notes = w.notes()
    assert notes == [
        "GPUs 0, 2: NVML delivers no Xid events here; Xid errors show only in the kernel log (dmesg)"
    ]
    assert fake.send_xid(0, 79) == 0  # not registered: the driver delivers nothing
    fake.send_xid(1, 48)
    wait_for(lambda: len(w._events) == 1)
    assert [(e.gpu, e.xid) for e in w.take()] == [(1, 48)]
    assert w.notes() == []  # said once
    stop(w)
    fake.nvmlShutdown()


def test_no_gpu_supports_events_no_thread(fake: FakeNvml) -> None:
    for g in fake.gpus:
        g.xid_events = False
    w = watcher(fake, [1])
    assert not w.start() and not w.running
    assert w.notes() == [
        "GPU 1: NVML delivers no Xid events here; Xid errors show only in the kernel log (dmesg)"
    ]
    assert fake.event_sets[0].freed
    fake.nvmlShutdown()
    assert fake.initialized == 0


def test_close_returns_at_once_even_while_the_driver_waits(fake: FakeNvml) -> None:
    """The wait blocks for a whole second in the driver; close() still returns in a moment, and the thread
    frees its set itself once the wait returns (never while it is in it)."""
    fake.event_wait_cap = 2.0  # a long wait, as the real driver's 1 s (longer: slack for a loaded box)
    w = watcher(fake)
    assert w.start()
    wait_for(lambda: fake.event_sets[0].waiting == 1)
    t0 = time.monotonic()
    w.close()
    assert time.monotonic() - t0 < 1.0  # not the 2 s wait
    wait_for(lambda: not w.running, 5.0)
    assert fake.event_sets[0].freed
    fake.nvmlShutdown()
    assert fake.initialized == 0


def test_idle_costs_one_wait_per_timeout(fake: FakeNvml) -> None:
    """While no event arrives, the thread does nothing but block in the driver: one call per timeout."""
    fake.event_wait_cap = 10.0  # let the watcher's own timeout rule
    w = watcher(fake, wait_ms=100)
    t0 = time.monotonic()
    assert w.start()
    time.sleep(0.55)
    wait_for(lambda: fake.event_sets[0].waits >= 1, 5.0)
    waits, elapsed = fake.event_sets[0].waits, time.monotonic() - t0
    stop(w)
    fake.nvmlShutdown()
    # Each wait blocks its whole 100 ms: at most one a timeout of the time that really passed (a loaded box
    # only makes fewer), where a loop that spun would make hundreds. `make bench` (pace) holds 4 to 7.
    assert 1 <= waits <= elapsed / 0.1 + 1, (waits, elapsed)


def test_a_failing_wait_is_said_once_and_does_not_spin(fake: FakeNvml) -> None:
    fake.fail(None, "nvmlEventSetWait_v2", pynvml.NVML_ERROR_GPU_IS_LOST)
    w = watcher(fake)
    assert w.start()
    wait_for(lambda: fake.system_calls["nvmlEventSetWait_v2"] >= 1)
    time.sleep(0.1)
    assert fake.system_calls["nvmlEventSetWait_v2"] == 1  # paused a second, not spinning
    assert w.notes() == ["waiting for Xid events failed: GPU is lost"]
    stop(w)
    fake.nvmlShutdown()


def test_an_event_from_an_unregistered_handle_is_named_by_nvml(fake: FakeNvml) -> None:
    w = watcher(fake, [0, 1])
    assert w.start()
    w._by_address.clear()  # as if the driver handed back another pointer for the same GPU
    fake.send_xid(1, 31)
    wait_for(lambda: len(w._events) == 1)
    assert [(e.gpu, e.xid) for e in w.take()] == [(1, 31)]
    assert fake.calls[1]["nvmlDeviceGetIndex"] == 1
    stop(w)
    fake.nvmlShutdown()


def test_nvml_source_hands_events_over_in_each_reading(fake: FakeNvml) -> None:
    fake.gpus[2].xid_events = False
    src = NvmlSource(xid_events=True)
    src.open()
    try:
        first = src.read(True)
        assert first.xids == ()
        assert any("GPU 2: NVML delivers no Xid events" in e for e in first.errors)
        fake.send_xid(1, 79)
        wait_for(lambda: src._xids is not None and len(src._xids._events) == 1)
        second = src.read(False)
        assert [(x.gpu, x.xid) for x in second.xids] == [(1, 79)]
        assert not any("Xid" in e for e in second.errors)  # said once
        assert src.read(False).xids == ()
    finally:
        t0 = time.monotonic()
        src.close()
        assert time.monotonic() - t0 < 1.0  # a moment (the fake's waits last 0.05 s), with slack for load
    wait_for(lambda: fake.initialized == 0)


def test_nvml_source_without_events_starts_no_thread(fake: FakeNvml) -> None:
    src = NvmlSource()
    src.open()
    assert src.read(True).xids == () and src.take_xids() == ()
    src.close()
    assert fake.event_sets == [] and fake.initialized == 0
