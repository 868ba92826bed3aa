"""The fleet as Prometheus knows it: every host and GPU scraped from `gputui export` or dcgm-exporter.

One refresh is a handful of PromQL queries whatever the fleet's size (never one per GPU or host):
utilization over the window (one range query), the latest GPU fields (one instant query over several
names), gputui's own host metrics, dips per GPU over the window, and `up`. When a host is opened,
three more: its processes and jobs (one query), its agents' allocators and its memory over the window.

A MIG instance's series (a GPU_I_ID label: gputui and dcgm-exporter both write them) are not a GPU's:
the GPU's own series are read, and a GPU with none only has its instances' memory summed.

When Prometheus cannot be reached the last view is kept and the error is returned with it; a host
whose exporter stopped stays listed (stale, with its last values) until it drops out of the window.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gputui.analyze.dips import MIN_DROP
from gputui.export.promql import (
    AccessDenied,
    BadAnswer,
    Prometheus,
    PrometheusError,
    QueryRefused,
    Sample,
    Series,
    label_value,
    matchers,
)

DEFAULT_WINDOW_S = 900.0
SPARK_POINTS = 60  # points per GPU in the range query: enough for the drill-down's sparkline
# The latest value of each, by the FleetGpu field it fills.
LATEST_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_FB_USED": "mem_used",
    "DCGM_FI_DEV_FB_FREE": "mem_free",
    "DCGM_FI_DEV_GPU_TEMP": "temperature",
    "DCGM_FI_DEV_POWER_USAGE": "power",
}
SORTS = ("name", "busy", "idle", "memory", "dips", "zombies")
# What each value can be; outside it, a value is a lie, shown as unknown (a 300-digit "utilization"
# pushed every column off the screen). Memory of the DCGM fields in MiB, of gputui's in bytes.
PERCENT = (0.0, 100.0)
LIMITS = {
    "util": PERCENT,
    "mem_used": (0.0, 2.0**30),
    "mem_free": (0.0, 2.0**30),
    "temperature": (-273.0, 1000.0),
    "power": (0.0, 1e6),
}
BYTES = (0.0, 2.0**50)  # a PiB
COUNT = (0.0, 1e9)


@dataclass(frozen=True, slots=True)
class FleetGpu:
    gpu: str
    uuid: str = ""
    model: str = ""
    util: float | None = None
    mem_used: float | None = None  # MiB, as dcgm-exporter reports it
    mem_free: float | None = None
    temperature: float | None = None
    power: float | None = None
    series: tuple[float | None, ...] = ()  # utilization over the window, oldest first, one per step
    dips: float | None = None  # dips over the window (gputui exporters only)
    in_dip: bool = False
    unaccounted: float | None = None  # bytes

    @property
    def mem_total(self) -> float | None:
        if self.mem_used is None or self.mem_free is None:
            return None
        return self.mem_used + self.mem_free

    @property
    def mem_percent(self) -> float | None:
        total = self.mem_total
        return None if not total or self.mem_used is None else 100.0 * self.mem_used / total


@dataclass(frozen=True, slots=True)
class FleetHost:
    name: str
    instance: str = ""
    job: str = ""
    gpus: tuple[FleetGpu, ...] = ()
    last_seen: float | None = None  # time of its newest utilization sample
    stale: bool = False  # no current sample: its exporter stopped or cannot be scraped
    down: bool = False  # Prometheus's `up` is 0 for its target
    gputui: bool = False  # scraped from `gputui export`: zombies and dips are known
    zombies: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.name

    def _mean(self, values: Iterable[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    @property
    def util(self) -> float | None:
        return self._mean(g.util for g in self.gpus)

    @property
    def busy_gpus(self) -> int:
        return sum(1 for g in self.gpus if g.util is not None and g.util >= 10)

    @property
    def mem_used(self) -> float | None:
        known = [g.mem_used for g in self.gpus if g.mem_used is not None]
        return sum(known) if known else None

    @property
    def mem_total(self) -> float | None:
        known = [g.mem_total for g in self.gpus if g.mem_total is not None]
        return sum(known) if known else None

    @property
    def mem_percent(self) -> float | None:
        used, total = self.mem_used, self.mem_total
        return None if used is None or not total else 100.0 * used / total

    @property
    def power(self) -> float | None:
        known = [g.power for g in self.gpus if g.power is not None]
        return sum(known) if known else None

    @property
    def dips(self) -> float | None:
        known = [g.dips for g in self.gpus if g.dips is not None]
        return sum(known) if known else None

    @property
    def zombie_total(self) -> int | None:
        return sum(self.zombies.values()) if self.gputui else None


@dataclass(frozen=True, slots=True)
class FleetProcess:
    gpu: str
    pid: str
    user: str
    command: str
    category: str
    memory: float  # bytes


@dataclass(frozen=True, slots=True)
class FleetJob:
    """A job on the host (gputui_job_gpu_memory_bytes): a SLURM job, a Kubernetes pod or a container."""

    kind: str  # slurm, kubernetes, docker, containerd, cri-o, podman (as the exporter said)
    name: str  # the SLURM job id, namespace/pod, or the container
    gpus: tuple[str, ...]  # "0", or "0:3" for MIG instance 3 of GPU 0; in GPU order
    memory: float  # bytes, over its GPUs
    user: str = ""


@dataclass(frozen=True, slots=True)
class FleetAgent:
    pid: str
    command: str
    cuda_device: str
    values: dict[str, float]  # allocated_bytes, reserved_bytes, fragmentation_percent, ooms_total, ...


@dataclass(frozen=True, slots=True)
class HostDetail:
    """What the drill-down shows beyond the fleet row: fetched only for the open host."""

    host: str
    processes: tuple[FleetProcess, ...] = ()
    agents: tuple[FleetAgent, ...] = ()
    mem_series: dict[str, tuple[float | None, ...]] = field(default_factory=dict)
    jobs: tuple[FleetJob, ...] = ()


@dataclass(frozen=True, slots=True)
class FleetView:
    hosts: tuple[FleetHost, ...] = ()
    start: float = 0.0
    end: float = 0.0
    step: float = 15.0
    fetched_at: float | None = None  # when the hosts were last read successfully
    error: str | None = None  # the last refresh failed: why (the hosts are from fetched_at)
    failures: int = 0  # refreshes failed in a row
    refused: bool = False  # Prometheus said the query is wrong (a bad --selector): retrying won't help
    bad_answer: bool = False  # what answered is not Prometheus's API, or not one to trust (promql.BadAnswer)
    access_denied: bool = False  # credentials wanted or refused, or the certificate not verified
    queries: int = 0  # queries the last refresh sent
    detail: HostDetail | None = None

    @property
    def gpu_count(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)


def within(value: float | None, bounds: tuple[float, float]) -> float | None:
    """`value` if it lies within `bounds`, else None (unknown)."""
    return value if value is not None and bounds[0] <= value <= bounds[1] else None


@dataclass(frozen=True, slots=True)
class SparkCell:
    """One sparkline cell over a share of a series: its mean (NaN before the series' first sample, None
    for a gap in it), and whether the share fell into a dip."""

    mean: float | None
    dip: bool = False


def spark_cells(series: tuple[float | None, ...], cells: int, dips: bool = True) -> list[SparkCell]:
    """`cells` cells from `series`, each its share's mean: a host at 80 % reads as 80 %, not as the
    lowest point of every share. With `dips`, a share whose lowest point is a dip (the main view's rule:
    under half the GPU's busy level and at least MIN_DROP points below it) is marked, so a dip shorter
    than a cell still shows."""
    if not series or cells <= 0:
        return [SparkCell(math.nan)] * max(0, cells)
    known = [v for v in series if v is not None]
    busy = statistics.median(known) if dips and known else None
    out: list[SparkCell] = []
    n = len(series)
    for c in range(cells):
        lo = c * n // cells
        share = [v for v in series[lo : max(lo + 1, (c + 1) * n // cells)] if v is not None]
        if not share:
            out.append(SparkCell(None))
            continue
        low = min(share)
        dip = busy is not None and low < busy / 2 and busy - low >= MIN_DROP
        out.append(SparkCell(math.fsum(share) / len(share), dip))
    for i, cell in enumerate(out):  # before the first sample: no data yet, not a gap
        if cell.mean is not None:
            break
        out[i] = SparkCell(math.nan)
    return out


def on_grid(
    values: Iterable[tuple[float, float | None]], start: float, step: float, points: int
) -> tuple[float | None, ...]:
    """A range query's (time, percent) pairs (finite times: promql checked them) placed on the window's
    grid; None where none fell, or where the value is no percentage."""
    series: list[float | None] = [None] * points
    for t, v in values:
        i = round((t - start) / step)
        if 0 <= i < points:
            series[i] = within(v, PERCENT)
    return tuple(series)


def _stale(host: FleetHost, old: FleetHost | None, last_seen: float | None) -> FleetHost:
    """`host` has no current sample: it keeps its last values (from `old`), with the window behind them."""
    if old is None:
        return replace(host, stale=True, last_seen=last_seen)
    before = {g.gpu: g for g in old.gpus}
    gpus = tuple(
        replace(before[g.gpu], series=g.series or before[g.gpu].series) if g.gpu in before else g
        for g in host.gpus
    )
    return replace(
        host,
        gpus=gpus,
        stale=True,
        last_seen=last_seen or old.last_seen,
        gputui=host.gputui or old.gputui,
        zombies=host.zombies or old.zombies,
    )


def on_instance(labels: dict[str, str]) -> bool:
    """A MIG instance's series, not its GPU's (dcgm-exporter's and gputui's GPU_I_ID label)."""
    return bool(labels.get("GPU_I_ID"))


def _gpu_order(gpu: str) -> tuple[int, str]:
    return len(gpu.partition(":")[0]), gpu  # 2 before 10


def jobs_of(samples: Iterable[Sample]) -> tuple[FleetJob, ...]:
    """gputui_job_gpu_memory_bytes samples (a job's memory per GPU) as one FleetJob per job, the one
    using most memory first. A value that is no byte count counts as none; the GPU is still listed."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    for s in samples:
        lb = s.labels
        kind, container, pod, namespace, hpc_job = (
            lb.get(k, "") for k in ("kind", "container", "pod", "namespace", "hpc_job")
        )
        entry = found.setdefault(
            (kind, container, pod, namespace, hpc_job), {"gpus": set(), "memory": 0.0, "users": set()}
        )
        gpu, instance = lb.get("gpu", "?"), lb.get("GPU_I_ID", "")
        entry["gpus"].add(f"{gpu}:{instance}" if instance else gpu)
        entry["memory"] += within(s.value, BYTES) or 0.0
        entry["users"].add(lb.get("user", ""))
    jobs = []
    for (kind, container, pod, namespace, hpc_job), e in found.items():
        if kind == "slurm" or (hpc_job and not pod):
            name = hpc_job
        elif pod:
            name = f"{namespace}/{pod}" if namespace else pod
        else:
            name = container
        users = e["users"]
        user = next(iter(users)) if len(users) == 1 else ""
        gpus = tuple(sorted(e["gpus"], key=_gpu_order))
        jobs.append(FleetJob(kind or "?", name or "?", gpus, min(e["memory"], BYTES[1]), user))
    return tuple(sorted(jobs, key=lambda j: (-j.memory, j.kind, j.name)))


def host_name(labels: dict[str, str]) -> str:
    """dcgm-exporter and gputui name the machine in `Hostname`; the scrape target is the fallback."""
    return labels.get("Hostname") or labels.get("instance") or "?"


def sort_hosts(hosts: Iterable[FleetHost], key: str) -> list[FleetHost]:
    """Hosts in `key` order (see SORTS); unknown values go last, then by name."""

    def measure(h: FleetHost) -> float | None:
        return {
            "busy": h.util,
            "idle": None if h.util is None else -h.util,
            "memory": h.mem_percent,
            "dips": h.dips,
            "zombies": h.zombie_total,
            "name": None,
        }[key]

    by_name = sorted(hosts, key=lambda h: h.name)
    if key == "name":
        return by_name
    return sorted(by_name, key=lambda h: (measure(h) is None, -(measure(h) or 0.0)))


class FleetReader:
    """Reads the fleet from Prometheus; `refresh()` returns a FleetView and never raises."""

    def __init__(
        self,
        prometheus: Prometheus,
        selector: str = "",
        window: float = DEFAULT_WINDOW_S,
        points: int = SPARK_POINTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.prometheus = prometheus
        self.matchers = matchers(selector)
        self.window = window
        self.step = max(1.0, math.ceil(window / points))
        self.points = round(window / self.step) + 1
        self.clock = clock
        self.view = FleetView(step=self.step)
        self.focus: str | None = None  # the host whose detail is wanted

    def _selector(self, *extra: str) -> str:
        parts = [p for p in (*extra, self.matchers) if p]
        return "{" + ",".join(parts) + "}" if parts else ""

    def refresh(self) -> FleetView:
        before = self.prometheus.requests
        try:
            view = self._read()
        except PrometheusError as err:
            view = self._failed(
                str(err),
                refused=isinstance(err, QueryRefused),
                bad_answer=isinstance(err, BadAnswer),
                access_denied=isinstance(err, AccessDenied),
            )
        except Exception as err:  # a bug here must not end the refresh loop: it is the banner's line
            reason = self.prometheus.redact(f"{type(err).__name__}: {err}")
            view = self._failed(f"could not make sense of Prometheus's answer: {reason}", bad_answer=True)
        self.view = replace(view, queries=self.prometheus.requests - before)
        return self.view

    def _failed(
        self, error: str, refused: bool = False, bad_answer: bool = False, access_denied: bool = False
    ) -> FleetView:
        """The last view, kept, with why this refresh failed."""
        return replace(
            self.view,
            error=error,
            failures=self.view.failures + 1,
            refused=refused,
            bad_answer=bad_answer,
            access_denied=access_denied,
        )

    def _read(self) -> FleetView:
        now = self.clock()
        # On the step grid, so the sparklines do not wobble; rounded up, so the last point is the latest
        # sample (Prometheus answers a point ahead of now with the newest value it has).
        end = math.ceil(now / self.step) * self.step
        start = end - self.window
        q = self.prometheus
        util_range = q.query_range(f"DCGM_FI_DEV_GPU_UTIL{self._selector()}", start, end, self.step)
        names = "|".join(n.removeprefix("DCGM_FI_DEV_") for n in LATEST_FIELDS)
        latest = q.query(self._selector(f'__name__=~"DCGM_FI_DEV_({names})"'), at=now)
        ours_names = "zombie_processes|unaccounted_memory_bytes|gpu_in_dip|exporter_info"
        ours = q.query(self._selector(f'__name__=~"gputui_({ours_names})"'), at=now)
        dips = q.query(
            f"sum by (Hostname, instance, job, gpu) "
            f"(increase(gputui_dips_total{self._selector()}[{int(self.window)}s]))",
            at=now,
        )
        up = q.query("up", at=now)
        hosts = self._hosts(util_range, latest, ours, dips, up, start, now)
        focus = self.focus  # read once: the UI thread may clear it meanwhile
        detail = self._detail(focus, start, end) if focus else None
        return FleetView(
            hosts=tuple(hosts), start=start, end=end, step=self.step, fetched_at=now, detail=detail
        )

    def _hosts(  # noqa: C901
        self,
        util_range: list[Series],
        latest: list[Sample],
        ours: list[Sample],
        dips: list[Sample],
        up: list[Sample],
        start: float,
        now: float,
    ) -> list[FleetHost]:
        gpus: dict[str, dict[str, dict[str, Any]]] = {}  # host -> gpu -> FleetGpu's fields
        targets: dict[str, tuple[str, str]] = {}  # host -> (job, instance)
        seen: dict[str, float] = {}  # host -> time of its newest sample in the window
        fresh: set[str] = set()  # hosts with a current sample

        def gpu_of(labels: dict[str, str]) -> dict[str, Any]:
            host = host_name(labels)
            targets.setdefault(host, (labels.get("job", ""), labels.get("instance", "")))
            first = {"uuid": labels.get("UUID", ""), "model": labels.get("modelName", "")}
            return gpus.setdefault(host, {}).setdefault(labels.get("gpu", "?"), first)

        for r in util_range:
            if on_instance(r.labels):
                continue
            if r.points:
                host = host_name(r.labels)
                seen[host] = min(now, max(seen.get(host, 0.0), r.points[-1][0]))
            gpu_of(r.labels)["series"] = on_grid(r.points, start, self.step, self.points)
        instances: dict[tuple[str, str, str], float] = {}  # (host, gpu, field) -> its instances' sum
        for s in latest:
            name = LATEST_FIELDS.get(s.labels.get("__name__", ""))
            if name and on_instance(s.labels):
                if name in ("mem_used", "mem_free") and (value := within(s.value, LIMITS[name])) is not None:
                    key = (host_name(s.labels), s.labels.get("gpu", "?"), name)
                    instances[key] = instances.get(key, 0.0) + value
                gpu_of(s.labels)  # a GPU known only by its instances is listed still
                fresh.add(host_name(s.labels))
            elif name:
                gpu_of(s.labels)[name] = within(s.value, LIMITS[name])
                fresh.add(host_name(s.labels))
        for (host, gpu, name), total in instances.items():
            fields_of = gpus[host][gpu]
            if fields_of.get(name) is None:  # no whole-GPU value: the GPU's instances' memory
                fields_of[name] = within(total, LIMITS[name])
        zombies: dict[str, dict[str, int]] = {}
        for s in ours:
            labels, value = s.labels, s.value
            host, metric = host_name(labels), labels.get("__name__", "")
            zombies.setdefault(host, {})
            if metric == "gputui_zombie_processes" and (count := within(value, COUNT)) is not None:
                zombies[host][labels.get("class", "?")] = int(count)
            elif metric == "gputui_unaccounted_memory_bytes" and host in gpus:
                gpu_of(labels)["unaccounted"] = within(value, BYTES)
            elif metric == "gputui_gpu_in_dip" and host in gpus:
                gpu_of(labels)["in_dip"] = bool(value)
        for s in dips:
            if host_name(s.labels) in gpus:
                gpu_of(s.labels)["dips"] = within(s.value, COUNT)
        down = {(s.labels.get("job", ""), s.labels.get("instance", "")) for s in up if s.value == 0}

        previous = {h.name: h for h in self.view.hosts}
        hosts = []
        for name, fields in gpus.items():
            job, instance = targets[name]
            in_order = sorted(fields, key=lambda g: (len(g), g))  # 2 before 10
            row = FleetHost(
                name,
                instance,
                job,
                tuple(FleetGpu(g, **fields[g]) for g in in_order),
                last_seen=now,
                down=(job, instance) in down,
                gputui=name in zombies,
                zombies=zombies.get(name, {}),
            )
            old = previous.get(name)
            if name not in fresh:
                row = _stale(row, old, seen.get(name))
            hosts.append(row)
        for name, old in previous.items():
            # Gone from the range data too (it was up for less than a step): keep it, stale, for a window.
            if name not in gpus and old.last_seen is not None and now - old.last_seen <= self.window:
                hosts.append(replace(old, stale=True, down=(old.job, old.instance) in down))
        return hosts

    def _detail(self, host: str, start: float, end: float) -> HostDetail:
        known = next((h for h in self.view.hosts if h.name == host), None)
        # dcgm-exporter's Hostname when the host has one, else its scrape target.
        label = f"Hostname={label_value(host)}"
        if known is not None and known.instance == host:
            label = f"instance={label_value(host)}"
        q = self.prometheus
        # Processes and jobs in one query: opening a host costs three queries, as before jobs.
        owned = q.query(
            self._selector('__name__=~"gputui_process_gpu_memory_bytes|gputui_job_gpu_memory_bytes"', label)
        )
        procs = [s for s in owned if s.labels.get("__name__") != "gputui_job_gpu_memory_bytes"]
        jobs = jobs_of(s for s in owned if s.labels.get("__name__") == "gputui_job_gpu_memory_bytes")
        agents = q.query(self._selector('__name__=~"gputui_agent_.*"', label))
        sel = self._selector(label)
        mem = q.query_range(
            f"100 * DCGM_FI_DEV_FB_USED{sel} / (DCGM_FI_DEV_FB_USED{sel} + DCGM_FI_DEV_FB_FREE{sel})",
            start,
            end,
            self.step,
        )
        processes = sorted(
            (
                FleetProcess(
                    s.labels.get("gpu", "?"),
                    s.labels.get("pid", "?"),
                    s.labels.get("user", ""),
                    s.labels.get("command", ""),
                    s.labels.get("class", ""),
                    within(s.value, BYTES) or 0.0,
                )
                for s in procs
            ),
            key=lambda p: (-p.memory, p.gpu, p.pid),
        )
        by_agent: dict[tuple[str, str], dict[str, Any]] = {}
        for s in agents:
            labels = s.labels
            entry = by_agent.setdefault(
                (labels.get("pid", "?"), labels.get("cuda_device", "")),
                {"command": labels.get("command", ""), "values": {}},
            )
            name = labels.get("__name__", "").removeprefix("gputui_agent_")
            value = within(s.value, PERCENT if name.endswith("_percent") else BYTES)
            if value is not None:  # the rest are bytes and counts: a PiB bounds both
                entry["values"][name] = value
        agent_rows = tuple(
            FleetAgent(pid, e["command"], dev, e["values"]) for (pid, dev), e in sorted(by_agent.items())
        )
        mem_series = {
            r.labels.get("gpu", "?"): on_grid(r.points, start, self.step, self.points)
            for r in mem
            if not on_instance(r.labels)
        }
        return HostDetail(host, tuple(processes), agent_rows, mem_series, jobs)
