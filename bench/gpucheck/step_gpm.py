"""NVML GPM (Hopper and newer) read directly through nvidia-ml-py under four loads with a known signature,
and its cost: what gputui's GPM support (3/5) will stand on. The readings are saved as gpm.json, a
fixture: per load, every metric's nvmlReturn and value, and NVML's utilization beside them."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import pynvml

from bench.gpucheck.common import Result, out_dir, running, until, work_dir, workload

METRICS = {
    name[len("NVML_GPM_METRIC_") :]: getattr(pynvml, name)
    for name in (
        "NVML_GPM_METRIC_GRAPHICS_UTIL",
        "NVML_GPM_METRIC_SM_UTIL",
        "NVML_GPM_METRIC_SM_OCCUPANCY",
        "NVML_GPM_METRIC_INTEGER_UTIL",
        "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        "NVML_GPM_METRIC_DFMA_TENSOR_UTIL",
        "NVML_GPM_METRIC_HMMA_TENSOR_UTIL",
        "NVML_GPM_METRIC_IMMA_TENSOR_UTIL",
        "NVML_GPM_METRIC_DRAM_BW_UTIL",
        "NVML_GPM_METRIC_FP64_UTIL",
        "NVML_GPM_METRIC_FP32_UTIL",
        "NVML_GPM_METRIC_FP16_UTIL",
        "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
        "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
        "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
        "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
    )
    if hasattr(pynvml, name)
}
# load -> (metric, at least, at most); NVML's own utilization is "UTIL"
EXPECT: dict[str, list[tuple[str, float, float]]] = {
    "idle": [("SM_UTIL", 0, 5), ("ANY_TENSOR_UTIL", 0, 2), ("DRAM_BW_UTIL", 0, 5)],
    "matmul": [("ANY_TENSOR_UTIL", 30, 100), ("SM_UTIL", 60, 100), ("UTIL", 90, 100)],
    "copy": [("DRAM_BW_UTIL", 40, 100), ("ANY_TENSOR_UTIL", 0, 5), ("UTIL", 90, 100)],
    "spin": [("UTIL", 80, 100), ("SM_UTIL", 0, 5), ("ANY_TENSOR_UTIL", 0, 1)],
}


# gputui's own path (NvmlSource, gpm="on") under the same loads: GpmMetrics field -> (at least, at most),
# and whether the GPU line's "busy but starved" case holds (util >= 90 with SM activity under 25 %).
GPUTUI_EXPECT: dict[str, tuple[list[tuple[str, float, float]], bool]] = {
    "matmul": ([("sm_active", 60, 100), ("tensor", 30, 100)], False),
    "spin": ([("sm_active", 0, 5), ("tensor", 0, 1)], True),
}


def check_gputui(r: Result, load: str) -> None:
    """Two reads of gputui's NVML source 1 s apart while `load` runs: its GpmMetrics as the raw ones."""
    from gputui.collect.sources.nvml import NvmlSource

    source = NvmlSource(gpm="on")
    source.open()
    try:
        source.read(True)
        time.sleep(1.0)
        start = time.perf_counter()
        reading = source.read(False)
        r.number(f"gputui_{load}_read_ms_all_gpus", round((time.perf_counter() - start) * 1000, 2))
    finally:
        source.close()
    g = reading.gpus[0]
    m = g.gpm
    r.number(f"gputui_{load}_gpm", None if m is None else {k: getattr(m, k) for k in m.__slots__})
    ranges, starved = GPUTUI_EXPECT[load]
    for name, low, high in ranges:
        value = getattr(m, name) if m is not None else None
        r.check(
            f"gputui {load}: GpmMetrics.{name}",
            value is not None and low <= value <= high,
            value,
            f"{low}..{high}",
        )
    if starved:
        busy = g.util_gpu is not None and g.util_gpu >= 90 and m is not None and (m.sm_active or 0) < 25
        r.check(f"gputui {load}: busy but starved", busy, (g.util_gpu, m and m.sm_active), "util>=90, SM<25")


class Gpm:
    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        self.turn = 0
        self.get_ms: list[float] = []
        self.metrics_ms: list[float] = []
        self.primed = False

    def read(self) -> dict[str, Any]:
        """One tick: a sample into the older buffer, metrics between the two; None before the second."""
        t0 = time.perf_counter()
        pynvml.nvmlGpmSampleGet(self.handle, self.samples[self.turn])
        self.get_ms.append((time.perf_counter() - t0) * 1000)
        previous, current = self.samples[1 - self.turn], self.samples[self.turn]
        self.turn = 1 - self.turn
        if not self.primed:
            self.primed = True
            return {}
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(METRICS)
        mg.sample1, mg.sample2 = previous, current
        for i, metric_id in enumerate(METRICS.values()):
            mg.metrics[i].metricId = metric_id
        t0 = time.perf_counter()
        pynvml.nvmlGpmMetricsGet(mg)
        self.metrics_ms.append((time.perf_counter() - t0) * 1000)
        out: dict[str, Any] = {}
        for i, name in enumerate(METRICS):
            m = mg.metrics[i]
            out[name] = m.value if m.nvmlReturn == pynvml.NVML_SUCCESS else {"error": int(m.nvmlReturn)}
        return out

    def close(self) -> None:
        for s in self.samples:
            pynvml.nvmlGpmSampleFree(s)


def measure(gpm: Gpm, handle: Any, seconds: int = 3) -> list[dict[str, Any]]:
    gpm.primed = False
    gpm.read()
    readings = []
    for _ in range(seconds):
        time.sleep(1.0)
        values = gpm.read()
        values["UTIL"] = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        readings.append(values)
    return readings


def median(readings: list[dict[str, Any]], name: str) -> float | None:
    values = [v[name] for v in readings if isinstance(v.get(name), (int, float))]
    return statistics.median(values) if values else None


def run(r: Result) -> None:
    pynvml.nvmlInit()
    fixture: dict[str, Any] = {"format": "gputui-gpm-readings", "version": 1, "metrics": METRICS}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        fixture["gpu"] = pynvml.nvmlDeviceGetName(handle)
        try:
            support = pynvml.nvmlGpmQueryDeviceSupport(handle)
        except pynvml.NVMLError as err:
            fixture["support_error"] = str(err)
            r.check("GPM support query answers", False, str(err), "nvmlGpmQueryDeviceSupport succeeds")
            return
        fixture["supported"] = bool(support.isSupportedDevice)
        r.number("gpm_supported", bool(support.isSupportedDevice))
        if not support.isSupportedDevice:
            r.note("this GPU/driver says GPM is not supported: gputui must show GPM fields as n/a here")
            r.check("GPM unsupported is reported, not an error", True, False, "a clear answer")
            return
        try:
            streaming = pynvml.nvmlGpmQueryIfStreamingEnabled(handle)
            r.number("gpm_streaming_enabled", streaming)
        except pynvml.NVMLError as err:
            r.number("gpm_streaming_enabled", f"error: {err}")
        gpm = Gpm(handle)
        try:
            loads: dict[str, Any] = {}
            fixture["loads"] = loads
            for load in ("idle", "matmul", "copy", "spin"):
                if load == "idle":
                    loads[load] = measure(gpm, handle)
                else:
                    ready = work_dir() / f"gpm-{load}.ready"
                    with running(workload(load, 30, ready, "0.25")):
                        if not until(ready.exists, 40):
                            r.check(f"{load}: workload started", False, "no ready file", "running")
                            continue
                        loads[load] = measure(gpm, handle)
                        if load in GPUTUI_EXPECT:
                            check_gputui(r, load)
                for name, low, high in EXPECT[load]:
                    value = median(loads[load], name)
                    r.check(
                        f"{load}: {name}", value is not None and low <= value <= high, value, f"{low}..{high}"
                    )
                r.number(
                    f"{load}_medians",
                    {
                        n: median(loads[load], n)
                        for n in (
                            "UTIL",
                            "SM_UTIL",
                            "SM_OCCUPANCY",
                            "ANY_TENSOR_UTIL",
                            "HMMA_TENSOR_UTIL",
                            "DRAM_BW_UTIL",
                            "FP32_UTIL",
                        )
                    },
                )
            errors = {
                n: v for rs in loads.values() for row in rs for n, v in row.items() if isinstance(v, dict)
            }
            r.number("metrics_with_errors", errors)
            r.number("sample_get_ms_median", statistics.median(gpm.get_ms))
            r.number("metrics_get_ms_median", statistics.median(gpm.metrics_ms) if gpm.metrics_ms else None)
            r.number("calls_per_gpu_per_tick", 2)
        finally:
            gpm.close()
    finally:
        (out_dir() / "gpm.json").write_text(json.dumps(fixture, indent=1, default=str))
        pynvml.nvmlShutdown()
