"""The monitor samples through one protocol (gputui.collect.sampler.Sampling), which the live Sampler and
the ReplaySampler both satisfy: the annotated assignments below are checked by mypy (`make lint`). Only a
recording can seek (its `seekable`); a live sampler says None."""

from __future__ import annotations

from gputui.collect.sampler import Sampler, Sampling, Seekable
from gputui.collect.sources.demo import DemoSource
from gputui.collect.sources.replay import ReplaySampler


def test_the_live_and_the_replay_sampler_are_both_samplings() -> None:
    live: Sampling = Sampler(DemoSource(gpus=1), scan_holders=False)
    with Sampler(DemoSource(gpus=1), scan_holders=False) as demo:
        snaps = [demo.tick(), demo.tick(), demo.tick()]
    replay: Sampling = ReplaySampler(snaps)
    assert live.seekable is None and live.agents is not None
    seekable: Seekable | None = replay.seekable
    assert seekable is not None and replay.agents is None
    assert replay.memory_split(snaps[0].processes[0].pid, None) is None  # a recording keeps no split
    replay.open()
    replay.tick()
    replay.tick()
    assert seekable.position == 2 and list(seekable.played) == snaps[:2]
    assert seekable.seek(-10) == 1 and seekable.seek(10) == len(seekable.snapshots) == 3
    live.close()
