"""Pictures of the main views on the fixed world (tests/ui/world.py). `pytest --snapshot-update` rewrites
them; look at the SVGs under tests/ui/__snapshots__/ before committing new ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from textual.app import App
from textual.pilot import Pilot

from gputui.model import Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.detail import DetailScreen
from tests.helpers import until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the header's clock
    time.tzset()
    # The detail's "started … (N h ago)": counted from the world's last sample, not from today.
    monkeypatch.setattr(DetailScreen, "clock", staticmethod(lambda: world.START + 360.0))


def _snap(
    snap_compare: Callable[..., bool],  # pytest-textual-snapshot's fixture
    size: tuple[int, int],
    *keys: str,
    gpus: int = 4,
    workers: int = 2,
    app: GpuTuiApp | None = None,
    **world_options: Any,
) -> bool:
    shot = app or make_app(gpus=gpus, unaccounted=True, workers=workers, **world_options)

    async def run_before(pilot: Pilot[int]) -> None:
        await press(pilot, shot, *keys)

    return snap_compare(shot, terminal_size=size, run_before=run_before)


async def press(pilot: Pilot[int], app: GpuTuiApp, *keys: str) -> None:
    """The first frame, then `keys`, then what they started is drawn."""
    await first_frame(pilot, app)
    for key in keys:
        await pilot.press(key)
        await pilot.pause()
    if isinstance(app.screen, DetailScreen):  # its worker reads /proc: what it read is in the picture
        await until(pilot, lambda: detail_shown(app), 10.0, "the detail's worker to show what it read")
    for _ in range(3):
        await pilot.pause(0.05)


def detail_shown(app: App[Any]) -> bool:
    """The detail screen's worker has finished, and so has drawn what it read (call_from_thread returns once
    the UI ran it): /proc's answer, and py-spy's stacks where it reads them."""
    screen = app.screen
    return (
        isinstance(screen, DetailScreen)
        and screen.detail is not None
        and all(w.is_finished for w in app.workers if w.node is screen)
    )


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=["80x24", "120x40", "200x60"])
def test_main_view(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, size)


def test_main_view_8_gpus(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), gpus=8)


def test_8_ranks_with_3_workers_each_at_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The everyday box: torchrun with 8 ranks, each with 3 DataLoader workers folded into it (+3)."""
    assert _snap(snap_compare, (120, 40), gpus=8, workers=3, holding=True)


def test_16_gpus_at_200x60(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """One line per GPU, util and memory sparklines filling the width."""
    assert _snap(snap_compare, (200, 60), gpus=16)


WIDE_COMMAND = "python 训练.py --名前 データ --tag cafe\u0301 n\u0303o --out /data/実験/run-7"


def test_wide_and_combining_characters_keep_the_columns(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """A CJK command line (two cells a character) and combining marks (none) stay inside their row."""
    import dataclasses

    from gputui.collect.sources.replay import ReplaySampler

    app = make_app(gpus=4, unaccounted=True)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)

    def wide(snap: Snapshot) -> Snapshot:
        rows = tuple(
            dataclasses.replace(r, command=WIDE_COMMAND, user="山田太郎") if r.pid == world.WEIRD_PID else r
            for r in snap.processes
        )
        return dataclasses.replace(snap, processes=rows)

    replay.snapshots = [wide(s) for s in replay.snapshots]
    assert _snap(snap_compare, (120, 40), app=app)


def test_help(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), "question_mark")


def test_detail(snap_compare, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # The world's pids are made up, and on a busy machine one may be a live process that the detail would
    # read ("belongs to another process", seen in a full run): here every one of them is gone.
    def gone(pid: int | None = None) -> psutil.Process:
        raise psutil.NoSuchProcess(pid or 0)

    monkeypatch.setattr(psutil, "Process", gone)
    assert _snap(snap_compare, (120, 40), "down", "down", "enter")


async def test_the_detail_is_pictured_once_its_worker_has_read_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow /proc (a loaded machine): the picture waited a fixed 0.15 s and caught "reading /proc …"."""
    from gputui.collect.procs.join import describe  # what the detail screen calls (as screens.describe)
    from gputui.ui.screens import detail as screens

    def slow(*args: Any) -> Any:
        time.sleep(0.5)
        return describe(*args)

    monkeypatch.setattr(screens, "describe", slow)
    app = make_app(gpus=4, unaccounted=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await press(pilot, app, "down", "down", "enter")
        assert isinstance(app.screen, DetailScreen) and app.screen.detail is not None
        assert "reading /proc" not in str(app.screen.body.render())


def test_tree(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), "t")


def test_allocator_panel(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The allocator panel of a process whose agent answers (a recorded-shape reply, tests/fixtures)."""
    import dataclasses
    import json
    from pathlib import Path

    from gputui.collect.sources.replay import ReplaySampler

    reply = json.loads((Path(__file__).parent.parent / "fixtures" / "agent_stats_cuda.json").read_text())
    app = make_app(gpus=4, interval=3600.0)  # no tick after the first: a fixed allocator history
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    from gputui.collect.agents.reply import parse

    report = parse(4101, reply)
    replay.snapshots = [dataclasses.replace(s, agents={4101: report}) for s in replay.snapshots]

    async def run_before(pilot: Pilot[int]) -> None:
        await first_frame(pilot, app)
        await pilot.press("a")
        for _ in range(3):
            await pilot.pause(0.05)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_job_column_and_jobs_view(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """A SLURM job on GPUs 0-1 and a pod on GPU 2: the JOB column, then `J` (one row per job)."""
    from tests.ui.test_jobs import app_with_owners

    assert _snap(snap_compare, (120, 40), "J", app=app_with_owners())
