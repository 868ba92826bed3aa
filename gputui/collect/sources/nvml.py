"""The NVML source, through NVIDIA's nvidia-ml-py binding (``import pynvml``).

Real drivers differ in what they support, so every field is read on its own: an error gives ``None`` for
that field, ``NotSupported``/``FunctionNotFound`` also stop asking for it, and ``GpuIsLost`` marks the GPU
lost without hiding the others. Calls are spread over three cadences to keep a tick cheap (about 8 NVML
calls per GPU per tick at 1 Hz):

- every tick: utilization, memory, one batched field read (power, power limit, energy, PCIe and NVLink
  byte counters, volatile uncorrected ECC errors), the compute and graphics process lists, per-process
  utilization; on a MIG GPU, one memory read per MIG instance;
- slow ticks (every few seconds): temperature, clocks, P-state, clock-event reasons, fan, encoder and
  decoder, the MPS process list (every tick once MPS clients were seen); health: the PCIe link's
  generation and width (2 calls), and, on a GPU with ECC on, its ECC counts, retired pages and row
  remapping as 10 more fields of that tick's batched read (no call of their own; a field a GPU lacks,
  retired pages on Ampere and later, row remapping before, is dropped after its first NotSupported);
- every SETTINGS_EVERY slow ticks: compute, persistence, MIG and ECC modes (and, until it is known,
  whether the GPU has NVLink at all); on a MIG GPU, its instances (the layout changes only by an
  admin's hand: 1 + the maximum MIG device count + 4 calls per instance); until known, the PCIe link's
  maximum generation and width (what GPU and slot can do together).

A batched field whose own nvmlReturn says NotSupported is not asked for again. Where the batched read or
the deprecated temperature call is missing (FunctionNotFound), the single calls stand in: power and
energy (nvmlDeviceGetPowerUsage, nvmlDeviceGetTotalEnergyConsumption), nvmlDeviceGetTemperatureV, and
the health counts (nvmlDeviceGetTotalEccErrors x4, nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPages
x2 and its pending status, on slow ticks).

GPM (Hopper and newer; gputui.collect.sources.gpm): every tick, 2 calls per GPU (a sample, the metrics
since the last one) and 2 per MIG GPU instance, where the GPU supports it and GPM is armed. Mode "auto"
arms it unless DCGM runs on the host (it reads the same counters; checked again on settings ticks), "on"
arms it regardless, "off" never; where a GPU could serve GPM and it is not armed, each reading says why in
`gpm_note`.

Critical Xid errors come from NVML events, on a thread of their own (xid_events.XidWatcher), when the
source is made with xid_events=True; each read hands over the events received since the last one.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import pynvml

from gputui.collect.sources import gpm as gpm_mod
from gputui.collect.sources.base import Reading, SourceInfo, SourceUnavailable
from gputui.collect.sources.xid_events import XidWatcher
from gputui.model import (
    GPM_MODES,
    GPM_OFF_NOTE,
    GpmMetrics,
    GpuHealth,
    GpuProcess,
    GpuSample,
    MigInstance,
    XidEvent,
)
from gputui.units import printable

SETTINGS_EVERY = 6  # slow ticks between reads of modes that change only by an admin's hand

_SKIP_FOREVER = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)

_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}

_REASONS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)

# Field ids read in one nvmlDeviceGetFieldValues call each tick.
_F_POWER = pynvml.NVML_FI_DEV_POWER_INSTANT  # mW
_F_LIMIT = pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT  # mW
_F_ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION  # mJ
_F_PCIE_TX = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES  # byte counters; rates come from deltas
_F_PCIE_RX = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
_FIELDS = (_F_POWER, _F_LIMIT, _F_ENERGY, _F_PCIE_TX, _F_PCIE_RX)
# Asked for only when ECC is on: "double bit" is NVML's name for uncorrected errors.
_F_ECC = pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL
# Asked for only on a GPU with NVLink: cumulative KiB counters, rates come from deltas. nvml.h: "A scopeId
# of UINT_MAX returns aggregate value summed up across all links"; scope 0 would be link 0 alone.
_F_NVLINK_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
_F_NVLINK_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
_ALL_LINKS = 0xFFFFFFFF
# Health, asked for on slow ticks only and only when ECC is on (memory errors are counted only then):
# GpuHealth's field <- NVML's field id ("single bit" is corrected, "double bit" uncorrected).
_HEALTH_FIELDS = (
    ("ecc_corrected_volatile", pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL),
    ("ecc_corrected_aggregate", pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL),
    ("ecc_uncorrected_aggregate", pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL),
    ("retired_pages_sbe", pynvml.NVML_FI_DEV_RETIRED_SBE),  # page retirement: before Ampere
    ("retired_pages_dbe", pynvml.NVML_FI_DEV_RETIRED_DBE),
    ("retired_pages_pending", pynvml.NVML_FI_DEV_RETIRED_PENDING),
    ("remapped_rows_correctable", pynvml.NVML_FI_DEV_REMAPPED_COR),  # row remapping: Ampere and later
    ("remapped_rows_uncorrectable", pynvml.NVML_FI_DEV_REMAPPED_UNC),
    ("remap_pending", pynvml.NVML_FI_DEV_REMAPPED_PENDING),
    ("remap_failed", pynvml.NVML_FI_DEV_REMAPPED_FAILURE),
)
_HEALTH_FLAGS = frozenset({"retired_pages_pending", "remap_pending", "remap_failed"})


class _ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t, which nvidia-ml-py no longer defines (drivers before 470 return it)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


_PROC_SYMBOLS = {
    "C": "nvmlDeviceGetComputeRunningProcesses",
    "G": "nvmlDeviceGetGraphicsRunningProcesses",
    "M": "nvmlDeviceGetMPSComputeRunningProcesses",
}
# Newest first; an old driver lacks the newer symbols.
_PROC_VERSIONS: tuple[tuple[str, type[ctypes.Structure]], ...] = (
    ("_v3", pynvml.c_nvmlProcessInfo_v3_t),
    ("_v2", pynvml.c_nvmlProcessInfo_v2_t),
    ("", _ProcessInfoV1),
)
_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
_SIZING_ATTEMPTS = 4
_NO_INSTANCE = 0xFFFFFFFF  # a process's gpuInstanceId/computeInstanceId when MIG is off
_MAX_MIG_DEVICES = 16  # 7 on an A100 or H100; a larger count from a broken driver is not walked
# The driver names a MIG device "<GPU name> MIG <profile>": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
# "... MIG 1c.3g.40gb" (a compute instance smaller than its GPU instance), "... MIG 1g.10gb+me".
_MIG_PROFILE = re.compile(
    r"\bMIG\s+((?:\d{1,2}c\.)?\d{1,2}g\.\d{1,4}gb(?:\+[a-z]{1,8}){0,3})\s*$", re.IGNORECASE
)


class _Lost(Exception):
    pass


@dataclass(frozen=True)
class _Mig:
    """One MIG device as enumerated on the settings tier; its memory is read every tick."""

    handle: Any
    gpu_instance: int
    compute_instance: int
    profile: str | None
    uuid: str | None


@dataclass
class _Gpu:
    index: int
    handle: Any
    static: dict[str, Any] = field(default_factory=dict)
    slow: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    skip: set[str] = field(default_factory=set)  # fields this GPU/driver does not support
    missing: set[str] = field(default_factory=set)  # those of them whose function the driver lacks
    lost: bool = False
    proc_util_ts: int = 0  # NVML's lastSeenTimeStamp for per-process utilization
    proc_version: dict[str, int] = field(default_factory=dict)  # kind -> index into _PROC_VERSIONS
    mps_seen: bool = False
    procs_failed: bool = False  # its process list could not be read this tick
    pcie_prev: tuple[float, int, int] | None = None  # (monotonic time, tx bytes, rx bytes)
    ecc_on: bool | None = None  # ECC mode from the settings tier; None: unknown or unsupported
    nvlink: bool | None = None  # has NVLink; None: not known yet
    nvlink_prev: dict[int, tuple[int, int]] = field(default_factory=dict)  # field id -> (µs, KiB)
    mig: list[_Mig] = field(default_factory=list)  # its MIG devices, by (GPU instance, compute instance)
    mig_stale: bool = False  # enumerate again on the next slow tick (a read failed: the layout changed?)
    health: GpuHealth | None = None  # from the last slow tick
    health_values: dict[int, float | int | None] = field(default_factory=dict)  # this slow tick's fields
    pcie_max: tuple[int | None, int | None] | None = None  # (generation, width); None: not read yet


def _text(value: Any) -> str:
    """A string from the driver (a name, a UUID, a version): short and printable before anyone shows it."""
    return printable((value.decode(errors="replace") if isinstance(value, bytes) else str(value))[:200])


def _from_milli(value: float | None) -> float | None:
    return value / 1000 if value is not None else None


class _Value(Protocol):
    """pynvml's c_nvmlValue_t (a ctypes union; pynvml has no annotations): what each member reads as."""

    dVal: float
    uiVal: int
    ulVal: int
    ullVal: int
    sllVal: int
    siVal: int
    usVal: int


def _field_value(fv: Any) -> float | int | None:
    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    kind = fv.valueType
    v: _Value = fv.value
    if kind == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return v.dVal
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return v.uiVal
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return v.ulVal
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return v.ullVal
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return v.sllVal
    if kind == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return v.siVal
    if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return v.usVal
    return None


def _limit_max(constraints: Any) -> float | None:
    """The most the power limit may be set to, in W, from nvmlDeviceGetPowerManagementLimitConstraints'
    (min, max) in mW."""
    if not isinstance(constraints, (list, tuple)) or len(constraints) != 2:
        return None
    return _from_milli(constraints[1]) if constraints[1] else None


def _pstate(value: int | None) -> int | None:
    return None if value is None or value == pynvml.NVML_PSTATE_UNKNOWN else value


def mig_profile(name: Any, attributes: Any = None) -> str | None:
    """A MIG device's profile ("3g.40gb"): from its name, which is the driver's own profile string (as
    nvidia-smi -L shows it, "+me" and "1c.3g.40gb" variants included); else built from its attributes
    (slice counts, memory in MB), whose rounding to the profile's "Ngb" is close but not NVIDIA's."""
    if name is not None:
        found = _MIG_PROFILE.search(_text(name))
        if found:
            return found.group(1).lower()
    if attributes is None:
        return None
    gi, ci, mb = (
        attributes.gpuInstanceSliceCount,
        attributes.computeInstanceSliceCount,
        attributes.memorySizeMB,
    )
    if not 0 < gi <= 8 or not 0 < ci <= gi or not 0 < mb < 1 << 24:
        return None
    profile = f"{gi}g.{math.ceil(mb / 1024)}gb"
    return profile if ci == gi else f"{ci}c.{profile}"


def _instance_id(value: int | None) -> int | None:
    return None if value is None or value == _NO_INSTANCE else int(value)


_Listed = tuple[int, int | None, int | None, int | None]  # pid, memory, GPU instance, compute instance


@functools.lru_cache(maxsize=32)
def _array_type(item: type[ctypes.Structure], length: int) -> Any:
    """`item * length`, kept alive. ctypes holds array types only weakly, and each type is a reference
    cycle: one made per call is garbage that only a collection of the oldest generation frees (~2.5 KB
    each; ~0.4 MB a minute on the bench's 8-GPU box). While this cache holds a type, ctypes hands the
    same one to pynvml's calls too."""
    return item * length


def _capacity(wanted: int) -> int:
    """A buffer length with headroom, one of few (a power of two), so that few array types are made."""
    return 1 << max(4, (wanted - 1).bit_length())


def _sized_call(fn: Any, handle: Any, struct: type[ctypes.Structure]) -> list[_Listed]:
    """NVML's two-call pattern: ask for the count, then fill a buffer with headroom for newcomers."""
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    buf = None
    for _ in range(_SIZING_ATTEMPTS):
        if ret == pynvml.NVML_SUCCESS:
            if buf is None:
                return []
            return [
                (
                    p.pid,
                    None if p.usedGpuMemory == _NOT_AVAILABLE else p.usedGpuMemory,
                    # v2 and v3 entries carry the process's MIG instance; v1 (before driver 470) does not
                    _instance_id(getattr(p, "gpuInstanceId", None)),
                    _instance_id(getattr(p, "computeInstanceId", None)),
                )
                for p in buf[: count.value]
            ]
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        count.value = _capacity(count.value * 2 + 8)
        buf = _array_type(struct, count.value)()
        ret = fn(handle, ctypes.byref(count), buf)
    raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)


def _init_error_message(err: Exception) -> str:
    if isinstance(err, pynvml.NVMLError_LibraryNotFound):
        return "NVIDIA driver not found: libnvidia-ml.so.1 could not be loaded"
    if isinstance(err, pynvml.NVMLError_DriverNotLoaded):
        return "NVIDIA driver is installed but not loaded (is the kernel module missing?)"
    if isinstance(err, pynvml.NVMLError_NoPermission):
        return "no permission to use the NVIDIA driver (NVML: insufficient permissions)"
    if isinstance(err, pynvml.NVMLError_LibRmVersionMismatch):
        return "NVIDIA driver and libnvidia-ml versions differ (reboot or reload the driver)"
    return f"NVML failed to start: {err}"


class NvmlSource:
    name = "nvml"

    def __init__(
        self,
        devices_dir: Path = Path("/dev"),
        xid_events: bool = False,
        gpm: str = "auto",
        gpm_wait: float = 0.0,
    ) -> None:
        """`xid_events`: watch for Xid errors on a thread of its own (a monitor that keeps running wants
        them; a one-shot reading, the doctor's, does not). `gpm`: "auto", "on" or "off" (see above).
        `gpm_wait`: GPM measures between two samples; open() takes the first, and the first read waits
        until this many seconds have passed since (a one-shot reading wants GPM from its one read)."""
        if gpm not in GPM_MODES:
            raise ValueError(f"gpm: {gpm!r} is not one of {GPM_MODES}")
        self.devices_dir = devices_dir
        self.xid_events = xid_events
        self.gpm_mode = gpm
        self.gpm_wait = gpm_wait
        self._gpm_primed: float | None = None  # when open() took the first GPM samples
        self._gpm = gpm_mod.GpmReader(lambda: time.monotonic())
        self._gpm_blocker: str | None = None  # what holds the counters ("nv-hostengine (pid 812)")
        self.dcgm_running = gpm_mod.dcgm_running  # the tests point it elsewhere
        self._xids: XidWatcher | None = None
        self._gpus: list[_Gpu] = []
        self._open_errors: list[str] = []
        self._slow_ticks = 0
        self._opened = False
        self._uninitialized = False
        self._inits = 0  # nvmlInit calls of ours that close() must balance

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> SourceInfo:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise SourceUnavailable(_init_error_message(err)) from None
        except OSError as err:  # a broken libnvidia-ml that dlopen refuses
            raise SourceUnavailable(f"NVIDIA driver library could not be loaded: {err}") from None
        self._opened = True
        self._inits = 1
        info = SourceInfo(
            driver_version=self._system(pynvml.nvmlSystemGetDriverVersion),
            nvml_version=self._system(pynvml.nvmlSystemGetNVMLVersion),
            cuda_driver_version=self._cuda_version(),
        )
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            self.close()
            raise SourceUnavailable(f"NVML cannot count the GPUs: {err}") from None
        self._gpus = [self._open_gpu(i) for i in range(count)]
        self._check_dcgm()
        self._prime_gpm()
        if self.xid_events:
            self._xids = XidWatcher([(g.index, g.handle) for g in self._gpus if not g.lost])
            self._xids.start()
        return info

    def _prime_gpm(self) -> None:
        """The first GPM sample of each armed GPU, so that the first read measures GPM already."""
        if not self.gpm_armed:
            return
        for gpu in self._gpus:
            state = self._gpm.gpus.get(gpu.index)
            if gpu.lost or state is None or not state.supported:
                continue
            try:
                self._gpm.read(gpu.index, gpu.handle)
                self._gpm_primed = time.monotonic()
            except gpm_mod.GpmLost:
                gpu.lost = True
                self._gpm.forget(gpu.index)
            except pynvml.NVMLError:  # tried again on the first read
                pass

    def _check_dcgm(self) -> None:
        # /proc is scanned only where it matters: in auto mode, on a box with a GPU that serves GPM.
        wanted = self.gpm_mode == "auto" and any(s.supported for s in self._gpm.gpus.values())
        self._gpm_blocker = self.dcgm_running() if wanted else None

    @property
    def gpm_armed(self) -> bool:
        return self.gpm_mode == "on" or (self.gpm_mode == "auto" and self._gpm_blocker is None)

    def gpm_note(self) -> str | None:
        """Why a GPU that could serve GPM metrics has none: one line, or None."""
        if self.gpm_armed or not any(s.supported for s in self._gpm.gpus.values()):
            return None
        if self.gpm_mode == "off":
            return GPM_OFF_NOTE
        return (
            f"GPM not armed: DCGM is running ({self._gpm_blocker}) and reads the same counters; "
            "--gpm on shares them"
        )

    def take_xids(self) -> tuple[XidEvent, ...]:
        """The Xid events received since the last call (also handed over in each Reading)."""
        return self._xids.take() if self._xids is not None else ()

    def close(self) -> None:
        if self._xids is not None:  # it keeps its own NVML reference until its wait returns
            self._xids.close()
            self._xids = None
        if self._opened:
            self._gpm.close()
            self._opened = False
            for _ in range(self._inits):  # NVML counts inits: one shutdown each
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlShutdown()
            self._inits = 0

    @staticmethod
    def _system(fn: Any) -> str | None:
        try:
            return _text(fn())
        except pynvml.NVMLError:
            return None

    @staticmethod
    def _cuda_version() -> str | None:
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion()
        except pynvml.NVMLError:
            return None
        return f"{v // 1000}.{v % 1000 // 10}"

    def _open_gpu(self, index: int) -> _Gpu:
        try:
            gpu = _Gpu(index, pynvml.nvmlDeviceGetHandleByIndex(index))
        except pynvml.NVMLError_GpuIsLost:
            self._open_errors.append(f"GPU {index} is lost (it needs a reset or a reboot)")
            return _Gpu(index, None, lost=True)
        except pynvml.NVMLError as err:
            self._open_errors.append(f"GPU {index}: cannot open it: {err}")
            return _Gpu(index, None, lost=True)
        h = gpu.handle
        try:
            pci = self._get(gpu, "pci", pynvml.nvmlDeviceGetPciInfo, h)
            gpu.static = {
                "name": self._get(gpu, "name", pynvml.nvmlDeviceGetName, h),
                "uuid": self._get(gpu, "uuid", pynvml.nvmlDeviceGetUUID, h),
                "pci_bus_id": _text(pci.busId) if pci is not None else None,
                "minor": self._get(gpu, "minor", pynvml.nvmlDeviceGetMinorNumber, h),
                "sm_clock_max": self._get(
                    gpu, "sm_max", pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM
                ),
                "mem_clock_max": self._get(
                    gpu, "mem_max", pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM
                ),
                "power_limit_max": _limit_max(
                    self._get(gpu, "limit_max", pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h)
                ),
            }
            for key in ("name", "uuid"):
                if gpu.static[key] is not None:
                    gpu.static[key] = _text(gpu.static[key])
            self._gpm.supported(index, h)  # once: static, and asking touches no counter
        except (_Lost, gpm_mod.GpmLost):
            gpu.lost = True
            self._open_errors.append(f"GPU {index} is lost (it needs a reset or a reboot)")
        except Exception as err:  # one GPU's odd answer must not keep the others from starting
            self._open_errors.append(f"GPU {index}: {type(err).__name__}: {err}")
        return gpu

    # -- reading -----------------------------------------------------------------------------------

    def read(self, slow: bool) -> Reading:
        settings = slow and self._slow_ticks % SETTINGS_EVERY == 0
        if slow:
            self._slow_ticks += 1
        if settings and self._slow_ticks > 1:  # open() looked already
            self._check_dcgm()
        if self._gpm_primed is not None:
            wait = self._gpm_primed + self.gpm_wait - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._gpm_primed = None
        if self._uninitialized:
            self._open_errors.append(self._initialize_again())
        if self._xids is not None:
            self._open_errors += self._xids.notes()
        errors = list(self._open_errors)
        self._open_errors.clear()
        samples: list[GpuSample] = []
        procs: list[GpuProcess] = []
        for gpu in self._gpus:
            if gpu.lost:
                samples.append(GpuSample(index=gpu.index, lost=True, **gpu.static))
                continue
            try:
                sample, gpu_procs = self._read_gpu(gpu, slow or not gpu.slow, settings or not gpu.settings)
            except _Lost:
                gpu.lost = True
                self._gpm.forget(gpu.index)
                errors.append(f"GPU {gpu.index} is lost (it needs a reset or a reboot)")
                sample, gpu_procs = GpuSample(index=gpu.index, lost=True, **gpu.static), []
            except Exception as err:  # a binding bug must not take the other GPUs down
                errors.append(f"GPU {gpu.index}: {type(err).__name__}: {err}")
                sample, gpu_procs = GpuSample(index=gpu.index, **gpu.static), []
            samples.append(sample)
            procs.extend(gpu_procs)
        unknown = frozenset(g.index for g in self._gpus if g.procs_failed and not g.lost)
        return Reading(
            tuple(samples),
            tuple(procs),
            tuple(errors),
            processes_unknown=unknown,
            xids=self.take_xids(),
            gpm_note=self.gpm_note(),
        )

    def _initialize_again(self) -> str:
        """NVML was shut down underneath us (every call says Uninitialized): init it, reopen the GPUs."""
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except (pynvml.NVMLError, OSError) as err:
            return f"NVML is not initialized and could not be started again: {err}"
        self._uninitialized = False
        self._inits += 1
        self._gpus = [self._open_gpu(i) for i in range(count)]
        return "NVML was shut down underneath gputui: it was initialized again"

    def _get(self, gpu: _Gpu, key: str, fn: Any, *args: Any) -> Any:
        """One NVML call for one field: None when unavailable; GpuIsLost propagates."""
        if key in gpu.skip:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError_GpuIsLost:
            raise _Lost from None
        except pynvml.NVMLError_FunctionNotFound:
            gpu.skip.add(key)
            gpu.missing.add(key)
            return None
        except _SKIP_FOREVER:
            gpu.skip.add(key)
            return None
        except pynvml.NVMLError_Uninitialized:  # shut down underneath us: start it again next read
            self._uninitialized = True
            return None
        except pynvml.NVMLError:
            return None

    def _read_gpu(self, gpu: _Gpu, slow: bool, settings: bool) -> tuple[GpuSample, list[GpuProcess]]:
        h = gpu.handle
        util = self._get(gpu, "util", pynvml.nvmlDeviceGetUtilizationRates, h)
        mem_total, mem_used, mem_reserved = self._memory(gpu)
        if settings:  # before the batched read, which asks for ECC and NVLink only where they exist
            self._read_features(gpu)
        fast = self._fields(gpu, slow)
        if fast.get("power") is None:
            mw = self._get(gpu, "power", pynvml.nvmlDeviceGetPowerUsage, h)
            fast["power"] = mw / 1000 if mw is not None else None
        if "energy" not in fast:  # no batched read (a field's own NotSupported is the driver's answer)
            fast["energy"] = _from_milli(
                self._get(gpu, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, h)
            )
        if settings:  # before the process lists, which keep instance ids only on a MIG GPU
            gpu.settings = self._read_settings(gpu, need_limit=fast.get("power_limit") is None)
        if settings or (slow and gpu.mig_stale):
            self._enumerate_mig(gpu)
        mig = self._mig_instances(gpu)
        gpm = self._read_gpm(gpu, mig)
        if gpm is not None and mig:
            mig = tuple(replace(m, gpm=gpm[1].get(m.gpu_instance)) for m in mig)
        procs = self._processes(gpu, slow)
        if slow:
            gpu.slow = self._read_slow(gpu)
            gpu.health = self._read_health(gpu)
        merged = {**gpu.slow, **gpu.settings, **{k: v for k, v in fast.items() if v is not None}}
        sample = GpuSample(
            index=gpu.index,
            **gpu.static,
            util_gpu=util.gpu if util is not None else None,
            util_mem=util.memory if util is not None else None,
            mem_total=mem_total,
            mem_used=mem_used,
            mem_reserved=mem_reserved,
            mig=mig,
            health=gpu.health,
            gpm=gpm[0] if gpm is not None else None,
            **merged,
        )
        return sample, procs

    def _read_gpm(
        self, gpu: _Gpu, mig: tuple[MigInstance, ...]
    ) -> tuple[GpmMetrics | None, dict[int, GpmMetrics | None]] | None:
        """This tick's GPM metrics of the GPU and of its MIG GPU instances; support is asked even when
        GPM is not armed (the note says why a GPU that could serve it has none)."""
        try:
            if not self._gpm.supported(gpu.index, gpu.handle):
                return None
            if not self.gpm_armed:
                self._gpm.forget_samples(gpu.index)  # DCGM came: give the counters back
                return None
            return self._gpm.read(gpu.index, gpu.handle, {m.gpu_instance for m in mig})
        except gpm_mod.GpmLost:
            raise _Lost from None
        except pynvml.NVMLError as err:  # the samples could not be allocated: tried again next tick
            self._open_errors.append(f"GPU {gpu.index}: GPM: {err}")
            return None

    def _memory(
        self, gpu: _Gpu, handle: Any = None, key: str = "mem"
    ) -> tuple[int | None, int | None, int | None]:
        """(total, used, reserved) of the GPU, or of one of its MIG devices (`handle`, `key` "mig_mem")."""
        h = gpu.handle if handle is None else handle
        m = self._get(gpu, f"{key}_v2", pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2)
        if m is not None:
            return m.total, m.used, m.reserved
        if f"{key}_v2" not in gpu.skip:  # v2 exists but failed this once: no v1 guess either
            return None, None, None
        m = self._get(gpu, f"{key}_v1", pynvml.nvmlDeviceGetMemoryInfo, h)
        return (m.total, m.used, None) if m is not None else (None, None, None)

    # -- MIG ---------------------------------------------------------------------------------------

    def _enumerate_mig(self, gpu: _Gpu) -> None:
        """The MIG devices of a MIG-enabled GPU: ids, profile and UUID, which change only when an admin
        creates or destroys instances. A failed walk keeps the last list and is tried again."""
        gpu.mig_stale = False
        if not gpu.settings.get("mig_mode"):
            gpu.mig = []
            return
        get, h = self._get, gpu.handle
        count = get(gpu, "mig_count", pynvml.nvmlDeviceGetMaxMigDeviceCount, h)
        if count is None:
            gpu.mig_stale = "mig_count" not in gpu.skip
            return
        found: dict[tuple[int, int], _Mig] = {}
        for i in range(min(int(count), _MAX_MIG_DEVICES)):
            # NotFound: no MIG device at this index (indices of destroyed instances stay empty)
            mh = get(gpu, "mig_handle", pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if mh is None:
                if "mig_handle" in gpu.skip:
                    break
                continue
            gi = get(gpu, "mig_gi", pynvml.nvmlDeviceGetGpuInstanceId, mh)
            ci = get(gpu, "mig_ci", pynvml.nvmlDeviceGetComputeInstanceId, mh)
            if gi is None or ci is None:  # an instance we cannot name cannot hold processes either
                continue
            uuid = get(gpu, "mig_uuid", pynvml.nvmlDeviceGetUUID, mh)
            profile = mig_profile(get(gpu, "mig_name", pynvml.nvmlDeviceGetName, mh))
            if profile is None:
                profile = mig_profile(None, get(gpu, "mig_attrs", pynvml.nvmlDeviceGetAttributes, mh))
            key = (int(gi), int(ci))
            found[key] = _Mig(mh, key[0], key[1], profile, _text(uuid) if uuid is not None else None)
        gpu.mig = [found[k] for k in sorted(found)]

    def _mig_instances(self, gpu: _Gpu) -> tuple[MigInstance, ...]:
        """Each MIG device's memory (one call each); utilization only where the driver reports it per
        instance (none does today: NotSupported on the first, never asked again)."""
        out = []
        for m in gpu.mig:
            total, used, _ = self._memory(gpu, m.handle, "mig_mem")
            if used is None and not {"mig_mem_v2", "mig_mem_v1"} <= gpu.skip:
                gpu.mig_stale = True  # a destroyed instance's handle fails: walk them again
            util = self._get(gpu, "mig_util", pynvml.nvmlDeviceGetUtilizationRates, m.handle)
            out.append(
                MigInstance(
                    gpu_instance=m.gpu_instance,
                    compute_instance=m.compute_instance,
                    profile=m.profile,
                    uuid=m.uuid,
                    mem_total=total,
                    mem_used=used,
                    util=util.gpu if util is not None and 0 <= util.gpu <= 100 else None,
                )
            )
        return tuple(out)

    def _read_features(self, gpu: _Gpu) -> None:
        """ECC mode (changes only with a reset) and whether NVLink exists (asked until NVML says)."""
        ecc = self._get(gpu, "ecc_mode", pynvml.nvmlDeviceGetEccMode, gpu.handle)
        gpu.ecc_on = ecc[0] == pynvml.NVML_FEATURE_ENABLED if ecc is not None else None
        if gpu.nvlink is None:
            # Any answer for link 0, active or not, means the GPU has NVLink; NotSupported: it has none.
            state = self._get(gpu, "nvlink", pynvml.nvmlDeviceGetNvLinkState, gpu.handle, 0)
            if state is not None:
                gpu.nvlink = True
            elif "nvlink" in gpu.skip:
                gpu.nvlink = False
        if gpu.pcie_max is None or None in gpu.pcie_max:
            h = gpu.handle
            gen = self._get(gpu, "pcie_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h)
            width = self._get(gpu, "pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth, h)
            if gen is not None or "pcie_gen_max" in gpu.skip:  # known, or never to be known
                gpu.pcie_max = (gen, width if width is not None or "pcie_width_max" in gpu.skip else None)

    def _field_ids(self, gpu: _Gpu, slow: bool) -> list[int | tuple[int, int]]:
        ids: list[int | tuple[int, int]] = list(_FIELDS)
        if gpu.ecc_on:
            ids.append(_F_ECC)
            if slow:
                ids += [fid for _, fid in _HEALTH_FIELDS]
        if gpu.nvlink:
            ids += [(_F_NVLINK_TX, _ALL_LINKS), (_F_NVLINK_RX, _ALL_LINKS)]
        return [i for i in ids if f"field {i[0] if isinstance(i, tuple) else i}" not in gpu.skip]

    def _fields(self, gpu: _Gpu, slow: bool) -> dict[str, float | None]:
        """Power, power limit, energy, PCIe and NVLink rates, ECC errors (and, on slow ticks, the health
        fields, kept in gpu.health_values): one batched call."""
        ids = self._field_ids(gpu, slow)
        gpu.health_values = {}
        _array_type(pynvml.c_nvmlFieldValue_t, len(ids))  # the binding makes this type at every call
        values = self._get(gpu, "fields", pynvml.nvmlDeviceGetFieldValues, gpu.handle, ids) if ids else None
        if values is None:
            return {}
        if any(fv.nvmlReturn == pynvml.NVML_ERROR_GPU_IS_LOST for fv in values):
            raise _Lost
        for fv in values:
            if fv.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED:
                gpu.skip.add(f"field {fv.fieldId}")
        got = {fv.fieldId: _field_value(fv) for fv in values}
        out = {
            key: _from_milli(got.get(fid))  # mW to W, mJ to J
            for key, fid in (("power", _F_POWER), ("power_limit", _F_LIMIT), ("energy", _F_ENERGY))
        }
        tx, rx = got.get(_F_PCIE_TX), got.get(_F_PCIE_RX)
        if tx is not None and rx is not None:
            now = time.monotonic()
            prev, gpu.pcie_prev = gpu.pcie_prev, (now, int(tx), int(rx))
            # No rate on the first reading or after a counter wrapped.
            if prev is not None and now > prev[0] and tx >= prev[1] and rx >= prev[2]:
                out["pcie_tx"] = (tx - prev[1]) / (now - prev[0])
                out["pcie_rx"] = (rx - prev[2]) / (now - prev[0])
        ecc = got.get(_F_ECC)
        out["ecc_errors"] = int(ecc) if ecc is not None and gpu.ecc_on else None
        if slow:
            gpu.health_values = {fid: got.get(fid) for fid in (_F_ECC, *(f for _, f in _HEALTH_FIELDS))}
        by_id = {fv.fieldId: fv for fv in values}
        for key, fid in (("nvlink_tx", _F_NVLINK_TX), ("nvlink_rx", _F_NVLINK_RX)):
            if fid in by_id:
                out[key] = self._nvlink_rate(gpu, by_id[fid], got.get(fid))
        return out

    @staticmethod
    def _nvlink_rate(gpu: _Gpu, fv: Any, kib: float | int | None) -> float | None:
        """Bytes/s from a cumulative KiB counter and the previous reading of it. None on the first
        reading, when the counter went back (the driver was reloaded) and when no time has passed."""
        if kib is None:
            return None  # failed this tick: the previous reading stays, the next rate spans both
        # NVML stamps each value (µs since 1970); a driver that leaves it 0 gets our clock instead.
        ts = int(fv.timestamp) if fv.timestamp > 0 else int(time.monotonic() * 1_000_000)
        prev = gpu.nvlink_prev.get(fv.fieldId)
        gpu.nvlink_prev[fv.fieldId] = (ts, int(kib))
        if prev is None or ts <= prev[0] or kib < prev[1]:
            return None
        return (int(kib) - prev[1]) * 1024 / ((ts - prev[0]) / 1_000_000)

    def _read_slow(self, gpu: _Gpu) -> dict[str, Any]:
        h, get = gpu.handle, self._get
        reasons = get(gpu, "reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        if reasons is None:
            reasons = get(gpu, "throttle", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        enc = get(gpu, "enc", pynvml.nvmlDeviceGetEncoderUtilization, h)
        dec = get(gpu, "dec", pynvml.nvmlDeviceGetDecoderUtilization, h)
        out: dict[str, Any] = {
            "temperature": self._temperature(gpu),
            "sm_clock": get(gpu, "sm", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
            "mem_clock": get(gpu, "memclk", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
            "pstate": _pstate(get(gpu, "pstate", pynvml.nvmlDeviceGetPerformanceState, h)),
            "throttle_reasons": None
            if reasons is None
            else tuple(name for bit, name in _REASONS if reasons & bit),
            "fan": get(gpu, "fan", pynvml.nvmlDeviceGetFanSpeed, h),
            "enc_util": enc[0] if enc is not None else None,
            "dec_util": dec[0] if dec is not None else None,
        }
        if gpu.pcie_prev is None:  # no PCIe byte counters on this driver: the slow ~20 ms call instead
            tx = get(gpu, "pcie_tx", pynvml.nvmlDeviceGetPcieThroughput, h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            rx = get(gpu, "pcie_rx", pynvml.nvmlDeviceGetPcieThroughput, h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
            out["pcie_tx"] = tx * 1024.0 if tx is not None else None  # NVML reports KB/s
            out["pcie_rx"] = rx * 1024.0 if rx is not None else None
        return out

    def _read_health(self, gpu: _Gpu) -> GpuHealth | None:
        """ECC counts, retired pages and row remapping (from this tick's batched read, or the single
        calls where the driver has no batched read), and the PCIe link against its maximum."""
        h, get = gpu.handle, self._get
        values = gpu.health_values
        if gpu.ecc_on and "fields" in gpu.skip:
            values = self._health_singly(gpu)
        counts: dict[str, int | bool | None] = {}
        for key, fid in (("ecc_uncorrected_volatile", _F_ECC), *_HEALTH_FIELDS):
            v = values.get(fid) if gpu.ecc_on else None
            if v is None:
                counts[key] = None
            elif key in _HEALTH_FLAGS:
                counts[key] = bool(v)
            else:
                counts[key] = int(v)
        gen_max, width_max = gpu.pcie_max or (None, None)
        health = GpuHealth(
            **counts,  # type: ignore[arg-type]  # keys are GpuHealth's own, values typed per key above
            pcie_gen=get(gpu, "pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
            pcie_gen_max=gen_max,
            pcie_width=get(gpu, "pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
            pcie_width_max=width_max,
        )
        return None if health == GpuHealth() else health

    def _health_singly(self, gpu: _Gpu) -> dict[int, float | int | None]:
        """The health fields by their own calls, for a driver without nvmlDeviceGetFieldValues."""
        h, get = gpu.handle, self._get
        cor, unc = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        vol, agg = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
        ecc = pynvml.nvmlDeviceGetTotalEccErrors
        out: dict[int, float | int | None] = {
            pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: get(gpu, "ecc_cor_vol", ecc, h, cor, vol),
            _F_ECC: get(gpu, "ecc_unc_vol", ecc, h, unc, vol),
            pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: get(gpu, "ecc_cor_agg", ecc, h, cor, agg),
            pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: get(gpu, "ecc_unc_agg", ecc, h, unc, agg),
        }
        rows = get(gpu, "remapped_rows", pynvml.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            for (_, fid), v in zip(_HEALTH_FIELDS[6:], rows, strict=True):
                out[fid] = v
        pages = pynvml.nvmlDeviceGetRetiredPages
        sbe = get(
            gpu, "retired_sbe", pages, h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        dbe = get(gpu, "retired_dbe", pages, h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        out[pynvml.NVML_FI_DEV_RETIRED_SBE] = len(sbe) if sbe is not None else None
        out[pynvml.NVML_FI_DEV_RETIRED_DBE] = len(dbe) if dbe is not None else None
        out[pynvml.NVML_FI_DEV_RETIRED_PENDING] = get(
            gpu, "retired_pending", pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h
        )
        return out

    def _temperature(self, gpu: _Gpu) -> int | None:
        """nvmlDeviceGetTemperature is deprecated: a driver (or binding) without it has only the V call."""
        old = getattr(pynvml, "nvmlDeviceGetTemperature", None)
        if old is None:
            gpu.skip.add("temp")
            gpu.missing.add("temp")
        sensor = pynvml.NVML_TEMPERATURE_GPU
        t = self._get(gpu, "temp", old, gpu.handle, sensor) if old is not None else None
        new = getattr(pynvml, "nvmlDeviceGetTemperatureV", None)
        # Only a missing function: a sensor the old call says is NotSupported is not there for V either.
        if t is None and "temp" in gpu.missing and new is not None:
            t = self._get(gpu, "temp_v", new, gpu.handle, sensor)
        return int(t) if t is not None else None

    def _read_settings(self, gpu: _Gpu, need_limit: bool) -> dict[str, Any]:
        h, get = gpu.handle, self._get
        mode = get(gpu, "compute_mode", pynvml.nvmlDeviceGetComputeMode, h)
        persistence = get(gpu, "persistence", pynvml.nvmlDeviceGetPersistenceMode, h)
        mig = get(gpu, "mig", pynvml.nvmlDeviceGetMigMode, h)
        out: dict[str, Any] = {
            "compute_mode": _COMPUTE_MODES.get(mode, str(mode)) if mode is not None else None,
            "persistence_mode": bool(persistence) if persistence is not None else None,
            "mig_mode": bool(mig[0]) if mig is not None else None,
        }
        if need_limit:
            limit = get(gpu, "power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            out["power_limit"] = limit / 1000 if limit is not None else None
        return out

    # -- processes ---------------------------------------------------------------------------------

    def _processes(self, gpu: _Gpu, slow: bool) -> list[GpuProcess]:
        merged: dict[int, list[Any]] = {}  # pid -> [kinds, memory, GPU instance, compute instance]
        # Instance ids mean something only on a MIG GPU (some drivers write 0, not 0xFFFFFFFF, without)
        on_mig = bool(gpu.settings.get("mig_mode"))
        kinds = ["C", "G"] + (["M"] if slow or gpu.mps_seen else [])
        gpu.procs_failed = False
        for kind in kinds:
            listed = self._get(gpu, f"procs_{kind}", self._running, gpu, kind)
            if listed is None and f"procs_{kind}" not in gpu.skip:  # failed now; not merely unsupported
                gpu.procs_failed = True
            if kind == "M":
                gpu.mps_seen = bool(listed)
            for pid, memory, gi, ci in listed or ():
                entry = merged.setdefault(pid, ["", None, None, None])
                entry[0] += kind
                if on_mig and entry[2] is None and gi is not None:
                    entry[2], entry[3] = gi, ci
                # The same context shows in several lists: its memory counts once.
                if memory is not None:
                    entry[1] = memory if entry[1] is None else max(entry[1], memory)
        utils = self._process_utilization(gpu, merged.keys()) if merged else {}
        return [
            GpuProcess(
                gpu=gpu.index,
                pid=pid,
                kinds=k,
                used_memory=m,
                sm_util=utils.get(pid, (None, None))[0],
                mem_util=utils.get(pid, (None, None))[1],
                gpu_instance=gi,
                compute_instance=ci,
            )
            for pid, (k, m, gi, ci) in merged.items()
        ]

    def _running(self, gpu: _Gpu, kind: str) -> list[_Listed]:
        """One process list, trying v3, then v2, then v1 of the call; remembers what worked."""
        start = gpu.proc_version.get(kind, 0)
        for i in range(start, len(_PROC_VERSIONS)):
            suffix, struct = _PROC_VERSIONS[i]
            try:
                fn = pynvml._nvmlGetFunctionPointer(_PROC_SYMBOLS[kind] + suffix)
            except pynvml.NVMLError_FunctionNotFound:
                continue
            gpu.proc_version[kind] = i
            return _sized_call(fn, gpu.handle, struct)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _process_utilization(self, gpu: _Gpu, running: Any) -> dict[int, tuple[int, int]]:
        samples = self._get(
            gpu, "proc_util", pynvml.nvmlDeviceGetProcessUtilization, gpu.handle, gpu.proc_util_ts
        )
        latest: dict[int, tuple[int, int, int]] = {}  # pid -> (time stamp, SM %, memory %)
        newest = gpu.proc_util_ts
        for s in samples or ():
            # Each field read once: pynvml's structs read every field through a Python __getattribute__.
            pid, stamp, sm, mem = s.pid, s.timeStamp, s.smUtil, s.memUtil
            newest = max(newest, stamp)
            # NVML sometimes reports garbage above 100 %, and samples of processes already gone.
            if pid not in running or sm > 100 or mem > 100:
                continue
            if pid not in latest or stamp > latest[pid][0]:
                latest[pid] = (stamp, sm, mem)
        gpu.proc_util_ts = newest
        return {pid: (sm, mem) for pid, (_, sm, mem) in latest.items()}
