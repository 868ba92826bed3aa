"""`gputui --demo` with one thing rigged, run as a program by the tests of quitting and crashing:

    python -m tests.ui.rigged MODE MARKER [gputui arguments...]

MODE
  stuck-source  from the third reading on, the demo source's read() blocks forever (a hung NVML call)
  stuck-close   as stuck-source, and closing the source hangs too (nvmlShutdown behind the stuck call)
  stuck-agent   from the third tick on, asking the agents never returns (an agent that never answers)
  crash         the GPU panes raise on the third snapshot (a bug in a widget, mid-run)

MARKER is a file written when the rigged thing has happened (the test waits for it). Everything else is
the real program: `gputui.cli.main`, the real demo with its child processes, the real terminal.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from gputui import cli, commands
from gputui.collect.agents.client import AgentPoller
from gputui.collect.sources.demo import DemoSource
from gputui.model import AgentReport, Snapshot
from gputui.ui.widgets.gpu_panes import GpuPanes

GOOD_CALLS = 2


class StuckDemo(DemoSource):
    """The demo whose reads hang once it has drawn a couple of frames."""

    marker: Path
    close_hangs = False

    def close(self) -> None:
        super().close()
        if self.close_hangs:
            threading.Event().wait()

    def read(self, slow: bool):  # type: ignore[no-untyped-def]
        self.reads = getattr(self, "reads", 0) + 1
        if self.reads > GOOD_CALLS:
            self.marker.write_text("stuck\n")
            threading.Event().wait()  # never set: the call never returns
        return super().read(slow)


def rig_stuck_source(marker: Path, close_hangs: bool = False) -> None:
    StuckDemo.marker, StuckDemo.close_hangs = marker, close_hangs
    original = commands.make_source

    def make_source(args: argparse.Namespace, start_at: float = 0.0, watch: bool = False) -> DemoSource:
        source = original(args, start_at, watch)
        assert isinstance(source, DemoSource)
        return StuckDemo(gpus=source.gpu_count, seed=source.seed, start_at=source.start_at)

    commands.make_source = make_source


def rig_stuck_agent(marker: Path) -> None:
    poll = AgentPoller.poll
    calls = 0

    def stuck_poll(self: AgentPoller) -> dict[int, AgentReport]:
        nonlocal calls
        calls += 1
        if calls > GOOD_CALLS:
            marker.write_text("stuck\n")
            threading.Event().wait()
        return poll(self)

    AgentPoller.poll = stuck_poll  # type: ignore[method-assign]  # the rig, on purpose


def rig_crash(marker: Path) -> None:
    show = GpuPanes.show
    calls = 0

    def crashing_show(self: GpuPanes, snap: Snapshot) -> None:
        nonlocal calls
        calls += 1
        if calls > GOOD_CALLS:
            marker.write_text("crashed\n")
            raise RuntimeError("a widget choked on this snapshot")
        show(self, snap)

    GpuPanes.show = crashing_show  # type: ignore[method-assign]


def main() -> int:
    mode, marker, *args = sys.argv[1:]
    rigs = {
        "stuck-source": rig_stuck_source,
        "stuck-close": lambda m: rig_stuck_source(m, close_hangs=True),
        "stuck-agent": rig_stuck_agent,
        "crash": rig_crash,
    }
    rigs[mode](Path(marker))
    return cli.main(["--demo", *args])


if __name__ == "__main__":
    sys.exit(main())
