"""Quitting (or a SIGTERM, a hangup) in the same instant a view opens: the view's on_mount then runs after
its children have left the app. It must not reach for them by query (NoMatches: a traceback on the way
out); each view holds its own widgets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from gputui.collect.sources.replay import ReplaySampler
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.attach import AttachScreen
from tests.ui.conftest import first_frame, make_app
from tests.ui.test_allocator import PID, REPLY


def _detail(app: GpuTuiApp) -> None:
    assert app.table.current is not None and app.table.current.process is not None
    app._open_detail(app.table.current.process)


OPENERS: dict[str, Callable[[GpuTuiApp], object]] = {
    "allocator": lambda app: app.open_allocator(PID),
    "events": GpuTuiApp.action_events,
    "detail": _detail,
    "doctor": GpuTuiApp.action_doctor,
    "kill": GpuTuiApp.action_kill,
    "gpu chooser": GpuTuiApp.action_choose_gpu,
    "columns": GpuTuiApp.action_columns,
    "help": GpuTuiApp.action_help,
    "attach": lambda app: app.push_screen(AttachScreen(PID, "gdb will run ...", "python train.py")),
}


@pytest.mark.parametrize("view", sorted(OPENERS))
async def test_quit_as_a_view_opens(view: str) -> None:
    app = make_app(gpus=2, interval=30.0)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    replay.snapshots = [dataclasses.replace(s, agents={PID: REPLY}) for s in replay.snapshots]
    async with app.run_test(size=(120, 40)) as pilot:  # an exception in any handler is raised here
        await first_frame(pilot, app)
        OPENERS[view](app)
        app.exit()
    assert app.return_code in (0, None)
