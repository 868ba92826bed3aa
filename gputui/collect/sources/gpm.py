"""NVML's GPU Performance Monitoring (GPM): how busy a GPU really is (Hopper and newer).

NVML's utilization is the share of time *a* kernel ran; one kernel on one SM reads 100 %. GPM reads the
performance counters DCGM's profiling reads: SM activity and occupancy, tensor-pipe activity, DRAM
bandwidth, the fp pipes, PCIe and NVLink bytes. No DCGM daemon is needed.

How it is read, per GPU (and per MIG GPU instance, with nvmlGpmMigSampleGet):
- `nvmlGpmQueryDeviceSupport` once: a GPU that says no (or a driver without GPM) is never asked again and
  its metrics stay None (n/a), never 0.
- Two samples are allocated once and kept; each tick takes one into the older of the two
  (`nvmlGpmSampleGet`, one call) and, from the second tick on, asks `nvmlGpmMetricsGet` for the metrics
  between the previous sample and this one (one call). So a tick costs 2 calls per GPU (and 2 per MIG
  instance); `make bench` states the time.
- Each metric carries its own nvmlReturn: one that fails gives None for that metric alone; one the GPU
  does not support is not asked for again.
- Samples are freed at close, and when a GPU is lost or a MIG instance disappears (no leaked samples).

GPM shares the counters with DCGM's profiling (nv-hostengine, dcgm-exporter's embedded DCGM): `dcgm_running`
tells whether one runs on this host, and the NVML source does not arm GPM behind it unless asked.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gputui.model import GPM_MIN_INTERVAL_S, GpmMetrics

# GpmMetrics field <- NVML metric id. Ratios are percent (0..100); the rates MiB/s (converted to bytes/s).
RATIO_IDS: tuple[tuple[str, int], ...] = (
    ("graphics", pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL),
    ("sm_active", pynvml.NVML_GPM_METRIC_SM_UTIL),
    ("sm_occupancy", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY),
    ("integer", pynvml.NVML_GPM_METRIC_INTEGER_UTIL),
    ("tensor", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL),
    ("dfma", pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL),
    ("hmma", pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL),
    ("imma", pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL),
    ("dram", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL),
    ("fp64", pynvml.NVML_GPM_METRIC_FP64_UTIL),
    ("fp32", pynvml.NVML_GPM_METRIC_FP32_UTIL),
    ("fp16", pynvml.NVML_GPM_METRIC_FP16_UTIL),
)
RATE_IDS: tuple[tuple[str, int], ...] = (
    ("pcie_tx", pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC),
    ("pcie_rx", pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC),
    ("nvlink_rx", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC),
    ("nvlink_tx", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC),
)
_RATIOS = frozenset(name for name, _ in RATIO_IDS)
_NAMES = dict((metric, name) for name, metric in (*RATIO_IDS, *RATE_IDS))
MIB = 1024 * 1024
# A ratio a hair over 100 is rounding in the driver's arithmetic; far over it is a broken reading.
RATIO_SLACK = 1.0

# Processes that hold the profiling counters GPM reads (by /proc/PID/comm, 15 characters at most).
DCGM_PROCESSES = frozenset({"nv-hostengine", "dcgm-exporter", "dcgmproftester1", "dcgmproftester12"})

_METRICS_MAX = int(pynvml.NVML_GPM_METRIC_MAX)


class GpmLost(Exception):
    """The GPU fell off the bus while its GPM sample was read."""


@dataclass
class _Pair:
    """Two samples of one GPU (or MIG instance): the last one taken, and the one the next tick overwrites."""

    samples: list[Any]
    last: int | None = None  # index into samples of the latest sample taken; None: none yet
    last_time: float = 0.0


@dataclass
class GpuGpm:
    """The GPM state of one GPU."""

    supported: bool | None = None  # None: not asked yet
    whole: _Pair | None = None
    instances: dict[int, _Pair] = field(default_factory=dict)  # GPU instance id -> its samples
    unsupported: set[int] = field(default_factory=set)  # metric ids this GPU answered NotSupported
    mig_unsupported: bool = False  # nvmlGpmMigSampleGet is not there or not supported


class GpmReader:
    """GPM samples and metrics for the GPUs of one NVML session. Not thread-safe: the sampler's thread."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.gpus: dict[int, GpuGpm] = {}
        self.calls = 0  # NVML calls made (the bench counts them)

    # -- support ------------------------------------------------------------------------------------

    def supported(self, index: int, handle: Any) -> bool:
        state = self.gpus.setdefault(index, GpuGpm())
        if state.supported is None:
            state.supported = self._query_support(handle)
        return state.supported

    def _query_support(self, handle: Any) -> bool:
        self.calls += 1
        try:
            answer = pynvml.nvmlGpmQueryDeviceSupport(handle)
        except pynvml.NVMLError_GpuIsLost:
            raise GpmLost from None
        except (pynvml.NVMLError, AttributeError):  # no GPM on this GPU, driver or binding
            return False
        return bool(answer.isSupportedDevice)

    # -- reading ------------------------------------------------------------------------------------

    def read(
        self, index: int, handle: Any, instances: Iterable[int] = ()
    ) -> tuple[GpmMetrics | None, dict[int, GpmMetrics | None]]:
        """This tick's metrics of GPU `index` and of its MIG GPU instances (ids in `instances`): None for
        each until it has two samples, or when GPM is not supported. Raises GpmLost."""
        if not self.supported(index, handle):
            return None, {}
        state = self.gpus[index]
        if state.whole is None:
            try:
                state.whole = self._alloc_pair()
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
                state.supported = False  # a tape played back, a driver that says so late: n/a, no error
                return None, {}
        whole = self._step(state, state.whole, lambda s: pynvml.nvmlGpmSampleGet(handle, s))
        wanted = set(instances)
        for gone in set(state.instances) - wanted:  # an instance destroyed: its samples go with it
            self._free_pair(state.instances.pop(gone))
        per: dict[int, GpmMetrics | None] = {}
        for gi in sorted(wanted):
            if state.mig_unsupported:
                per[gi] = None
                continue
            pair = state.instances.get(gi)
            if pair is None:
                pair = state.instances[gi] = self._alloc_pair()
            per[gi] = self._step(
                state, pair, functools.partial(pynvml.nvmlGpmMigSampleGet, handle, gi), mig=True
            )
        return whole, per

    def _alloc_pair(self) -> _Pair:
        samples = []
        try:
            for _ in range(2):
                self.calls += 1
                samples.append(pynvml.nvmlGpmSampleAlloc())
        except pynvml.NVMLError:
            for s in samples:
                self._free(s)
            raise
        return _Pair(samples)

    def _step(
        self, state: GpuGpm, pair: _Pair, take: Callable[[Any], Any], mig: bool = False
    ) -> GpmMetrics | None:
        """Take a sample into the older slot and measure from the previous one to it."""
        now = self.clock()
        if pair.last is not None and now - pair.last_time < GPM_MIN_INTERVAL_S:
            return None  # too soon: keep the previous sample for the next tick
        slot = 0 if pair.last is None else 1 - pair.last
        self.calls += 1
        try:
            take(pair.samples[slot])
        except pynvml.NVMLError_GpuIsLost:
            raise GpmLost from None
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            if mig:
                state.mig_unsupported = True
            else:
                state.supported = False
            return None
        except pynvml.NVMLError:
            pair.last = None  # this sample is not usable: start the pair again next tick
            return None
        previous, pair.last = pair.last, slot
        interval, pair.last_time = now - pair.last_time, now
        if previous is None:
            return None
        return self._metrics(state, pair.samples[previous], pair.samples[slot], interval)

    def _metrics(self, state: GpuGpm, first: Any, second: Any, interval: float) -> GpmMetrics | None:
        wanted = [m for m in _NAMES if m not in state.unsupported]
        if not wanted:
            return None
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = first
        request.sample2 = second
        for i, metric in enumerate(wanted):
            request.metrics[i].metricId = metric
        self.calls += 1
        try:
            answer = pynvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError_GpuIsLost:
            raise GpmLost from None
        except pynvml.NVMLError:
            return None
        values: dict[str, float | None] = {}
        count = min(int(answer.numMetrics), len(wanted), _METRICS_MAX)
        for i in range(count):
            metric = answer.metrics[i]
            name = _NAMES.get(int(metric.metricId))
            if name is None:
                continue
            if metric.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED:
                state.unsupported.add(int(metric.metricId))
                continue
            if metric.nvmlReturn != pynvml.NVML_SUCCESS:
                continue
            values[name] = _checked(name, float(metric.value))
        return GpmMetrics(interval=round(interval, 3), **values)

    # -- freeing ------------------------------------------------------------------------------------

    def forget(self, index: int) -> None:
        """A lost GPU: its samples are freed (host memory; the GPU is not asked for anything) and its
        state dropped."""
        self.forget_samples(index)
        self.gpus.pop(index, None)

    def forget_samples(self, index: int) -> None:
        """Free a GPU's samples and keep what it supports (GPM disarmed: DCGM wants the counters)."""
        state = self.gpus.get(index)
        if state is None:
            return
        if state.whole is not None:
            self._free_pair(state.whole)
            state.whole = None
        for pair in state.instances.values():
            self._free_pair(pair)
        state.instances.clear()

    def close(self) -> None:
        for index in list(self.gpus):
            self.forget(index)

    def _free_pair(self, pair: _Pair) -> None:
        for s in pair.samples:
            self._free(s)
        pair.samples = []

    def _free(self, sample: Any) -> None:
        self.calls += 1
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlGpmSampleFree(sample)

    def live_samples(self) -> int:
        """Samples allocated and not freed (the tests check none leak)."""
        n = 0
        for state in self.gpus.values():
            pairs = ([state.whole] if state.whole else []) + list(state.instances.values())
            n += sum(len(p.samples) for p in pairs)
        return n


def _checked(name: str, value: float) -> float | None:
    """A value as gputui shows it: a ratio in 0..100, a rate in bytes/s; None for what cannot be true."""
    if not math.isfinite(value) or value < 0:
        return None
    if name in _RATIOS:
        if value > 100.0 + RATIO_SLACK:
            return None
        return min(value, 100.0)
    return value * MIB


def dcgm_running(proc: str = "/proc") -> str | None:
    """The first process that holds DCGM's profiling ("nv-hostengine (pid 812)"), or None. Reads each
    process's comm (one small read each): a second's work is never spent on a host of thousands."""
    try:
        entries = os.scandir(proc)
    except OSError:
        return None
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"{proc}/{entry.name}/comm", "rb") as f:
                    comm = f.read(64).decode(errors="replace").strip()
            except OSError:
                continue
            if comm in DCGM_PROCESSES:
                return f"{comm} (pid {entry.name})"
    return None
