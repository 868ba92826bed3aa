"""`gputui export`: sample on a steady clock, serve the latest snapshot to Prometheus.

Sampling runs on its own schedule (every --interval seconds, 1 s by default) rather than per scrape, so
dips of a few seconds are seen whatever the scrape interval, and two Prometheus servers scraping the
same exporter cost nothing extra.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from gputui import __version__
from gputui.collect.dips import DipDetector
from gputui.collect.sampler import Sampler
from gputui.export.metrics import DipCounters, families
from gputui.model import Snapshot


class Exporter:
    """A prometheus-client collector over a Sampler: `tick()` samples, `collect()` serves the latest."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.detector = DipDetector()
        self.dips = DipCounters()
        self.latest: Snapshot | None = None
        self.failures = 0
        self.last_error = ""
        self.sample_seconds = 0.0
        self._lock = threading.Lock()  # scrapes run on the HTTP server's threads

    def tick(self) -> Snapshot | None:
        started = time.perf_counter()
        try:
            snap = self.sampler.tick()
        except Exception as err:  # keep serving the last sample; say what went wrong in a metric
            with self._lock:
                self.failures += 1
                self.last_error = f"{type(err).__name__}: {err}"
            return None
        try:
            ended, ongoing = self.detector.add(snap), self.detector.ongoing(snap.time)
        except Exception as err:  # dips are extra: they must never stop the metrics being served
            ended, ongoing = [], []
            self.last_error = f"dip detection: {type(err).__name__}: {err}"
        with self._lock:
            self.dips.add(ended, ongoing)
            self.latest = snap
            self.sample_seconds = time.perf_counter() - started
        return snap

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap, failures, took = self.latest, self.failures, self.sample_seconds
            dips = DipCounters(dict(self.dips.count), dict(self.dips.seconds), set(self.dips.ongoing))
        info = InfoMetricFamily("gputui_exporter", "The gputui exporter and what it reads.")
        info.add_metric([], {"version": __version__, "source": self.sampler.source.name,
                             "Hostname": self.sampler.hostname})
        yield info
        fails = CounterMetricFamily("gputui_exporter_sample_failures", "Samples that raised an error.")
        fails.add_metric([], float(failures))
        yield fails
        if snap is None:
            return
        took_fam = GaugeMetricFamily("gputui_exporter_sample_seconds", "Time the last sample took.")
        took_fam.add_metric([], took)
        yield took_fam
        stamp = GaugeMetricFamily("gputui_exporter_last_sample_timestamp_seconds",
                                  "Unix time of the sample being served.")
        stamp.add_metric([], snap.time)
        yield stamp
        yield from families(snap, dips)


def serve(exporter: Exporter, port: int, bind: str) -> tuple[Any, int]:
    """Start the HTTP server on its own thread; returns it and the port it listens on."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)  # type: ignore[arg-type]  # a duck-typed collector
    ProcessCollector(registry=registry)  # the exporter's own CPU and memory
    server, _thread = start_http_server(port, addr=bind, registry=registry)
    return server, server.server_port


def run(exporter: Exporter, interval: float, stop: threading.Event | None = None,
        monotonic: Callable[[], float] = time.monotonic) -> None:
    """Sample every `interval` seconds (on a steady schedule, not drifting) until `stop` is set."""
    stop = stop or threading.Event()
    next_at = monotonic()
    while not stop.is_set():
        exporter.tick()
        next_at += interval
        now = monotonic()
        if next_at < now:  # a slow sample: skip the missed beats instead of catching up in a burst
            next_at = now
        stop.wait(next_at - now)


def announce(port: int, bind: str, exporter: Exporter, interval: float) -> None:
    host = "localhost" if bind in ("", "0.0.0.0", "::") else bind
    if ":" in host:
        host = f"[{host}]"
    print(f"gputui export: http://{host}:{port}/metrics (Hostname={exporter.sampler.hostname}, "
          f"source {exporter.sampler.source.name}, sampled every {interval:g} s)",
          file=sys.stderr, flush=True)
