"""One tick = one Snapshot: the source's reading joined with the host's view of its processes."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from gputui.analyze import classify, forecast, hung
from gputui.analyze.history import History
from gputui.collect.agents.client import AgentPoller
from gputui.collect.host import HostSampler
from gputui.collect.procs.holders import HolderScanner
from gputui.collect.procs.join import ProcessJoiner
from gputui.collect.sources.base import GpuSource, Named, SourceInfo, SourceUnavailable
from gputui.model import AgentReport, GpuSample, Owner, ProcessRow, Snapshot, unaccounted_memory

if TYPE_CHECKING:
    from gputui.collect.procs.owners import Found, Owners

TREND_EVERY_S = 5.0  # a process's memory trend is recomputed at most this often


class Seekable(Protocol):
    """A sampler that plays a recording back: the play position moves both ways."""

    @property
    def position(self) -> int:
        """How many snapshots were played."""
        ...

    @property
    def snapshots(self) -> Sequence[Snapshot]: ...

    @property
    def played(self) -> Sequence[Snapshot]: ...

    def seek(self, delta: int) -> int:
        """Move the play position by `delta` snapshots; the new position."""
        ...


class Sampling(Protocol):
    """What the monitor samples through: the live Sampler, or a ReplaySampler playing snapshots back."""

    want_relatives: bool  # the tree view sets it: parents and children too

    @property
    def source(self) -> Named: ...

    @property
    def info(self) -> SourceInfo | None:
        """None until open()."""
        ...

    @property
    def agents(self) -> AgentPoller | None:
        """The poller that asks the agents, where the sampler asks live ones."""
        ...

    @property
    def seekable(self) -> Seekable | None:
        """The play controls, for a recording; None when live."""
        ...

    def open(self) -> SourceInfo: ...

    def tick(self) -> Snapshot: ...

    def close(self) -> None: ...

    def memory_split(self, pid: int, create_time: float | None) -> forecast.Split | None:
        """With an agent: whether allocated or only reserved memory grows (None: not known here)."""
        ...


class Sampler:
    """Owns a source. Fast fields every tick; slow fields once `slow_interval` seconds have passed."""

    def __init__(
        self,
        source: GpuSource,
        slow_interval: float = 5.0,
        history: History | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        devices_dir: Path | None = None,
        scan_holders: bool = True,
        agents: AgentPoller | None = None,
        host: HostSampler | None = None,
        owners: Owners | None = None,
    ) -> None:
        self.source = source
        self.slow_interval = slow_interval
        # Kept here for consumers without a UI thread; the TUI keeps its own, on its own thread.
        self.history = history
        self.clock, self.monotonic = clock, monotonic
        self.hostname = socket.gethostname()
        self.info: SourceInfo | None = None
        self.ticks = 0
        self.want_relatives = False  # the UI's tree view sets this: parents and children too
        self._joiner = ProcessJoiner(monotonic)
        self.devices_dir = devices_dir  # None: the source's (/dev, or the demo's stand-ins)
        self.scan_holders = scan_holders
        self._scanner: HolderScanner | None = None
        self.agents = agents if agents is not None else AgentPoller()
        self.host = host if host is not None else HostSampler(clock)
        self._owners = owners  # made on the first tick (see `owners`)
        self._last_slow: float | None = None
        self._lock = threading.Lock()  # open() may be started early on another thread
        self._closed = False
        self._tick_lock = threading.Lock()  # so may the first tick: see prefetch()
        self._early: Snapshot | None = None
        # Per process (pid, create time): its memory and agent numbers, its trend, since when it idles;
        # per GPU: its recent utilization and power. For the forecast and the hung rules.
        self.memory = forecast.MemorySeries()
        self.gpu_windows: dict[int, hung.GpuWindow] = {}
        self.hung_rules = hung.DEFAULT
        self._trends: dict[tuple[int, float | None], tuple[float, forecast.Forecast]] = {}
        self._quiet_since: dict[tuple[int, float | None], float] = {}
        # per (pid, create time, GPU): when its own SM % last said its kernels ran, or did not
        self._own_sm: dict[tuple[int, float | None, int], hung.ProcessSm] = {}

    def open(self) -> SourceInfo:
        """Open the source once; a second caller waits for the first and gets the same answer."""
        with self._lock:
            if self._closed:
                raise SourceUnavailable("the sampler was closed")
            if self.info is None:
                self.info = self.source.open()
            return self.info

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self.source.close()

    def __enter__(self) -> Sampler:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def owners(self) -> Owners:
        """Made when first needed: on the first tick, which the monitor takes on the prefetch thread while
        Textual is imported, so its imports (json, sockets, the cgroup patterns) are not the first frame's."""
        if self._owners is None:
            from gputui.collect.procs.owners import Owners

            self._owners = Owners(monotonic=self.monotonic)
        return self._owners

    @owners.setter
    def owners(self, owners: Owners) -> None:
        self._owners = owners

    def prefetch(self) -> None:
        """Open and take the first tick now, on the caller's thread, while the UI is still starting up;
        the next tick() returns it. The first frame then waits for the slower of the two, not both."""
        with self._tick_lock:
            if self._early is None:
                self.open()
                self._early = self._tick()

    def tick(self) -> Snapshot:
        with self._tick_lock:
            early, self._early = self._early, None
            return early if early is not None else self._tick()

    def _tick(self) -> Snapshot:
        assert self.info is not None, "Sampler.open() first"
        now = self.monotonic()
        slow = self._last_slow is None or now - self._last_slow >= self.slow_interval
        if slow:
            self._last_slow = now
        reading = self.source.read(slow)
        scan = None
        if self.scan_holders:
            if self._scanner is None:
                self._scanner = HolderScanner(
                    self.devices_dir or self.source.devices_dir, monotonic=self.monotonic
                )
            scan = self._scanner.scan()
        minors = {g.minor: g.index for g in reading.gpus if g.minor is not None}
        agents = self.agents.poll()  # first: a process with the agent and no GPU is described too (its row)
        rows, hosts = self._joiner.join(
            reading.processes, scan, minors, relatives=self.want_relatives, extra=agents.keys()
        )
        rows = self._with_owners(rows)
        wall = self.clock()
        rows = self._with_trends(rows, reading.gpus, agents, wall)
        snap = Snapshot(
            time=wall,
            hostname=self.hostname,
            source=self.source.name,
            driver_version=self.info.driver_version,
            nvml_version=self.info.nvml_version,
            cuda_driver_version=self.info.cuda_driver_version,
            gpus=reading.gpus,
            processes=rows,
            unaccounted_memory={
                gpu: None if gpu in reading.processes_unknown else value
                for gpu, value in unaccounted_memory(reading.gpus, reading.processes).items()
            },
            errors=reading.errors,
            host_processes=hosts,
            unreadable_fds=len(scan.unreadable) if scan else 0,
            agents=agents,
            host=self.host.read(),
            xids=reading.xids,
            gpm_note=reading.gpm_note,
        )
        if self.history is not None:
            self.history.add(snap)
        self.ticks += 1
        return snap

    def _with_trends(  # noqa: C901
        self,
        rows: tuple[ProcessRow, ...],
        gpus: tuple[GpuSample, ...],
        agents: dict[int, AgentReport],
        now: float,
    ) -> tuple[ProcessRow, ...]:
        """Each GPU row with its memory trend, its GPU's time to full and, when it looks hung, why (its
        class then `hung`, if it had none). Rows are copied only when one of those is known."""
        for gpu in gpus:
            self.gpu_windows.setdefault(gpu.index, hung.GpuWindow()).add(now, gpu)
        by_index = {g.index: g for g in gpus}
        keys: list[tuple[int, float | None]] = []
        growth: dict[int, float | None] = {}  # row index -> bytes/s
        for i, row in enumerate(rows):
            if row.gpu is None:
                continue
            key = (row.pid, row.create_time)
            keys.append(key)
            self.memory.add(key, now, row.used_memory)
            report = agents.get(row.pid)
            if report is not None and report.ok and report.devices:
                self.memory.add_agent(
                    key,
                    now,
                    sum(d.allocated or 0 for d in report.devices),
                    sum(d.reserved or 0 for d in report.devices),
                )
            if row.cpu_percent is not None:
                if row.cpu_percent <= hung.CPU_QUIET:
                    self._quiet_since.setdefault(key, now)
                else:
                    self._quiet_since.pop(key, None)
            growth[i] = self._trend(key, now, row.create_time)
        # A GPU (or MIG instance) fills at the rate of all its growing processes together.
        filling: dict[tuple[int, int | None], float] = {}
        for i, g in growth.items():
            if g:
                where = (rows[i].gpu or 0, rows[i].gpu_instance)
                filling[where] = filling.get(where, 0.0) + g
        out = list(rows)
        listed: dict[int, set[int]] = {}  # GPU -> the pids NVML lists on it: is a process alone there?
        for row in rows:
            if row.gpu is not None and row.kinds:
                listed.setdefault(row.gpu, set()).add(row.pid)
        for i, g in growth.items():
            row = rows[i]
            sample = by_index.get(row.gpu or 0)
            full_in = None
            if g and sample is not None:
                full_in = forecast.seconds_until_full(
                    forecast.free_bytes(sample, row.gpu_instance), filling[(row.gpu or 0, row.gpu_instance)]
                )
            others = len(listed.get(row.gpu or 0, ())) - 1
            verdict = self._hung(row, agents.get(row.pid), now, others)
            if g is None and verdict is None:
                continue
            changes: dict[str, object] = {"memory_growth": g, "full_in": full_in, "hung": verdict}
            if verdict is not None and row.category == classify.OK:
                changes.update(category=classify.HUNG, reason=verdict)
            out[i] = dataclasses.replace(row, **changes)  # type: ignore[arg-type]
        self.memory.forget_except(keys)
        live = set(keys)
        for store in (self._trends, self._quiet_since):
            for key in [k for k in store if k not in live]:
                del store[key]
        for own in [k for k in self._own_sm if k[:2] not in live]:
            del self._own_sm[own]
        return tuple(out)

    def _trend(self, key: tuple[int, float | None], now: float, born: float | None) -> float | None:
        """bytes/s (0.0: not growing), None: not enough data yet; recomputed every TREND_EVERY_S."""
        cached = self._trends.get(key)
        if cached is None or now >= cached[0] or now < cached[0] - 2 * TREND_EVERY_S:
            f = forecast.forecast(self.memory.series(key), now, born)
            # Spread the processes' recomputations over the period, not all on one tick.
            spread = TREND_EVERY_S * (0.75 + 0.5 * ((key[0] * 2654435761) % 1000) / 1000)
            cached = self._trends[key] = (now + spread, f)
        f = cached[1]
        return f.growth if f.enough else None

    def _hung(self, row: ProcessRow, report: AgentReport | None, now: float, others: int = 0) -> str | None:
        """Why this row looks hung, or None. `others`: how many other processes NVML lists on its GPU.
        Without an agent each process is judged by its own SM % and CPU, not by its GPU's alone: a quiet
        process beside a spinning one is not hung (see hung.possibly_hung)."""
        gpu = self.gpu_windows.get(row.gpu or 0)
        own = None
        if row.kinds:  # its own SM % is tracked every tick, whichever rule applies now
            own = self._own_sm.setdefault((row.pid, row.create_time, row.gpu or 0), hung.ProcessSm())
            own.add(now, row.sm_util)
        if report is not None and report.progress.steps is not None:  # the agent knows: only its rule
            return hung.stalled(report, gpu, now, self.hung_rules)
        if own is None:  # not in NVML's lists: a data-loader worker, not the GPU's user
            return None
        since = self._quiet_since.get((row.pid, row.create_time))
        return hung.possibly_hung(
            None if since is None else now - since,
            gpu,
            now,
            self.hung_rules,
            own_sm=own.spinning(now, self.hung_rules.quiet_s),
            sharing=others,
        )

    @property
    def seekable(self) -> None:
        """Live: no play position to move."""
        return None

    def memory_split(self, pid: int, create_time: float | None) -> forecast.Split | None:
        """With an agent: whether allocated (a leak) or only reserved (fragmentation) grows."""
        return self.memory.split((pid, create_time), self.clock(), create_time)

    def _with_owners(self, rows: tuple[ProcessRow, ...]) -> tuple[ProcessRow, ...]:
        """Each row with its container, pod or SLURM job; an orphan's reason says whose, and whether
        that pod or job has ended. Only rows that have an owner are copied: most have none. The cgroup
        reads behind "has ended" are bounded per tick (see gputui.collect.procs.owners): each job's cgroup is
        read once for all its orphans."""
        owners = self.owners
        owners.tick()
        out = list(rows)
        for i, row in enumerate(rows):
            if not row.visible:  # another PID namespace's pid, or gone: this /proc/PID is not it
                continue
            try:
                owner = owners.lookup(row.pid, row.create_time)
            except (OSError, ValueError):  # a name or an owner is never worth a tick
                owner = None
            if owner is not None:
                out[i] = dataclasses.replace(row, owner=owner)
        orphans = [
            i
            for i, row in enumerate(out)
            if row.category == "orphan"
            and row.owner is not None
            and row.owner.kind in ("slurm", "kubernetes")
        ]
        if orphans:
            of_job: dict[tuple[str, str], set[int]] = {}
            for r in out:
                if r.category == "orphan" and r.owner is not None:
                    of_job.setdefault((r.owner.kind, r.owner.id), set()).add(r.pid)
            found = {i: owners.found(out[i].pid, out[i].create_time) for i in orphans}
            owners.read_groups(f for f in found.values() if f is not None)
            for i in orphans:
                row = out[i]
                assert row.owner is not None
                mates = of_job[(row.owner.kind, row.owner.id)]
                out[i] = dataclasses.replace(row, reason=self._orphan_reason(row, found[i], mates))
        owners.forget_except(r.pid for r in rows)
        return tuple(out)

    def _orphan_reason(self, row: ProcessRow, found: Found | None, orphans: set[int]) -> str:
        """`orphan of SLURM job 81234, which has ended; ...`: ended when no process but this job's
        orphans is left in the job's (or pod's) cgroup, which takes root to read; unsaid when unknown."""
        owner = row.owner
        assert owner is not None
        others = self.owners.others_in_group(found, orphans) if found is not None else None
        if others == 0:
            state = ", which has ended"
        elif others is not None:
            state = f", which still runs ({others} other process{'es' if others != 1 else ''})"
        else:
            state = ""
        return (
            f"orphan of {_whose(owner)}{state}; {row.reason}"
            if row.reason
            else f"orphan of {_whose(owner)}{state}"
        )


def _whose(owner: Owner) -> str:
    if owner.kind == "slurm":
        return f"SLURM job {owner.id}"
    if owner.name:
        return f"pod {owner.namespace}/{owner.name}" if owner.namespace else f"pod {owner.name}"
    return f"pod {owner.id}"
