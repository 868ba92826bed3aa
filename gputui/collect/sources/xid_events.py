"""Critical Xid errors as NVML delivers them: one event set, waited on by a thread of its own.

The thread blocks inside the driver (nvmlEventSetWait_v2) until an event arrives or a second passes, so it
costs nothing while the GPUs are well; the timeout only lets it notice that it should stop. It holds its
own nvmlInit reference and frees its event set itself when it ends, so closing the NVML source never
pulls the library out from under a wait that is still in the driver; close() therefore waits only a
moment and never holds up quitting (the thread is a daemon).

A GPU that cannot deliver Xid events (NotSupported: GeForce cards, some virtual GPUs) is said once and
left out; the others are watched.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from gputui.model import XidEvent

WAIT_MS = 1000  # how long one wait blocks in the driver; bounds how late the thread sees a stop
MAX_QUEUED = 1000  # an Xid storm nobody drains keeps the newest this many
_ERROR_PAUSE_S = 1.0  # after a failed wait (not a timeout): no spinning on a broken driver


def _address(handle: Any) -> int | None:
    """A device handle's address: the event names its GPU by the same pointer registration was given."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _gpu_list(indices: Sequence[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(str(i) for i in indices)


class XidWatcher:
    """Watches `devices` ((NVML index, handle) pairs) for critical Xid events. start() once, take() each
    tick, close() at the end. `notes()` gives, once each, what the user should know (unsupported GPUs,
    a wait that failed)."""

    def __init__(
        self,
        devices: Sequence[tuple[int, Any]],
        wait_ms: int = WAIT_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.devices = list(devices)
        self.wait_ms = wait_ms
        self.clock = clock
        self.watched: list[int] = []  # GPU indices registered for Xid events
        self._events: deque[XidEvent] = deque(maxlen=MAX_QUEUED)  # appends and pops are thread-safe
        self._notes: deque[str] = deque(maxlen=16)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._by_address: dict[int, int] = {}

    def start(self) -> bool:
        """Register every GPU that supports Xid events and start the thread; False when none can."""
        if self._thread is not None or not self.devices:
            return self._thread is not None
        try:
            pynvml.nvmlInit()  # our own reference: see the module's docstring
        except (pynvml.NVMLError, OSError) as err:
            self._notes.append(f"Xid events are not watched: NVML failed to start: {err}")
            return False
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as err:
            self._notes.append(f"Xid events are not watched: NVML cannot create an event set: {err}")
            self._shutdown()
            return False
        unsupported: list[int] = []
        for index, handle in self.devices:
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
                unsupported.append(index)
                continue
            except pynvml.NVMLError as err:
                self._notes.append(f"GPU {index}: Xid events are not watched: {err}")
                continue
            self.watched.append(index)
            address = _address(handle)
            if address is not None:
                self._by_address[address] = index
        if unsupported:
            self._notes.append(
                f"{_gpu_list(unsupported)}: NVML delivers no Xid events here; "
                "Xid errors show only in the kernel log (dmesg)"
            )
        if not self.watched:
            self._free(event_set)
            self._shutdown()
            return False
        self._thread = threading.Thread(
            target=self._run, args=(event_set,), name="gputui-xid-events", daemon=True
        )
        self._thread.start()
        return True

    def take(self) -> tuple[XidEvent, ...]:
        """The events received since the last call, oldest first."""
        out = []
        while True:
            try:
                out.append(self._events.popleft())
            except IndexError:
                return tuple(out)

    def notes(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self._notes.popleft())
            except IndexError:
                return out

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self, wait: float = 0.05) -> None:
        """Ask the thread to stop and give it `wait` seconds; a thread still in the driver's wait ends on
        its own when the wait returns (within wait_ms), freeing its set and its NVML reference."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)

    # -- the thread --------------------------------------------------------------------------------

    def _run(self, event_set: Any) -> None:
        failed_before = False
        try:
            while not self._stop.is_set():
                try:
                    data = pynvml.nvmlEventSetWait_v2(event_set, self.wait_ms)
                except pynvml.NVMLError_Timeout:
                    failed_before = False
                    continue
                except (pynvml.NVMLError_Uninitialized, pynvml.NVMLError_FunctionNotFound) as err:
                    self._notes.append(f"Xid events are no longer watched: {err}")
                    return
                except pynvml.NVMLError as err:  # a lost GPU, a driver in trouble: say it once, go on
                    if not failed_before:
                        self._notes.append(f"waiting for Xid events failed: {err}")
                    failed_before = True
                    self._stop.wait(_ERROR_PAUSE_S)
                    continue
                failed_before = False
                self._receive(data)
        except Exception as err:  # a binding bug: the monitor goes on without events, and says so
            self._notes.append(f"Xid events are no longer watched: {type(err).__name__}: {err}")
        finally:
            self._free(event_set)
            self._shutdown()

    def _receive(self, data: Any) -> None:
        if not int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self._by_address.get(_address(data.device) or 0)
        if gpu is None:  # a handle we did not register by this pointer: ask NVML which GPU it is
            try:
                gpu = int(pynvml.nvmlDeviceGetIndex(data.device))
            except (pynvml.NVMLError, TypeError, ctypes.ArgumentError):
                gpu = self.watched[0] if len(self.watched) == 1 else None
        xid = int(data.eventData)
        if gpu is None:  # still worth saying, though not as an event of a GPU
            self._notes.append(f"Xid {xid} on a GPU NVML cannot name (see the kernel log)")
            return
        self._events.append(XidEvent(gpu=gpu, xid=xid, time=self.clock()))

    @staticmethod
    def _free(event_set: Any) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(event_set)

    @staticmethod
    def _shutdown() -> None:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
