"""What the doctor reads off the machine: the kernel module, NVML and its library, the GPUs, the
device files. Paths hang off `root` so that tests can stand up a machine in a temporary directory."""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pynvml

from gputui.collect.sources.base import SourceUnavailable
from gputui.collect.sources.nvml import NvmlSource
from gputui.model import GpuProcess, GpuSample, MigInstance

_MODULE_VERSION = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+(?:\.\d+)+)")
# GPM measures between two samples: NvmlSource.open() takes the first and the doctor's one read the second
# this long after. A second spans a few training steps, so one step's data-loader gap or optimizer step
# does not decide the verdict (a monitor's --once takes 0.1 s; the doctor asks PyTorch for seconds anyway).
DOCTOR_GPM_S = 1.0


@dataclass(frozen=True, slots=True)
class GpuFact:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    minor: int | None = None
    lost: bool = False
    mig: bool | None = None
    capability: tuple[int, int] | None = None  # CUDA compute capability, e.g. (9, 0)
    sm_clock_max: int | None = None
    # Its MIG instances with their MIG-... UUIDs (GpuSample.mig): what CUDA_VISIBLE_DEVICES's MIG ids name.
    mig_instances: tuple[MigInstance, ...] = ()

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name or 'unknown model'})"


@dataclass(frozen=True, slots=True)
class SystemFacts:
    kernel_module: str | None = None  # its version, "loaded" when no version is readable, None: not loaded
    nvml_error: str | None = None  # why NVML did not start: library, driver, permission, mismatch, other
    nvml_error_text: str = ""
    library: str | None = None  # the libnvidia-ml file this process loaded
    library_candidates: tuple[str, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None  # the highest CUDA version the driver supports, e.g. "12.4"
    gpus: tuple[GpuFact, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    # path -> "ok", "missing" or "no access" (not readable and writable by this user)
    device_files: dict[str, str] = field(default_factory=dict)
    # NVML's reading of each GPU: its health (ECC, remaps, PCIe link) and, on Hopper and newer with GPM armed,
    # its SM, tensor and DRAM activity over DOCTOR_GPM_S (GpuSample.gpm)
    samples: tuple[GpuSample, ...] = ()
    gpm_note: str | None = None  # why GPM is not armed where a GPU could serve it (DCGM runs, --gpm off)

    def by_index(self, index: int) -> GpuFact | None:
        return next((g for g in self.gpus if g.index == index), None)


def kernel_module(root: Path) -> str | None:
    try:
        text = (root / "proc/driver/nvidia/version").read_text(errors="replace")
    except OSError:
        return "loaded" if (root / "sys/module/nvidia").is_dir() else None
    match = _MODULE_VERSION.search(text)
    return match.group(1) if match else "loaded"


def loaded_library(maps: Path) -> str | None:
    """The libnvidia-ml file mapped into this process (the one pynvml really loaded)."""
    with contextlib.suppress(OSError):
        for line in maps.read_text(errors="replace").splitlines():
            path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
            if "libnvidia-ml" in path:
                return path.strip()
    return None


def _nvml_error_kind(err: BaseException) -> str:
    kinds = (
        (pynvml.NVMLError_LibraryNotFound, "library"),
        (pynvml.NVMLError_DriverNotLoaded, "driver"),
        (pynvml.NVMLError_NoPermission, "permission"),
        (pynvml.NVMLError_LibRmVersionMismatch, "mismatch"),
    )
    return next((kind for cls, kind in kinds if isinstance(err, cls)), "other")


def _capability(index: int) -> tuple[int, int] | None:
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(index))
    except (pynvml.NVMLError, TypeError, ValueError):
        return None
    return int(major), int(minor)


def device_access(root: Path, minors: list[int], dev: Path | None = None) -> dict[str, str]:
    """`dev`: where the device files are (doctor --devices-dir); root/dev by default."""
    dev = dev or root / "dev"
    names = ["nvidiactl", "nvidia-uvm", *(f"nvidia{m}" for m in minors)]
    if not minors:
        names += sorted(p.name for p in dev.glob("nvidia[0-9]*"))
    out = {}
    for name in names:
        path = dev / name
        if not path.exists():
            out[str(path)] = "missing"
        else:
            out[str(path)] = "ok" if os.access(path, os.R_OK | os.W_OK) else "no access"
    # None at all is its own verdict (no driver, or a container started without GPUs), not "missing".
    return out if any(state != "missing" for state in out.values()) else {}


def gather(
    root: Path = Path("/"),
    maps: Path = Path("/proc/self/maps"),
    devices_dir: Path | None = None,
    gpm: str = "auto",
    gpm_s: float = DOCTOR_GPM_S,
) -> SystemFacts:
    """`devices_dir`: where the nvidia device files are, when not in root/dev (doctor --devices-dir).
    `gpm`: "auto" (not behind a running DCGM), "on" or "off", as the monitor's --gpm; `gpm_s`: how long the
    GPM reading measures (the one read waits for it)."""
    module = kernel_module(root)
    dev = devices_dir or root / "dev"
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as err:
        candidates = tuple(filter(None, [ctypes.util.find_library("nvidia-ml")]))
        kind = _nvml_error_kind(err) if isinstance(err, pynvml.NVMLError) else "library"
        return SystemFacts(
            kernel_module=module,
            nvml_error=kind,
            nvml_error_text=str(err),
            library_candidates=candidates,
            device_files=device_access(root, [], dev),
        )
    try:
        source = NvmlSource(devices_dir=dev, gpm=gpm, gpm_wait=gpm_s)
        try:
            info = source.open()
            reading = source.read(slow=True)
        except SourceUnavailable as err:
            return SystemFacts(
                kernel_module=module,
                nvml_error="other",
                nvml_error_text=str(err),
                library=loaded_library(maps),
                device_files=device_access(root, [], dev),
            )
        finally:
            source.close()
        gpus = tuple(
            GpuFact(
                g.index,
                g.name,
                g.uuid,
                g.pci_bus_id,
                g.minor,
                g.lost,
                g.mig_mode,
                None if g.lost else _capability(g.index),
                g.sm_clock_max,
                g.mig,
            )
            for g in reading.gpus
        )
        minors = [g.minor for g in gpus if g.minor is not None]  # a lost GPU's file is unknown
        return SystemFacts(
            samples=reading.gpus,
            kernel_module=module,
            library=loaded_library(maps),
            driver_version=info.driver_version,
            cuda_version=info.cuda_driver_version,
            gpus=gpus,
            processes=reading.processes,
            device_files=device_access(root, minors, dev),
            gpm_note=reading.gpm_note,
        )
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def idle_seconds(gpus: list[int], now: float, window_s: float = 600.0) -> float | None:
    """How long `gpus` have all been at 0 % SM, from the per-process samples NVML keeps (timestamps in
    microseconds of the wall clock); None when NVML has no samples to tell."""
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):
        return None
    samples: list[tuple[float, int]] = []
    try:
        for index in gpus:
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                got = pynvml.nvmlDeviceGetProcessUtilization(handle, int((now - window_s) * 1e6))
            except pynvml.NVMLError:
                continue
            samples += [(s.timeStamp / 1e6, s.smUtil) for s in got if s.smUtil <= 100]
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    if not samples:
        return None
    busy = [t for t, sm in samples if sm > 0]
    since = max(busy) if busy else min(t for t, _ in samples)
    return max(0.0, now - since)
