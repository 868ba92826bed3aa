"""Why a GPU dipped: what else was true while it was low, the strongest cause first, in one line.

The dip detector asks `observe` on every sample inside a dip and keeps what it saw (a later text for the
same thing replaces the earlier one; the host's CPU keeps its peak). The data loader's share of step time
stays the detector's own (Dip.wait_share): it is the most common answer. A profile recorded near the dip
comes from the app, which alone knows of it (`profile_causes`). Pure: no clocks, no I/O.

On a GPU with GPM (Hopper and newer, GpuSample.gpm) the counters say what the GPU did meanwhile: its tensor
cores went idle while its SMs kept working (other work than the model's matmuls), its DRAM was busy while
its SMs were not (memory-bound work), or PCIe carried copies from or to the host. `gpm_findings` judges a
busy GPU's GPM reading the same way for the doctor and the allocator panel's profile verdict: busy but
starved, tensor cores idle, low SM occupancy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gputui.analyze.hung import STALL_FACTOR
from gputui.analyze.xid import xid_name
from gputui.model import GPM_RATES, GPM_RATIOS, GpmMetrics, GpuSample, Snapshot, XidEvent
from gputui.units import fmt_bytes

# The ranks: a lower one is the stronger reason, listed first.
HEALTH = 0  # an Xid, clocks held down by the hardware
HUNG = 1  # the job looks hung, or made no step for many of its usual steps
DATA = 2  # the data loader (the detector's wait share)
GPM = 3  # what the GPU's own counters saw during the dip (GPM): measured on the GPU, so before the host's
HOST = 4  # the host's CPUs are saturated
PROFILE = 5  # a profile of a process on the GPU, recorded near the dip

HOST_CPU_BUSY = 90.0  # percent of all CPUs
NO_STEP_MIN_S = 10.0  # a pause shorter than this is the dip itself, not news
XID_NEAR_S = 60.0  # an Xid this long before a dip began may be why
PROFILE_NEAR_S = 600.0  # a profile this close to a dip says what the job was like then
# Clock event reasons (gputui.collect.sources.nvml) that slow a GPU down against the job's will.
SLOWDOWNS = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal": "hardware thermal limit",
    "sw_thermal": "thermal limit",
    "hw_power_brake": "power brake",
}

# GPM, during a dip. SMs still this active while the tensor cores are idle: the GPU kept computing, just not
# the model's matmuls (an evaluation's metrics, preprocessing on the GPU). Under it the dip is plain idling.
DIP_SM_WORKING = 25.0
# The tensor cores count as idle at or under this (percent): a reading of 0.3 % is counter noise, not work.
TENSOR_IDLE = 1.0
# The tensor cores count as used before the dip from this median up: only then is their idling news (a job
# that never used them, fp32 or not an ML job, would carry the same reason on every dip).
TENSOR_USED = 5.0
# DRAM this busy (percent) while at least as busy as the SMs: memory-bound work (device copies, elementwise
# ops, an optimizer step). HBM streaming at 40 % of its bandwidth is far beyond what a waiting GPU does.
DRAM_BUSY = 40.0
# Host<->device traffic this high (bytes/s, averaged over the tick) is copies the step waits for; a
# training loop's batches at a few hundred MB/s take a small share of a tick on any PCIe link.
PCIE_BUSY = 1e9

# GPM, of a busy GPU (the doctor, the allocator panel's profile verdict).
# NVML's utilization at or over this: "a kernel ran" nearly all the time.
UTIL_BUSY = 80.0
# ...while at most this share of the SMs had work: one tiny kernel at a time, the GPU waits on the host
# (a data loader, kernel launches) or on another rank. A healthy training step keeps SMs 60-95 % active.
SM_STARVED = 20.0
# SMs at least this active: enough work that the tensor cores should be carrying the matmuls of a model.
SM_BUSY = 50.0
# Occupancy (resident warps of the maximum) at or under this while the SMs are at least SM_OCCUPIED active
# and the tensor cores under TENSOR_BUSY: kernels too small to fill the SMs (a small batch, unfused ops).
# A big GEMM runs at low occupancy by design (one large block per SM), so busy tensor cores excuse it.
OCCUPANCY_LOW = 15.0
SM_OCCUPIED = 40.0
TENSOR_BUSY = 20.0


@dataclass(frozen=True, slots=True)
class Cause:
    rank: int
    key: str  # one per thing seen: its newest text replaces an older one
    text: str
    peak: float = 0.0  # for the host's CPU: the highest is kept, not the newest


@dataclass(frozen=True, slots=True)
class ProfileNote:
    """A profile the allocator panel saw finish: when it ran, on which GPU, and its verdict."""

    pid: int
    gpu: int | None
    start: float
    end: float
    verdict: str  # input-bound, host-bound, launch-bound, gpu-bound
    gpm: str = ""  # what GPM said of its GPU meanwhile ("tensor cores idle: fp32 matmuls?"), if anything


def observe(
    snap: Snapshot, gpu: int, xids: Iterable[XidEvent] = (), tensor_before: float | None = None
) -> list[Cause]:
    """What this sample says about why `gpu` is low. `xids`: the recent Xid events (the one that took the
    job down may have come a tick before the dip began); this sample's own are read from it too.
    `tensor_before`: the GPU's tensor activity (percent, GPM) while it was busy before the dip, if known."""
    out: list[Cause] = []
    for x in (*xids, *snap.xids):
        if x.gpu == gpu:
            out.append(Cause(HEALTH, f"xid {gpu} {x.xid}", f"GPU {gpu} Xid {x.xid}: {xid_name(x.xid)}"))
    sample = next((g for g in snap.gpus if g.index == gpu), None)
    slow = [SLOWDOWNS[r] for r in (sample.throttle_reasons or ()) if r in SLOWDOWNS] if sample else []
    if slow:
        out.append(Cause(HEALTH, f"clocks {gpu}", f"GPU {gpu} clocks held down ({', '.join(slow)})"))
    if sample is not None and sample.gpm is not None and not sample.lost:
        out += _gpm_causes(gpu, sample.gpm, tensor_before)
    for p in snap.processes:
        if p.gpu != gpu:
            continue
        if p.hung:
            out.append(Cause(HUNG, f"hung {p.pid}", f"pid {p.pid} {p.hung}"))
            continue
        report = snap.agents.get(p.pid)
        progress = report.progress if report is not None and report.ok else None
        if progress is not None and progress.last_step_age_s is not None and progress.usual_step_s:
            age, usual = progress.last_step_age_s, progress.usual_step_s
            if age >= max(NO_STEP_MIN_S, STALL_FACTOR * usual):
                took = f"{age:.0f} s" if age < 120 else f"{age / 60:.0f} min"
                text = f"pid {p.pid} made no step for {took} (usual step {usual:.2g} s)"
                out.append(Cause(HUNG, f"no step {p.pid}", text))
    cpu = snap.host.cpu_percent if snap.host is not None else None
    if cpu is not None and cpu >= HOST_CPU_BUSY:
        out.append(Cause(HOST, "host cpu", f"host CPUs {cpu:.0f}% busy", peak=cpu))
    return out


def _gpm_causes(gpu: int, m: GpmMetrics, tensor_before: float | None) -> list[Cause]:
    """What the GPU's counters say during a dip; each metric on its own (one may be n/a)."""
    out = []
    sm = m.sm_active
    if (
        sm is not None
        and sm >= DIP_SM_WORKING
        and tensor_before is not None
        and tensor_before >= TENSOR_USED
        and _tensor_idle(m)
    ):
        text = (
            f"GPU {gpu} SMs {sm:.0f}% active but tensor cores idle (were {tensor_before:.0f}%): "
            "work other than the model's matmuls (evaluation, metrics, preprocessing on the GPU)"
        )
        out.append(Cause(GPM, f"tensor idle {gpu}", text, peak=sm))
    dram = m.dram
    if dram is not None and dram >= DRAM_BUSY and (sm is None or dram >= sm):
        sms = f", SMs {sm:.0f}%" if sm is not None else ""
        text = f"GPU {gpu} DRAM {dram:.0f}% busy{sms}: memory-bound work (device copies, elementwise ops)"
        out.append(Cause(GPM, f"dram {gpu}", text, peak=dram))
    # NVML's rx is what the GPU received: host->device; tx what it sent.
    if m.pcie_rx is not None and m.pcie_rx >= PCIE_BUSY:
        text = (
            f"GPU {gpu} PCIe host→device {fmt_bytes(m.pcie_rx)}/s: the step waits on copies from the host "
            "(pin_memory=True with non_blocking=True overlaps them)"
        )
        out.append(Cause(GPM, f"pcie rx {gpu}", text, peak=m.pcie_rx))
    if m.pcie_tx is not None and m.pcie_tx >= PCIE_BUSY:
        text = (
            f"GPU {gpu} PCIe device→host {fmt_bytes(m.pcie_tx)}/s: copies to the host (a checkpoint, .cpu())"
        )
        out.append(Cause(GPM, f"pcie tx {gpu}", text, peak=m.pcie_tx))
    return out


def _tensor_idle(m: GpmMetrics) -> bool:
    """Every tensor reading known (any pipe, fp16/bf16's) at or under TENSOR_IDLE; at least one known."""
    known = [v for v in (m.tensor, m.hmma) if v is not None]
    return bool(known) and all(v <= TENSOR_IDLE for v in known)


@dataclass(frozen=True, slots=True)
class GpmFinding:
    """What GPM says of a busy GPU's work: one short verdict and its fix."""

    key: str  # starved, tensor idle, occupancy
    text: str  # "busy but starved: SM 6% while util 98%"
    fix: str


STARVED_FIX = (
    "the GPU waits on the host (data loading, kernel launches) or on another rank: more DataLoader workers "
    "and pin_memory=True for data; CUDA graphs or torch.compile for a launch-bound loop"
)
TENSOR_FIX = (
    "let matmuls use the tensor cores: TF32 (torch.set_float32_matmul_precision('high')) or bf16 autocast "
    "(torch.autocast('cuda', dtype=torch.bfloat16)); work that is not matmuls cannot use them"
)
OCCUPANCY_FIX = "a larger batch, or fewer, bigger kernels (torch.compile fuses small ops)"


def starved_sm(g: GpuSample) -> float | None:
    """The SM activity of a GPU NVML calls busy while its SMs are nearly empty: utilization at least
    UTIL_BUSY and SM activity at most SM_STARVED (gpm_findings' rule). Some kernel always runs, so NVML
    says ~100 %, but it is a tiny one: the GPU waits on the host (data, kernel launches) or another rank.
    None: not starved, or unknown. The screen and --once call it out."""
    sm = g.gpm.sm_active if g.gpm is not None and not g.lost else None
    return sm if sm is not None and g.util_gpu is not None and _starved(sm, g.util_gpu) else None


def _starved(sm: float, util: float) -> bool:
    return util >= UTIL_BUSY and sm <= SM_STARVED


def gpm_findings(m: GpmMetrics, util: float | None) -> list[GpmFinding]:
    """The GPM verdicts on a GPU (or MIG instance) with a job on it; `util`: NVML's utilization over the
    same time, if known. Nothing when the reading says nothing wrong or the metrics needed are n/a."""
    sm = m.sm_active
    if sm is None:
        return []
    if util is not None and _starved(sm, util):
        text = f"busy but starved: SM {sm:.0f}% while util {util:.0f}%"
        return [GpmFinding("starved", text, STARVED_FIX)]
    out = []
    if sm >= SM_BUSY and _tensor_idle(m):
        tensor = m.tensor if m.tensor is not None else m.hmma
        text = f"tensor cores idle: fp32 matmuls? (SM {sm:.0f}% active, tensor {tensor:.0f}%)"
        out.append(GpmFinding("tensor idle", text, TENSOR_FIX))
    occupancy = m.sm_occupancy
    tensor_busy = m.tensor is not None and m.tensor >= TENSOR_BUSY
    if occupancy is not None and sm >= SM_OCCUPIED and occupancy <= OCCUPANCY_LOW and not tensor_busy:
        text = f"SM occupancy {occupancy:.0f}%: small kernels or batch (SM {sm:.0f}% active)"
        out.append(GpmFinding("occupancy", text, OCCUPANCY_FIX))
    return out


def gpm_reading(m: GpmMetrics) -> str:
    """The numbers the verdicts stand on, one line: `SM 85% · occupancy 30% · tensor 55% · DRAM 20%`."""
    parts = [
        f"{label} {value:.0f}%"
        for label, value in (
            ("SM", m.sm_active),
            ("occupancy", m.sm_occupancy),
            ("tensor", m.tensor),
            ("DRAM", m.dram),
        )
        if value is not None
    ]
    return " · ".join(parts) if parts else "n/a"


def gpm_of(sample: GpuSample, gpu_instance: int | None = None) -> GpmMetrics | None:
    """The GPM reading of what a process on `sample` runs on: its MIG instance's when it runs in one (never
    the whole GPU's, which mixes every instance's work), else the GPU's."""
    if gpu_instance is not None and sample.mig:
        return next((i.gpm for i in sample.mig if i.gpu_instance == gpu_instance), None)
    return sample.gpm


def mean_gpm(readings: Iterable[GpmMetrics]) -> GpmMetrics | None:
    """Each metric's mean over the readings that have it (None where none has); None for no reading."""
    got = list(readings)
    if not got:
        return None
    means: dict[str, float | None] = {}
    for name in (*GPM_RATIOS, *GPM_RATES):
        values = [v for v in (getattr(r, name) for r in got) if v is not None]
        means[name] = sum(values) / len(values) if values else None
    intervals = [r.interval for r in got if r.interval is not None]
    return GpmMetrics(interval=sum(intervals) if intervals else None, **means)  # interval: the time covered


def merge(seen: dict[str, Cause], new: Iterable[Cause]) -> None:
    for c in new:
        old = seen.get(c.key)
        if old is None or c.peak >= old.peak:
            seen[c.key] = c


def profile_causes(
    notes: Iterable[ProfileNote], gpus: Iterable[int], start: float, end: float
) -> list[Cause]:
    """The newest profile of each process on `gpus` that ran within PROFILE_NEAR_S of [start, end]."""
    on = set(gpus)
    newest: dict[int, ProfileNote] = {}
    for n in notes:
        near = n.start <= end + PROFILE_NEAR_S and n.end >= start - PROFILE_NEAR_S
        if n.gpu in on and near and (n.pid not in newest or n.end > newest[n.pid].end):
            newest[n.pid] = n
    return [
        Cause(
            PROFILE,
            f"profile {n.pid}",
            f"profile of pid {n.pid}: {n.verdict}" + (f", {n.gpm}" if n.gpm else ""),
        )
        for n in newest.values()
    ]


def combine(causes: Iterable[Cause], wait: str = "") -> str:
    """One line: the causes by rank (each once), the data loader's verdict at its own rank."""
    parts = [(c.rank, c.text) for c in causes]
    if wait:
        parts.append((DATA, wait))
    seen: set[str] = set()
    out = []
    for _, text in sorted(parts, key=lambda p: p[0]):  # stable: the order seen within a rank
        if text not in seen:
            seen.add(text)
            out.append(text)
    return "; ".join(out)
