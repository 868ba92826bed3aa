"""The tests' shared builders of model values, one of each: a GPU sample (`h100`), a snapshot (`snapshot`)
and a process row (`process_row`; `holder_row` for a process that only holds a device file). Each takes
only what nearly every test leaves alone as its default; a test passes the values it is about."""

from __future__ import annotations

import dataclasses
from typing import Any

from gputui.model import GpuSample, ProcessRow, Snapshot

GIB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"


def h100(**fields: Any) -> GpuSample:
    """An H100 (its name, 80 GiB) with `fields`; GPU 0 unless `index` says otherwise."""
    return GpuSample(**{"index": 0, "name": H100, "mem_total": 80 * GIB, **fields})


def sample_of(base: GpuSample, **changes: Any) -> GpuSample:
    """`base` with `changes`: a file's own sample, varied by its tests."""
    return dataclasses.replace(base, **changes)


def snapshot(
    *,
    time: float = 0.0,
    gpus: tuple[GpuSample, ...] = (),
    processes: tuple[ProcessRow, ...] = (),
    hostname: str = "box",
    source: str = "demo",
    **fields: Any,
) -> Snapshot:
    """A snapshot without driver, NVML or CUDA versions (no test here reads them)."""
    return Snapshot(
        time=time,
        hostname=hostname,
        source=source,
        driver_version=None,
        nvml_version=None,
        cuda_driver_version=None,
        gpus=gpus,
        processes=processes,
        **fields,
    )


def process_row(
    gpu: int | None,
    pid: int,
    *,
    kinds: str = "C",
    used_memory: int | None = None,
    sm_util: int | None = None,
    mem_util: int | None = None,
    visible: bool = True,
    **fields: Any,
) -> ProcessRow:
    """A process on `gpu` in NVML's lists (`kinds`), visible here; its usage unknown unless given."""
    return ProcessRow(
        gpu=gpu,
        pid=pid,
        kinds=kinds,
        used_memory=used_memory,
        sm_util=sm_util,
        mem_util=mem_util,
        visible=visible,
        **fields,
    )


def holder_row(gpu: int | None, pid: int, **fields: Any) -> ProcessRow:
    """A process that holds `gpu`'s device file and is in none of NVML's lists (a worker, an orphan)."""
    return process_row(gpu, pid, kinds="", **fields)


def nvml_only_row(gpu: int | None, pid: int, **fields: Any) -> ProcessRow:
    """A process in NVML's list that this PID namespace does not see (a container's, or gone)."""
    return process_row(
        gpu, pid, visible=False, category="nvml-only", reason="in NVML's list but not visible here", **fields
    )
