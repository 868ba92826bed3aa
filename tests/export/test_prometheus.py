"""Against a real Prometheus server (Debian's `prometheus`) scraping two `gputui export --demo`
processes with different host names, on loopback. Skipped, with the reason, where the binary is absent;
.ci/run installs it so that in CI these run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.export.fleet import FleetReader
from gputui.export.metrics import DCGM_FIELDS, GPU_LABELS, ZOMBIE_CLASSES
from gputui.export.promql import Prometheus
from gputui.ui.fleet_app import FleetApp
from gputui.ui.screens.fleet_host import HostScreen
from tests.export.servers import NO_PROMETHEUS, PROMETHEUS, Exporter, PrometheusServer
from tests.helpers import until
from tests.ui.drawn import lines

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS),
]

HOSTS = {"node-a": 2, "node-b": 3}  # host name -> demo GPUs


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, list[Exporter]]]:
    exporters: list[Exporter] = []
    prom = None
    try:
        exporters = [Exporter(name, gpus=n) for name, n in HOSTS.items()]
        prom = PrometheusServer(tmp_path_factory.mktemp("prom"), [e.port for e in exporters])
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", count=sum(HOSTS.values()))
        prom.wait_for("gputui_process_gpu_memory_bytes", count=sum(HOSTS.values()))
        yield prom, exporters
    finally:
        if prom is not None:
            prom.stop()
        for e in exporters:
            e.stop()


def test_dcgm_metric_names_and_labels_through_prometheus(
    fleet: tuple[PrometheusServer, list[Exporter]],
) -> None:
    prom, _ = fleet
    for name, *_ in DCGM_FIELDS:
        series = prom.wait_for(name, count=sum(HOSTS.values()))
        by_host: dict[str, set[str]] = {}
        for s in series:
            labels = s["metric"]
            assert set(GPU_LABELS) <= set(labels), (name, labels)
            assert labels["device"] == f"nvidia{labels['gpu']}"  # the demo's minor numbers are its indices
            assert labels["UUID"].startswith("GPU-") and labels["modelName"]
            assert labels["pci_bus_id"].count(":") == 2
            by_host.setdefault(labels["Hostname"], set()).add(labels["gpu"])
        assert by_host == {h: {str(i) for i in range(n)} for h, n in HOSTS.items()}, name
    used = {
        (s["metric"]["Hostname"], s["metric"]["gpu"]): float(s["value"][1])
        for s in prom.query("DCGM_FI_DEV_FB_USED")
    }
    free = {
        (s["metric"]["Hostname"], s["metric"]["gpu"]): float(s["value"][1])
        for s in prom.query("DCGM_FI_DEV_FB_FREE")
    }
    for key, mib in used.items():  # an 80 GB H100 of the demo: MiB, as dcgm-exporter reports them
        assert 70_000 < mib + free[key] < 82_000, key
        assert mib == int(mib)


def test_gputui_metrics_through_prometheus(fleet: tuple[PrometheusServer, list[Exporter]]) -> None:
    prom, _ = fleet
    procs = prom.wait_for("gputui_process_gpu_memory_bytes", count=sum(HOSTS.values()))
    # Prometheus drops empty labels: the NVML-only ghost has no command.
    trainers = [s["metric"] for s in procs if "--role trainer" in s["metric"].get("command", "")]
    assert {m["Hostname"] for m in trainers} == set(HOSTS)
    assert all(m["pid"].isdigit() and m["user"] and m["class"] == "ok" for m in trainers)
    zombies = prom.query("gputui_zombie_processes")
    classes: dict[str, set[str]] = {}
    for s in zombies:
        classes.setdefault(s["metric"]["Hostname"], set()).add(s["metric"]["class"])
    assert classes == {h: set(ZOMBIE_CLASSES) for h in HOSTS}
    defunct = {
        s["metric"]["Hostname"]: float(s["value"][1]) for s in zombies if s["metric"]["class"] == "defunct"
    }
    assert defunct == dict.fromkeys(HOSTS, 1.0)  # each demo leaves one unreaped child
    unaccounted = {
        (s["metric"]["Hostname"], s["metric"]["gpu"]): float(s["value"][1])
        for s in prom.query("gputui_unaccounted_memory_bytes")
    }
    assert unaccounted[("node-a", "0")] == 1.5 * 2**30  # the demo's leak on GPU 0
    dips = prom.wait_for("gputui_dips_total", count=2 * sum(HOSTS.values()))
    assert {s["metric"]["kind"] for s in dips} == {"stall", "long"}


async def test_fleet_shows_every_host_with_its_gpus(fleet: tuple[PrometheusServer, list[Exporter]]) -> None:
    prom, _ = fleet
    reader = FleetReader(Prometheus(prom.url), window=300)
    app = FleetApp(reader, interval=1.0, sort="name")
    async with app.run_test(size=(140, 30)) as pilot:
        await until(pilot, lambda: len(app.view.hosts) == len(HOSTS), 20.0)
        await pilot.pause()
        rows = lines(app.table)[1:]
        assert [r.split()[0] for r in rows[:2]] == ["node-a", "node-b"]
        assert rows[0].split()[1] == "2/2" and rows[1].split()[1] == "3/3"  # busy / all GPUs
        assert all(r.split()[-1].strip("▁▂▃▄▅▆▇█") == "" for r in rows[:2])  # sparklines drawn
        assert app.view.queries == 5
        assert "2 hosts · 5 GPUs" in lines(app.header)[0]
        await pilot.press("down", "enter")  # open node-b
        assert isinstance(app.screen, HostScreen)
        await until(pilot, lambda: app.view.detail is not None and app.view.detail.host == "node-b", 20.0)
        await pilot.pause()
        drawn = lines(app.screen.host_view)
        assert drawn[0].split()[0] == "node-b"
        gpu_rows = [line for line in drawn if "NVIDIA H100" in line]
        assert [r.split()[0] for r in gpu_rows] == ["0", "1", "2"]
        assert any("defunct 1" in line for line in drawn)  # zombies of that host
        assert any("demo_train.py --role trainer --gpu 2" in line for line in drawn)  # its processes
        assert app.view.queries == 8
        await pilot.press("escape")
        assert not isinstance(app.screen, HostScreen) and reader.focus is None


async def test_a_stopped_exporter_is_a_stale_host(tmp_path: Path) -> None:
    alive, stopping = Exporter("node-live"), Exporter("node-gone")
    prom = PrometheusServer(tmp_path, [alive.port, stopping.port])
    try:
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", count=4)
        reader = FleetReader(Prometheus(prom.url), window=300)
        app = FleetApp(reader, interval=1.0, sort="name")
        async with app.run_test(size=(140, 30)) as pilot:
            await until(pilot, lambda: len(app.view.hosts) == 2, 20.0)
            before = next(h for h in app.view.hosts if h.name == "node-gone")
            assert not before.stale
            assert stopping.stop() == 0  # SIGTERM: a clean exit
            await until(pilot, lambda: any(h.name == "node-gone" and h.down for h in app.view.hosts), 20.0)
            await pilot.pause()
            gone = next(h for h in app.view.hosts if h.name == "node-gone")
            assert gone.stale and len(gone.gpus) == 2
            assert gone.util is not None and gone.mem_used == before.mem_used  # its last values kept
            row = next(r for r in lines(app.table) if r.startswith("node-gone"))
            assert " down " in row
            assert "not scraped now: node-gone" in lines(app.banner)[0]
            live = next(r for r in lines(app.table) if r.startswith("node-live"))
            assert " ok " in live
    finally:
        prom.stop()
        alive.stop()
        stopping.stop()


async def test_prometheus_down_keeps_the_last_data_and_retries(tmp_path: Path) -> None:
    exporter = Exporter("node-x")
    prom = PrometheusServer(tmp_path, [exporter.port])
    try:
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", count=2)
        reader = FleetReader(Prometheus(prom.url, timeout=2.0), window=300)
        app = FleetApp(reader, interval=1.0)
        async with app.run_test(size=(140, 30)) as pilot:
            await until(pilot, lambda: len(app.view.hosts) == 1, 20.0)
            prom.stop()
            await until(pilot, lambda: app.view.failures >= 2, 20.0)  # it keeps trying
            await pilot.pause()
            banner = lines(app.banner)[0]
            assert "cannot reach Prometheus" in banner and "showing data from" in banner
            assert any(r.startswith("node-x") for r in lines(app.table))  # the last data stays
            prom.start()
            app.action_refresh()
            await until(pilot, lambda: app.view.error is None, timeout=30)
            await pilot.pause()
            assert app.view.failures == 0 and "cannot reach" not in lines(app.banner)[0]
            assert any(r.startswith("node-x") for r in lines(app.table))
    finally:
        prom.stop()
        exporter.stop()
    await asyncio.sleep(0)
