from __future__ import annotations

import time
from pathlib import Path

import pytest

from gputui.ui.app import GpuTuiApp
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


@pytest.fixture
def app_factory():  # type: ignore[no-untyped-def]
    return make_app
