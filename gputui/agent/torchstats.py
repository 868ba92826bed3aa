"""What PyTorch's CUDA caching allocator says, read from inside the training process.

torch is never imported here: it is read from sys.modules once the host has imported it, and CUDA is
never initialized by us (only `torch.cuda.is_initialized()` is asked). Every key is optional: older
torch, the cudaMallocAsync backend and CPU-only builds all lack some of them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SNAPSHOT_EVERY_S = 5.0  # memory_snapshot() walks every block: not every poll
MAX_OOM_EVENTS = 20

# memory_stats() keys reported as they are: (name in the reply, key in torch)
_STATS = {
    "allocated": "allocated_bytes.all.current",
    "allocated_peak": "allocated_bytes.all.peak",
    "reserved": "reserved_bytes.all.current",
    "reserved_peak": "reserved_bytes.all.peak",
    "active": "active_bytes.all.current",
    "active_peak": "active_bytes.all.peak",
    "inactive_split": "inactive_split_bytes.all.current",  # "non-releasable" in memory_summary()
    "inactive_split_peak": "inactive_split_bytes.all.peak",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
    "num_device_alloc": "num_device_alloc",
    "num_device_free": "num_device_free",
    "num_sync_all_streams": "num_sync_all_streams",
}


def _torch() -> Any | None:
    return sys.modules.get("torch")


def _quiet(fn: Callable[..., Any], *args: Any) -> Any | None:
    try:
        return fn(*args)
    except Exception:  # an allocator call must never take the host process down
        return None


def segments_summary(snapshot: Any, device: int) -> dict[str, Any]:
    """Segments, the largest free block and a coarse map, from torch.cuda.memory_snapshot()."""
    segments = [s for s in (snapshot or []) if s.get("device", device) == device]
    largest_free = 0
    total_free = 0
    cells = []
    for seg in segments:
        size = seg.get("total_size", 0) or 0
        used = seg.get("allocated_size", 0) or 0
        for block in seg.get("blocks", []) or []:
            if block.get("state") == "inactive":
                largest_free = max(largest_free, block.get("size", 0) or 0)
                total_free += block.get("size", 0) or 0
        cells.append(used / size if size else 0.0)
    return {
        "segments": len(segments),
        "largest_free_block": largest_free,
        "free_in_segments": total_free,
        # Per segment, in address order, how full it is (0..1): drawn as a one-line map.
        "segment_fill": [round(c, 3) for c in cells[:512]],
    }


class TorchStats:
    """Reads the allocator on demand; the expensive snapshot at most every SNAPSHOT_EVERY_S."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._snapshot: tuple[float, Any] | None = None  # (when, memory_snapshot()): all devices
        self._ooms: list[dict[str, Any]] = []
        self._observer = False
        self._lock = threading.Lock()

    def collect(self) -> dict[str, Any]:
        torch = _torch()
        out: dict[str, Any] = {
            "torch": getattr(torch, "__version__", None) if torch else None,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "devices": [],
        }
        if torch is None:
            return out
        out["cuda"] = _quiet(lambda: torch.version.cuda)
        cuda = getattr(torch, "cuda", None)
        # Lambdas, not bound methods: an older torch lacking one is a None, not an AttributeError.
        initialized = cuda is not None and bool(_quiet(lambda: cuda.is_initialized()))
        out["cuda_initialized"] = initialized
        if cuda is None or not initialized:
            return out
        out["allocator_backend"] = _quiet(lambda: cuda.get_allocator_backend())
        self._attach_oom_observer(torch)
        with self._lock:
            out["oom_events"] = list(self._ooms)
        count = _quiet(lambda: cuda.device_count()) or 0
        for device in range(count):
            stats = _quiet(lambda d: cuda.memory_stats(d), device) or {}
            if not stats or not stats.get("reserved_bytes.all.peak"):
                continue  # a device this process never allocated on
            out["devices"].append(self._device(torch, device, stats))
        return out

    def _device(self, torch: Any, device: int, stats: dict[str, Any]) -> dict[str, Any]:
        d: dict[str, Any] = {"index": device}
        for name, key in _STATS.items():
            if key in stats:
                d[name] = stats[key]
        if "reserved" in d and "allocated" in d:
            d["reserved_unallocated"] = d["reserved"] - d["allocated"]
        now = self.clock()
        if self._snapshot is None or now - self._snapshot[0] >= SNAPSHOT_EVERY_S:
            self._snapshot = (now, _quiet(lambda: torch.cuda.memory_snapshot()))  # one walk, all devices
        if self._snapshot[1] is not None:
            d.update(segments_summary(self._snapshot[1], device))
        free = d.get("reserved_unallocated")
        if free is not None and d.get("largest_free_block") is not None:
            # The snapshot may be a few seconds older than the counters: never more free than free.
            d["largest_free_block"] = min(d["largest_free_block"], free)
            if free:  # how far the free memory is from one usable block: 0 % = all in one piece
                d["fragmentation"] = round(100.0 * (1 - d["largest_free_block"] / free), 1)
        return d

    def _attach_oom_observer(self, torch: Any) -> None:
        if self._observer:
            return
        self._observer = True
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return

        def observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
            with self._lock:
                self._ooms.append(
                    {
                        "time": time.time(),
                        "device": device,
                        "requested": alloc,
                        "allocated": device_allocated,
                        "free": device_free,
                    }
                )
                del self._ooms[:-MAX_OOM_EVENTS]

        _quiet(lambda: attach(observer))

    # -- actions ----------------------------------------------------------------------------------

    def record_history(self, enabled: bool) -> str:
        torch = self._cuda_torch()
        record = getattr(torch.cuda.memory, "_record_memory_history", None)
        if record is None:
            raise RuntimeError("this torch has no allocation history recording")
        record(enabled="all" if enabled else None)
        return "recording allocation history" if enabled else "stopped recording allocation history"

    def dump_snapshot(self, directory: str) -> str:
        torch = self._cuda_torch()
        dump = getattr(torch.cuda.memory, "_dump_snapshot", None)
        if dump is None:
            raise RuntimeError("this torch cannot dump memory snapshots")
        path = os.path.join(directory, f"memory-snapshot-{os.getpid()}-{int(time.time())}.pickle")
        dump(path)
        return path  # load it at https://pytorch.org/memory_viz

    def empty_cache(self) -> str:
        torch = self._cuda_torch()
        before = _quiet(torch.cuda.memory_reserved) or 0
        torch.cuda.empty_cache()
        after = _quiet(torch.cuda.memory_reserved) or 0
        return f"empty_cache released {max(0, before - after)} bytes"

    @staticmethod
    def _cuda_torch() -> Any:
        torch = _torch()
        if torch is None or not _quiet(torch.cuda.is_initialized):
            raise RuntimeError("CUDA is not initialized in this process")
        return torch
