"""The fleet view shares the monitor's base app (ui/base_app.py): the same quit and help keys, the
palette that follows the theme, and its sort as reactive state."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from textual.pilot import Pilot

from gputui.export.fleet import FleetReader, FleetView
from gputui.export.promql import Prometheus
from gputui.ui.fleet_app import FleetApp
from gputui.ui.screens.detail import HelpScreen
from gputui.ui.screens.fleet_host import HostScreen
from tests.export.fake_prometheus import FakePrometheus
from tests.ui.drawn import lines

SIZE = (140, 30)


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=2, gpus=2) as server:
        yield server


async def _loaded(pilot: Pilot[int], app: FleetApp) -> None:
    deadline = time.monotonic() + 10
    while len(app.view.hosts) < 2:
        assert time.monotonic() < deadline, "no hosts"
        await pilot.pause(0.05)
    await pilot.pause()


@pytest.mark.parametrize("key", ["q", "f10", "ctrl+c"])
async def test_fleet_quits_on_q_f10_and_ctrl_c(fake: FakePrometheus, key: str) -> None:
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press(key)
        await pilot.pause()
    assert app.return_value == 0


async def test_fleet_f1_opens_help_and_sort_keys_reorder(fake: FakePrometheus) -> None:
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0, sort="name")
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        assert "sort name" in lines(app.header)[0]
        rows = [r.split()[0] for r in lines(app.table)[1:3]]
        assert rows == sorted(rows)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")  # F1 closes it again
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f6")  # the next sort key
        await pilot.pause()
        assert app.sort != "name" and f"sort {app.sort}" in lines(app.header)[0]
        assert app.table.sort == app.sort


async def test_fleet_host_screen_follows_each_view(fake: FakePrometheus) -> None:
    """The open host's screen gets each new view (the FollowsFleet protocol, not an isinstance check)."""
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0, sort="name")
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HostScreen)
        shown: list[FleetView] = []
        original = screen.show

        def show(view: FleetView) -> None:
            shown.append(view)
            original(view)

        screen.show = show  # type: ignore[method-assign]
        frames = app.frames
        app.action_refresh()
        deadline = time.monotonic() + 10
        while app.frames == frames:
            assert time.monotonic() < deadline, "no refresh"
            await pilot.pause(0.05)
        assert shown and shown[-1] is app.view


async def test_fleet_theme_change_reaches_the_cell_widgets(fake: FakePrometheus) -> None:
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        before = app.header.palette
        app.theme = "textual-light"
        await pilot.pause()
        assert app.palette is app.header.palette is app.table.palette
        assert app.header.palette != before
