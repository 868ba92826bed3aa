"""Xid events a source hands over reach the snapshot (and so the panes, Events, --json and the exporter)."""

from __future__ import annotations

import time

from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource
from gputui.model import XidEvent


def test_the_demos_xids_reach_a_snapshot_once() -> None:
    seen: list[XidEvent] = []
    with Sampler(DemoSource(gpus=2, faults=True, start_at=89.0)) as sampler:
        end = time.monotonic() + 8.0
        while time.monotonic() < end and len(seen) < 2:
            seen += sampler.tick().xids
            time.sleep(0.2)
        for _ in range(3):
            seen += sampler.tick().xids  # and never again
    assert sorted(x.xid for x in seen) == [63, 94]
    assert {x.gpu for x in seen} == {1}
