"""A sampler that plays back snapshots: recordings, and fixed worlds for tests and screenshots."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gputui.collect.sources.base import SourceInfo
from gputui.model import Snapshot

if TYPE_CHECKING:
    from gputui.analyze.forecast import Split
    from gputui.collect.agents.client import AgentPoller


@dataclass
class _ReplaySource:
    name: str
    devices_dir: Path

    def close(self) -> None:
        pass


class ReplaySampler:
    """The Sampler's interface (gputui.collect.sampler.Sampling) over a list of snapshots, seekable; the
    last one repeats once they run out."""

    # Seconds between two replayed snapshots: the recording's own spacing, within bounds, so that
    # times that jump (a clock step, a crafted file) neither freeze the replay nor make it spin.
    MIN_INTERVAL, MAX_INTERVAL = 0.05, 60.0

    @classmethod
    def interval_of(cls, snapshots: list[Snapshot], speed: float = 1.0) -> float:
        spacing = (
            (snapshots[-1].time - snapshots[0].time) / (len(snapshots) - 1) if len(snapshots) > 1 else 1.0
        )
        return min(cls.MAX_INTERVAL, max(cls.MIN_INTERVAL, spacing / speed))

    def __init__(self, snapshots: Iterable[Snapshot], devices_dir: Path = Path("/dev")) -> None:
        self.snapshots = list(snapshots)
        if not self.snapshots:
            raise ValueError("nothing to replay")
        first = self.snapshots[0]
        self.source = _ReplaySource(first.source, devices_dir)
        self.info: SourceInfo | None = None
        self.want_relatives = False
        self.position = 0
        self.agents: AgentPoller | None = None  # a recording's agents are not asked (tests may give one)

    def open(self) -> SourceInfo:
        first = self.snapshots[0]
        self.info = SourceInfo(first.driver_version, first.nvml_version, first.cuda_driver_version)
        return self.info

    def tick(self) -> Snapshot:
        snap = self.snapshots[min(self.position, len(self.snapshots) - 1)]
        self.position = min(self.position + 1, len(self.snapshots))
        return snap

    def seek(self, delta: int) -> int:
        """Move the play position by `delta` snapshots; the new position (snapshots already played)."""
        self.position = max(1, min(len(self.snapshots), self.position + delta))
        return self.position

    @property
    def played(self) -> list[Snapshot]:
        return self.snapshots[: self.position]

    @property
    def seekable(self) -> ReplaySampler:
        return self

    def memory_split(self, pid: int, create_time: float | None) -> Split | None:
        """A recording keeps no allocated/reserved series (its memory history is the app's own)."""
        return None

    def close(self) -> None:
        pass
