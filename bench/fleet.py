"""fleet: `gputui fleet` over 100 hosts x 8 GPUs from a fake Prometheus on loopback."""

from __future__ import annotations

import statistics
import time

from bench.tui import bench_tui


def bench_fleet(
    hosts: int = 100, gpus: int = 8, refreshes: int = 10, measure: float = 30.0
) -> dict[str, object]:
    """`gputui fleet` over a fleet of `hosts` x `gpus` served by a fake Prometheus on loopback (a real
    HTTP server answering the reader's queries): one refresh, and the TUI at a 5 s refresh in 200x60."""
    from gputui.export.fleet import FleetReader
    from gputui.export.promql import Prometheus
    from tests.export.fake_prometheus import FakePrometheus

    with FakePrometheus(hosts=hosts, gpus=gpus, gputui=True) as fake:
        reader = FleetReader(Prometheus(fake.url))
        times = []
        for _ in range(refreshes):
            t0 = time.perf_counter()
            view = reader.refresh()
            times.append((time.perf_counter() - t0) * 1000)
        assert view.error is None and len(view.hosts) == hosts, view.error
        tui = bench_tui(
            gpus=hosts * gpus,
            measure=measure,
            cols=200,
            rows=60,
            args=("fleet", "--prometheus", fake.url, "--interval", "5", "--sort", "name"),
            full_frame=(b"UTILIZATION PER GPU", sorted(h.name for h in view.hosts)[0].encode()),
        )
    return {
        "hosts": hosts,
        "gpus": hosts * gpus,
        "queries_per_refresh": view.queries,
        "refresh_ms_median": round(statistics.median(times), 1),
        "tui": tui,
    }
