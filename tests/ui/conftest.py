from __future__ import annotations

import time
from pathlib import Path

import pytest

from gputui.model import Snapshot
from gputui.ui.app import GpuTuiApp, SnapshotReady
from tests.helpers import until
from tests.ui import world
from tests.ui.terminal import tmux  # noqa: F401 - the fixture of the real-terminal tests


def make_app(
    gpus: int = 4,
    interval: float = 1.0,
    weird: bool = True,
    devices_dir: Path | None = None,
    unaccounted: bool = False,
    readonly: bool = False,
    workers: int = 2,
    holding: bool = False,
) -> GpuTuiApp:
    """The app on the fixed world: five minutes of history, then the same last snapshot on every tick
    (a test that wants change posts SnapshotReady messages itself)."""
    replay, past = world.sampler(
        gpus=gpus, weird=weird, unaccounted=unaccounted, workers=workers, holding=holding
    )
    app = GpuTuiApp(
        replay, interval=interval, devices_dir=devices_dir or Path("/nonexistent"), readonly=readonly
    )
    for snap in past:
        app.ingest(snap)
    return app


async def first_frame(pilot, app: GpuTuiApp, frames: int = 1, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while app.frames < frames:
        assert time.monotonic() < deadline, f"{app.frames} frames of {frames} after {timeout:g} s"
        await pilot.pause(0.02)
    await pilot.pause()


async def post(pilot, app: GpuTuiApp, snap: Snapshot) -> None:  # type: ignore[no-untyped-def]
    """Show `snap` as if the sampler had sent it, and wait until it is drawn."""
    frames = app.frames
    app.post_message(SnapshotReady(snap))
    await until(pilot, lambda: app.frames > frames, 3.0, "the posted snapshot's frame")
    await pilot.pause()


async def move_to(pilot, app: GpuTuiApp, key: str) -> None:  # type: ignore[no-untyped-def]
    """Down the table to the row `key`, one press per row at most: a row that is not there fails the
    test instead of pressing `down` at the last row for ever."""
    for _ in range(len(app.table.rows) + 1):
        if app.table.current is not None and app.table.current.key == key:
            return
        await pilot.press("down")
        await pilot.pause()
    raise AssertionError(f"no row {key!r} among {[row.key for row in app.table.rows]}")


@pytest.fixture
def app_factory():  # type: ignore[no-untyped-def]
    return make_app
