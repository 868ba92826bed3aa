"""NvmlSource on a real NVIDIA GPU and driver; skipped where NVML cannot start or sees no GPU."""

from __future__ import annotations

import pynvml
import pytest

from bench.gpucheck.__main__ import why_no_nvml as _why_no_gpu
from gputui.collect.sources.nvml import NvmlSource


@pytest.mark.gpu
def test_real_gpu_sanity() -> None:
    why = _why_no_gpu()
    if why is not None:
        pytest.skip(why)
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()

    src = NvmlSource()
    info = src.open()
    try:
        readings = [src.read(slow=True), src.read(slow=False), src.read(slow=True)]
    finally:
        src.close()

    assert info.driver_version and info.nvml_version
    assert info.cuda_driver_version is None or info.cuda_driver_version[0].isdigit()
    for r in readings:
        assert [s.index for s in r.gpus] == list(range(count))
        assert all(isinstance(e, str) and "\n" not in e for e in r.errors)
        assert {p.gpu for p in r.processes} <= set(range(count))
        for p in r.processes:
            assert p.pid > 0 and p.kinds and set(p.kinds) <= set("CGM")
            assert p.used_memory is None or p.used_memory >= 0
            assert p.sm_util is None or 0 <= p.sm_util <= 100
        for s in r.gpus:
            if s.lost:
                continue
            assert s.name and s.uuid and s.uuid.startswith(("GPU-", "MIG-"))
            assert s.pci_bus_id and ":" in s.pci_bus_id
            assert s.mem_total and s.mem_total > 0
            assert s.mem_used is not None and 0 <= s.mem_used <= s.mem_total
            assert s.util_gpu is not None and 0 <= s.util_gpu <= 100
            assert s.temperature is None or 0 < s.temperature < 130
            assert s.power is None or 0 <= s.power < 2000  # watts, not milliwatts
            assert s.power_limit is None or 0 < s.power_limit < 2000
            assert s.energy is None or s.energy >= 0
            assert s.sm_clock is None or s.sm_clock_max is None or 0 <= s.sm_clock <= s.sm_clock_max * 1.1
            assert s.pcie_tx is None or s.pcie_tx >= 0
            assert s.throttle_reasons is None or isinstance(s.throttle_reasons, tuple)
    last = readings[-1].gpus
    assert any(not s.lost for s in last)
