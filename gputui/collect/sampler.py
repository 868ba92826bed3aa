"""One tick = one Snapshot: the source's reading joined with the host's view of its processes."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from gputui.collect.agents import AgentPoller
from gputui.collect.history import History
from gputui.collect.holders import HolderScanner
from gputui.collect.host import HostSampler
from gputui.collect.owners import Owners
from gputui.collect.procs import ProcessJoiner
from gputui.collect.source import GpuSource, SourceInfo, SourceUnavailable
from gputui.model import Owner, ProcessRow, Snapshot, unaccounted_memory


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
        self.owners = owners if owners is not None else Owners(monotonic=monotonic)
        self._last_slow: float | None = None
        self._lock = threading.Lock()  # open() may be started early on another thread
        self._closed = False
        self._tick_lock = threading.Lock()  # so may the first tick: see prefetch()
        self._early: Snapshot | None = None

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
        rows, hosts = self._joiner.join(reading.processes, scan, minors, relatives=self.want_relatives)
        rows = self._with_owners(rows)
        snap = Snapshot(
            time=self.clock(),
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
            agents=self.agents.poll(),
            host=self.host.read(),
        )
        if self.history is not None:
            self.history.add(snap)
        self.ticks += 1
        return snap

    def _with_owners(self, rows: tuple[ProcessRow, ...]) -> tuple[ProcessRow, ...]:
        """Each row with its container, pod or SLURM job; an orphan's reason says whose, and whether
        that pod or job has ended. Only rows that have an owner are copied: most have none."""
        owners = self.owners
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
        for i, row in enumerate(out):
            if (
                row.category == "orphan"
                and row.owner is not None
                and row.owner.kind in ("slurm", "kubernetes")
            ):
                out[i] = dataclasses.replace(row, reason=self._orphan_reason(row, out))
        owners.forget_except(r.pid for r in rows)
        return tuple(out)

    def _orphan_reason(self, row: ProcessRow, rows: list[ProcessRow]) -> str:
        """`orphan of SLURM job 81234, which has ended; ...`: ended when no process but this job's
        orphans is left in the job's (or pod's) cgroup, which takes root to read; unsaid when unknown."""
        owner = row.owner
        assert owner is not None
        found = self.owners.found(row.pid, row.create_time)
        orphans = {
            r.pid
            for r in rows
            if r.category == "orphan"
            and r.owner is not None
            and (r.owner.kind, r.owner.id) == (owner.kind, owner.id)
        }
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
