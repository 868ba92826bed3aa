"""How busy the GPUs with a job really are, from NVML's GPM (SM, tensor and DRAM activity; Hopper and newer).

NVML's utilization says only that a kernel ran; GPM says how much of the GPU it used. For each GPU (or MIG
instance) with a process on it: busy but starved (utilization near 100 %, SMs nearly empty: the GPU waits on
the host), tensor cores idle under busy SMs (fp32 matmuls), low SM occupancy (small kernels or batch); the
verdicts are gputui.analyze.dip_causes.gpm_findings, the allocator panel's too. Where there is no GPM reading,
one line says why (before Hopper; DCGM holds the counters; --gpm off): information, never a problem.
"""

from __future__ import annotations

from collections.abc import Iterable

from gputui.analyze.dip_causes import gpm_findings, gpm_reading
from gputui.doctor.facts import SystemFacts
from gputui.doctor.report import Check, ok, warning
from gputui.model import GpmMetrics, GpuProcess, GpuSample

AREA = "gpm"
HOPPER = (9, 0)  # the first compute capability with GPM
MAX_PIDS = 3  # named on a line; more are counted


def checks(f: SystemFacts, machine: SystemFacts | None = None) -> list[Check]:
    """`f`: the GPUs and processes judged (the doctor's own reading, or the monitor's view in the TUI);
    `machine`: the doctor's reading of the machine when `f` is the monitor's view (its compute capabilities
    and its note on GPM)."""
    if f.nvml_error is not None:
        return []
    machine = machine or f
    out: list[Check] = []
    missing: list[GpuSample] = []
    for g in f.samples:
        if g.lost:
            continue
        if g.gpm is None and not any(i.gpm is not None for i in g.mig):
            missing.append(g)
            continue
        for label, gpm, util, pids in _targets(g, f.processes):
            if gpm is not None and pids:
                out += _judge(label, pids, gpm, util)
    return out + _unavailable(missing, f.gpm_note or machine.gpm_note, machine)


def _targets(
    g: GpuSample, processes: Iterable[GpuProcess]
) -> list[tuple[str, GpmMetrics | None, float | None, list[int]]]:
    """(label, GPM reading, NVML's utilization, pids) of the GPU, or of each MIG instance with a process."""
    whole: list[int] = []
    by_instance: dict[int, list[int]] = {}
    for p in processes:
        if p.gpu != g.index:
            continue
        if p.gpu_instance is not None and g.mig:
            by_instance.setdefault(p.gpu_instance, []).append(p.pid)
        else:
            whole.append(p.pid)
    out: list[tuple[str, GpmMetrics | None, float | None, list[int]]] = []
    if whole or not by_instance:
        out.append((f"GPU {g.index}", g.gpm, g.util_gpu, whole))
    for gi, pids in sorted(by_instance.items()):
        inst = next((i for i in g.mig if i.gpu_instance == gi), None)
        profile = f" ({inst.profile})" if inst is not None and inst.profile else ""
        label = f"GPU {g.index} MIG instance {gi}{profile}"
        out.append((label, inst.gpm if inst else None, inst.util if inst else None, pids))
    return out


def _pids(pids: list[int]) -> str:
    unique = sorted(set(pids))
    named = ", ".join(str(p) for p in unique[:MAX_PIDS])
    more = f" +{len(unique) - MAX_PIDS}" if len(unique) > MAX_PIDS else ""
    return f"pid{'s' * (len(unique) > 1)} {named}{more}"


def _judge(label: str, pids: list[int], gpm: GpmMetrics, util: float | None) -> list[Check]:
    who = f"{label} ({_pids(pids)})"
    over = f" over {gpm.interval:.1f} s" if gpm.interval is not None else ""
    found = gpm_findings(gpm, util)
    if not found:
        return [ok(AREA, f"{who}: {gpm_reading(gpm)} (GPM{over})")]
    return [warning(AREA, f"{who}: {x.text} (GPM{over})", x.fix) for x in found]


def _unavailable(missing: list[GpuSample], note: str | None, machine: SystemFacts) -> list[Check]:
    """One line per reason for the GPUs without a GPM reading."""
    old: list[GpuSample] = []
    other: list[GpuSample] = []
    for g in missing:
        fact = machine.by_index(g.index)
        capability = fact.capability if fact is not None else None
        (old if capability is not None and capability < HOPPER else other).append(g)
    out = []
    if old:
        names = ", ".join(sorted({g.name or "unknown model" for g in old}))
        out.append(
            ok(
                AREA,
                f"{_gpus(old)} ({names}): SM and tensor activity n/a: GPM needs Hopper or newer "
                "(NVML's utilization only says that a kernel ran)",
            )
        )
    if other:
        why = note or "the driver served no GPM reading (a driver before GPM, or the GPU refused it)"
        out.append(ok(AREA, f"{_gpus(other)}: SM and tensor activity n/a: {why}"))
    return out


def _gpus(gpus: list[GpuSample]) -> str:
    return f"GPU{'s' * (len(gpus) > 1)} {', '.join(str(g.index) for g in gpus)}"
