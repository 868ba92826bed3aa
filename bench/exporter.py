"""exporter: `gputui export` on the demo: a sample, a scrape (and its bytes), a real exporter's CPU and
RSS."""

from __future__ import annotations

import statistics
import time

import psutil

from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource


def bench_exporter(gpus: int = 8, ticks: int = 60, measure: float = 20.0) -> dict[str, object]:
    """`gputui export` on the demo: one sample (+ dips), one scrape, and a real exporter process's CPU
    at 1 Hz sampling while it is scraped every second."""
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from gputui.export.exporter import Exporter

    with Sampler(DemoSource(gpus=gpus, start_at=120.0)) as sampler:
        exporter = Exporter(sampler)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(exporter)
        tick, scrape = [], []
        for _ in range(ticks):
            t0 = time.perf_counter()
            exporter.tick()
            t1 = time.perf_counter()
            body = generate_latest(registry)
            tick.append((t1 - t0) * 1000)
            scrape.append((time.perf_counter() - t1) * 1000)
    from tests.export.servers import Exporter as ExporterProcess

    proc = ExporterProcess("bench", gpus=gpus, interval=1.0)
    try:
        ps = psutil.Process(proc.proc.pid)
        time.sleep(2.0)
        cpu0, t0 = ps.cpu_times(), time.monotonic()
        while time.monotonic() - t0 < measure:
            proc.scrape()
            time.sleep(1.0)
        cpu1, elapsed = ps.cpu_times(), time.monotonic() - t0
        rss = ps.memory_info().rss
    finally:
        proc.stop()
    used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "gpus": gpus,
        "sample_ms_median": round(statistics.median(tick), 3),
        "scrape_ms_median": round(statistics.median(scrape), 3),
        "scrape_bytes": len(body),
        "process_cpu_percent_of_core": round(100 * used / elapsed, 2),
        "process_rss_mib": round(rss / 2**20, 1),
    }
