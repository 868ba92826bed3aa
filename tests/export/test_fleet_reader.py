"""FleetReader against a fake Prometheus on loopback: how hosts and GPUs are assembled from the few queries
it sends, what happens when hosts or Prometheus go away, and the drill-down's detail."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from gputui.export.fleet import (
    SORTS,
    FleetGpu,
    FleetHost,
    FleetReader,
    FleetView,
    SparkCell,
    on_grid,
    sort_hosts,
    spark_cells,
)
from gputui.export.promql import Prometheus
from tests.export.fake_prometheus import MODEL, FakePrometheus

NOW = 1_700_000_100.0  # on the 15 s grid of the default window, and on the 5 s grid of a 300 s one
assert NOW % 15 == 0


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus() as server:
        yield server


def reader_of(
    fake: FakePrometheus, selector: str = "", window: float = 900.0, clock: Clock | None = None
) -> FleetReader:
    return FleetReader(Prometheus(fake.url), selector, window=window, clock=clock or Clock())


def host_of(view: FleetView, name: str) -> FleetHost:
    found = [h for h in view.hosts if h.name == name]
    assert len(found) == 1, f"{name} not (once) in {[h.name for h in view.hosts]}"
    return found[0]


def ok(view: FleetView) -> FleetView:
    assert view.error is None, view.error
    return view


# --- hosts, GPUs, values -----------------------------------------------------------------------------


def test_hosts_and_gpus_are_grouped_by_hostname_or_else_instance(fake: FakePrometheus) -> None:
    alpha = fake.add_host("alpha", gpus=2, job="dcgm")
    fake.add_host("beta", gpus=12)
    fake.add_host("gamma", gpus=1, instance="10.9.9.9:9400", hostname_label=False)
    view = ok(reader_of(fake).refresh())
    assert sorted(h.name for h in view.hosts) == ["10.9.9.9:9400", "alpha", "beta"]
    assert view.gpu_count == 15
    a = host_of(view, "alpha")
    assert (a.instance, a.job, a.stale, a.down, a.gputui) == (alpha.instance, "dcgm", False, False, False)
    assert [(g.gpu, g.uuid, g.model) for g in a.gpus] == [
        ("0", alpha.uuid(0), MODEL),
        ("1", alpha.uuid(1), MODEL),
    ]
    assert [g.gpu for g in host_of(view, "beta").gpus] == [str(i) for i in range(12)]  # 10 and 11 after 9
    unnamed = host_of(view, "10.9.9.9:9400")
    assert unnamed.instance == "10.9.9.9:9400" and len(unnamed.gpus) == 1
    assert view.fetched_at == NOW and view.queries == 5


def test_the_latest_values_of_every_gpu(fake: FakePrometheus) -> None:
    box = fake.add_host("box", gpus=3)
    for i, gpu in enumerate(box.gpus):
        gpu.util, gpu.temperature, gpu.power = [95.0, 5.0, 40.0][i], 60.0 + i, 250.5 + i
        gpu.mem_used, gpu.mem_free = 1000.0 * (i + 1), 9000.0 - 1000.0 * (i + 1)
    box.gpus[2].power = math.nan  # not a number: unknown
    host = host_of(ok(reader_of(fake).refresh()), "box")
    assert [(g.util, g.mem_used, g.mem_free, g.temperature, g.power) for g in host.gpus] == [
        (95.0, 1000.0, 8000.0, 60.0, 250.5),
        (5.0, 2000.0, 7000.0, 61.0, 251.5),
        (40.0, 3000.0, 6000.0, 62.0, None),
    ]
    g0 = host.gpus[0]
    assert g0.mem_total == 9000.0 and g0.mem_percent == pytest.approx(100 * 1000 / 9000)
    assert host.util == pytest.approx((95 + 5 + 40) / 3)
    assert host.busy_gpus == 2  # 5 % is not busy
    assert (host.mem_used, host.mem_total) == (6000.0, 27000.0)
    assert host.power == 250.5 + 251.5  # the unknown one left out
    assert host.dips is None and host.zombie_total is None  # dcgm-exporter does not know them


def test_gputui_hosts_bring_zombies_dips_and_unaccounted_memory(fake: FakePrometheus) -> None:
    ours = fake.add_host("ours", gpus=2, gputui=True, zombies={"defunct": 2, "orphan": 1})
    ours.gpus[1].dips, ours.gpus[1].in_dip, ours.gpus[0].unaccounted = 4.0, True, 2.5e9
    fake.add_host("dcgm", gpus=2)
    view = ok(reader_of(fake).refresh())
    host = host_of(view, "ours")
    assert host.gputui and host.zombies == {"defunct": 2, "orphan": 1} and host.zombie_total == 3
    assert [(g.dips, g.in_dip, g.unaccounted) for g in host.gpus] == [(0.0, False, 2.5e9), (4.0, True, 0.0)]
    assert host.dips == 4.0
    other = host_of(view, "dcgm")
    assert not other.gputui and other.zombie_total is None and other.gpus[0].dips is None


def test_utilization_series_lie_on_the_step_grid_with_gaps_as_none(fake: FakePrometheus) -> None:
    reader = reader_of(fake, window=300.0)
    assert (reader.step, reader.points) == (5.0, 61)
    start = NOW - 300
    steady = fake.add_host("steady", gpus=2)
    steady.util_at = lambda gpu, t: (t - start) / 5 + 30 * gpu  # the grid index, oldest first
    steady.gaps = {start + 50, start + 55, NOW}
    late = fake.add_host("late", gpus=1)
    late.since = start + 15  # its exporter started 15 s into the window
    view = ok(reader.refresh())
    assert (view.start, view.end, view.step) == (start, NOW, 5.0)
    sent = fake.received[0]
    assert sent.endpoint == "query_range"
    assert (float(sent.params["start"]), float(sent.params["end"]), sent.params["step"]) == (start, NOW, "5")
    g0, g1 = host_of(view, "steady").gpus
    assert len(g0.series) == 61
    assert g0.series == tuple(None if i in (10, 11, 60) else float(i) for i in range(61))
    assert g1.series == tuple(None if i in (10, 11, 60) else 30.0 + i for i in range(61))
    assert host_of(view, "steady").last_seen == NOW  # fresh: seen now, whatever its newest util sample
    assert host_of(view, "late").gpus[0].series == (None, None, None, *[50.0] * 58)


def test_on_grid_places_samples_on_the_nearest_step() -> None:
    start, step = 1000.0, 10.0
    values = [
        (start + 0.4, 1.0),
        (start + 19.6, 2.0),
        (start + 30, None),
        (start + 40, None),
        (start - 10, 9.0),
        (start + 50, 9.0),
        (start + 41, 4.0),
    ]
    assert on_grid(values, start, step, 5) == (1.0, None, 2.0, None, 4.0)
    assert on_grid([], start, step, 3) == (None, None, None)


# --- hosts that stop, fail, leave ---------------------------------------------------------------------


def test_a_host_absent_from_the_instant_query_is_stale_and_keeps_its_values(fake: FakePrometheus) -> None:
    for name in ("node001", "node002", "node003"):
        box = fake.add_host(name, gpus=2, gputui=True)
        for i, gpu in enumerate(box.gpus):
            gpu.util, gpu.mem_used, gpu.temperature, gpu.power = 30.0 + i, 4000.0 + i, 50.0 + i, 200.0 + i
    fake.hosts["node002"].zombies = {"defunct": 3}
    fake.hosts["node002"].gpus[0].dips = 2.0
    clock = Clock()
    reader = reader_of(fake, clock=clock)
    first = host_of(ok(reader.refresh()), "node002")
    assert not first.stale and first.zombie_total == 3

    fake.stop_host("node002", at=NOW, up=0.0)  # its exporter is gone: Prometheus's scrapes fail
    fake.stop_host("node003", at=NOW, up=1.0)  # scraped, but no GPU series any more
    clock.t = NOW + 60
    view = ok(reader.refresh())
    gone, quiet, live = (host_of(view, n) for n in ("node002", "node003", "node001"))
    assert (gone.stale, gone.down) == (True, True)
    assert (quiet.stale, quiet.down) == (True, False)
    assert (live.stale, live.down, live.last_seen) == (False, False, NOW + 60)
    assert gone.last_seen == NOW  # its newest sample, for "stale 60s"
    for before, after in zip(first.gpus, gone.gpus, strict=True):
        assert (after.util, after.mem_used, after.mem_free, after.temperature, after.power, after.dips) == (
            before.util,
            before.mem_used,
            before.mem_free,
            before.temperature,
            before.power,
            before.dips,
        )
        assert after.util is not None
        # ... with the new window behind them: four steps with no sample at the end.
        assert after.series[-4:] == (None,) * 4 and after.series[-5] == before.util
        assert len(after.series) == reader.points
    assert gone.gputui and gone.zombies == {"defunct": 3}  # what it last said

    clock.t = NOW + 120  # stale again: still the values of the last fresh refresh
    again = host_of(ok(reader.refresh()), "node002")
    assert again.stale and [g.util for g in again.gpus] == [g.util for g in first.gpus]
    assert again.zombie_total == 3

    back = fake.hosts["node002"]
    back.stopped, back.until, back.up = False, math.inf, 1.0
    back.gpus[0].util = 77.0
    clock.t = NOW + 135
    revived = host_of(ok(reader.refresh()), "node002")
    assert not revived.stale and not revived.down and revived.gpus[0].util == 77.0


def test_a_host_gone_from_every_query_stays_stale_for_a_window_then_disappears(fake: FakePrometheus) -> None:
    for name in ("a", "b", "c"):
        fake.add_host(name, gpus=1)
    clock = Clock()
    reader = reader_of(fake, clock=clock)
    before = host_of(ok(reader.refresh()), "b")
    fake.remove_host("b")  # no series at all, not even in the range query (up for less than a step)
    clock.t = NOW + 60
    view = ok(reader.refresh())
    assert sorted(h.name for h in view.hosts) == ["a", "b", "c"]
    kept = host_of(view, "b")
    assert kept.stale and not kept.down and kept.last_seen == NOW
    assert kept.gpus == before.gpus  # its last values
    clock.t = NOW + 900  # a window after it was last seen: still (just) there
    assert host_of(ok(reader.refresh()), "b").stale
    clock.t = NOW + 915
    assert sorted(h.name for h in ok(reader.refresh()).hosts) == ["a", "c"]


def test_a_stale_host_disappears_once_its_samples_leave_the_window(fake: FakePrometheus) -> None:
    for name in ("a", "b"):
        fake.add_host(name, gpus=1)
    clock = Clock()
    reader = reader_of(fake, window=300.0, clock=clock)
    ok(reader.refresh())
    fake.stop_host("b", at=NOW, up=0.0)
    clock.t = NOW + 200
    assert host_of(ok(reader.refresh()), "b").stale
    clock.t = NOW + 400  # its last sample is older than the window: not in the range data any more
    assert [h.name for h in ok(reader.refresh()).hosts] == ["a"]


def test_unreachable_prometheus_keeps_the_last_hosts_and_counts_failures(fake: FakePrometheus) -> None:
    for name in ("a", "b"):
        fake.add_host(name, gpus=2)
    clock = Clock()
    reader = reader_of(fake, clock=clock)
    good = ok(reader.refresh())
    fake.stop()
    clock.t = NOW + 15
    failed = reader.refresh()  # does not raise
    assert failed.error == f"cannot reach Prometheus at {fake.url}: Connection refused"
    assert (failed.failures, failed.refused, failed.queries) == (1, False, 1)  # it stopped at the first
    assert failed.hosts == good.hosts and failed.fetched_at == NOW  # the last data, and its time
    assert reader.refresh().failures == 2

    fake.start()  # on the same port
    clock.t = NOW + 30
    view = reader.refresh()
    assert (view.error, view.failures, view.refused, view.fetched_at) == (None, 0, False, NOW + 30)
    assert sorted(h.name for h in view.hosts) == ["a", "b"]


def test_a_refused_query_says_so(fake: FakePrometheus) -> None:
    fake.add_host("a", gpus=1)
    reader = reader_of(fake)
    good = ok(reader.refresh())
    reason = '1:5: parse error: unexpected "}" in label matching, expected string'
    fake.refusal = reason
    view = reader.refresh()
    assert view.refused and view.failures == 1
    assert view.error == f"Prometheus refused the query: {reason}"
    assert view.hosts == good.hosts
    fake.refusal = None
    view = reader.refresh()
    assert not view.refused and view.error is None


# --- the queries it sends ----------------------------------------------------------------------------


def test_the_selector_goes_into_every_query_for_gpu_series(fake: FakePrometheus) -> None:
    fake.add_host("mine-1", gpus=2, job="gpu", gputui=True)
    fake.add_host("mine-2", gpus=2, job="gpu", gputui=True)
    fake.add_host("theirs", gpus=2, job="other", gputui=True)
    reader = reader_of(fake, selector='{job="gpu"}')
    assert sorted(h.name for h in ok(reader.refresh()).hosts) == ["mine-1", "mine-2"]
    reader.focus = "mine-2"
    view = ok(reader.refresh())
    assert sorted(h.name for h in view.hosts) == ["mine-1", "mine-2"]
    assert view.detail is not None and view.detail.host == "mine-2"
    queries = fake.queries
    assert len(queries) == 13
    # `up` is about scrape targets, not GPU series: it is read whole (a Hostname matcher would hide every
    # target); every other query carries the matchers.
    assert [q for q in queries if 'job="gpu"' not in q] == ["up", "up"]
    assert all('Hostname="mine-2"' in q for q in queries[-3:])  # the detail's three: that host only


def test_a_hostname_selector_still_sees_targets_that_are_down(fake: FakePrometheus) -> None:
    fake.add_host("node-a", gpus=1)
    fake.add_host("node-b", gpus=1)
    clock = Clock()
    reader = reader_of(fake, selector='Hostname="node-a"', clock=clock)
    assert [h.name for h in ok(reader.refresh()).hosts] == ["node-a"]
    fake.stop_host("node-a", at=NOW, up=0.0)
    clock.t = NOW + 30
    [host] = ok(reader.refresh()).hosts
    assert host.stale and host.down


@pytest.mark.parametrize("hosts", [10, 100])
def test_queries_per_refresh_do_not_grow_with_the_fleet(hosts: int) -> None:
    with FakePrometheus(hosts=hosts, gpus=8, gputui=True) as fake:
        reader = reader_of(fake)
        view = ok(reader.refresh())
        assert (len(view.hosts), view.gpu_count) == (hosts, 8 * hosts)
        assert view.queries == 5 and len(fake.received) == 5
        reader.focus = "node007"
        view = ok(reader.refresh())
        assert view.queries == 8 and len(fake.received) == 13
        assert view.detail is not None and view.detail.host == "node007"
        reader.focus = None
        assert ok(reader.refresh()).queries == 5 and reader.view.detail is None


# --- the open host's detail --------------------------------------------------------------------------


def test_host_detail_processes_agents_and_memory_over_the_window(fake: FakePrometheus) -> None:
    box = fake.add_host("box", gpus=2, gputui=True)
    box.gpus[0].mem_used, box.gpus[0].mem_free = 2000.0, 6000.0
    box.gpus[1].mem_used, box.gpus[1].mem_free = 6000.0, 2000.0
    box.processes = [
        {"gpu": 0, "pid": 100, "user": "ana", "command": "python train.py", "class": "ok", "memory": 1e9},
        {"gpu": 1, "pid": 200, "user": "bo", "command": "python eval.py", "class": "ok", "memory": 5e9},
        {"gpu": 0, "pid": 300, "user": "cy", "command": "python old.py", "class": "defunct", "memory": 3e9},
    ]
    box.agents = [
        {
            "pid": 100,
            "cuda_device": 0,
            "command": "python train.py",
            "values": {"allocated_bytes": 1e9, "reserved_bytes": 2e9, "fragmentation_percent": 50.0},
        },
        {"pid": 100, "cuda_device": 1, "command": "python train.py", "values": {"allocated_bytes": 3e8}},
        {"pid": 7, "cuda_device": 0, "command": "python x.py", "values": {"ooms_total": 2.0}},
    ]
    other = fake.add_host("other", gpus=1, gputui=True)
    other.processes = [{"gpu": 0, "pid": 999, "user": "z", "command": "big", "class": "ok", "memory": 9e9}]
    reader = reader_of(fake)
    assert ok(reader.refresh()).detail is None
    reader.focus = "box"
    detail = ok(reader.refresh()).detail
    assert detail is not None and detail.host == "box"
    assert [(p.pid, p.gpu, p.user, p.command, p.category, p.memory) for p in detail.processes] == [
        ("200", "1", "bo", "python eval.py", "ok", 5e9),
        ("300", "0", "cy", "python old.py", "defunct", 3e9),
        ("100", "0", "ana", "python train.py", "ok", 1e9),
    ]  # most memory first; not the other host's
    assert len(detail.agents) == 3  # one per process and CUDA device, its metrics together
    assert {(a.pid, a.cuda_device): (a.command, a.values) for a in detail.agents} == {
        ("100", "0"): (
            "python train.py",
            {"allocated_bytes": 1e9, "reserved_bytes": 2e9, "fragmentation_percent": 50.0},
        ),
        ("100", "1"): ("python train.py", {"allocated_bytes": 3e8}),
        ("7", "0"): ("python x.py", {"ooms_total": 2.0}),
    }
    assert sorted(detail.mem_series) == ["0", "1"]
    assert detail.mem_series["0"] == (25.0,) * reader.points
    assert detail.mem_series["1"] == (75.0,) * reader.points


def test_detail_of_a_host_known_by_its_instance(fake: FakePrometheus) -> None:
    fake.add_host("x", gpus=2, instance="10.1.2.3:9400", hostname_label=False)
    fake.add_host("y", gpus=1)
    reader = reader_of(fake)
    ok(reader.refresh())
    reader.focus = "10.1.2.3:9400"
    detail = ok(reader.refresh()).detail
    assert detail is not None and sorted(detail.mem_series) == ["0", "1"]
    assert all('instance="10.1.2.3:9400"' in q and "Hostname" not in q for q in fake.queries[-3:])


class FocusClearedMidRefresh(FleetReader):
    """`focus` as the refresh thread sees it when the UI thread clears it (Escape on the host screen)
    right after the refresh checked it: set on the first read, None from then on."""

    reads = 0

    @property
    def focus(self) -> str | None:
        self.reads += 1
        return "a" if self.reads == 1 else None

    @focus.setter
    def focus(self, value: str | None) -> None:
        pass


def test_focus_cleared_during_a_refresh_does_not_break_it(fake: FakePrometheus) -> None:
    fake.add_host("a", gpus=1)
    reader = FocusClearedMidRefresh(Prometheus(fake.url), clock=Clock())
    view = reader.refresh()
    assert view.error is None and [h.name for h in view.hosts] == ["a"]


def test_a_url_with_a_bad_port_is_refused_before_any_refresh() -> None:
    with pytest.raises(ValueError, match="not a usable port"):
        FleetReader(Prometheus("http://127.0.0.1:90a90"), clock=Clock())


# --- sorting -------------------------------------------------------------------------------------------


def _host(
    name: str, util: float | None, used: float | None, dips: float | None, zombies: dict[str, int] | None
) -> FleetHost:
    gpu = FleetGpu("0", util=util, mem_used=used, mem_free=None if used is None else 80.0 - used, dips=dips)
    return FleetHost(name, gpus=(gpu,), gputui=zombies is not None, zombies=zombies or {})


HOSTS = [
    _host("e", 50.0, 20.0, None, None),
    _host("c", None, None, None, None),  # nothing known
    _host("a", 90.0, 40.0, 3.0, {"defunct": 2}),
    _host("d", 50.0, 8.0, 7.0, {"orphan": 5}),
    _host("b", 10.0, 72.0, 0.0, {}),
]
ORDER = {
    "name": "abcde",
    "busy": "adebc",  # d and e tie: by name
    "idle": "bdeac",
    "memory": "baedc",
    "dips": "dabce",  # none is last, 0 is not none
    "zombies": "dabce",
}


@pytest.mark.parametrize("key", SORTS)
def test_sort_hosts_puts_unknown_values_last(key: str) -> None:
    assert set(ORDER) == set(SORTS)
    assert "".join(h.name for h in sort_hosts(HOSTS, key)) == ORDER[key]
    assert "".join(h.name for h in sort_hosts(reversed(HOSTS), key)) == ORDER[key]  # whatever came in


# -- sparkline cells: each its share's mean, dips marked ------------------------------------------------


def test_a_host_at_80_percent_reads_80_not_its_lowest_point() -> None:
    series = tuple(70.0 if i % 2 else 90.0 for i in range(60))  # 80 % on average, never under 70
    cells = spark_cells(series, 5)
    assert [c.mean for c in cells] == [pytest.approx(80.0)] * 5
    assert not any(c.dip for c in cells)  # steady noise is no dip


def test_a_dip_shorter_than_a_cell_is_marked_on_its_cell_only() -> None:
    series = [90.0] * 60
    series[25] = 5.0  # one point of a 12-point share
    cells = spark_cells(tuple(series), 5)
    assert [c.dip for c in cells] == [False, False, True, False, False]
    assert cells[2].mean == pytest.approx((11 * 90 + 5) / 12)
    assert [c.dip for c in spark_cells(tuple(series), 5, dips=False)] == [False] * 5


def test_a_shallow_drop_or_an_idle_gpu_is_no_dip() -> None:
    shallow = tuple([60.0] * 30 + [35.0] * 30)  # not under half of the busy level
    assert not any(c.dip for c in spark_cells(shallow, 6))
    idle = tuple([0.0] * 50 + [30.0] * 10)
    assert not any(c.dip for c in spark_cells(idle, 6))


def test_cells_before_the_first_sample_are_no_data_and_gaps_are_none() -> None:
    series = (None, None, None, None, 50.0, None, 50.0, 50.0)
    cells = spark_cells(series, 4)
    assert math.isnan(cells[0].mean or 0.0) and math.isnan(cells[1].mean or 0.0)
    assert [c.mean for c in cells[2:]] == [50.0, 50.0]
    assert spark_cells(series, 8)[5] == SparkCell(None)  # a gap inside the series
    assert all(math.isnan(c.mean or 0.0) for c in spark_cells((), 3))
    assert spark_cells(series, 0) == []


@pytest.mark.parametrize("cells", [1, 3, 7, 16, 60, 100])
def test_every_width_gives_that_many_cells_within_the_series_range(cells: int) -> None:
    series = tuple(float(i % 100) for i in range(60))
    out = spark_cells(series, cells)
    assert len(out) == cells
    assert all(c.mean is not None and 0.0 <= c.mean <= 99.0 for c in out)
