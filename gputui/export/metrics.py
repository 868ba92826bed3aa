"""A Snapshot as Prometheus metric families.

GPU metrics carry dcgm-exporter's names, units, types and labels (checked against its
etc/default-counters.csv, etc/dcp-metrics-included.csv and its collector's labelling), so dashboards made
for dcgm-exporter work unchanged:
- `DCGM_FI_PROF_*` from NVML GPM (Hopper+): ratios 0..1 and bytes/s, per GPU and per MIG instance;
  absent (no sample) on a GPU without GPM, never 0;
- each `DCGM_*` series of a GPU carries `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidia<index>`, as
  dcgm-exporter names it: the GPU index, not the minor number), `modelName`, `Hostname` (the released
  dcgm-exporters' spelling; its main branch renamed it `hostname` after 4.8.2), `DCGM_FI_DRIVER_VERSION`,
  and, on a GPU whose processes all belong to one Kubernetes pod or one SLURM job, `pod`, `namespace`,
  `container`, `pod_uid` or `hpc_job`, as dcgm-exporter's pod and HPC mappings add them;
- `DCGM_FI_DEV_XID_ERRORS` carries `err_code` and `err_msg`;
- the counters of its csv (energy, ECC and retired-page counts, remapped rows, NVLink bandwidth) are typed
  `counter` under their own names, with no `_total` (see `retype_counters`).

gputui's own metrics (prefix ``gputui_``) add what dcgm-exporter cannot see: processes and their memory,
zombie classes, unaccounted memory, utilization dips and the torch allocator.

Families are built fresh from the latest snapshot at each scrape: the series of a process that exited
are simply not there any more.

Owners and MIG use dcgm-exporter's label names: a process's series carries `container`, `pod` and
`namespace` (its Kubernetes mapping) and `hpc_job` (its HPC job mapping: the SLURM job id), empty where
they do not apply; a MIG instance's memory series and a process on an instance carry `GPU_I_PROFILE` and
`GPU_I_ID`. gputui_job_gpu_memory_bytes sums a job's processes per GPU (instance): a job is a SLURM job
(its steps together), a Kubernetes pod (its containers together) or a container. Each of these adds at
most one series per process or per job and GPU: cardinality grows with what runs, as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from gputui.analyze.classify import SUSPICIOUS
from gputui.analyze.dips import Dip
from gputui.analyze.xid import XIDS, xid_name
from gputui.model import GpuSample, MigInstance, Owner, ProcessRow, Snapshot, XidEvent
from gputui.units import printable

MIB = 1024 * 1024
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"  # dcgm-exporter's "label" field: the driver on every GPU series
ZOMBIE_CLASSES = tuple(sorted(SUSPICIOUS))
DIP_KINDS = ("stall", "long")
COMMAND_CHARS = 60  # a label is stored with every sample: keep the command short
# A Kubernetes name is at most 253 characters: real owners are never cut, a made-up cgroup path is.
OWNER_CHARS = 253
PROFILE_CHARS = 32  # a MIG profile name ("1g.10gb+me")
# dcgm-exporter's names: its Kubernetes pod mapping, its HPC job mapping, its MIG instance labels.
OWNER_LABELS = ("container", "pod", "namespace", "hpc_job")
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
PROCESS_LABELS = ("gpu", "UUID", "Hostname", "pid", "user", "command", "class", *OWNER_LABELS, *MIG_LABELS)
# One series per job and GPU (instance): a pod's containers are one job, so are a SLURM job's steps.
JOB_LABELS = ("gpu", "UUID", "Hostname", *MIG_LABELS, "kind", *OWNER_LABELS, "user")


def _free_mib(g: GpuSample) -> float | None:
    if g.mem_total is None or g.mem_used is None:
        return None
    return max(0, g.mem_total - g.mem_used - (g.mem_reserved or 0)) // MIB


def _mib(v: int | None) -> int | None:
    return None if v is None else v // MIB  # whole MiB, as DCGM reports them


def _energy_mj(g: GpuSample) -> float | None:
    return None if g.energy is None else round(g.energy * 1000.0)  # whole mJ: no float noise


def _mig_free_mib(i: MigInstance) -> int | None:
    if i.mem_total is None or i.mem_used is None:
        return None
    return max(0, i.mem_total - i.mem_used) // MIB


# Fields a MIG instance has a series of too (with GPU_I_PROFILE and GPU_I_ID), as in dcgm-exporter: the
# whole GPU's series stays, without those labels.
MIG_FIELDS: dict[str, Any] = {
    "DCGM_FI_DEV_FB_USED": lambda i: _mib(i.mem_used),
    "DCGM_FI_DEV_FB_FREE": _mig_free_mib,
}


# (name, help, type, value): dcgm-exporter's default fields, in its units.
DCGM_FIELDS: tuple[tuple[str, str, str, Any], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge", lambda g: g.util_gpu),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "gauge", lambda g: g.util_mem),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge", lambda g: _mib(g.mem_used)),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge", _free_mib),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge", lambda g: g.temperature),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "gauge", lambda g: g.power),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "gauge", lambda g: g.sm_clock),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "gauge", lambda g: g.mem_clock),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", "gauge", lambda g: g.enc_util),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", "gauge", lambda g: g.dec_util),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "counter",
        _energy_mj,
    ),
)


def _ratio(attr: str) -> Any:
    def read(g: GpuSample | MigInstance) -> float | None:
        value = getattr(g.gpm, attr) if g.gpm is not None else None
        return None if value is None else value / 100.0  # percent -> dcgm-exporter's 0..1

    return read


def _rate(attr: str) -> Any:
    def read(g: GpuSample | MigInstance) -> float | None:
        return getattr(g.gpm, attr) if g.gpm is not None else None

    return read


# (name, help, GpmMetrics field): DCGM's profiling fields, read from NVML GPM (per GPU and MIG instance).
PROF_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", _ratio("graphics")),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        _ratio("sm_active"),
    ),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", _ratio("sm_occupancy")),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        _ratio("tensor"),
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        "Ratio of cycles the HMMA tensor pipe is active.",
        _ratio("hmma"),
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        "Ratio of cycles the IMMA tensor pipe is active.",
        _ratio("imma"),
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        "Ratio of cycles the DFMA tensor pipe is active.",
        _ratio("dfma"),
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        _ratio("dram"),
    ),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active.", _ratio("fp64")),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active.", _ratio("fp32")),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active.", _ratio("fp16")),
    ("DCGM_FI_PROF_PIPE_INT_ACTIVE", "Ratio of cycles the integer pipe is active.", _ratio("integer")),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
        "payloads - in bytes per second.",
        _rate("pcie_tx"),
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
        _rate("pcie_rx"),
    ),
    (
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, in bytes per second.",
        _rate("nvlink_tx"),
    ),
    (
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, in bytes per second.",
        _rate("nvlink_rx"),
    ),
)


def _nvlink_total(g: GpuSample) -> float | None:
    """DCGM's NVLINK_BANDWIDTH_TOTAL: (received + sent KiB)/s / 1000, DCGM's own arithmetic (its cache
    manager divides the KiB counters' delta by seconds, then by 1000). A rate, though dcgm-exporter's csv
    types it `counter` (its PR #658 to change that was closed): served as dcgm-exporter serves it."""
    if g.nvlink_rx is None or g.nvlink_tx is None:
        return None
    return round((g.nvlink_rx + g.nvlink_tx) / 1024 / 1000, 3)


# (name, help, type, value): fields dcgm-exporter serves beyond its default csv that dashboards ask for.
EXTRA_FIELDS: tuple[tuple[str, str, str, Any], ...] = (
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", "gauge", lambda g: g.power_limit),
    (
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
        "Maximum power management limit (in W).",
        "gauge",
        lambda g: g.power_limit_max,
    ),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", "Maximum SM clock (in MHz).", "gauge", lambda g: g.sm_clock_max),
    ("DCGM_FI_DEV_MAX_MEM_CLOCK", "Maximum memory clock (in MHz).", "gauge", lambda g: g.mem_clock_max),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "Total number of NVLink bandwidth counters for all lanes.",
        "counter",
        _nvlink_total,
    ),
)


# GPU health under dcgm-exporter's names (DCGM's field names) and the GpuHealth field each one reads; a
# field NVML does not report has no sample.
HEALTH_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Single-bit volatile ECC errors.", "ecc_corrected_volatile"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Double-bit volatile ECC errors.", "ecc_uncorrected_volatile"),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Single-bit persistent ECC errors.", "ecc_corrected_aggregate"),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Double-bit persistent ECC errors.", "ecc_uncorrected_aggregate"),
    ("DCGM_FI_DEV_RETIRED_SBE", "Pages retired for single-bit errors.", "retired_pages_sbe"),
    ("DCGM_FI_DEV_RETIRED_DBE", "Pages retired for double-bit errors.", "retired_pages_dbe"),
    ("DCGM_FI_DEV_RETIRED_PENDING", "Pages pending retirement.", "retired_pages_pending"),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Rows remapped for correctable errors.",
        "remapped_rows_correctable",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Rows remapped for uncorrectable errors.",
        "remapped_rows_uncorrectable",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "A row remap waits for a GPU reset.", "remap_pending"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "A row remap failed.", "remap_failed"),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe link generation.", "pcie_gen"),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "PCIe maximum link generation.", "pcie_gen_max"),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe link width.", "pcie_width"),
    ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "PCIe maximum link width.", "pcie_width_max"),
)


# The families dcgm-exporter types `counter` under a name without `_total` (its csv). prometheus-client
# writes a counter's HELP and TYPE as `<name>_total`, so `retype_counters` puts the name back in the text
# format, and, in OpenMetrics, where a counter's samples must end in `_total`, says `unknown`.
DCGM_COUNTERS = frozenset(
    {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    }
)


def retype_counters(body: bytes, openmetrics: bool) -> bytes:
    """dcgm-exporter's counters as it types them: `# TYPE X counter` with samples named X (Prometheus text
    format), or `# TYPE X unknown` in OpenMetrics (legal with any sample name; rate() works the same)."""
    for name in DCGM_COUNTERS:
        n = name.encode()
        if openmetrics:
            body = body.replace(b"# TYPE " + n + b" counter\n", b"# TYPE " + n + b" unknown\n", 1)
        else:
            body = body.replace(b"# HELP " + n + b"_total ", b"# HELP " + n + b" ", 1)
            body = body.replace(b"# TYPE " + n + b"_total counter\n", b"# TYPE " + n + b" counter\n", 1)
    return body


@dataclass
class XidCounters:
    """Per GPU: the last Xid error and how many were seen since the exporter started."""

    last: dict[int, int] = field(default_factory=dict)
    count: dict[int, int] = field(default_factory=dict)

    def add(self, xids: Iterable[XidEvent]) -> None:
        for x in xids:
            self.last[x.gpu] = x.xid
            self.count[x.gpu] = self.count.get(x.gpu, 0) + 1


@dataclass
class DipCounters:
    """Dips per GPU and kind since the exporter started (Prometheus counters only ever grow)."""

    count: dict[tuple[int, str], int] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    ongoing: set[int] = field(default_factory=set)

    def add(self, ended: list[Dip], ongoing: list[Dip]) -> None:
        for d in ended:
            self.count[(d.gpu, d.kind)] = self.count.get((d.gpu, d.kind), 0) + 1
            self.seconds[d.gpu] = self.seconds.get(d.gpu, 0.0) + d.duration
        self.ongoing = {d.gpu for d in ongoing}


def gpu_labels(g: GpuSample, hostname: str) -> list[str]:
    """dcgm-exporter's label values: `device` is `nvidia<GPU index>`, as it writes it (not the minor
    number of /dev/nvidiaN, which can differ: gputui's screen shows that)."""
    return [str(g.index), g.uuid or "", g.pci_bus_id or "", f"nvidia{g.index}", g.name or "", hostname]


def _job_labels(procs: list[ProcessRow]) -> dict[str, str]:
    """pod, namespace, container and pod_uid of the one Kubernetes pod, or hpc_job of the one SLURM job,
    whose processes are all of a GPU's (instance's) GPU processes, as dcgm-exporter's mappings label a
    GPU's series; none when the GPU is shared, or runs anything else."""
    owners = {(p.owner.kind, p.owner.id) for p in procs if p.owner is not None}
    if len(owners) != 1 or any(p.owner is None for p in procs):
        return {}
    owner = next(p.owner for p in procs if p.owner is not None)
    container, pod, namespace, hpc_job = owner_labels(owner)
    if owner.kind == "kubernetes":
        containers = {(p.owner.container or "")[:12] for p in procs if p.owner is not None}
        one = container if len(containers) == 1 else ""  # a pod's GPU shared by its containers: no name
        return {"pod": pod, "namespace": namespace, "container": one, "pod_uid": _bounded(owner.id, 64)}
    if owner.kind == "slurm":
        return {"hpc_job": hpc_job}
    return {}


class _DcgmLabels:
    """The labels of one snapshot's DCGM_* series, per GPU and per MIG GPU instance: worked out once per
    GPU (or instance) and copied to each family's samples."""

    def __init__(self, snap: Snapshot, base: dict[int, list[str]]) -> None:
        self.snap = snap
        self.base = base
        self._procs: dict[int, list[ProcessRow]] = {}
        for p in snap.processes:
            if p.kinds and p.gpu is not None:
                self._procs.setdefault(p.gpu, []).append(p)
        self._cache: dict[tuple[int, int | None], dict[str, str]] = {}

    def gpu(self, g: GpuSample) -> dict[str, str]:
        key = (g.index, None)
        if key not in self._cache:
            labels = dict(zip(GPU_LABELS, self.base[g.index], strict=True))
            self._cache[key] = self._more(labels, self._procs.get(g.index, []))
        return dict(self._cache[key])

    def instance(self, g: GpuSample, inst: MigInstance) -> dict[str, str]:
        key = (g.index, inst.gpu_instance)
        if key not in self._cache:
            labels = _mig_labels(self.base[g.index], inst)
            procs = [p for p in self._procs.get(g.index, []) if p.gpu_instance == inst.gpu_instance]
            self._cache[key] = self._more(labels, procs)
        return dict(self._cache[key])

    def _more(self, labels: dict[str, str], procs: list[ProcessRow]) -> dict[str, str]:
        if self.snap.driver_version:
            labels[DRIVER_LABEL] = _bounded(self.snap.driver_version, 32)
        if procs:
            labels.update(_job_labels(procs))
        return labels


def _short_command(command: str | None, name: str | None) -> str:
    if not command:
        return name or ""
    argv0, _, rest = command.partition(" ")
    text = f"{os.path.basename(argv0)} {rest}".strip()
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 1] + "…"


def printable_labels(metrics: Iterable[Metric]) -> Iterator[Metric]:
    """Every label value made printable: the one place label text is cleaned, for every family served.

    Labels carry text other users control (command lines, user names, host and GPU names). A command line
    that is not UTF-8 reaches us holding lone surrogates (psutil decodes argv with surrogateescape), which
    cannot be encoded and failed every scrape; ESC and BEL would reach whoever reads a scrape in a terminal.
    """
    for metric in metrics:
        metric.samples = [_printable_sample(s) for s in metric.samples]
        yield metric


def _printable_sample(sample: Sample) -> Sample:
    if all(isinstance(v, str) and v.isprintable() for v in sample.labels.values()):
        return sample
    return sample._replace(labels={k: printable(str(v)) for k, v in sample.labels.items()})


def _health_families(live: list[GpuSample], dcgm: _DcgmLabels, xids: XidCounters | None) -> Iterator[Metric]:
    for name, doc, attr in HEALTH_FIELDS:
        fam = Metric(name, doc, "counter" if name in DCGM_COUNTERS else "gauge")
        for g in live:
            value = getattr(g.health, attr) if g.health is not None else None
            if value is not None:
                fam.add_sample(name, dcgm.gpu(g), float(value))
        yield fam
    last = Metric("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "gauge")
    count = CounterMetricFamily(
        "gputui_xid_errors", "Xid errors seen since the exporter started.", labels=GPU_LABELS
    )
    xids = xids or XidCounters()
    for g in live:
        code = xids.last.get(g.index, 0)
        last.add_sample(last.name, {**dcgm.gpu(g), **xid_labels(code)}, float(code))
        count.add_metric(dcgm.base[g.index], float(xids.count.get(g.index, 0)))
    yield last
    yield count


def xid_labels(code: int) -> dict[str, str]:
    """err_code and err_msg, as dcgm-exporter labels the last Xid ("No Error" for none; its own words for
    an Xid gputui does not describe)."""
    if code == 0:
        return {"err_code": "0", "err_msg": "No Error"}
    message = xid_name(code) if code in XIDS else "Unknown Error"
    return {"err_code": str(code), "err_msg": message}


def _forecast_families(snap: Snapshot, labels: dict[int, list[str]]) -> Iterator[Metric]:
    """The memory trend of each process, how soon each GPU is full at its processes' pace, and hung ones."""
    growth = GaugeMetricFamily(
        "gputui_process_memory_growth_bytes_per_second",
        "The robust trend of a process's GPU memory (bytes/s; negative: shrinking).",
        labels=["gpu", "UUID", "Hostname", "pid", "command"],
    )
    until_full = GaugeMetricFamily(
        "gputui_gpu_seconds_until_full",
        "Seconds until the GPU's memory is full at the pace of its growing processes.",
        labels=GPU_LABELS,
    )
    hung = GaugeMetricFamily(
        "gputui_process_hung",
        "1 for a process that looks hung (see the monitor for why).",
        labels=["Hostname", "pid", "command"],
    )
    soonest: dict[int, float] = {}
    for p in snap.processes:
        if p.gpu is None or p.gpu not in labels:
            continue
        gpu, uuid, *_, hostname = labels[p.gpu]
        command = _short_command(p.command, p.name)
        if p.memory_growth is not None:
            growth.add_metric([gpu, uuid, hostname, str(p.pid), command], p.memory_growth)
        if p.full_in is not None:
            soonest[p.gpu] = min(soonest.get(p.gpu, p.full_in), p.full_in)
        if p.hung:
            hung.add_metric([hostname, str(p.pid), command], 1.0)
    for gpu_index, seconds in soonest.items():
        until_full.add_metric(labels[gpu_index], seconds)
    yield growth
    yield until_full
    yield hung


def families(
    snap: Snapshot, dips: DipCounters | None = None, xids: XidCounters | None = None
) -> Iterator[Metric]:
    host = snap.hostname
    live = [g for g in snap.gpus if not g.lost]
    labels = {g.index: gpu_labels(g, host) for g in snap.gpus}
    dcgm = _DcgmLabels(snap, labels)
    for name, doc, kind, read in (*DCGM_FIELDS, *EXTRA_FIELDS):
        fam = Metric(name, doc, kind)
        for g in live:
            value = read(g)
            if value is not None:  # unsupported here: no sample, as dcgm-exporter does
                fam.add_sample(name, dcgm.gpu(g), float(value))
            if name in MIG_FIELDS:
                for inst in _instances(g):
                    value = MIG_FIELDS[name](inst)
                    if value is not None:
                        fam.add_sample(name, dcgm.instance(g, inst), float(value))
        yield fam
    for name, doc, read in PROF_FIELDS:
        fam = Metric(name, doc, "gauge")
        for g in live:
            value = read(g)
            if value is not None:
                fam.add_sample(name, dcgm.gpu(g), float(value))
            for inst in _instances(g):
                value = read(inst)
                if value is not None:
                    fam.add_sample(name, dcgm.instance(g, inst), float(value))
        yield fam

    lost = GaugeMetricFamily(
        "gputui_gpu_lost", "1 when NVML reports the GPU lost (fallen off the bus).", labels=GPU_LABELS
    )
    unaccounted = GaugeMetricFamily(
        "gputui_unaccounted_memory_bytes",
        "GPU memory used that no listed process accounts for (leaks, other containers' contexts).",
        labels=GPU_LABELS,
    )
    for g in snap.gpus:
        lost.add_metric(labels[g.index], 1.0 if g.lost else 0.0)
        value = snap.unaccounted_memory.get(g.index)
        if value is not None and not g.lost:
            unaccounted.add_metric(labels[g.index], float(value))
    yield lost
    yield unaccounted
    yield _mig_util_family(live, labels)

    yield from _health_families(live, dcgm, xids)
    yield from _forecast_families(snap, labels)
    yield from _process_families(snap, labels)
    yield from _dip_families(snap, labels, dips)
    yield from _agent_families(snap)

    unreadable = GaugeMetricFamily(
        "gputui_unreadable_processes",
        "Processes whose open files gputui cannot read: device holders among them are not counted.",
        labels=["Hostname"],
    )
    unreadable.add_metric([host], float(snap.unreadable_fds))
    yield unreadable
    errors = GaugeMetricFamily(
        "gputui_sample_errors", "Errors in the last sample (fields read as n/a).", labels=["Hostname"]
    )
    errors.add_metric([host], float(len(snap.errors)))
    yield errors


def _process_families(snap: Snapshot, labels: dict[int, list[str]]) -> Iterator[Metric]:
    mem = GaugeMetricFamily(
        "gputui_process_gpu_memory_bytes",
        "GPU memory used by a process, as NVML reports it.",
        labels=PROCESS_LABELS,
    )
    jobs: dict[tuple[str, ...], float] = {}
    job_users: dict[tuple[str, ...], set[str]] = {}
    profiles = {g.index: {i.gpu_instance: i.profile for i in g.mig} for g in snap.gpus}
    seen: set[tuple[int, int]] = set()
    for p in snap.processes:
        if p.gpu is None or p.used_memory is None or p.gpu not in labels or (p.gpu, p.pid) in seen:
            continue
        seen.add((p.gpu, p.pid))
        gpu, uuid, *_, hostname = labels[p.gpu]
        owner = owner_labels(p.owner)
        mig = _instance_labels(p, profiles.get(p.gpu, {}))
        values = [str(p.pid), p.user or "", _short_command(p.command, p.name), p.category]
        mem.add_metric([gpu, uuid, hostname, *values, *owner, *mig], float(p.used_memory))
        if p.owner is not None:
            key = (gpu, uuid, hostname, *mig, *job_key(p.owner))
            jobs[key] = jobs.get(key, 0.0) + p.used_memory
            user = p.owner.user or p.user
            job_users.setdefault(key, set()).add(_bounded(user or "", OWNER_CHARS))
    yield mem

    per_job = GaugeMetricFamily(
        "gputui_job_gpu_memory_bytes",
        "GPU memory used by the processes of a job (a SLURM job, a Kubernetes pod, a container) on a GPU.",
        labels=JOB_LABELS,
    )
    for key, used in jobs.items():
        users = job_users[key]  # the job's user when all its processes name the same one
        per_job.add_metric([*key, next(iter(users)) if len(users) == 1 else ""], used)
    yield per_job

    zombies = GaugeMetricFamily(
        "gputui_zombie_processes",
        "Processes in each suspicious class (defunct, orphan, stuck, unseen, nvml-only, no-permission).",
        labels=["Hostname", "class"],
    )
    counts = dict.fromkeys(ZOMBIE_CLASSES, 0)
    for pid in {(p.pid, p.category) for p in snap.processes if p.category in counts}:
        counts[pid[1]] += 1
    for cls, n in counts.items():
        zombies.add_metric([snap.hostname, cls], float(n))
    yield zombies


def _bounded(text: str, chars: int) -> str:
    """`text` cut to `chars`: label values from cgroup paths and the driver are other people's text."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def owner_labels(owner: Owner | None) -> list[str]:
    """container, pod, namespace and hpc_job of a process's owner; "" for each it has none of, as
    dcgm-exporter writes them for a GPU no pod uses. A container is named by its name where one is known,
    else by its short id (12 hex, as `docker ps`); a pod by its name, else by its UID."""
    container = pod = namespace = hpc_job = ""
    if owner is None:
        pass
    elif owner.kind == "slurm":
        hpc_job = owner.id
    elif owner.kind == "kubernetes":
        pod, namespace = owner.name or owner.id, owner.namespace or ""
        container = (owner.container or "")[:12]
    else:
        container = owner.name or owner.id[:12]
    return [_bounded(v, OWNER_CHARS) for v in (container, pod, namespace, hpc_job)]


def job_key(owner: Owner) -> list[str]:
    """kind and OWNER_LABELS of the job a process belongs to: a pod, not its container; a SLURM job,
    not its step; a container."""
    container, pod, namespace, hpc_job = owner_labels(owner)
    if owner.kind == "kubernetes":
        container = ""
    return [_bounded(owner.kind, 16), container, pod, namespace, hpc_job]


def _instance_labels(p: ProcessRow, profiles: dict[int, str | None]) -> list[str]:
    """GPU_I_PROFILE and GPU_I_ID of the MIG instance a process runs in; "" off MIG."""
    if p.gpu_instance is None:
        return ["", ""]
    return [_bounded(profiles.get(p.gpu_instance) or "", PROFILE_CHARS), str(p.gpu_instance)]


def _instances(g: GpuSample) -> list[MigInstance]:
    """A GPU's MIG instances, one per GPU instance: a series is named by its GPU_I_ID, and a scrape with
    two series of the same labels is rejected whole."""
    first: dict[int, MigInstance] = {}
    for inst in g.mig:
        first.setdefault(inst.gpu_instance, inst)
    return list(first.values())


def _mig_labels(gpu: list[str], inst: MigInstance) -> dict[str, str]:
    """A MIG instance's series: its GPU's labels, and its profile and id, as dcgm-exporter labels them."""
    labels = dict(zip(GPU_LABELS, gpu, strict=True))
    labels["GPU_I_PROFILE"] = _bounded(inst.profile or "", PROFILE_CHARS)
    labels["GPU_I_ID"] = str(inst.gpu_instance)
    return labels


def _mig_util_family(live: list[GpuSample], labels: dict[int, list[str]]) -> Metric:
    util = Metric(
        "gputui_mig_utilization_percent",
        "Utilization of a MIG instance (in %), where the driver reports it per instance.",
        "gauge",
    )
    for g in live:
        for inst in _instances(g):
            if inst.util is not None:
                util.add_sample(util.name, _mig_labels(labels[g.index], inst), float(inst.util))
    return util


def _dip_families(snap: Snapshot, labels: dict[int, list[str]], dips: DipCounters | None) -> Iterator[Metric]:
    if dips is None:
        return
    count = CounterMetricFamily(
        "gputui_dips", "Utilization dips seen (stall: < 5 s, long: >= 5 s).", labels=[*GPU_LABELS, "kind"]
    )
    for g in snap.gpus:  # zeros too: increase() over the window needs the series to exist
        for kind in DIP_KINDS:
            count.add_metric([*labels[g.index], kind], float(dips.count.get((g.index, kind), 0)))
    seconds = CounterMetricFamily(
        "gputui_dip_seconds", "Seconds spent in finished utilization dips.", labels=GPU_LABELS
    )
    in_dip = GaugeMetricFamily(
        "gputui_gpu_in_dip", "1 while the GPU is in a utilization dip.", labels=GPU_LABELS
    )
    for g in snap.gpus:
        seconds.add_metric(labels[g.index], dips.seconds.get(g.index, 0.0))
        in_dip.add_metric(labels[g.index], 1.0 if g.index in dips.ongoing else 0.0)
    yield count
    yield seconds
    yield in_dip


# (suffix, help, key in the agent's per-device stats, kind)
AGENT_FIELDS = (
    ("allocated_bytes", "Bytes in live tensors (torch.cuda.memory_allocated).", "allocated", "gauge"),
    ("allocated_peak_bytes", "Peak of allocated bytes.", "allocated_peak", "gauge"),
    ("reserved_bytes", "Bytes the caching allocator holds from the driver.", "reserved", "gauge"),
    ("reserved_peak_bytes", "Peak of reserved bytes.", "reserved_peak", "gauge"),
    (
        "largest_free_block_bytes",
        "Largest free block inside reserved segments.",
        "largest_free_block",
        "gauge",
    ),
    (
        "fragmentation_percent",
        "Share of reserved-but-free memory outside the largest free block.",
        "fragmentation",
        "gauge",
    ),
    ("alloc_retries", "cudaMalloc retries after freeing cached blocks.", "num_alloc_retries", "counter"),
    ("ooms", "Out-of-memory errors the allocator raised.", "num_ooms", "counter"),
)


def _agent_families(snap: Snapshot) -> Iterator[Metric]:
    names = {p.pid: _short_command(p.command, p.name) for p in snap.processes}
    label_names = ["Hostname", "pid", "command", "cuda_device"]
    fams = {}
    for suffix, doc, _key, kind in AGENT_FIELDS:
        cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        fams[suffix] = cls(f"gputui_agent_{suffix}", doc, labels=label_names)
    wait = GaugeMetricFamily(
        "gputui_agent_data_wait_ratio",
        "Share of step time the training loop waited for its DataLoader.",
        labels=["Hostname", "pid", "command"],
    )
    for pid, report in sorted(snap.agents.items()):
        if not report.ok:  # a slow agent's numbers are old, an unreadable one's are none
            continue
        command = names.get(pid, "")
        for dev in report.devices:
            values = [snap.hostname, str(pid), command, str(dev.index)]
            for suffix, _doc, key, _kind in AGENT_FIELDS:
                value = getattr(dev, key)
                if value is not None:
                    fams[suffix].add_metric(values, float(value))
        if report.progress.data_wait_share is not None:
            wait.add_metric([snap.hostname, str(pid), command], report.progress.data_wait_share)
    yield from fams.values()
    yield wait
