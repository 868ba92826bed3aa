"""The interface both GPU sources (NVML and demo) implement."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gputui.model import GpuProcess, GpuSample, XidEvent


class SourceUnavailable(Exception):
    """The source cannot start (no driver, no library). The message is one line meant for the user."""


@dataclass(frozen=True, slots=True)
class SourceInfo:
    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: str | None


@dataclass(frozen=True, slots=True)
class Reading:
    """What a source read in one tick, before the host-side join."""

    gpus: tuple[GpuSample, ...]
    processes: tuple[GpuProcess, ...]
    errors: tuple[str, ...] = ()
    # GPUs whose process list could not be read this time: their unaccounted memory is unknown too.
    processes_unknown: frozenset[int] = frozenset()
    xids: tuple[XidEvent, ...] = ()  # Xid errors received since the last reading
    gpm_note: str | None = None  # why GPM is not armed where a GPU could serve it (see Snapshot.gpm_note)


class Named(Protocol):
    """What a sampler's user reads of its source: its name and where its device files live."""

    @property
    def name(self) -> str: ...

    @property
    def devices_dir(self) -> Path: ...


class GpuSource(Protocol):
    name: str  # "nvml" or "demo"
    devices_dir: Path  # where the nvidia device files live (/dev, or the demo's stand-ins)

    def open(self) -> SourceInfo:
        """Start the source; raises SourceUnavailable with a one-line reason."""
        ...

    def read(self, slow: bool) -> Reading:
        """One reading. Fast fields every call; slow fields (clocks, temperature, ...) only when `slow`,
        otherwise their last values are repeated. Never raises for a field or a single GPU."""
        ...

    def close(self) -> None: ...
