"""A fake NVML for tests: replaces the nvidia-ml-py (``pynvml``) functions that NvmlSource calls.

The fakes return the binding's real ctypes structures and raise its real ``NVMLError_*`` classes, so the
code under test sees exactly the types it sees on a machine with a driver. The process lists are the one
place NvmlSource calls C functions itself (``pynvml._nvmlGetFunctionPointer`` and the two-call buffer
sizing): the fake function pointers emulate the C calling convention, write into the caller's buffer with
the layouts nvml.h defines (declared here independently of pynvml and of nvml.py, so a struct mismatch
shows) and record a violation when the buffer is too small or of the wrong element size.

Usage::

    fake = FakeNvml(n_gpus=2).install(monkeypatch)
    fake.gpus[0].temperature = 80
    fake.fail(1, "nvmlDeviceGetFanSpeed", pynvml.NVML_ERROR_NO_PERMISSION)
    fake.gpus[0].processes["C"].append(FakeProcess(pid=1234, memory=2 << 30))
    ...
    assert fake.violations == []

Counting: ``fake.calls[i]`` counts, per GPU index, every call NvmlSource made of a pynvml function for
that GPU (one per call, whether it failed or not) and every process-list query (one per two-call
sequence, under the symbol's base name); ``fake.lib_calls[i]`` counts the calls that actually cross into
libnvidia-ml (each C invocation of a process-list sizing sequence, both halves of the binding's own
two-call ``nvmlDeviceGetProcessUtilization``, no call for a symbol the driver lacks). ``fake.arg_calls[i]``
counts ``(name, first argument)`` pairs, e.g. ``("nvmlDeviceGetClockInfo", NVML_CLOCK_SM)``.

A value of ``None`` in a FakeGpu attribute behind a query means the GPU does not support it: the call
raises NVMLError_NotSupported (a GPU without a fan, ...).

MIG: ``FakeGpu.mig_devices`` lists the MIG devices (compute instances) of a GPU whose ``mig`` mode is on,
each at its ``slot`` for nvmlDeviceGetMigDeviceHandleByIndex (an empty slot answers NotFound, as the
driver does for the index of a destroyed instance). A MIG handle (``FakeMigHandle``) is accepted by the
calls the driver accepts it for (name, UUID, memory, utilization, attributes, GPU/compute instance id);
any other call given one records a violation. Calls on a MIG handle count under its GPU's index; a
handle whose device was removed from ``mig_devices`` answers INVALID_ARGUMENT.

NVLink: ``nvlink_tx_kib``/``nvlink_rx_kib`` hold one cumulative KiB counter per link (None: no NVLink).
The field values answer scopeId = link for one link and scopeId = UINT_MAX for the sum of all, as nvml.h
describes; any other scope gets NVML_ERROR_INVALID_ARGUMENT in that field's nvmlReturn.

Health: ECC counts (volatile/aggregate, corrected/uncorrected), retired pages (``retired_pages``: None, the
default of an H100, means the GPU has row remapping instead and answers NotSupported), row remapping
(``remapped_rows``: (correctable, uncorrectable, pending, failure); None before Ampere) and the PCIe link
answer both as batched fields and as their own calls. Device handles are real ``c_nvmlDevice_t`` pointers
(to an address nothing dereferences), so an event names its GPU the way the driver's do.

GPM: ``FakeGpu.gpm`` holds the metric values (by NVML metric id, in NVML's units: percent, MiB/s) that
``nvmlGpmMetricsGet`` reports between any two samples of that GPU (None, the default: the GPU does not
support GPM, as before Hopper); ``gpm_returns`` gives one metric its own nvmlReturn; ``gpm_mig`` the values
per GPU instance id for ``nvmlGpmMigSampleGet``. Samples are real ``c_nvmlGpmSample_t`` pointers to made-up
addresses; the fake records a violation for a sample used after it was freed, freed twice, taken on one
GPU and measured with another's, or measured before it was taken. ``live_gpm_samples()`` counts those
allocated and not freed.

Xid events: ``nvmlEventSetCreate``/``nvmlDeviceRegisterEvents``/``nvmlEventSetWait_v2``/``nvmlEventSetFree``
on a fake event set; ``send_xid(gpu, xid)`` delivers a real ``c_nvmlEventData_t`` to every set that GPU is
registered in. A GPU with ``xid_events = False`` answers NotSupported to the registration. A wait blocks
until an event or its timeout, but never longer than ``event_wait_cap`` seconds (tests stay fast); it
raises NVMLError_Timeout as the binding does. Freeing a set while another thread waits on it, waiting on
a freed set, or freeing it twice is recorded as a violation.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time as _time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

import gputui.collect.sources.nvml as nvml_module


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()  # in fail(): any argument

NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE for unsigned long long

# NVML's return codes, typed once (pynvml has no annotations)
SUCCESS: int = pynvml.NVML_SUCCESS
INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
FEATURE_ENABLED: int = pynvml.NVML_FEATURE_ENABLED

_T = TypeVar("_T")


# -- the driver's process structures, as nvml.h declares them --------------------------------------------


class DriverProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t (the un-suffixed symbols): 16 bytes."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class DriverProcessInfoV2(ctypes.Structure):
    """nvmlProcessInfo_v2_t, which is also nvmlProcessInfo_t of the _v3 symbols: 24 bytes."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


DRIVER_PROCESS_STRUCTS: dict[int, type[ctypes.Structure]] = {
    1: DriverProcessInfoV1,
    2: DriverProcessInfoV2,
    3: DriverProcessInfoV2,
}
PROC_SYMBOLS = {
    "C": "nvmlDeviceGetComputeRunningProcesses",
    "G": "nvmlDeviceGetGraphicsRunningProcesses",
    "M": "nvmlDeviceGetMPSComputeRunningProcesses",
}
_VERSION_SUFFIX = {3: "_v3", 2: "_v2", 1: ""}


@functools.cache
def _array_type(item: type[ctypes.Structure], length: int) -> Any:
    """`item * length`, kept: the driver writes C memory and makes no Python objects, so neither should
    the fake (ctypes keeps array types weakly, and each is a cycle only a full collection frees)."""
    return item * length


def proc_symbol(kind: str, version: int) -> str:
    return PROC_SYMBOLS[kind] + _VERSION_SUFFIX[version]


# -- per-GPU state --------------------------------------------------------------------------------------


@dataclass
class FakeProcess:
    pid: int
    memory: int | None = None  # bytes; None is written as NVML_VALUE_NOT_AVAILABLE
    gpu_instance: int = 0xFFFFFFFF
    compute_instance: int = 0xFFFFFFFF


@dataclass
class FakeMigDevice:
    """One MIG device: a compute instance within a GPU instance, as the driver names and measures it."""

    slot: int  # its index for nvmlDeviceGetMigDeviceHandleByIndex
    gpu_instance: int
    compute_instance: int
    profile: str = "3g.40gb"  # the name's last word: "<GPU name> MIG 3g.40gb"
    uuid: str | None = None
    mem_total: int = 40 * 2**30
    mem_used: int = 0
    mem_reserved: int = 0
    util: int | None = None  # per-instance utilization: no driver reports it (NotSupported)
    gi_slices: int = 3
    ci_slices: int = 3
    memory_mb: int = 40192
    name: str | None = None  # None: "<GPU name> MIG <profile>"

    def __post_init__(self) -> None:
        if self.uuid is None:
            self.uuid = (
                f"MIG-{self.gpu_instance:08x}-aaaa-bbbb-cccc-{self.slot:04x}{self.compute_instance:08x}"
            )


@dataclass
class UtilSample:
    pid: int
    timestamp: int  # microseconds, like NVML's
    sm: int
    mem: int
    enc: int = 0
    dec: int = 0


# Value types the fake reports for the batched fields, as current drivers do.
DEFAULT_FIELD_TYPES = {
    pynvml.NVML_FI_DEV_POWER_INSTANT: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
    pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_RETIRED_SBE: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_RETIRED_DBE: pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    pynvml.NVML_FI_DEV_RETIRED_PENDING: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
    pynvml.NVML_FI_DEV_REMAPPED_COR: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
    pynvml.NVML_FI_DEV_REMAPPED_UNC: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
}
ALL_LINKS = 0xFFFFFFFF  # the scopeId that asks for the sum over every NVLink link
_UNION_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


@dataclass
class FakeGpu:
    index: int
    name: str | None = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None
    pci_bus_id: str | None = None
    minor: int | None = None
    sm_clock_max: int | None = 1980  # MHz
    mem_clock_max: int | None = 2619
    util_gpu: int = 57
    util_mem: int = 23
    mem_total: int = 80 * 2**30
    mem_reserved: int = 512 * 2**20
    mem_used: int = 30 * 2**30  # v2 meaning: without the reserved part
    power_mw: int | None = 350_250
    power_limit_mw: int | None = 700_000
    energy_mj: int = 123_456_789  # counter: advance() adds power_mw * seconds
    pcie_tx_bytes: int = 10**12  # counters: advance() adds rate * seconds
    pcie_rx_bytes: int = 3 * 10**11
    pcie_tx_rate: int = 2_000_000_000  # bytes/s
    pcie_rx_rate: int = 500_000_000
    pcie_tx_kbs: int | None = 1_953_125  # nvmlDeviceGetPcieThroughput, KB/s
    pcie_rx_kbs: int | None = 488_281
    temperature: int | None = 61
    sm_clock: int | None = 1755
    mem_clock: int | None = 2619
    pstate: int | None = 0
    clock_reasons: int | None = 0x001 | 0x004  # gpu_idle, sw_power_cap
    fan: int | None = 30
    enc: int | None = 3
    dec: int | None = 5
    compute_mode: int | None = 0
    persistence: int | None = 1
    mig: tuple[int, int] | None = (0, 0)
    max_mig_devices: int | None = 7  # nvmlDeviceGetMaxMigDeviceCount; None: MIG not supported
    mig_devices: list[FakeMigDevice] = field(default_factory=list)
    capability: tuple[int, int] | None = (9, 0)  # CUDA compute capability (H100)
    ecc_mode: tuple[int, int] | None = None  # (current, pending); None: ECC not supported
    ecc_uncorrected: int = 0  # volatile double-bit errors, answered while ECC is on
    ecc_corrected: int = 0  # volatile single-bit errors
    ecc_corrected_aggregate: int = 0  # over the GPU's life
    ecc_uncorrected_aggregate: int = 0
    # cause (NVML_PAGE_RETIREMENT_CAUSE_*) -> page addresses; None: no page retirement (Ampere and later)
    retired_pages: dict[int, list[int]] | None = None
    retired_pending: int = 0
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # cor, unc, pending, failure
    # The PCIe link; None (the default, so the tests written before health see no health): NotSupported.
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    xid_events: bool = True  # False: nvmlDeviceRegisterEvents answers NotSupported
    nvlink_tx_kib: list[int] | None = None  # per link, cumulative KiB; None: no NVLink
    nvlink_rx_kib: list[int] | None = None
    nvlink_tx_rate: int = 0  # bytes/s per link: advance() adds them to the counters
    nvlink_rx_rate: int = 0
    processes: dict[str, list[FakeProcess]] = field(default_factory=lambda: {"C": [], "G": [], "M": []})
    util_samples: list[UtilSample] = field(default_factory=list)
    field_types: dict[int, int] = field(default_factory=lambda: dict(DEFAULT_FIELD_TYPES))
    field_returns: dict[int, int] = field(default_factory=dict)  # fieldId -> nvmlReturn for that field
    power_limit_constraints_mw: tuple[int, int] | None = None  # (min, max); None: NotSupported
    gpm: dict[int, float] | None = None  # GPM metric id -> value; None: no GPM (before Hopper)
    gpm_returns: dict[int, int] = field(default_factory=dict)  # metric id -> its own nvmlReturn
    gpm_mig: dict[int, dict[int, float]] = field(default_factory=dict)  # GPU instance id -> values

    def __post_init__(self) -> None:
        i = self.index
        if self.uuid is None:
            self.uuid = f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}"
        if self.pci_bus_id is None:
            self.pci_bus_id = f"00000000:{0x1B + 0x10 * i:02X}:00.0"
        if self.minor is None:
            self.minor = 7 - i  # deliberately not the NVML index


@dataclass
class _Rule:
    gpu: int | None  # None: every GPU and the system calls
    name: str
    error: Any  # an NVML_ERROR_* code, or an exception (instance or class) to raise
    arg: Any = ANY
    times: int | None = None  # None: every call


@dataclass
class _Growth:
    gpu: int
    kind: str
    add: int | Callable[[int], int]  # how many start: a number, or a function of the list's length
    times: int | None


_HANDLE_BASE = 0x7F00_0000_1000  # FakeHandle(i) points at _HANDLE_BASE + i * 0x100: never dereferenced


class FakeHandle(pynvml.c_nvmlDevice_t):  # type: ignore[misc]  # pynvml is untyped (Any)
    """A device handle: a real c_nvmlDevice_t, as the binding returns, with a made-up address that is
    the same for every handle of one GPU (so an event's device pointer names its GPU)."""

    _type_ = pynvml.struct_c_nvmlDevice_t

    def __init__(self, index: int) -> None:
        super().__init__()
        ctypes.cast(ctypes.pointer(self), ctypes.POINTER(ctypes.c_void_p))[0] = _HANDLE_BASE + index * 0x100
        self.index = index

    def __repr__(self) -> str:
        return f"FakeHandle({self.index})"


class FakeMigHandle:
    """A MIG device's handle: distinct from its GPU's, as in NVML."""

    def __init__(self, index: int, slot: int) -> None:
        self.index, self.slot = index, slot

    def __repr__(self) -> str:
        return f"FakeMigHandle({self.index}, {self.slot})"


_GPM_BASE = 0x7E00_0000_0000  # where the fake's GPM samples point: never dereferenced


@dataclass
class FakeGpmSample:
    address: int
    freed: bool = False
    gpu: int | None = None  # the GPU it was last taken on
    instance: int | None = None  # its GPU instance (nvmlGpmMigSampleGet), else None
    time: float | None = None


class _FakeTime:
    """Stands in for the ``time`` module inside gputui.collect.sources.nvml: monotonic() is the fake clock."""

    def __init__(self, fake: FakeNvml) -> None:
        self._fake = fake

    def monotonic(self) -> float:
        return self._fake.now

    def sleep(self, seconds: float) -> None:  # the source waits (a one-shot GPM interval): time passes
        self._fake.advance(seconds)
        self._fake.slept.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)


class FakeEventSet:
    """An event set: what nvmlEventSetCreate hands out (opaque to the caller)."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # GPU index -> event type mask
        self.pending: list[Any] = []  # c_nvmlEventData_t not yet waited for
        self.cond = threading.Condition()
        self.waiting = 0
        self.freed = False
        self.waits = 0


def _nvml_error(error: int | type[BaseException] | BaseException) -> BaseException:
    if isinstance(error, int):
        nvml_error: BaseException = pynvml.NVMLError(error)
        return nvml_error
    if isinstance(error, type):
        return error()
    return error


class FakeNvml:
    # Every pynvml attribute install() replaces.
    BINDINGS = (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetNVMLVersion",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetPerformanceState",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetFanSpeed",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
        "nvmlDeviceGetPcieThroughput",
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetNvLinkState",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetAttributes",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "nvmlDeviceGetIndex",
        "nvmlGpmQueryDeviceSupport",
        "nvmlGpmSampleAlloc",
        "nvmlGpmSampleFree",
        "nvmlGpmSampleGet",
        "nvmlGpmMigSampleGet",
        "nvmlGpmMetricsGet",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlEventSetCreate",
        "nvmlDeviceRegisterEvents",
        "nvmlEventSetWait_v2",
        "nvmlEventSetFree",
        "_nvmlGetFunctionPointer",
    )

    def __init__(self, n_gpus: int = 2, gpus: list[FakeGpu] | None = None) -> None:
        self.gpus: list[FakeGpu] = gpus if gpus is not None else [FakeGpu(i) for i in range(n_gpus)]
        self.driver_version = "550.54.15"
        self.nvml_version = "12.550.54.15"
        self.cuda_version = 12040
        self.init_error: Any = None  # raised by nvmlInit (a code or an exception)
        self.bytes_strings = False  # old bindings returned bytes for names and versions
        self.missing_symbols: set[str] = set()  # C symbols this "driver" lacks
        self.initialized = 0  # nvmlInit reference count
        self.now = 1000.0  # the fake monotonic clock, seconds
        self.calls: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.lib_calls: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.arg_calls: defaultdict[int, Counter[tuple[str, Any]]] = defaultdict(Counter)
        self.system_calls: Counter[str] = Counter()
        self.lookups: Counter[str] = Counter()  # _nvmlGetFunctionPointer names asked for
        self.failed_lookups: Counter[str] = Counter()
        self.proc_util_args: defaultdict[int, list[int]] = defaultdict(list)  # lastSeenTimeStamp passed
        self.violations: list[str] = []  # misuse of the API seen by the fake
        self._rules: list[_Rule] = []
        self._growth: list[_Growth] = []
        self._next_pid = 40_000
        self.event_sets: list[FakeEventSet] = []
        self.event_wait_cap = 0.05  # seconds: the longest a fake wait blocks, whatever its timeout
        self._lock = threading.Lock()  # the event thread counts calls too
        self.gpm_samples: dict[int, FakeGpmSample] = {}
        self.slept: list[float] = []  # what the source slept through the fake time module

    # -- set-up ---------------------------------------------------------------------------------------

    def install(self, monkeypatch: Any) -> FakeNvml:
        for name in self.BINDINGS:
            # raising=False: an older binding may lack a newer function (nvmlDeviceGetTemperatureV)
            monkeypatch.setattr(pynvml, name, getattr(self, name), raising=False)
        monkeypatch.setattr(nvml_module, "time", _FakeTime(self))
        return self

    def advance(self, seconds: float) -> None:
        """Time passes: the clock, and with it the energy and PCIe byte counters of every GPU."""
        self.now += seconds
        for g in self.gpus:
            g.energy_mj += int((g.power_mw or 0) * seconds)
            g.pcie_tx_bytes += int(g.pcie_tx_rate * seconds)
            g.pcie_rx_bytes += int(g.pcie_rx_rate * seconds)
            for links, rate in ((g.nvlink_tx_kib, g.nvlink_tx_rate), (g.nvlink_rx_kib, g.nvlink_rx_rate)):
                if links is not None:
                    links[:] = [kib + int(rate * seconds) // 1024 for kib in links]

    def fail(
        self, gpu: int | None, name: str, error: Any, *, arg: Any = ANY, times: int | None = None
    ) -> None:
        """Make `name` (a pynvml function, or a process-list symbol with or without its version suffix)
        fail on GPU `gpu` (None: everywhere) with `error`: an NVML_ERROR_* code or an exception."""
        self._rules.append(_Rule(gpu, name, error, arg, times))

    def clear_failures(self) -> None:
        self._rules.clear()

    def old_driver(self, proc_version: int) -> None:
        """A driver whose newest process-list symbols are of `proc_version` (1: no _v2, no _v3)."""
        for kind in PROC_SYMBOLS:
            for version in range(proc_version + 1, 4):
                self.missing_symbols.add(proc_symbol(kind, version))

    def grow_between_calls(
        self, gpu: int, kind: str, add: int | Callable[[int], int], times: int | None = 1
    ) -> None:
        """After each of the next `times` calls of a process list (None: every call), `add` new processes
        start (`add` may be a function of the list's length): a list that grows between the sizing call
        and the filling call."""
        self._growth.append(_Growth(gpu, kind, add, times))

    def send_xid(self, gpu: int, xid: int) -> int:
        """The driver reports Xid `xid` on GPU `gpu`: every event set it is registered in (for Xid
        events) gets it. Returns how many sets did."""
        sent = 0
        for es in self.event_sets:
            if es.freed or not es.registered.get(gpu, 0) & pynvml.nvmlEventTypeXidCriticalError:
                continue
            data = pynvml.c_nvmlEventData_t()
            data.device = FakeHandle(gpu)
            data.eventType = pynvml.nvmlEventTypeXidCriticalError
            data.eventData = xid
            data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
            with es.cond:
                es.pending.append(data)
                es.cond.notify_all()
            sent += 1
        return sent

    def new_pid(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def add_util_sample(self, gpu: int, pid: int, sm: int, mem: int, timestamp: int | None = None) -> None:
        ts = int(self.now * 1_000_000) if timestamp is None else timestamp
        self.gpus[gpu].util_samples.append(UtilSample(pid, ts, sm, mem))

    def reset_counts(self) -> None:
        for counter in (self.calls, self.lib_calls, self.arg_calls):
            counter.clear()
        self.system_calls.clear()
        self.lookups.clear()
        self.failed_lookups.clear()

    def total_calls(self, gpu: int) -> int:
        return sum(self.calls[gpu].values())

    def total_lib_calls(self, gpu: int) -> int:
        return sum(self.lib_calls[gpu].values())

    # -- machinery ------------------------------------------------------------------------------------

    def _violation(self, text: str) -> None:
        self.violations.append(text)

    def _check_init(self) -> None:
        if self.initialized <= 0:
            self._violation("NVML called while not initialized")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu_of(self, handle: Any) -> FakeGpu:
        if isinstance(handle, pynvml.c_nvmlDevice_t) and not isinstance(handle, FakeHandle):
            # a pointer read back from the driver (an event's device): the same address as the handle
            address = ctypes.cast(handle, ctypes.c_void_p).value or 0
            index, rest = divmod(address - _HANDLE_BASE, 0x100)
            if rest == 0 and 0 <= index < len(self.gpus):
                return self.gpus[index]
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            self._violation(f"not a device handle: {handle!r}")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle.index]

    def _mig_enter(self, name: str, handle: FakeMigHandle, symbol: str | None = None) -> FakeMigDevice:
        """Book-keeping of a call on a MIG handle: counted under its GPU; a destroyed device is invalid."""
        if not 0 <= handle.index < len(self.gpus):
            self._violation(f"not a MIG device handle: {handle!r}")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        self.calls[gpu.index][name] += 1
        self.arg_calls[gpu.index][(name, "mig")] += 1
        self._check_init()
        if (symbol or name) in self.missing_symbols:
            self.failed_lookups[symbol or name] += 1
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        self.lib_calls[gpu.index][name] += 1
        error = self._injected(gpu.index, (name,), "mig")
        if error is not None:
            raise _nvml_error(error)
        for dev in gpu.mig_devices:
            if dev.slot == handle.slot:
                return dev
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _injected(self, gpu: int | None, names: tuple[str, ...], arg: Any) -> Any:
        for rule in self._rules:
            if rule.gpu is not None and rule.gpu != gpu:
                continue
            if rule.name not in names or (rule.arg is not ANY and rule.arg != arg):
                continue
            if rule.times is not None:
                if rule.times <= 0:
                    continue
                rule.times -= 1
            return rule.error
        return None

    def _system(self, name: str, symbol: str | None = None) -> None:
        with self._lock:
            self.system_calls[name] += 1
        self._check_init()
        if (symbol or name) in self.missing_symbols:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        error = self._injected(None, (name,), ANY)
        if error is not None:
            raise _nvml_error(error)

    def _enter(self, name: str, handle: Any, arg: Any = None, symbol: str | None = None) -> FakeGpu:
        """Book-keeping shared by the device calls: count, check, inject."""
        gpu = self._gpu_of(handle)
        with self._lock:
            self.calls[gpu.index][name] += 1
            self.arg_calls[gpu.index][(name, arg)] += 1
        self._check_init()
        if (symbol or name) in self.missing_symbols:  # pynvml's pointer lookup fails: no C call
            self.failed_lookups[symbol or name] += 1
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        self.lib_calls[gpu.index][name] += 1
        error = self._injected(gpu.index, (name,), arg)
        if error is not None:
            raise _nvml_error(error)
        return gpu

    @staticmethod
    def _supported(value: _T | None) -> _T:
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _str(self, value: str) -> Any:
        return value.encode() if self.bytes_strings else value

    # -- system -----------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self._lock:
            self.system_calls["nvmlInit"] += 1
            if self.init_error is not None:
                raise _nvml_error(self.init_error)
            self.initialized += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self.system_calls["nvmlShutdown"] += 1
            if self.initialized <= 0:
                self._violation("nvmlShutdown without nvmlInit")
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> Any:
        self._system("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlSystemGetNVMLVersion(self) -> Any:
        self._system("nvmlSystemGetNVMLVersion")
        return self._str(self.nvml_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._system("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._system("nvmlDeviceGetCount", "nvmlDeviceGetCount_v2")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        name = "nvmlDeviceGetHandleByIndex"
        self.calls[index][name] += 1
        self.lib_calls[index][name] += 1
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        error = self._injected(index, (name,), index)
        if error is not None:
            raise _nvml_error(error)
        return FakeHandle(index)

    # -- static ---------------------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: Any) -> Any:
        if isinstance(handle, FakeMigHandle):
            dev = self._mig_enter("nvmlDeviceGetName", handle)
            parent = self.gpus[handle.index].name or "NVIDIA GPU"
            return self._str(dev.name if dev.name is not None else f"{parent} MIG {dev.profile}")
        gpu = self._enter("nvmlDeviceGetName", handle)
        return self._str(self._supported(gpu.name))

    def nvmlDeviceGetUUID(self, handle: Any) -> Any:
        if isinstance(handle, FakeMigHandle):
            return self._str(self._supported(self._mig_enter("nvmlDeviceGetUUID", handle).uuid))
        gpu = self._enter("nvmlDeviceGetUUID", handle)
        return self._str(self._supported(gpu.uuid))

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle, symbol="nvmlDeviceGetPciInfo_v3")
        bus_id = self._supported(gpu.pci_bus_id)
        info = pynvml.nvmlPciInfo_t()
        info.busId = bus_id
        info.busIdLegacy = bus_id[4:]
        info.domain, info.bus, info.device = 0, int(bus_id.split(":")[1], 16), 0
        info.pciDeviceId = 0x233010DE
        return info

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetMinorNumber", handle)
        return self._supported(gpu.minor)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._enter("nvmlDeviceGetMaxClockInfo", handle, type)
        if type == pynvml.NVML_CLOCK_SM:
            return self._supported(gpu.sm_clock_max)
        if type == pynvml.NVML_CLOCK_MEM:
            return self._supported(gpu.mem_clock_max)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    # -- every tick -------------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        if isinstance(handle, FakeMigHandle):
            dev = self._mig_enter("nvmlDeviceGetUtilizationRates", handle)
            return pynvml.c_nvmlUtilization_t(gpu=self._supported(dev.util), memory=0)
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        symbol = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        gpu: Any
        if isinstance(handle, FakeMigHandle):  # a MIG device answers for its own slice of memory
            gpu = self._mig_enter("nvmlDeviceGetMemoryInfo", handle, symbol=symbol)
        else:
            gpu = self._enter("nvmlDeviceGetMemoryInfo", handle, version, symbol=symbol)
        if not version:
            used = gpu.mem_used + gpu.mem_reserved  # v1 counts the reserved memory as used
            return pynvml.c_nvmlMemory_t(total=gpu.mem_total, free=gpu.mem_total - used, used=used)
        if version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        m = pynvml.c_nvmlMemory_v2_t()
        m.version = version
        m.total, m.reserved, m.used = gpu.mem_total, gpu.mem_reserved, gpu.mem_used
        m.free = gpu.mem_total - gpu.mem_reserved - gpu.mem_used
        return m

    @staticmethod
    def _field_raw(gpu: FakeGpu, field_id: int, scope: int) -> int | None:
        """The raw value, None for not supported; -1 for a scope that names no link."""
        links = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: gpu.nvlink_tx_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: gpu.nvlink_rx_kib,
        }
        if field_id in links:
            counters = links[field_id]
            if counters is None:
                return None
            if scope == ALL_LINKS:
                return sum(counters)
            return counters[scope] if scope < len(counters) else -1
        ecc_on = gpu.ecc_mode is not None and bool(gpu.ecc_mode[0])
        ecc = {
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: gpu.ecc_uncorrected,
            pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: gpu.ecc_corrected,
            pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: gpu.ecc_corrected_aggregate,
            pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: gpu.ecc_uncorrected_aggregate,
        }
        if field_id in ecc:
            return ecc[field_id] if ecc_on else None
        pages = gpu.retired_pages
        retired = {
            pynvml.NVML_FI_DEV_RETIRED_SBE: lambda p: len(
                p.get(pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, [])
            ),
            pynvml.NVML_FI_DEV_RETIRED_DBE: lambda p: len(
                p.get(pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, [])
            ),
            pynvml.NVML_FI_DEV_RETIRED_PENDING: lambda p: gpu.retired_pending,
        }
        if field_id in retired:
            return retired[field_id](pages) if pages is not None and ecc_on else None
        remap = (
            pynvml.NVML_FI_DEV_REMAPPED_COR,
            pynvml.NVML_FI_DEV_REMAPPED_UNC,
            pynvml.NVML_FI_DEV_REMAPPED_PENDING,
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
        )
        if field_id in remap:
            rows = gpu.remapped_rows
            return rows[remap.index(field_id)] if rows is not None and ecc_on else None
        return {
            pynvml.NVML_FI_DEV_POWER_INSTANT: gpu.power_mw,
            pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT: gpu.power_limit_mw,
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: gpu.energy_mj,
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: gpu.pcie_tx_bytes,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: gpu.pcie_rx_bytes,
        }.get(field_id)

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        gpu = self._enter("nvmlDeviceGetFieldValues", handle)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for fv, fid in zip(values, fieldIds, strict=True):
            scope = 0
            if isinstance(fid, tuple) and len(fid) == 2 and all(isinstance(x, int) for x in fid):
                fid, scope = fid  # the binding's (fieldId, scopeId) form
            elif not isinstance(fid, int):
                self._violation(f"field id {fid!r} is neither an int nor (fieldId, scopeId)")
                fid = int(fid[0])
            fv.fieldId = fid
            fv.scopeId = scope
            fv.timestamp = int(self.now * 1_000_000)
            raw = self._field_raw(gpu, fid, scope)
            ret = gpu.field_returns.get(fid, pynvml.NVML_SUCCESS)
            if raw is None and ret == pynvml.NVML_SUCCESS:
                ret = pynvml.NVML_ERROR_NOT_SUPPORTED
            if raw == -1 and ret == pynvml.NVML_SUCCESS:
                ret = pynvml.NVML_ERROR_INVALID_ARGUMENT
            fv.nvmlReturn = ret
            if ret != pynvml.NVML_SUCCESS or raw is None:
                continue
            kind = gpu.field_types.get(fid, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG)
            fv.valueType = kind
            member = _UNION_MEMBER.get(kind)
            if member is not None:
                setattr(fv.value, member, float(raw) if member == "dVal" else raw)
            else:  # an unknown type: the bits land somewhere the caller cannot interpret
                fv.value.ullVal = raw
        return values

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetPowerUsage", handle)
        return self._supported(gpu.power_mw)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        gpu = self._enter("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return list(self._supported(gpu.power_limit_constraints_mw))

    # -- GPM ------------------------------------------------------------------------------------------

    def live_gpm_samples(self) -> int:
        return sum(1 for s in self.gpm_samples.values() if not s.freed)

    def _gpm_sample(self, sample: Any, what: str) -> FakeGpmSample | None:
        address = ctypes.cast(sample, ctypes.c_void_p).value if sample else None
        found = self.gpm_samples.get(address or 0)
        if found is None:
            self._violation(f"{what}: not a GPM sample: {sample!r}")
        elif found.freed:
            self._violation(f"{what}: GPM sample used after it was freed")
            found = None
        return found

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", handle)
        answer = pynvml.c_nvmlGpmSupport_t()
        answer.version = pynvml.NVML_GPM_SUPPORT_VERSION
        answer.isSupportedDevice = 1 if gpu.gpm is not None else 0
        return answer

    def nvmlGpmSampleAlloc(self) -> Any:
        self._system("nvmlGpmSampleAlloc")
        address = _GPM_BASE + 0x100 * (len(self.gpm_samples) + 1)
        self.gpm_samples[address] = FakeGpmSample(address)
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._system("nvmlGpmSampleFree")
        found = self._gpm_sample(sample, "nvmlGpmSampleFree")
        if found is not None:
            found.freed = True

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        gpu = self._enter("nvmlGpmSampleGet", handle)
        return self._take_sample(gpu, None, sample, "nvmlGpmSampleGet")

    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance: int, sample: Any) -> Any:
        gpu = self._enter("nvmlGpmMigSampleGet", handle, gpu_instance)
        if gpu.gpm is not None and (
            not gpu.mig or not gpu.mig[0] or gpu_instance not in {d.gpu_instance for d in gpu.mig_devices}
        ):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self._take_sample(gpu, gpu_instance, sample, "nvmlGpmMigSampleGet")

    def _take_sample(self, gpu: FakeGpu, instance: int | None, sample: Any, call: str) -> Any:
        if gpu.gpm is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        found = self._gpm_sample(sample, call)
        if found is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        found.gpu, found.instance, found.time = gpu.index, instance, self.now
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._system("nvmlGpmMetricsGet")
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            self._violation(f"nvmlGpmMetricsGet: version {request.version}")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if not 0 < request.numMetrics <= pynvml.NVML_GPM_METRIC_MAX:
            self._violation(f"nvmlGpmMetricsGet: numMetrics {request.numMetrics}")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        first = self._gpm_sample(request.sample1, "nvmlGpmMetricsGet sample1")
        second = self._gpm_sample(request.sample2, "nvmlGpmMetricsGet sample2")
        if first is None or second is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if first.time is None or second.time is None or first.time >= second.time:
            self._violation("nvmlGpmMetricsGet: samples not taken, or out of order")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if (first.gpu, first.instance) != (second.gpu, second.instance):
            self._violation("nvmlGpmMetricsGet: samples of two different GPUs or instances")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        assert second.gpu is not None
        gpu = self.gpus[second.gpu]
        with self._lock:
            self.calls[gpu.index]["nvmlGpmMetricsGet"] += 1
        error = self._injected(gpu.index, ("nvmlGpmMetricsGet",), ANY)
        if error is not None:
            raise _nvml_error(error)
        values = gpu.gpm if second.instance is None else gpu.gpm_mig.get(second.instance, {})
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            code = gpu.gpm_returns.get(metric.metricId)
            if code is None:
                code = (
                    pynvml.NVML_SUCCESS
                    if metric.metricId in (values or {})
                    else pynvml.NVML_ERROR_NOT_SUPPORTED
                )
            metric.nvmlReturn = code
            metric.value = (values or {}).get(metric.metricId, 0.0) if code == pynvml.NVML_SUCCESS else 0.0
        return request

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        return self._supported(gpu.power_limit_mw)

    # -- slow ticks -------------------------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._enter("nvmlDeviceGetTemperature", handle, sensor)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._supported(gpu.temperature)

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int, version: int = -1) -> int:
        """Like the binding: fills a c_nvmlTemperature_v1_t, checks its version, returns .temperature."""
        gpu = self._enter("nvmlDeviceGetTemperatureV", handle, sensor)
        v = pynvml.nvmlTemperature_v1 if version == -1 else version
        if v != pynvml.nvmlTemperature_v1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        temp = pynvml.c_nvmlTemperature_v1_t()
        temp.version, temp.sensorType = v, sensor
        temp.temperature = self._supported(gpu.temperature)
        return int(temp.temperature)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        # The same counter as the field: no power sensor, or the field unsupported, means no energy.
        field_ret = gpu.field_returns.get(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_SUCCESS)
        if gpu.power_mw is None or field_ret == pynvml.NVML_ERROR_NOT_SUPPORTED:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return ctypes.c_uint64(gpu.energy_mj).value

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._enter("nvmlDeviceGetClockInfo", handle, type)
        if type == pynvml.NVML_CLOCK_SM:
            return self._supported(gpu.sm_clock)
        if type == pynvml.NVML_CLOCK_MEM:
            return self._supported(gpu.mem_clock)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetPerformanceState", handle)
        return self._supported(gpu.pstate)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return self._supported(gpu.clock_reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return self._supported(gpu.clock_reasons)

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetFanSpeed", handle)
        return self._supported(gpu.fan)

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        gpu = self._enter("nvmlDeviceGetEncoderUtilization", handle)
        return [self._supported(gpu.enc), 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        gpu = self._enter("nvmlDeviceGetDecoderUtilization", handle)
        return [self._supported(gpu.dec), 167_000]

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        gpu = self._enter("nvmlDeviceGetPcieThroughput", handle, counter)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return self._supported(gpu.pcie_tx_kbs)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return self._supported(gpu.pcie_rx_kbs)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    # -- settings ---------------------------------------------------------------------------------------

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetComputeMode", handle)
        return self._supported(gpu.compute_mode)

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetPersistenceMode", handle)
        return self._supported(gpu.persistence)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._enter("nvmlDeviceGetMigMode", handle)
        return list(self._supported(gpu.mig))

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return self._supported(gpu.max_mig_devices)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> FakeMigHandle:
        gpu = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
        limit = self._supported(gpu.max_mig_devices)
        if not 0 <= index < limit:
            self._violation(f"MIG device index {index} beyond the maximum {limit}")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.mig is None or not gpu.mig[0]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        if not any(d.slot == index for d in gpu.mig_devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeMigHandle(gpu.index, index)

    def _mig_handle(self, name: str, handle: Any) -> FakeMigDevice:
        if not isinstance(handle, FakeMigHandle):  # the driver's NOT_SUPPORTED for a GPU's own handle
            self._gpu_of(handle)
            self._violation(f"{name} on a GPU handle, not a MIG device's")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._mig_enter(name, handle)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        return self._mig_handle("nvmlDeviceGetGpuInstanceId", handle).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        return self._mig_handle("nvmlDeviceGetComputeInstanceId", handle).compute_instance

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        dev = self._mig_handle("nvmlDeviceGetAttributes", handle)
        attrs = pynvml.c_nvmlDeviceAttributes()
        attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount = dev.gi_slices, dev.ci_slices
        attrs.memorySizeMB = dev.memory_mb
        attrs.multiprocessorCount = 16 * dev.ci_slices
        return attrs

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        gpu = self._enter("nvmlDeviceGetEccMode", handle)
        return list(self._supported(gpu.ecc_mode))

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        gpu = self._enter("nvmlDeviceGetNvLinkState", handle, link)
        links = self._supported(gpu.nvlink_tx_kib)
        if not 0 <= link < len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FEATURE_ENABLED

    # -- health ---------------------------------------------------------------------------------------

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle, (errorType, counterType))
        if gpu.ecc_mode is None or not gpu.ecc_mode[0]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        counts = {
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): gpu.ecc_corrected,
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): gpu.ecc_uncorrected,
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): gpu.ecc_corrected_aggregate,
            (
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_AGGREGATE_ECC,
            ): gpu.ecc_uncorrected_aggregate,
        }
        if (errorType, counterType) not in counts:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ctypes.c_ulonglong(counts[(errorType, counterType)]).value

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        gpu = self._enter("nvmlDeviceGetRemappedRows", handle)
        rows = self._supported(gpu.remapped_rows)
        return tuple(ctypes.c_uint(v).value for v in rows)  # type: ignore[return-value]

    def nvmlDeviceGetRetiredPages(self, handle: Any, sourceFilter: int) -> list[int]:
        gpu = self._enter("nvmlDeviceGetRetiredPages", handle, sourceFilter)
        pages = self._supported(gpu.retired_pages)
        self.lib_calls[gpu.index]["nvmlDeviceGetRetiredPages"] += 1  # the binding's sizing call
        return [int(ctypes.c_ulonglong(a).value) for a in pages.get(sourceFilter, [])]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        gpu = self._enter("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        self._supported(gpu.retired_pages)
        return int(gpu.retired_pending)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._supported(self._enter("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._supported(self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._supported(self._enter("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._supported(self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max))

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._enter("nvmlDeviceGetIndex", handle).index

    # -- events -----------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._system("nvmlEventSetCreate")
        es = FakeEventSet()
        self.event_sets.append(es)
        return es

    def _event_set(self, name: str, es: Any) -> FakeEventSet:
        if not isinstance(es, FakeEventSet) or es not in self.event_sets:
            self._violation(f"{name}: not an event set: {es!r}")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if es.freed:
            self._violation(f"{name} on a freed event set")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return es

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._enter("nvmlDeviceRegisterEvents", handle, eventTypes)
        es = self._event_set("nvmlDeviceRegisterEvents", eventSet)
        if not gpu.xid_events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        es.registered[gpu.index] = es.registered.get(gpu.index, 0) | int(eventTypes)

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        self._system("nvmlEventSetWait_v2")
        es = self._event_set("nvmlEventSetWait_v2", eventSet)
        with es.cond:
            es.waits += 1
            es.waiting += 1
            try:
                if not es.pending:
                    es.cond.wait(min(timeoutms / 1000, self.event_wait_cap))
                if not es.pending:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
                return es.pending.pop(0)
            finally:
                es.waiting -= 1

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._system("nvmlEventSetFree")
        es = self._event_set("nvmlEventSetFree", eventSet)
        with es.cond:
            if es.waiting:
                self._violation("nvmlEventSetFree while a thread waits on the set")
            es.freed = True

    # -- processes --------------------------------------------------------------------------------------

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        gpu = self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        return self._supported(gpu.capability)

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        """Like the binding: a sizing call, then (if there are samples) a filling call. Only samples newer
        than `timeStamp` come back; none gives NVML_ERROR_NOT_FOUND, as the driver does."""
        name = "nvmlDeviceGetProcessUtilization"
        gpu = self._enter(name, handle)
        self.proc_util_args[gpu.index].append(timeStamp)
        samples = [s for s in gpu.util_samples if s.timestamp > timeStamp]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        self.lib_calls[gpu.index][name] += 1  # the binding's second call
        return [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=s.pid, timeStamp=s.timestamp, smUtil=s.sm, memUtil=s.mem, encUtil=s.enc, decUtil=s.dec
            )
            for s in samples
        ]

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        self.lookups[name] += 1
        for kind in PROC_SYMBOLS:
            for version in (3, 2, 1):
                if name == proc_symbol(kind, version):
                    if name in self.missing_symbols:
                        self.failed_lookups[name] += 1
                        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
                    return self._process_function(kind, version)
        # Every binding NvmlSource uses is replaced; reaching here means an un-faked one was called.
        self._violation(f"unexpected function pointer lookup: {name}")
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _grow(self, gpu: FakeGpu, kind: str) -> None:
        for g in self._growth:
            if g.gpu == gpu.index and g.kind == kind and (g.times is None or g.times > 0):
                if g.times is not None:
                    g.times -= 1
                procs = gpu.processes[kind]
                for _ in range(g.add(len(procs)) if callable(g.add) else g.add):
                    procs.append(FakeProcess(self.new_pid(), 64 * 2**20))

    def _process_function(self, kind: str, version: int) -> Any:
        symbol = proc_symbol(kind, version)
        base = PROC_SYMBOLS[kind]
        struct = DRIVER_PROCESS_STRUCTS[version]

        def fn(handle: Any, count_ref: Any, buf: Any) -> int:
            """nvmlReturn_t fn(nvmlDevice_t, unsigned int *infoCount, nvmlProcessInfo_vN_t *infos)"""
            gpu = self._gpu_of(handle)
            if buf is None:
                self.calls[gpu.index][base] += 1  # one query per two-call sequence
            self.lib_calls[gpu.index][symbol] += 1
            self._check_init()
            count = getattr(count_ref, "_obj", None)
            if count is None:
                count = getattr(count_ref, "contents", None)
            if not isinstance(count, ctypes.c_uint):
                self._violation(f"{symbol}: infoCount is not a pointer to an unsigned int: {count_ref!r}")
                return INVALID_ARGUMENT
            error = self._injected(gpu.index, (base, symbol), None)
            if error is not None:
                if not isinstance(error, int):
                    raise _nvml_error(error)
                return error
            procs = gpu.processes[kind]
            needed = len(procs)
            if buf is None:
                count.value = needed
                self._grow(gpu, kind)  # new processes start between this call and the next
                return SUCCESS if needed == 0 else INSUFFICIENT_SIZE
            capacity = count.value
            element = getattr(type(buf), "_type_", None)
            if element is None or ctypes.sizeof(element) != ctypes.sizeof(struct):
                self._violation(f"{symbol}: buffer of {element} for a {ctypes.sizeof(struct)}-byte struct")
                return INVALID_ARGUMENT
            if ctypes.sizeof(buf) < capacity * ctypes.sizeof(struct):
                self._violation(f"{symbol}: infoCount {capacity} exceeds the buffer")
                return INVALID_ARGUMENT
            if capacity < needed:
                count.value = needed
                self._grow(gpu, kind)
                return INSUFFICIENT_SIZE
            # The caller's buffer seen as this struct (not ctypes.cast: it ties the two in a reference
            # cycle, garbage only the cyclic collector frees; the driver writes C memory and makes none).
            out = _array_type(struct, capacity).from_address(ctypes.addressof(buf))
            for i, p in enumerate(procs):
                out[i].pid = p.pid
                out[i].usedGpuMemory = NOT_AVAILABLE if p.memory is None else p.memory
                if version >= 2:
                    out[i].gpuInstanceId = p.gpu_instance
                    out[i].computeInstanceId = p.compute_instance
            count.value = needed
            return SUCCESS

        return fn
