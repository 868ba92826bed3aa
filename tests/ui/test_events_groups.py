"""The Events pane (e) shows a dip that the GPUs of one job share as one row: eight torchrun ranks waiting
together, beside an unrelated job on a ninth GPU that dipped at the same moment."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gputui.collect.sources.replay import ReplaySampler
from gputui.model import GpuSample, HostProcess, ProcessRow, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.events import EventsScreen
from gputui.ui.widgets.dip_groups import RANGE
from tests.builders import process_row, snapshot
from tests.ui.conftest import first_frame
from tests.ui.test_dips_ui import events_text, press, summary_rows

T0 = 1_795_000_000.0
SIZE = (120, 40)
LAUNCHER = 4242
JOB_GPUS = range(8)
LONER = 8  # a GPU whose process has no launcher (its parent is init)
START = time.strftime("%H:%M:%S", time.gmtime(T0 + 60))  # when the dips start, as the pane shows it in UTC
EVIL = "/usr/bin/python3 /venv/bin/torchrun\x1b[2J\x1b]0;owned\x07 --nproc-per-node 8 train.py"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def row(gpu: int, pid: int, ppid: int) -> ProcessRow:
    return process_row(
        gpu,
        pid,
        user="alice",
        name="python",
        command=f"python train.py --rank {gpu}",
        create_time=T0 - 600,
        ppid=ppid,
    )


def util(gpu: int, t: int, dip_from: int, dip_to: int) -> int:
    """Busy at 95 %; down to 5 % from `dip_from` (odd ranks a second later) until `dip_to`."""
    return 5 if dip_from + (gpu % 2) <= t < dip_to else 95


def snapshots(seconds: int, dip_from: int, dip_to: int, launcher_command: str) -> list[Snapshot]:
    procs = (*(row(g, 5000 + g, LAUNCHER) for g in JOB_GPUS), row(LONER, 7000, 1))
    hosts = (
        HostProcess(LAUNCHER, 1, "alice", "torchrun", launcher_command, 0.1, None, T0 - 700, "sleeping"),
    )
    return [
        snapshot(
            time=T0 + t,
            gpus=tuple(GpuSample(index=g, util_gpu=util(g, t, dip_from, dip_to)) for g in (*JOB_GPUS, LONER)),
            processes=procs,
            host_processes=hosts,
        )
        for t in range(seconds + 1)
    ]


def app_on(snaps: list[Snapshot]) -> GpuTuiApp:
    app = GpuTuiApp(ReplaySampler(snaps[-1:]), interval=3600.0, readonly=True)
    for snap in snaps[:-1]:
        app.ingest(snap)
    return app


def table_rows(body: str) -> list[list[str]]:
    """The dips table's rows, split on runs of two or more spaces."""
    lines = body.splitlines()
    top = next(i for i, line in enumerate(lines) if line.split()[:2] == ["time", "GPU"])
    assert lines[top].split() == ["time", "GPU", "job", "duration", "depth", "kind", "why"]
    return [[c for c in line.strip().split("  ") if c.strip()] for line in lines[top + 1 :] if line.strip()]


async def test_a_dip_shared_by_eight_gpus_of_a_job_is_one_row() -> None:
    app = app_on(snapshots(90, dip_from=60, dip_to=64, launcher_command=EVIL))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert sorted(d.gpu for d in app.dips.dips) == [*JOB_GPUS, LONER]  # nine dips were detected
        await press(pilot, "e")
        assert isinstance(app.screen, EventsScreen)
        body = events_text(app)
        rows = [[c.strip() for c in r] for r in table_rows(body)]
        # Newest first: all nine ended at the same sample, GPU 8's last. The launcher's name is shortened
        # as the process table does, its control characters shown as "?", and cut.
        assert rows == [
            [START, "8", "4 s", "-90 pts (95→5%)", "stall"],
            [START, f"0{RANGE}7", "torchrun?[2J?]0;own… pid 4242", "4 s", "-90 pts (95→5%)", "stall"],
        ]
        assert "\x1b" not in body and "\x07" not in body
        # The summary still counts each GPU's own dip.
        summary = summary_rows(body)
        assert sorted(summary) == [*JOB_GPUS, LONER]
        assert all(cells[1] == "1" for cells in summary.values())


async def test_a_group_with_a_dip_still_running_is_open() -> None:
    app = app_on(snapshots(70, dip_from=60, dip_to=999, launcher_command="torchrun --nproc-per-node 8 t.py"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert not app.dips.dips  # nothing ended: every dip is ongoing
        await press(pilot, "e")
        rows = [[c.strip() for c in r] for r in table_rows(events_text(app))]
        assert rows == [
            [START, f"0{RANGE}7", "torchrun pid 4242", "10 s", "-90 pts (95→5%)", "long (now)"],
            [START, "8", "10 s", "-90 pts (95→5%)", "long (now)"],
        ]


async def test_the_sampler_reads_parents_while_events_is_open() -> None:
    """A job's row names its launcher, which only the parents' reading knows (outside the tree view)."""
    from tests.ui.conftest import make_app

    app = make_app(gpus=4)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert app.sampler.want_relatives is False
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, EventsScreen)
        assert app.sampler.want_relatives is True
        await pilot.press("escape")
        await pilot.pause()
        assert app.sampler.want_relatives is False  # back to what the table needs
        await pilot.press("t", "e", "escape")
        await pilot.pause()
        assert app.sampler.want_relatives is True  # the tree view still wants them
