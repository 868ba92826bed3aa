"""A fleet of 100 hosts x 8 GPUs from a fake Prometheus on loopback: one refresh reads it all in five
queries, and `gputui fleet` shows it, opens a host, and says so when Prometheus is gone or slow."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from textual.pilot import Pilot

from gputui.export.fleet import FleetReader, sort_hosts
from gputui.export.promql import Prometheus
from gputui.ui.fleet_app import FleetApp
from gputui.ui.screens.fleet_host import HostScreen
from tests.export.fake_prometheus import MODEL, FakePrometheus
from tests.helpers import until
from tests.ui.drawn import lines

HOSTS, GPUS = 100, 8


def util_of(index: int) -> float:
    return float(index * 37 % 100)  # every host its own utilization, 0..99, not in name order


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=HOSTS, gpus=GPUS) as server:
        for i, host in enumerate(server.hosts.values()):
            for gpu in host.gpus:
                gpu.util = util_of(i)
        yield server


@asynccontextmanager
async def running(app: FleetApp) -> AsyncIterator[Pilot[int]]:
    """The app in a 160x50 terminal, its first view drawn (the app stops its refresh thread as it ends)."""
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.frames >= 1 and len(app.view.hosts) == HOSTS, 15.0, settle=True)
        yield pilot


def names(app: FleetApp) -> list[str]:
    """The host column of the drawn table rows, top to bottom."""
    return [line.split()[0] for line in lines(app.table)[1:]]


def test_one_refresh_reads_the_whole_fleet_in_five_queries(fake: FakePrometheus) -> None:
    reader = FleetReader(Prometheus(fake.url))
    view = reader.refresh()
    assert view.error is None
    assert (len(view.hosts), view.gpu_count, view.queries) == (HOSTS, HOSTS * GPUS, 5)
    assert len(fake.received) == 5
    assert all(len(h.gpus) == GPUS and not h.stale for h in view.hosts)
    assert all(len(g.series) == reader.points for h in view.hosts for g in h.gpus)
    by_name = {h.name: h for h in view.hosts}
    assert [by_name[f"node{i + 1:03d}"].util for i in range(HOSTS)] == [util_of(i) for i in range(HOSTS)]


async def test_fleet_app_over_100_hosts(fake: FakePrometheus) -> None:
    reader = FleetReader(Prometheus(fake.url))
    app = FleetApp(reader, interval=60.0)
    async with running(app) as pilot:
        busy = [h.name for h in sort_hosts(app.view.hosts, "busy")]
        shown = names(app)
        assert 40 <= len(shown) < HOSTS  # a screenful
        assert shown == busy[: len(shown)]
        first = lines(app.table)[1].split()
        assert first[:3] == [busy[0], f"{GPUS}/{GPUS}", "99%"]
        assert "100 hosts · 800 GPUs" in lines(app.header)[0]

        await pilot.press("end")
        current = app.table.current
        assert current is not None and current.name == busy[-1]
        assert names(app)[-1] == busy[-1] and names(app) == busy[-len(shown) :]

        await pilot.press("i")  # idlest first: the cursor stays on its host, now at the top
        idle = [h.name for h in sort_hosts(app.view.hosts, "idle")]
        assert idle == busy[::-1]
        assert names(app) == idle[: len(shown)]
        assert lines(app.table)[1].split()[:3] == [idle[0], f"0/{GPUS}", "0%"]
        current = app.table.current
        assert current is not None and current.name == idle[0] and app.table.cursor == 0
        assert "sort idle" in lines(app.header)[0]

        frames = app.frames
        await pilot.press("enter")
        assert isinstance(app.screen, HostScreen) and reader.focus == idle[0]
        host_view = app.screen.host_view
        await until(pilot, lambda: app.frames > frames and app.view.detail is not None, 15.0, settle=True)
        detail = app.view.detail
        assert detail is not None and detail.host == idle[0] and app.view.queries == 8
        drawn = lines(host_view)
        assert drawn[0].split()[0] == idle[0]
        gpu_rows = [line for line in drawn if MODEL in line]
        assert [row.split()[0] for row in gpu_rows] == [str(g) for g in range(GPUS)]
        assert all(row.split()[len(MODEL.split()) + 1] == "0%" for row in gpu_rows)
        assert f"{GPUS} GPUs ·" in "\n".join(drawn)

        await pilot.press("escape")
        assert not isinstance(app.screen, HostScreen)
        assert reader.focus is None
        frames = app.frames
        app.action_refresh()
        await until(pilot, lambda: app.frames > frames, 15.0, settle=True)
        assert app.view.queries == 5 and app.view.detail is None
        assert names(app)[0] == idle[0]


async def test_prometheus_gone_keeps_the_fleet_on_screen_under_a_banner(fake: FakePrometheus) -> None:
    reader = FleetReader(Prometheus(fake.url))
    app = FleetApp(reader, interval=60.0)
    async with running(app) as pilot:
        before = names(app)
        assert lines(app.banner) == [""]
        fake.stop()
        app.action_refresh()
        await until(pilot, lambda: app.view.error is not None, 15.0, settle=True)
        banner = lines(app.banner)[0]
        assert f"cannot reach Prometheus at {fake.url}" in banner
        assert "showing data from" in banner and "retry in" in banner
        assert names(app) == before  # the last data stays
        assert "100 hosts · 800 GPUs" in lines(app.header)[0]

        fake.start()
        app.action_refresh()
        await until(pilot, lambda: app.view.error is None, 15.0, settle=True)
        assert app.view.failures == 0 and lines(app.banner) == [""]
        assert names(app) == before


async def test_a_slow_prometheus_is_named_in_the_banner(fake: FakePrometheus) -> None:
    reader = FleetReader(Prometheus(fake.url, timeout=0.3))
    app = FleetApp(reader, interval=60.0)
    async with running(app) as pilot:
        before = names(app)
        fake.delay = 5.0
        app.action_refresh()
        await until(pilot, lambda: app.view.error is not None, 15.0, settle=True)
        banner = lines(app.banner)[0]
        assert f"Prometheus at {fake.url} did not answer within 0.3 s" in banner
        assert "showing data from" in banner
        assert names(app) == before
