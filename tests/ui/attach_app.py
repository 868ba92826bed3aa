"""The monitor on the fixed world whose highlighted row is a real process, run as a program by the tests of
quitting during an attach:

    python -m tests.ui.attach_app PID

`a` then `a` attaches the real debugger to PID. It leaves as gputui does (cli.main's signal handlers, the
app's own run, its exit status); nothing is rigged but the world it shows.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from pathlib import Path

import psutil

from gputui import cli
from gputui.collect.agents.client import AgentPoller
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Snapshot
from gputui.ui.app import GpuTuiApp
from tests.ui import world


class LiveAgents(ReplaySampler):
    """The fixed world, with each tick's agents asked live: the ◆ shows when PID's agent answers."""

    agents: AgentPoller

    def tick(self) -> Snapshot:
        snap = super().tick()
        return dataclasses.replace(snap, agents=self.agents.poll())


def app_for(pid: int) -> GpuTuiApp:
    started = psutil.Process(pid).create_time()
    first = world.trainer_pid(0)
    snaps = [
        dataclasses.replace(
            s,
            processes=tuple(
                dataclasses.replace(p, pid=pid, create_time=started, command="python gil_hog.py")
                if p.pid == first
                else p
                for p in s.processes
            ),
        )
        for s in world.snapshots(gpus=2, seconds=20, weird=False)
    ]
    sampler = LiveAgents(snaps, devices_dir=Path("/nonexistent"))
    sampler.agents = AgentPoller()
    return GpuTuiApp(sampler, interval=30.0, devices_dir=Path("/nonexistent"))


def main() -> int:
    pid = int(sys.argv[1])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # as cli.main does
        signal.signal(sig, cli._exit_on_signal)
    code = app_for(pid).run()
    return code if code is not None else 0


if __name__ == "__main__":
    sys.exit(main())
