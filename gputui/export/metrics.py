"""A Snapshot as Prometheus metric families.

GPU metrics carry dcgm-exporter's names, units and labels, so dashboards made for dcgm-exporter work
unchanged. gputui's own metrics (prefix ``gputui_``) add what dcgm-exporter cannot see: processes and
their memory, zombie classes, unaccounted memory, utilization dips and the torch allocator.

Families are built fresh from the latest snapshot at each scrape: the series of a process that exited
are simply not there any more.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from gputui.collect.classify import SUSPICIOUS
from gputui.collect.dips import Dip
from gputui.model import GpuSample, Snapshot
from gputui.units import printable

MIB = 1024 * 1024
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
ZOMBIE_CLASSES = tuple(sorted(SUSPICIOUS))
DIP_KINDS = ("stall", "long")
COMMAND_CHARS = 60  # a label is stored with every sample: keep the command short


def _free_mib(g: GpuSample) -> float | None:
    if g.mem_total is None or g.mem_used is None:
        return None
    return max(0, g.mem_total - g.mem_used - (g.mem_reserved or 0)) // MIB


def _mib(v: int | None) -> int | None:
    return None if v is None else v // MIB  # whole MiB, as DCGM reports them


def _energy_mj(g: GpuSample) -> float | None:
    return None if g.energy is None else g.energy * 1000.0


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
    # A counter in dcgm-exporter; prometheus-client cannot write a counter without `_total`, so the TYPE
    # line says gauge and the name stays dcgm-exporter's (rate() and increase() work the same).
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        "gauge",
        _energy_mj,
    ),
)


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
    """dcgm-exporter's label values: `device` is the /dev/nvidiaN name, N being the minor number."""
    device = f"nvidia{g.minor if g.minor is not None else g.index}"
    return [str(g.index), g.uuid or "", g.pci_bus_id or "", device, g.name or "", hostname]


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


def families(snap: Snapshot, dips: DipCounters | None = None) -> Iterator[Metric]:
    host = snap.hostname
    live = [g for g in snap.gpus if not g.lost]
    labels = {g.index: gpu_labels(g, host) for g in snap.gpus}
    for name, doc, kind, read in DCGM_FIELDS:
        fam = Metric(name, doc, kind)
        for g in live:
            value = read(g)
            if value is not None:  # unsupported here: no sample, as dcgm-exporter does
                fam.add_sample(name, dict(zip(GPU_LABELS, labels[g.index], strict=True)), float(value))
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
        labels=["gpu", "UUID", "Hostname", "pid", "user", "command", "class"],
    )
    seen: set[tuple[int, int]] = set()
    for p in snap.processes:
        if p.gpu is None or p.used_memory is None or p.gpu not in labels or (p.gpu, p.pid) in seen:
            continue
        seen.add((p.gpu, p.pid))
        gpu, uuid, *_, hostname = labels[p.gpu]
        mem.add_metric(
            [gpu, uuid, hostname, str(p.pid), p.user or "", _short_command(p.command, p.name), p.category],
            float(p.used_memory),
        )
    yield mem

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
