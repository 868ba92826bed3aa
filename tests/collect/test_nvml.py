"""NvmlSource against a fake NVML (tests/collect/fake_nvml.py): no GPU or driver needed."""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

import gputui.collect.sources.nvml as nvml
from gputui.collect.sources.base import Reading, SourceUnavailable
from gputui.collect.sources.nvml import SETTINGS_EVERY, NvmlSource
from gputui.model import GpuProcess, GpuSample
from tests.collect.fake_nvml import ANY, NOT_AVAILABLE, FakeNvml, FakeProcess, proc_symbol
from tests.helpers import known

GiB = 2**30
MakeSource = Callable[[], NvmlSource]  # the make_source fixture: an opened source, closed at the end
MiB = 2**20
SLOW_INTERVAL = 5.0  # the Sampler's default slow_interval, with 1 s ticks: every 5th tick is slow

E_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
E_NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
E_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
E_UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
E_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
SKIP_FOREVER = (E_NOT_SUPPORTED, E_FUNCTION_NOT_FOUND)
ALL_ERRORS = pytest.mark.parametrize(
    "error",
    [E_NOT_SUPPORTED, E_NO_PERMISSION, E_FUNCTION_NOT_FOUND, E_UNKNOWN],
    ids=["NotSupported", "NoPermission", "FunctionNotFound", "Unknown"],
)

F_POWER = pynvml.NVML_FI_DEV_POWER_INSTANT
F_LIMIT = pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT
F_ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
F_TX = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES
F_RX = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES


# -- fixtures and helpers ---------------------------------------------------------------------------------


def make_gpu1_different(fake: FakeNvml) -> None:
    """GPU 1 gets values unlike GPU 0's, so that a mix-up between GPUs shows."""
    g = fake.gpus[1]
    g.name = "NVIDIA A100-SXM4-40GB"
    g.util_gpu, g.util_mem = 5, 1
    g.mem_total, g.mem_reserved, g.mem_used = 40 * GiB, 300 * MiB, 1 * GiB
    g.power_mw, g.power_limit_mw, g.energy_mj = 80_500, 400_000, 5_000
    g.pcie_tx_rate, g.pcie_rx_rate = 1_000, 3_000
    g.temperature, g.sm_clock, g.mem_clock, g.pstate = 40, 210, 1215, 8
    g.clock_reasons = 0x040 | 0x008  # hw_thermal, hw_slowdown
    g.fan, g.enc, g.dec = 0, 0, 12
    g.compute_mode, g.persistence, g.mig = 3, 0, (1, 0)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    f = FakeNvml(n_gpus=2)
    make_gpu1_different(f)
    f.install(monkeypatch)
    yield f
    assert f.violations == []


@pytest.fixture
def make_source(fake: FakeNvml) -> Iterator[MakeSource]:
    """Opens NvmlSources (after the test configured the fake) and closes them at the end."""
    opened: list[NvmlSource] = []

    def make() -> NvmlSource:
        src = NvmlSource()
        src.open()
        opened.append(src)
        return src

    yield make
    for src in opened:
        src.close()
    assert fake.initialized == 0, "nvmlInit without nvmlShutdown"


@pytest.fixture
def source(make_source: MakeSource) -> NvmlSource:
    return make_source()


def tick(src: NvmlSource, fake: FakeNvml, slow: bool = True) -> Reading:
    """One second passes, then one reading."""
    fake.advance(1.0)
    return src.read(slow)


def run(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, slows: list[bool]) -> list[Reading]:
    """Install `fake`, open a source, read once per entry of `slows`, close."""
    fake.install(monkeypatch)
    src = NvmlSource()
    src.open()
    try:
        return [tick(src, fake, slow) for slow in slows]
    finally:
        src.close()
        assert fake.initialized == 0
        assert fake.violations == []


def calls(fake: FakeNvml, gpu: int, name: str, arg: Any = ANY) -> int:
    return fake.calls[gpu][name] if arg is ANY else fake.arg_calls[gpu][(name, arg)]


def procs_of(reading: Reading, gpu: int) -> dict[int, GpuProcess]:
    return {p.pid: p for p in reading.processes if p.gpu == gpu}


# -- open -------------------------------------------------------------------------------------------------


def test_open_reports_versions_and_close_shuts_nvml_down(fake: FakeNvml) -> None:
    src = NvmlSource()
    info = src.open()
    assert (info.driver_version, info.nvml_version, info.cuda_driver_version) == (
        "550.54.15",
        "12.550.54.15",
        "12.4",
    )
    assert fake.initialized == 1
    src.close()
    src.close()  # twice is harmless
    assert fake.initialized == 0
    assert fake.system_calls["nvmlShutdown"] == 1


def test_open_with_bytes_from_an_old_binding(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.bytes_strings = True
    src = make_source()
    sample = tick(src, fake).gpus[0]
    assert sample.name == "NVIDIA H100 80GB HBM3"
    assert sample.uuid == fake.gpus[0].uuid


@pytest.mark.parametrize(
    ("raw", "text"), [(12040, "12.4"), (11080, "11.8"), (12000, "12.0"), (13010, "13.1")]
)
def test_cuda_driver_version_format(fake: FakeNvml, raw: int, text: str) -> None:
    fake.cuda_version = raw
    src = NvmlSource()
    assert src.open().cuda_driver_version == text
    src.close()


def test_system_queries_failing_give_none(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.fail(None, "nvmlSystemGetDriverVersion", E_NO_PERMISSION)
    fake.fail(None, "nvmlSystemGetNVMLVersion", E_UNKNOWN)
    fake.fail(None, "nvmlSystemGetCudaDriverVersion", E_FUNCTION_NOT_FOUND)
    src = NvmlSource()
    info = src.open()
    assert (info.driver_version, info.nvml_version, info.cuda_driver_version) == (None, None, None)
    assert len(tick(src, fake).gpus) == 2
    src.close()


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, ("driver not found", "libnvidia-ml")),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, ("not loaded",)),
        (pynvml.NVML_ERROR_NO_PERMISSION, ("permission",)),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, ("versions differ",)),
        (pynvml.NVML_ERROR_UNKNOWN, ("NVML failed to start", "Unknown Error")),
        (OSError("libnvidia-ml.so.1: invalid ELF header"), ("could not be loaded", "invalid ELF header")),
    ],
    ids=["LibraryNotFound", "DriverNotLoaded", "NoPermission", "LibRmVersionMismatch", "Unknown", "OSError"],
)
def test_init_failure_is_source_unavailable_with_one_line(
    fake: FakeNvml, error: Any, words: tuple[str, ...]
) -> None:
    fake.init_error = error
    src = NvmlSource()
    with pytest.raises(SourceUnavailable) as excinfo:
        src.open()
    message = str(excinfo.value)
    for word in words:
        assert word in message
    assert "\n" not in message and "Traceback" not in message and "NVMLError" not in message
    assert excinfo.value.__cause__ is None and excinfo.value.__suppress_context__  # `from None`
    src.close()  # nothing to shut down
    assert fake.system_calls["nvmlShutdown"] == 0


def test_device_count_failure_is_source_unavailable_and_shuts_down(fake: FakeNvml) -> None:
    fake.fail(None, "nvmlDeviceGetCount", E_UNKNOWN)
    src = NvmlSource()
    with pytest.raises(SourceUnavailable, match="cannot count the GPUs") as excinfo:
        src.open()
    assert "\n" not in str(excinfo.value)
    assert fake.initialized == 0


# -- every field, converted -----------------------------------------------------------------------------


def expected_sample(fake: FakeNvml, index: int, **changes: Any) -> GpuSample:
    """What NvmlSource should report for the fake's GPU `index` now, one second after the last reading,
    written out from the fake's raw values with the units converted by hand."""
    g = fake.gpus[index]
    names = {0x001: "gpu_idle", 0x004: "sw_power_cap", 0x008: "hw_slowdown", 0x040: "hw_thermal"}
    sample = GpuSample(
        index=index,
        name=g.name,
        uuid=g.uuid,
        pci_bus_id=g.pci_bus_id,
        minor=g.minor,
        util_gpu=g.util_gpu,
        util_mem=g.util_mem,
        mem_total=g.mem_total,
        mem_used=g.mem_used,
        mem_reserved=g.mem_reserved,
        temperature=g.temperature,
        power=known(g.power_mw) / 1000,
        power_limit=known(g.power_limit_mw) / 1000,
        energy=g.energy_mj / 1000,  # mJ -> J
        fan=g.fan,
        sm_clock=g.sm_clock,
        sm_clock_max=g.sm_clock_max,
        mem_clock=g.mem_clock,
        mem_clock_max=g.mem_clock_max,
        pstate=g.pstate,
        throttle_reasons=tuple(name for bit, name in sorted(names.items()) if known(g.clock_reasons) & bit),
        enc_util=g.enc,
        dec_util=g.dec,
        pcie_tx=float(g.pcie_tx_rate),
        pcie_rx=float(g.pcie_rx_rate),  # counters over one second
        compute_mode={0: "Default", 3: "Exclusive_Process"}[known(g.compute_mode)],
        persistence_mode=bool(g.persistence),
        mig_mode=bool(known(g.mig)[0]),
    )
    return dataclasses.replace(sample, **changes)


def test_every_field_is_read_and_converted(fake: FakeNvml, source: NvmlSource) -> None:
    first = tick(source, fake, slow=True)  # t = 1001
    assert first.errors == ()
    # No PCIe rate yet (a rate needs two counter readings), and no fallback call for one either.
    assert [(s.pcie_tx, s.pcie_rx) for s in first.gpus] == [(None, None), (None, None)]
    assert calls(fake, 0, "nvmlDeviceGetPcieThroughput") == 0
    assert first.gpus[0] == expected_sample(fake, 0, pcie_tx=None, pcie_rx=None)

    second = tick(source, fake, slow=False)  # t = 1002
    assert second.gpus == (expected_sample(fake, 0), expected_sample(fake, 1))
    assert second.errors == () and second.processes == ()

    # Spot checks of the units, independent of expected_sample's arithmetic.
    g0, g1 = second.gpus
    assert (g0.power, g0.power_limit) == (350.25, 700.0)
    assert g0.energy == 124_157.289  # (123_456_789 + 2 s * 350_250 mW) mJ
    assert (g0.pcie_tx, g0.pcie_rx) == (2e9, 5e8)
    assert (g0.mem_total, g0.mem_used, g0.mem_reserved) == (80 * GiB, 30 * GiB, 512 * MiB)
    assert g0.pci_bus_id == "00000000:1B:00.0" and g0.minor == 7
    assert g0.throttle_reasons == ("gpu_idle", "sw_power_cap")
    assert (g0.compute_mode, g0.persistence_mode, g0.mig_mode) == ("Default", True, False)
    assert g1.throttle_reasons == ("hw_slowdown", "hw_thermal")
    assert (g1.compute_mode, g1.persistence_mode, g1.mig_mode) == ("Exclusive_Process", False, True)
    assert (g1.name, g1.pci_bus_id, g1.minor) == ("NVIDIA A100-SXM4-40GB", "00000000:2B:00.0", 6)
    assert not g0.lost and not g1.lost


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, ()),
        (0x001, ("gpu_idle",)),
        (
            0x1FF,
            (
                "gpu_idle",
                "applications_clocks",
                "sw_power_cap",
                "hw_slowdown",
                "sync_boost",
                "sw_thermal",
                "hw_thermal",
                "hw_power_brake",
                "display_clocks",
            ),
        ),
        (0x080 | 0x020, ("sw_thermal", "hw_power_brake")),
        (0x100 | 0x4000_0000_0000, ("display_clocks",)),  # unknown bits are ignored
    ],
)
def test_clock_event_reasons_decoded_from_the_bitmask(
    fake: FakeNvml, source: NvmlSource, mask: int, names: tuple[str, ...]
) -> None:
    fake.gpus[0].clock_reasons = mask
    assert tick(source, fake).gpus[0].throttle_reasons == names


def test_clock_event_reasons_fall_back_to_throttle_reasons_on_old_drivers(
    fake: FakeNvml, make_source: MakeSource
) -> None:
    fake.missing_symbols.add("nvmlDeviceGetCurrentClocksEventReasons")
    src = make_source()
    for _ in range(3):
        assert tick(src, fake).gpus[0].throttle_reasons == ("gpu_idle", "sw_power_cap")
    assert calls(fake, 0, "nvmlDeviceGetCurrentClocksEventReasons") == 1  # not asked again
    assert calls(fake, 0, "nvmlDeviceGetCurrentClocksThrottleReasons") == 3


@ALL_ERRORS
def test_clock_reasons_none_when_both_calls_fail(fake: FakeNvml, source: NvmlSource, error: int) -> None:
    fake.fail(0, "nvmlDeviceGetCurrentClocksEventReasons", error)
    fake.fail(0, "nvmlDeviceGetCurrentClocksThrottleReasons", error)
    readings = [tick(source, fake) for _ in range(3)]
    assert [r.gpus[0].throttle_reasons for r in readings] == [None, None, None]
    assert readings[-1].gpus[1].throttle_reasons == ("hw_slowdown", "hw_thermal")
    expected = 1 if error in SKIP_FOREVER else 3
    assert calls(fake, 0, "nvmlDeviceGetCurrentClocksEventReasons") == expected
    assert calls(fake, 0, "nvmlDeviceGetCurrentClocksThrottleReasons") == expected


@pytest.mark.parametrize(
    ("mode", "name"),
    [(0, "Default"), (1, "Exclusive_Thread"), (2, "Prohibited"), (3, "Exclusive_Process"), (7, "7")],
)
def test_compute_mode_names(fake: FakeNvml, source: NvmlSource, mode: int, name: str) -> None:
    fake.gpus[0].compute_mode = mode
    assert tick(source, fake).gpus[0].compute_mode == name


@pytest.mark.parametrize(
    ("persistence", "mig", "expected"),
    [
        (0, (0, 0), (False, False)),
        (1, (1, 1), (True, True)),
        (1, (0, 1), (True, False)),
        (None, None, (None, None)),  # a GPU without the features: NotSupported
    ],
)
def test_persistence_and_mig_are_bools(
    fake: FakeNvml, source: NvmlSource, persistence: Any, mig: Any, expected: tuple[Any, Any]
) -> None:
    fake.gpus[0].persistence, fake.gpus[0].mig = persistence, mig
    s = tick(source, fake).gpus[0]
    assert (s.persistence_mode, s.mig_mode) == expected


@pytest.mark.parametrize(
    ("value_type", "raw"),
    [
        (pynvml.NVML_VALUE_TYPE_DOUBLE, 350_250),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 350_250),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, 350_250),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 350_250),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, 350_250),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, 350_250),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, 35_025),
    ],
    ids=["double", "uint", "ulong", "ulonglong", "slonglong", "sint", "ushort"],
)
def test_field_value_types(fake: FakeNvml, source: NvmlSource, value_type: int, raw: int) -> None:
    fake.gpus[0].power_mw = raw
    fake.gpus[0].field_types[F_POWER] = value_type
    assert tick(source, fake).gpus[0].power == raw / 1000
    assert calls(fake, 0, "nvmlDeviceGetPowerUsage") == 0  # the field did it


def test_field_value_of_unknown_type_falls_back_to_power_usage(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].field_types[F_POWER] = 99
    assert tick(source, fake).gpus[0].power == 350.25
    assert calls(fake, 0, "nvmlDeviceGetPowerUsage") == 1


@pytest.mark.parametrize("error", [E_NOT_SUPPORTED, E_NO_PERMISSION, pynvml.NVML_ERROR_INVALID_ARGUMENT])
def test_power_field_failing_falls_back_to_power_usage_each_tick(
    fake: FakeNvml, source: NvmlSource, error: int
) -> None:
    fake.gpus[0].field_returns[F_POWER] = error
    readings = [tick(source, fake, slow) for slow in (True, False, False)]
    assert [r.gpus[0].power for r in readings] == [350.25] * 3
    assert calls(fake, 0, "nvmlDeviceGetPowerUsage") == 3
    assert calls(fake, 1, "nvmlDeviceGetPowerUsage") == 0
    assert readings[-1].gpus[0].energy is not None


def test_power_limit_from_enforced_limit_when_the_field_fails(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].field_returns[F_LIMIT] = E_NOT_SUPPORTED
    readings = [tick(source, fake, slow) for slow in (True, False, False, True)]
    assert [r.gpus[0].power_limit for r in readings] == [700.0] * 4
    # A setting: read on the first tick only (the next settings tick is SETTINGS_EVERY slow ticks away).
    assert calls(fake, 0, "nvmlDeviceGetEnforcedPowerLimit") == 1


def test_energy_field_failing_gives_none_and_others_intact(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].field_returns[F_ENERGY] = E_NOT_SUPPORTED
    tick(source, fake)
    s = tick(source, fake, slow=False).gpus[0]
    assert s == expected_sample(fake, 0, energy=None)


@pytest.mark.parametrize("failing", [F_TX, F_RX])
def test_one_pcie_counter_missing_uses_the_throughput_fallback(
    fake: FakeNvml, source: NvmlSource, failing: int
) -> None:
    fake.gpus[0].field_returns[failing] = E_NOT_SUPPORTED
    readings = [tick(source, fake, slow) for slow in (True, False)]
    for r in readings:
        assert (r.gpus[0].pcie_tx, r.gpus[0].pcie_rx) == (1_953_125 * 1024.0, 488_281 * 1024.0)
    assert calls(fake, 0, "nvmlDeviceGetPcieThroughput") == 2  # tx and rx, slow tick only


def test_pcie_rates_from_counter_deltas(fake: FakeNvml, source: NvmlSource) -> None:
    g = fake.gpus[0]
    tick(source, fake)
    fake.advance(1.0)  # two seconds between these readings
    s = tick(source, fake, slow=False).gpus[0]
    assert (s.pcie_tx, s.pcie_rx) == (2e9, 5e8)  # bytes/s, not bytes per tick
    g.pcie_tx_rate, g.pcie_rx_rate = 1_000_000, 0  # the traffic stops
    s = tick(source, fake, slow=False).gpus[0]
    assert (s.pcie_tx, s.pcie_rx) == pytest.approx((1e6, 0.0))
    assert calls(fake, 0, "nvmlDeviceGetPcieThroughput") == 0


def test_pcie_no_rate_after_a_counter_wrap_or_without_time_passing(
    fake: FakeNvml, source: NvmlSource
) -> None:
    g = fake.gpus[0]
    tick(source, fake)
    tick(source, fake, slow=False)
    g.pcie_tx_bytes -= 10**12  # the counter went backwards (wrapped, or the driver reloaded)
    s = tick(source, fake, slow=False).gpus[0]
    assert (s.pcie_tx, s.pcie_rx) == (None, None)
    s = tick(source, fake, slow=False).gpus[0]  # rates resume from the new base
    assert (s.pcie_tx, s.pcie_rx) == (2e9, 5e8)
    s = source.read(False).gpus[0]  # no time passed: no division by zero, no rate
    assert (s.pcie_tx, s.pcie_rx) == (None, None)


def test_pcie_fallback_converts_kb_per_second(fake: FakeNvml, source: NvmlSource) -> None:
    for fid in (F_TX, F_RX):
        fake.gpus[0].field_returns[fid] = E_NOT_SUPPORTED
    fake.gpus[0].pcie_tx_kbs, fake.gpus[0].pcie_rx_kbs = 1000, 3
    readings = [tick(source, fake, slow) for slow in (True, False, False)]
    for r in readings:  # slow values, repeated on the fast ticks
        assert (r.gpus[0].pcie_tx, r.gpus[0].pcie_rx) == (1_024_000.0, 3_072.0)
    assert calls(fake, 0, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_TX_BYTES) == 1
    assert calls(fake, 0, "nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_RX_BYTES) == 1
    assert (readings[-1].gpus[1].pcie_tx, readings[-1].gpus[1].pcie_rx) == (1000.0, 3000.0)


@ALL_ERRORS
def test_field_values_call_failing(fake: FakeNvml, source: NvmlSource, error: int) -> None:
    """Without the batched read: power from nvmlDeviceGetPowerUsage, the limit from the enforced limit,
    PCIe from the throughput counters, energy from nvmlDeviceGetTotalEnergyConsumption."""
    fake.fail(0, "nvmlDeviceGetFieldValues", error)
    readings = [tick(source, fake, slow) for slow in (True, False, False)]
    s = readings[-1].gpus[0]
    assert s == expected_sample(fake, 0, pcie_tx=1_953_125 * 1024.0, pcie_rx=488_281 * 1024.0)
    assert calls(fake, 0, "nvmlDeviceGetTotalEnergyConsumption") == 3
    assert readings[-1].gpus[1] == expected_sample(fake, 1)
    assert calls(fake, 0, "nvmlDeviceGetFieldValues") == (1 if error in SKIP_FOREVER else 3)
    assert calls(fake, 0, "nvmlDeviceGetPowerUsage") == 3
    assert calls(fake, 0, "nvmlDeviceGetEnforcedPowerLimit") == 1


def test_memory_v2_with_reserved(fake: FakeNvml, source: NvmlSource) -> None:
    s = tick(source, fake).gpus[0]
    assert (s.mem_total, s.mem_used, s.mem_reserved) == (80 * GiB, 30 * GiB, 512 * MiB)
    assert s.mem_percent == pytest.approx(37.5)
    assert calls(fake, 0, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2) == 1
    assert calls(fake, 0, "nvmlDeviceGetMemoryInfo", None) == 0


@ALL_ERRORS
def test_memory_v2_failing(fake: FakeNvml, source: NvmlSource, error: int) -> None:
    fake.fail(0, "nvmlDeviceGetMemoryInfo", error, arg=pynvml.nvmlMemory_v2)
    readings = [tick(source, fake) for _ in range(3)]
    s = readings[-1].gpus[0]
    if error in SKIP_FOREVER:  # v1 instead: its `used` includes the reserved memory, which it lacks
        assert (s.mem_total, s.mem_used, s.mem_reserved) == (80 * GiB, 30 * GiB + 512 * MiB, None)
        assert calls(fake, 0, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2) == 1
        assert calls(fake, 0, "nvmlDeviceGetMemoryInfo", None) == 3
    else:  # v2 exists but failed: no v1 guess, and v2 is asked again
        assert (s.mem_total, s.mem_used, s.mem_reserved) == (None, None, None)
        assert calls(fake, 0, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2) == 3
        assert calls(fake, 0, "nvmlDeviceGetMemoryInfo", None) == 0
    assert s == expected_sample(
        fake, 0, mem_total=s.mem_total, mem_used=s.mem_used, mem_reserved=s.mem_reserved
    )
    assert readings[-1].gpus[1].mem_reserved == 300 * MiB


def test_memory_v1_on_a_driver_without_v2(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.missing_symbols.add("nvmlDeviceGetMemoryInfo_v2")  # pynvml's pointer lookup fails
    src = make_source()
    readings = [tick(src, fake) for _ in range(3)]
    g0, g1 = readings[-1].gpus
    assert (g0.mem_total, g0.mem_used, g0.mem_reserved) == (80 * GiB, 30 * GiB + 512 * MiB, None)
    assert (g1.mem_total, g1.mem_used, g1.mem_reserved) == (40 * GiB, 1 * GiB + 300 * MiB, None)
    for i in (0, 1):
        assert calls(fake, i, "nvmlDeviceGetMemoryInfo", pynvml.nvmlMemory_v2) == 1
        assert calls(fake, i, "nvmlDeviceGetMemoryInfo", None) == 3


# -- per-field error injection ----------------------------------------------------------------------------

SLOWS = [True] * (SETTINGS_EVERY + 1) + [False]  # covers two settings ticks and a fast one

FIELD_CASES = [
    ("nvmlDeviceGetUtilizationRates", ANY, ("util_gpu", "util_mem")),
    ("nvmlDeviceGetTemperature", ANY, ("temperature",)),
    ("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM, ("sm_clock",)),
    ("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM, ("mem_clock",)),
    ("nvmlDeviceGetPerformanceState", ANY, ("pstate",)),
    ("nvmlDeviceGetFanSpeed", ANY, ("fan",)),
    ("nvmlDeviceGetEncoderUtilization", ANY, ("enc_util",)),
    ("nvmlDeviceGetDecoderUtilization", ANY, ("dec_util",)),
    ("nvmlDeviceGetComputeMode", ANY, ("compute_mode",)),
    ("nvmlDeviceGetPersistenceMode", ANY, ("persistence_mode",)),
    ("nvmlDeviceGetMigMode", ANY, ("mig_mode",)),
]


@ALL_ERRORS
@pytest.mark.parametrize(
    ("name", "arg", "fields"),
    FIELD_CASES,
    ids=[f"{c[0][len('nvmlDeviceGet') :]}-{c[2][0]}" for c in FIELD_CASES],
)
def test_one_field_failing(
    monkeypatch: pytest.MonkeyPatch, name: str, arg: Any, fields: tuple[str, ...], error: int
) -> None:
    baseline_fake = FakeNvml()
    make_gpu1_different(baseline_fake)
    baseline = run(baseline_fake, monkeypatch, SLOWS)

    fake = FakeNvml()
    make_gpu1_different(fake)
    fake.fail(0, name, error, arg=arg)
    if name == "nvmlDeviceGetTemperature":  # its stand-in where it is missing must fail too for a None
        fake.fail(0, "nvmlDeviceGetTemperatureV", error, arg=arg)
    readings = run(fake, monkeypatch, SLOWS)

    for got, want in zip(readings, baseline, strict=True):
        unknown: dict[str, Any] = dict.fromkeys(fields)
        assert got.gpus[0] == dataclasses.replace(want.gpus[0], **unknown)
        assert got.gpus[1] == want.gpus[1]
        assert got.errors == ()
    normal = calls(baseline_fake, 0, name, arg)
    assert normal > 1
    if error in SKIP_FOREVER:
        assert calls(fake, 0, name, arg) == 1  # not asked again
    else:
        assert calls(fake, 0, name, arg) == normal  # asked again each time it is due
    assert calls(fake, 1, name, arg) == normal


STATIC_CASES = [
    ("nvmlDeviceGetName", ANY, ("name",)),
    ("nvmlDeviceGetUUID", ANY, ("uuid",)),
    ("nvmlDeviceGetPciInfo", ANY, ("pci_bus_id",)),
    ("nvmlDeviceGetMinorNumber", ANY, ("minor",)),
    ("nvmlDeviceGetMaxClockInfo", pynvml.NVML_CLOCK_SM, ("sm_clock_max",)),
    ("nvmlDeviceGetMaxClockInfo", pynvml.NVML_CLOCK_MEM, ("mem_clock_max",)),
]


@ALL_ERRORS
@pytest.mark.parametrize(("name", "arg", "fields"), STATIC_CASES, ids=[c[2][0] for c in STATIC_CASES])
def test_one_static_field_failing(
    fake: FakeNvml, make_source: MakeSource, name: str, arg: Any, fields: tuple[str, ...], error: int
) -> None:
    fake.fail(0, name, error, arg=arg)
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False, True)]
    for r in readings:
        assert r.gpus[0] == expected_sample(
            fake,
            0,
            **dict.fromkeys(fields),
            pcie_tx=r.gpus[0].pcie_tx,
            pcie_rx=r.gpus[0].pcie_rx,
            energy=r.gpus[0].energy,
        )
        assert getattr(r.gpus[1], fields[0]) is not None
    assert calls(fake, 0, name, arg) == 1  # static: read once, at open


# -- one GPU failing does not hide the others -------------------------------------------------------------


def assert_gpu0_normal(reading: Reading, fake: FakeNvml) -> None:
    s = reading.gpus[0]
    assert s == expected_sample(fake, 0, pcie_tx=s.pcie_tx, pcie_rx=s.pcie_rx)


def test_gpu_lost_at_open(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.fail(1, "nvmlDeviceGetHandleByIndex", E_LOST)
    src = make_source()
    first = tick(src, fake)
    assert [s.lost for s in first.gpus] == [False, True]
    assert first.gpus[1] == GpuSample(index=1, lost=True)
    assert first.errors == ("GPU 1 is lost (it needs a reset or a reboot)",)
    assert_gpu0_normal(first, fake)
    before = fake.total_calls(1)
    later = [tick(src, fake, slow) for slow in (True, False, True)]
    assert all(r.errors == () and r.gpus[1].lost for r in later)  # reported once
    assert fake.total_calls(1) == before  # nothing asked of a lost GPU
    assert_gpu0_normal(later[-1], fake)


def test_gpu_lost_while_reading_static_fields_at_open(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.fail(0, "nvmlDeviceGetUUID", E_LOST)
    src = make_source()
    r = tick(src, fake)
    assert r.gpus[0].lost and not r.gpus[1].lost
    assert r.errors == ("GPU 0 is lost (it needs a reset or a reboot)",)
    assert r.gpus[1] == expected_sample(fake, 1, pcie_tx=None, pcie_rx=None)


def test_gpu_that_cannot_be_opened(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.fail(0, "nvmlDeviceGetHandleByIndex", E_NO_PERMISSION)
    src = make_source()
    r = tick(src, fake)
    assert r.gpus[0] == GpuSample(index=0, lost=True)
    assert len(r.errors) == 1 and r.errors[0].startswith("GPU 0: cannot open it:")
    assert "Insufficient Permissions" in r.errors[0]
    assert r.gpus[1].name == "NVIDIA A100-SXM4-40GB"


LOST_CASES = {  # name, slow ticks before, slow, noticed
    "util": ("nvmlDeviceGetUtilizationRates", 1, False, True),
    "memory": ("nvmlDeviceGetMemoryInfo", 1, False, True),
    "fields": ("nvmlDeviceGetFieldValues", 1, False, True),
    "temperature-slow": ("nvmlDeviceGetTemperature", 1, True, True),
    "temperature-not-due": ("nvmlDeviceGetTemperature", 1, False, False),  # a slow field on a fast tick
    "compute-mode-settings": ("nvmlDeviceGetComputeMode", SETTINGS_EVERY, True, True),
    "compute-mode-not-due": ("nvmlDeviceGetComputeMode", 1, True, False),
    "process-list": ("nvmlDeviceGetComputeRunningProcesses", 1, False, True),
    "mps-list": ("nvmlDeviceGetMPSComputeRunningProcesses", 1, True, True),
    "process-utilization": ("nvmlDeviceGetProcessUtilization", 1, False, True),
}


@pytest.mark.parametrize("case", list(LOST_CASES))
def test_gpu_lost_while_reading(fake: FakeNvml, source: NvmlSource, case: str) -> None:
    name, before, slow, noticed = LOST_CASES[case]
    for i in (0, 1):
        fake.gpus[i].processes["C"].append(FakeProcess(100 + i, 1 * GiB))
    for _ in range(before):
        tick(source, fake)
    fake.add_util_sample(1, 101, 50, 10, timestamp=int((fake.now + 0.5) * 1e6))
    fake.fail(1, name, E_LOST)
    r = tick(source, fake, slow=slow)
    if not noticed:
        assert not r.gpus[1].lost and r.errors == ()
        return
    assert r.gpus[1].lost and not r.gpus[0].lost
    assert r.errors == ("GPU 1 is lost (it needs a reset or a reboot)",)
    # The static identity stays, so the user sees which GPU it was; the measurements go.
    assert r.gpus[1] == GpuSample(
        index=1,
        lost=True,
        name="NVIDIA A100-SXM4-40GB",
        uuid=fake.gpus[1].uuid,
        pci_bus_id="00000000:2B:00.0",
        minor=6,
        sm_clock_max=1980,
        mem_clock_max=2619,
    )
    assert [p.gpu for p in r.processes] == [0]
    assert_gpu0_normal(r, fake)
    before = fake.total_calls(1)
    later = [tick(source, fake, slow) for slow in (True, False)]
    assert fake.total_calls(1) == before
    assert all(x.errors == () and x.gpus[1].lost for x in later)


def test_gpu_lost_reported_in_a_field_value(fake: FakeNvml, source: NvmlSource) -> None:
    tick(source, fake)
    fake.gpus[0].field_returns[F_ENERGY] = E_LOST
    r = tick(source, fake, slow=False)
    assert r.gpus[0].lost and not r.gpus[1].lost
    assert r.errors == ("GPU 0 is lost (it needs a reset or a reboot)",)
    assert r.gpus[1] == expected_sample(fake, 1)


def test_non_nvml_exception_on_one_gpu_does_not_hide_the_others(fake: FakeNvml, source: NvmlSource) -> None:
    fake.fail(0, "nvmlDeviceGetUtilizationRates", RuntimeError("binding bug"), times=1)
    r = tick(source, fake)
    assert r.errors == ("GPU 0: RuntimeError: binding bug",)
    g0 = fake.gpus[0]
    assert r.gpus[0] == GpuSample(
        index=0,
        name=g0.name,
        uuid=g0.uuid,
        pci_bus_id=g0.pci_bus_id,
        minor=7,
        sm_clock_max=1980,
        mem_clock_max=2619,
    )  # not lost: it may recover
    assert r.gpus[1] == expected_sample(fake, 1, pcie_tx=None, pcie_rx=None)
    r = tick(source, fake)  # it does (no PCIe rate yet: the failed tick read no counters)
    assert r.errors == ()
    assert r.gpus[0] == expected_sample(fake, 0, pcie_tx=None, pcie_rx=None)


def test_non_nvml_exception_at_open_on_one_gpu_does_not_hide_the_others(fake: FakeNvml) -> None:
    fake.fail(1, "nvmlDeviceGetName", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))
    src = NvmlSource()
    try:
        src.open()
        r = tick(src, fake)
    finally:
        src.close()
    assert r.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert len(r.gpus) == 2 and any("GPU 1" in e for e in r.errors)


def test_unknown_pstate_is_none(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].pstate = pynvml.NVML_PSTATE_UNKNOWN
    assert tick(source, fake).gpus[0].pstate is None


# -- processes --------------------------------------------------------------------------------------------


def test_processes_merged_by_pid(fake: FakeNvml, source: NvmlSource) -> None:
    p = fake.gpus[0].processes
    p["C"] += [FakeProcess(100, 1 * GiB), FakeProcess(200, 2 * GiB), FakeProcess(400, None)]
    p["G"] += [FakeProcess(100, 1 * GiB), FakeProcess(300, None), FakeProcess(400, 5 * MiB)]
    p["M"] += [FakeProcess(200, 3 * GiB)]
    fake.gpus[1].processes["C"].append(FakeProcess(100, 7 * MiB))  # the same pid on another GPU
    r = tick(source, fake)
    assert procs_of(r, 0) == {
        100: GpuProcess(gpu=0, pid=100, kinds="CG", used_memory=1 * GiB),  # counted once
        200: GpuProcess(gpu=0, pid=200, kinds="CM", used_memory=3 * GiB),  # the larger
        300: GpuProcess(gpu=0, pid=300, kinds="G", used_memory=None),  # NVML_VALUE_NOT_AVAILABLE
        400: GpuProcess(gpu=0, pid=400, kinds="CG", used_memory=5 * MiB),  # the known one
    }
    assert procs_of(r, 1) == {100: GpuProcess(gpu=1, pid=100, kinds="C", used_memory=7 * MiB)}


def test_not_available_memory_is_none(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(4242, None))
    (proc,) = tick(source, fake).processes
    assert proc.used_memory is None
    assert pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value == NOT_AVAILABLE


def test_gpu_and_compute_instance_ids_do_not_disturb_the_layout(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"] += [
        FakeProcess(11, 5 * GiB, gpu_instance=1, compute_instance=0),
        FakeProcess(12, 6 * GiB, gpu_instance=2, compute_instance=1),
    ]
    r = tick(source, fake)
    assert {p.pid: p.used_memory for p in r.processes} == {11: 5 * GiB, 12: 6 * GiB}


def test_v1_struct_is_16_bytes() -> None:
    assert ctypes.sizeof(nvml._ProcessInfoV1) == 16
    assert [f[0] for f in nvml._ProcessInfoV1._fields_] == ["pid", "usedGpuMemory"]


@pytest.mark.parametrize("driver", [3, 2, 1], ids=["v3", "v2-only", "v1-only"])
def test_process_list_versions(fake: FakeNvml, make_source: MakeSource, driver: int) -> None:
    """The fake writes the driver's layout for the symbol found; a wrong struct in NvmlSource would show
    as a violation (element size) or as garbage pids and memory."""
    fake.old_driver(driver)
    for i, kind in enumerate("CGM"):
        fake.gpus[0].processes[kind] += [FakeProcess(1000 + i, (i + 1) * GiB), FakeProcess(2000 + i, None)]
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False, True, False)]
    for r in (readings[0], readings[2]):
        assert {(p.pid, p.kinds, p.used_memory) for p in r.processes} == {
            (1000, "C", 1 * GiB),
            (2000, "C", None),
            (1001, "G", 2 * GiB),
            (2001, "G", None),
            (1002, "M", 3 * GiB),
            (2002, "M", None),
        }
    for kind in "CGM":
        for version in (3, 2, 1):
            symbol = proc_symbol(kind, version)
            if version > driver:  # looked for once per GPU, then the working version is remembered
                assert fake.failed_lookups[symbol] == 2, symbol
            else:
                assert fake.failed_lookups[symbol] == 0, symbol
            if version != driver:
                assert fake.lib_calls[0][symbol] == 0, symbol
    assert fake.lib_calls[0][proc_symbol("C", driver)] == 2 * 4  # sizing + filling, four ticks


def test_no_process_list_symbol_at_all(fake: FakeNvml, make_source: MakeSource) -> None:
    fake.old_driver(1)
    for kind in "CGM":
        fake.missing_symbols.add(proc_symbol(kind, 1))
    fake.gpus[0].processes["C"].append(FakeProcess(5, 1 * GiB))
    src = make_source()
    readings = [tick(src, fake) for _ in range(3)]
    assert all(r.processes == () and r.errors == () for r in readings)
    assert fake.failed_lookups[proc_symbol("C", 3)] == 2  # once per GPU: then not asked again
    assert_gpu0_normal(readings[-1], fake)


def test_process_list_that_grows_beyond_the_headroom(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    fake.grow_between_calls(0, "C", add=20)  # more than the 16 a buffer for 1 * 2 + 8 holds
    r = tick(source, fake)
    pids = sorted(procs_of(r, 0))
    assert len(pids) == 21 and pids[0] == 100
    assert fake.lib_calls[0][proc_symbol("C", 3)] == 3  # sizing, too small, retry
    fake.reset_counts()
    tick(source, fake)
    assert fake.lib_calls[0][proc_symbol("C", 3)] == 2


def test_process_list_that_grows_within_the_headroom(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    fake.grow_between_calls(0, "C", add=15)  # 1 + 15: just fits a buffer for 1 * 2 + 8 (a power of two)
    r = tick(source, fake)
    assert len(procs_of(r, 0)) == 16
    assert fake.lib_calls[0][proc_symbol("C", 3)] == 2


def test_process_list_that_keeps_growing_is_given_up_for_the_tick(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    fake.gpus[0].processes["G"].append(FakeProcess(300, 1 * GiB))
    fake.grow_between_calls(0, "C", add=lambda n: 3 * n + 20, times=5)  # outruns every retry (<= 4n + 16)
    r = tick(source, fake)
    assert r.errors == ()
    assert procs_of(r, 0) == {300: GpuProcess(gpu=0, pid=300, kinds="G", used_memory=1 * GiB)}
    assert fake.lib_calls[0][proc_symbol("C", 3)] == 1 + nvml._SIZING_ATTEMPTS
    assert_gpu0_normal(r, fake)
    r = tick(source, fake)  # the growth stopped: the list is back, and was not given up for good
    assert len(procs_of(r, 0)) == len(fake.gpus[0].processes["C"]) + 1 > 400


def test_process_list_shrinking_between_the_calls(
    fake: FakeNvml, source: NvmlSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = fake.gpus[0].processes["C"]
    procs += [FakeProcess(100, 1 * GiB), FakeProcess(101, 2 * GiB)]
    real_grow = fake._grow

    def shrink(gpu: Any, kind: str) -> None:
        real_grow(gpu, kind)
        if gpu.index == 0 and kind == "C":
            del procs[1:]

    monkeypatch.setattr(fake, "_grow", shrink)
    r = tick(source, fake)
    assert procs_of(r, 0) == {100: GpuProcess(gpu=0, pid=100, kinds="C", used_memory=1 * GiB)}


def test_empty_process_lists_take_one_call_each(fake: FakeNvml, source: NvmlSource) -> None:
    r = tick(source, fake)
    assert r.processes == ()
    for kind in "CGM":
        assert fake.lib_calls[0][proc_symbol(kind, 3)] == 1
    assert calls(fake, 0, "nvmlDeviceGetProcessUtilization") == 0  # nobody to ask about


@ALL_ERRORS
def test_process_list_error(fake: FakeNvml, source: NvmlSource, error: int) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    fake.gpus[0].processes["G"].append(FakeProcess(300, 1 * GiB))
    fake.fail(0, "nvmlDeviceGetComputeRunningProcesses", error)
    readings = [tick(source, fake) for _ in range(3)]
    for r in readings:
        assert set(procs_of(r, 0)) == {300}
        assert r.errors == ()
    expected = 1 if error in SKIP_FOREVER else 3
    assert fake.calls[0]["nvmlDeviceGetComputeRunningProcesses"] == expected
    assert fake.calls[0]["nvmlDeviceGetGraphicsRunningProcesses"] == 3


# -- per-process utilization ------------------------------------------------------------------------------


def test_process_utilization_latest_valid_sample_per_running_pid(fake: FakeNvml, source: NvmlSource) -> None:
    g = fake.gpus[0]
    g.processes["C"] += [FakeProcess(100, 1 * GiB), FakeProcess(200, 1 * GiB), FakeProcess(300, 1 * GiB)]
    fake.add_util_sample(0, 100, 10, 1, timestamp=1_000)
    fake.add_util_sample(0, 100, 30, 3, timestamp=3_000)  # latest wins, whatever the order
    fake.add_util_sample(0, 100, 20, 2, timestamp=2_000)
    fake.add_util_sample(0, 200, 40, 4, timestamp=1_500)
    fake.add_util_sample(0, 200, 250, 5, timestamp=4_000)  # garbage above 100 %: dropped
    fake.add_util_sample(0, 300, 60, 101, timestamp=2_500)  # memory above 100 %: dropped
    fake.add_util_sample(0, 999, 70, 7, timestamp=9_000)  # not running any more: dropped
    r = tick(source, fake)
    got = {p.pid: (p.sm_util, p.mem_util) for p in r.processes}
    assert got == {100: (30, 3), 200: (40, 4), 300: (None, None)}
    assert fake.proc_util_args[0] == [0]


def test_process_utilization_passes_the_last_seen_timestamp_back(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    fake.add_util_sample(0, 100, 10, 1, timestamp=1_000)
    fake.add_util_sample(0, 999, 70, 7, timestamp=9_000)  # a dropped sample still counts as seen
    tick(source, fake)
    fake.add_util_sample(0, 100, 55, 5, timestamp=12_000)
    r = tick(source, fake, slow=False)
    assert [(p.sm_util, p.mem_util) for p in r.processes] == [(55, 5)]
    r = tick(source, fake, slow=False)  # no new sample: NVML says NOT_FOUND
    assert [(p.sm_util, p.mem_util) for p in r.processes] == [(None, None)]
    assert r.errors == ()
    assert fake.proc_util_args[0] == [0, 9_000, 12_000]
    assert fake.proc_util_args[1] == []  # GPU 1 has no processes: not asked


def test_process_utilization_not_supported_is_not_asked_again(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    fake.fail(0, "nvmlDeviceGetProcessUtilization", E_NOT_SUPPORTED)
    readings = [tick(source, fake) for _ in range(3)]
    assert all(r.processes == (GpuProcess(gpu=0, pid=100, kinds="C", used_memory=1 * GiB),) for r in readings)
    assert calls(fake, 0, "nvmlDeviceGetProcessUtilization") == 1


# -- cadence ----------------------------------------------------------------------------------------------

SLOW_FUNCTIONS = (
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)
SETTINGS_FUNCTIONS = ("nvmlDeviceGetComputeMode", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetMigMode")
FAST_FUNCTIONS = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
)


def test_fast_reads_repeat_slow_values_without_asking(fake: FakeNvml, source: NvmlSource) -> None:
    g = fake.gpus[0]
    tick(source, fake, slow=True)
    g.temperature, g.sm_clock, g.pstate, g.fan, g.enc = 85, 900, 2, 99, 50
    g.util_gpu, g.compute_mode = 100, 2
    fake.reset_counts()
    for _ in range(4):
        s = tick(source, fake, slow=False).gpus[0]
        assert (s.temperature, s.sm_clock, s.pstate, s.fan, s.enc_util) == (61, 1755, 0, 30, 3)
        assert s.util_gpu == 100  # fast fields are fresh
        assert s.compute_mode == "Default"
    for name in SLOW_FUNCTIONS + SETTINGS_FUNCTIONS:
        assert fake.calls[0][name] == 0, name
    for name in FAST_FUNCTIONS:
        assert fake.calls[0][name] == 4, name
    s = tick(source, fake, slow=True).gpus[0]
    assert (s.temperature, s.sm_clock, s.pstate, s.fan, s.enc_util) == (85, 900, 2, 99, 50)
    assert s.compute_mode == "Default"  # a setting: not due yet


def test_settings_every_few_slow_ticks(fake: FakeNvml, source: NvmlSource) -> None:
    tick(source, fake, slow=True)
    fake.gpus[0].compute_mode = 2
    seen = [tick(source, fake, slow=True).gpus[0].compute_mode for _ in range(SETTINGS_EVERY)]
    assert seen == ["Default"] * (SETTINGS_EVERY - 1) + ["Prohibited"]
    assert fake.calls[0]["nvmlDeviceGetComputeMode"] == 2


def test_first_read_fast_still_reads_everything(fake: FakeNvml, source: NvmlSource) -> None:
    s = tick(source, fake, slow=False).gpus[0]
    assert s == expected_sample(fake, 0, pcie_tx=None, pcie_rx=None)
    s = tick(source, fake, slow=True).gpus[0]
    assert fake.calls[0]["nvmlDeviceGetComputeMode"] == 2  # the first slow tick reads the settings too


def test_mps_list_only_on_slow_ticks_until_mps_clients_are_seen(fake: FakeNvml, source: NvmlSource) -> None:
    mps = "nvmlDeviceGetMPSComputeRunningProcesses"
    for slow in (True, False, False, False):
        tick(source, fake, slow)
    assert fake.calls[0][mps] == 1
    fake.gpus[0].processes["M"].append(FakeProcess(777, 1 * GiB))
    r = tick(source, fake, slow=False)
    assert r.processes == ()  # not asked on a fast tick: not seen yet
    r = tick(source, fake, slow=True)
    assert procs_of(r, 0)[777].kinds == "M"
    fake.reset_counts()
    for _ in range(3):
        r = tick(source, fake, slow=False)
        assert procs_of(r, 0)[777].kinds == "M"
    assert fake.calls[0][mps] == 3  # every tick while MPS clients exist
    assert fake.calls[1][mps] == 0  # the other GPU has none
    fake.gpus[0].processes["M"].clear()
    tick(source, fake, slow=False)
    fake.reset_counts()
    for _ in range(3):
        tick(source, fake, slow=False)
    assert fake.calls[0][mps] == 0  # gone: back to slow ticks only


# -- cost -------------------------------------------------------------------------------------------------


def test_calls_per_gpu_per_tick(fake: FakeNvml, source: NvmlSource) -> None:
    """GPU 0 runs one compute process with fresh utilization samples; GPU 1 is idle. The slow cadence is
    the Sampler's: 1 s ticks, slow once slow_interval (5 s) has passed, i.e. every 5th tick."""
    fake.gpus[0].processes["C"].append(FakeProcess(100, 10 * GiB))
    fake.reset_counts()
    ticks, last_slow = 60, None
    for _ in range(ticks):
        fake.add_util_sample(0, 100, 90, 40)
        now = fake.now
        slow = last_slow is None or now - last_slow >= SLOW_INTERVAL
        if slow:
            last_slow = now
        r = source.read(slow)
        assert r.errors == () and len(r.processes) == 1 and r.processes[0].sm_util == 90
        fake.advance(1.0)
    busy, idle = fake.total_calls(0) / ticks, fake.total_calls(1) / ticks
    busy_lib, idle_lib = fake.total_lib_calls(0) / ticks, fake.total_lib_calls(1) / ticks
    print(
        f"\nNVML calls per GPU per tick over {ticks} ticks (slow every 5th): "
        f"busy GPU {busy:.2f} queries ({busy_lib:.2f} C calls into libnvidia-ml), "
        f"idle GPU {idle:.2f} queries ({idle_lib:.2f} C calls)"
    )
    assert busy <= 8 and idle <= 8
    assert busy_lib <= 10 and idle_lib <= 8  # the process list and per-process utilization take two each


# -- the fake covers what NvmlSource uses -----------------------------------------------------------------


def test_fake_replaces_every_binding_nvml_py_uses() -> None:
    text = Path(nvml.__file__).read_text()
    used = {
        name
        for name in re.findall(r"pynvml\.(_?nvml\w+)", text)
        if callable(getattr(pynvml, name)) and not isinstance(getattr(pynvml, name), type)
    }
    assert used
    assert used <= set(FakeNvml.BINDINGS), used - set(FakeNvml.BINDINGS)


def test_reading_makes_no_ctypes_types_that_only_a_full_collection_frees(
    fake: FakeNvml, source: NvmlSource
) -> None:
    """ctypes keeps array types weakly and each is a reference cycle: a buffer type made per call (the
    binding's field values, a process list's buffer) piles up as garbage between Python's rare full
    collections, about a mebibyte within minutes."""
    fake.gpus[0].processes["C"].append(FakeProcess(100, 1 * GiB))
    tick(source, fake)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for n in range(10):
            fake.gpus[0].processes["C"].append(FakeProcess(200 + n, 1 * GiB))  # a list of a new length
            tick(source, fake)
        gc.collect()
        made = [o for o in gc.garbage if isinstance(o, type) and issubclass(o, ctypes.Array)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert made == []
