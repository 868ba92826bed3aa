"""A fake Prometheus on loopback: a real HTTP server that speaks enough of Prometheus's HTTP API
(/api/v1/query, /api/v1/query_range; GET or form-encoded POST) to serve a synthetic fleet of
dcgm-exporter-style series, and to misbehave on demand.

It is no PromQL engine: a query is recognised by the metric names in it (the shapes FleetReader sends),
and of its matchers only `label="value"` ones are applied (to the underlying series). Anything else is
answered as Prometheus answers a bad query: HTTP 400 with its error JSON.

    with FakePrometheus(hosts=10, gpus=8) as fake:
        reader = FleetReader(Prometheus(fake.url))
        ...
        fake.stop_host("node003", at=t)   # its series end at t; `up` 0 for its target
        fake.stop()                       # connection refused from now on; fake.start() again
        fake.delay = 2.0                  # answer late
        fake.refusal = "parse error"      # HTTP 400 {"status":"error",...}
        fake.raw = (200, "text/html", b"<html>")  # any answer at all
        fake.takeover = drip(...)                 # the handler answers as it likes (hostile_prometheus.py)
        fake.auth = "Basic dTpw"          # any other Authorization (or none): HTTP 401 (fake.auth_status)

    with FakePrometheus(tls=server_context) as fake:  # https://127.0.0.1:port
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (handler, endpoint, form parameters): writes whatever answer it likes, status line included.
Takeover = Callable[[BaseHTTPRequestHandler, str, dict[str, str]], None]

MODEL = "NVIDIA H100 80GB HBM3"
FB_TOTAL = 81559.0  # MiB, as dcgm-exporter reports FB_USED + FB_FREE for an H100
DCGM_FIELDS = {
    "GPU_UTIL": "util",
    "FB_USED": "mem_used",
    "FB_FREE": "mem_free",
    "GPU_TEMP": "temperature",
    "POWER_USAGE": "power",
}
_MATCHER = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')
_WINDOW = re.compile(r"\[(\d+)s\]")


class UnknownQuery(Exception):
    """The fake does not know how to answer this query."""


@dataclass
class FakeGpu:
    util: float = 50.0
    mem_used: float = 1024.0  # MiB
    mem_free: float = FB_TOTAL - 1024.0
    temperature: float = 40.0
    power: float = 300.0
    dips: float = 0.0  # increase of gputui_dips_total over the window (gputui hosts only)
    in_dip: bool = False
    unaccounted: float = 0.0  # bytes


@dataclass
class FakeHost:
    name: str
    instance: str
    job: str = "gpu"
    gpus: list[FakeGpu] = field(default_factory=list)
    hostname_label: bool = True  # False: its series have no Hostname label (named by instance)
    gputui: bool = False  # scraped from `gputui export`: gputui_* series too
    stopped: bool = False  # no current sample: absent from instant queries
    up: float | None = 1.0  # its target's `up`; None: no `up` series at all
    since: float = -math.inf  # its util samples lie in [since, until]
    until: float = math.inf
    gaps: set[float] = field(default_factory=set)  # sample times where every GPU has no util sample
    util_at: Callable[[int, float], float | None] | None = None  # (gpu, time) -> util; default: gpu.util
    zombies: dict[str, int] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)  # gpu, pid, user, command, class, memory
    agents: list[dict[str, Any]] = field(default_factory=list)  # pid, cuda_device, command, values{}
    # gputui_job_gpu_memory_bytes series: their labels past the host's (gpu, kind, pod, ...) and "memory"
    jobs: list[dict[str, Any]] = field(default_factory=list)
    # MIG instances' FB_USED / FB_FREE series: gpu, GPU_I_ID, GPU_I_PROFILE, mem_used, mem_free (MiB)
    instances: list[dict[str, Any]] = field(default_factory=list)
    whole_gpus: bool = True  # False: its FB_USED / FB_FREE are its instances' only (dcgm-exporter on MIG)

    def labels(self, gpu: int) -> dict[str, str]:
        """dcgm-exporter's labels of one GPU's series, with the scrape target's."""
        labels = {
            "gpu": str(gpu),
            "UUID": self.uuid(gpu),
            "pci_bus_id": f"00000000:{gpu + 0x18:02X}:00.0",
            "device": f"nvidia{gpu}",
            "modelName": MODEL,
            "instance": self.instance,
            "job": self.job,
        }
        return self._named(labels)

    def uuid(self, gpu: int) -> str:
        return f"GPU-{sum(map(ord, self.name)):08x}-{gpu:04d}"

    def _named(self, labels: dict[str, str]) -> dict[str, str]:
        if self.hostname_label:
            labels["Hostname"] = self.name
        return labels

    def util_sample(self, gpu: int, t: float) -> float | None:
        if not self.since <= t <= self.until or t in self.gaps:
            return None
        return self.util_at(gpu, t) if self.util_at else self.gpus[gpu].util


@dataclass(frozen=True)
class Received:
    path: str
    endpoint: str  # "query" or "query_range"
    method: str
    content_type: str
    params: dict[str, str]
    authorization: str = ""  # the Authorization header as it arrived, "" without one

    @property
    def query(self) -> str:
        return self.params.get("query", "")


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], text)


def _matchers(promql: str) -> list[tuple[str, str]]:
    return [(name, _unescape(value)) for name, value in _MATCHER.findall(promql) if name != "__name__"]


def _num(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(float(value))


class _Server(ThreadingHTTPServer):
    """The HTTP server, over TLS when given a server context. The handshake is made in the answer's
    thread, not in accept: a client that hangs in it must not stall the others."""

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None
    ):
        self.tls = tls
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that refused the certificate, or hung up: the test looks at what the client saw


class FakePrometheus:
    def __init__(
        self,
        hosts: int = 0,
        gpus: int = 8,
        *,
        job: str = "gpu",
        gputui: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.hosts: dict[str, FakeHost] = {}
        for i in range(hosts):
            self.add_host(f"node{i + 1:03d}", gpus=gpus, job=job, gputui=gputui)
        self.received: list[Received] = []
        self.delay = 0.0  # seconds before each answer
        self.refusal: str | None = None  # answer every query with HTTP 400 and this error
        self.raw: tuple[int, str, bytes] | None = None  # answer every query with (status, type, body)
        self.takeover: Takeover | None = None  # answer every request with this instead
        self.auth: str | None = None  # the Authorization header every request must carry
        self.auth_status = 401  # the answer to one without it
        self.tls = tls
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._release = threading.Event()
        self.start()

    # --- the fleet -----------------------------------------------------------------------------------

    def add_host(self, name: str, gpus: int = 8, *, instance: str | None = None, **kw: Any) -> FakeHost:
        n = len(self.hosts)
        host = FakeHost(
            name,
            instance or f"10.0.{n // 250}.{n % 250 + 1}:9400",
            gpus=[FakeGpu() for _ in range(gpus)],
            **kw,
        )
        with self.lock:
            self.hosts[name] = host
        return host

    def remove_host(self, name: str) -> None:
        """The host is gone: no series at all (it left the window)."""
        with self.lock:
            del self.hosts[name]

    def stop_host(self, name: str, at: float = math.inf, up: float | None = 0.0) -> None:
        """Its exporter stopped at `at`: no current sample, no util samples after `at`, `up` as given."""
        with self.lock:
            host = self.hosts[name]
            host.stopped, host.until, host.up = True, at, up

    # --- what it was asked ---------------------------------------------------------------------------

    @property
    def queries(self) -> list[str]:
        with self.lock:
            return [r.query for r in self.received]

    def clear(self) -> None:
        with self.lock:
            self.received.clear()

    # --- the server ----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen (again: on the same port, once it has one)."""
        assert self._server is None, "already running"
        self._release = threading.Event()
        self._server = _Server(("127.0.0.1", self.port), self._handler(), self.tls)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-prometheus-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening: connections are refused from now on. Waits for every answer in flight."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._release.set()  # a delayed answer ends now
        server.shutdown()
        server.server_close()  # joins the threads of answers in flight
        thread.join(5)
        assert not thread.is_alive()
        self._server = self._thread = None

    @property
    def stopping(self) -> threading.Event:
        """Set when the server stops: an answer that takes its time (a drip) must end then."""
        return self._release

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve(urllib.parse.urlsplit(self.path).query)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._serve(self.rfile.read(length).decode())

            def _serve(self, form: str) -> None:
                release = fake._release
                path = urllib.parse.urlsplit(self.path).path
                endpoint = path.removeprefix("/api/v1/")
                params = dict(urllib.parse.parse_qsl(form))
                with fake.lock:
                    fake.received.append(
                        Received(
                            path,
                            endpoint,
                            self.command,
                            self.headers.get("Content-Type", ""),
                            params,
                            self.headers.get("Authorization", ""),
                        )
                    )
                if fake.auth is not None and self.headers.get("Authorization") != fake.auth:
                    self._refuse(fake.auth_status)
                    return
                if fake.delay and release.wait(fake.delay):
                    return  # stopped while waiting: the client gave up long ago
                takeover = fake.takeover
                if takeover is not None:
                    with contextlib.suppress(OSError):  # the client went away, as one that gave up does
                        takeover(self, endpoint, params)
                    return
                status, kind, body = fake.answer(endpoint, params)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client went away
                    pass

            def _refuse(self, status: int) -> None:
                """As Prometheus's own basic auth (--web.config.file) answers."""
                body = b"Unauthorized\n"
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("WWW-Authenticate", 'Basic realm="prometheus"')
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

        return Handler

    # --- answers -------------------------------------------------------------------------------------

    def answer(self, endpoint: str, params: dict[str, str]) -> tuple[int, str, bytes]:
        if self.raw is not None:
            return self.raw
        if self.refusal is not None:
            return self._error(400, "bad_data", self.refusal)
        if endpoint not in ("query", "query_range"):
            return 404, "text/plain", b"404 page not found\n"
        query = params.get("query", "")
        try:
            with self.lock:
                if endpoint == "query_range":
                    start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
                    result_type, result = "matrix", self._range(query, start, end, step)
                else:
                    at = float(params["time"]) if "time" in params else time.time()
                    result_type, result = "vector", self._instant(query, at)
        except (UnknownQuery, KeyError, ValueError) as err:
            return self._error(400, "bad_data", f"fake Prometheus cannot answer {query!r}: {err}")
        doc = {"status": "success", "data": {"resultType": result_type, "result": result}}
        return 200, "application/json", json.dumps(doc).encode()

    @staticmethod
    def _error(status: int, kind: str, text: str) -> tuple[int, str, bytes]:
        return (
            status,
            "application/json",
            json.dumps({"status": "error", "errorType": kind, "error": text}).encode(),
        )

    def _gpus(self, hosts: Iterator[FakeHost] | None = None) -> Iterator[tuple[FakeHost, int, FakeGpu]]:
        for host in self.hosts.values() if hosts is None else hosts:
            for i, gpu in enumerate(host.gpus):
                yield host, i, gpu

    def _live(self) -> Iterator[FakeHost]:
        return (h for h in self.hosts.values() if not h.stopped)

    def _instant(self, query: str, at: float) -> list[dict[str, Any]]:  # noqa: C901
        wanted = _matchers(query)

        def keep(labels: dict[str, str]) -> bool:
            return all(labels.get(k, "") == v for k, v in wanted)

        def sample(labels: dict[str, str], value: float) -> dict[str, Any]:
            return {"metric": labels, "value": [at, _num(value)]}

        out: list[dict[str, Any]] = []
        if query.strip() == "up" or query.startswith("up{"):
            for host in self.hosts.values():
                labels = {"__name__": "up", "instance": host.instance, "job": host.job}
                if host.up is not None and keep(labels):
                    out.append(sample(labels, host.up))
        elif "DCGM_FI_DEV_(" in query:
            names = re.search(r"DCGM_FI_DEV_\(([\w|]+)\)", query)
            if not names:
                raise UnknownQuery("no field names")
            for host, i, gpu in self._gpus(self._live()):
                for name in names[1].split("|"):
                    labels = {"__name__": f"DCGM_FI_DEV_{name}", **host.labels(i)}
                    if not host.whole_gpus and name in ("FB_USED", "FB_FREE"):
                        continue
                    if name in DCGM_FIELDS and keep(labels):
                        out.append(sample(labels, getattr(gpu, DCGM_FIELDS[name])))
            for host in self._live():
                for inst in host.instances:
                    for name in ("FB_USED", "FB_FREE"):
                        labels = {
                            "__name__": f"DCGM_FI_DEV_{name}",
                            **host.labels(int(inst["gpu"])),
                            "GPU_I_ID": str(inst["GPU_I_ID"]),
                            "GPU_I_PROFILE": inst["GPU_I_PROFILE"],
                        }
                        if name in names[1].split("|") and keep(labels):
                            out.append(sample(labels, inst[DCGM_FIELDS[name]]))
        elif "gputui_(" in query:
            for host in self._live():
                if not host.gputui:
                    continue
                target = host._named({"instance": host.instance, "job": host.job})
                found = [({"__name__": "gputui_exporter_info", "version": "0.1.0", **target}, 1.0)]
                found += [
                    ({"__name__": "gputui_zombie_processes", "class": cls, **target}, n)
                    for cls, n in host.zombies.items()
                ]
                for i, gpu in enumerate(host.gpus):
                    found.append(
                        ({"__name__": "gputui_unaccounted_memory_bytes", **host.labels(i)}, gpu.unaccounted)
                    )
                    found.append(({"__name__": "gputui_gpu_in_dip", **host.labels(i)}, float(gpu.in_dip)))
                out += [sample(labels, v) for labels, v in found if keep(labels)]
        elif "gputui_dips_total" in query:
            window = _WINDOW.search(query)
            if not window:
                raise UnknownQuery("no range")
            since = at - int(window[1])
            for host, i, gpu in self._gpus(h for h in self.hosts.values() if h.gputui and h.until >= since):
                labels = {"__name__": "gputui_dips_total", **host.labels(i)}
                if keep(labels):  # sum by (Hostname, instance, job, gpu)
                    out.append(
                        sample(
                            {k: labels[k] for k in ("Hostname", "instance", "job", "gpu") if k in labels},
                            gpu.dips,
                        )
                    )
        elif "gputui_process_gpu_memory_bytes" in query:
            for host in self._live():
                for p in host.processes if host.gputui else ():
                    index = int(p["gpu"])
                    labels = host._named(
                        {
                            "__name__": "gputui_process_gpu_memory_bytes",
                            "gpu": str(index),
                            "UUID": host.uuid(index),
                            "pid": str(p["pid"]),
                            "user": p["user"],
                            "command": p["command"],
                            "class": p["class"],
                            "instance": host.instance,
                            "job": host.job,
                        }
                    )
                    if keep(labels):
                        out.append(sample(labels, p["memory"]))
                for job in host.jobs if host.gputui and "gputui_job_gpu_memory_bytes" in query else ():
                    index = int(job["gpu"])
                    labels = host._named(
                        {
                            "__name__": "gputui_job_gpu_memory_bytes",
                            "UUID": host.uuid(index),
                            "instance": host.instance,
                            "job": host.job,
                            **{k: str(v) for k, v in job.items() if k != "memory"},
                        }
                    )
                    if keep(labels):
                        out.append(sample(labels, job["memory"]))
        elif "gputui_agent_" in query:
            for host in self._live():
                for a in host.agents if host.gputui else ():
                    for name, value in a["values"].items():
                        labels = host._named(
                            {
                                "__name__": f"gputui_agent_{name}",
                                "pid": str(a["pid"]),
                                "command": a["command"],
                                "cuda_device": str(a["cuda_device"]),
                                "instance": host.instance,
                                "job": host.job,
                            }
                        )
                        if keep(labels):
                            out.append(sample(labels, value))
        else:
            raise UnknownQuery("unknown query")
        return out

    def _range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        wanted = _matchers(query)
        times = [start + k * step for k in range(round((end - start) / step) + 1)]
        out: list[dict[str, Any]] = []
        if "DCGM_FI_DEV_FB_USED" in query and "DCGM_FI_DEV_FB_FREE" in query:  # memory percent
            for host, i, gpu in self._gpus():
                labels = host.labels(i)
                values = [
                    [t, _num(100 * gpu.mem_used / (gpu.mem_used + gpu.mem_free))]
                    for t in times
                    if host.since <= t <= host.until
                ]
                if values and all(labels.get(k, "") == v for k, v in wanted):
                    out.append({"metric": labels, "values": values})  # an expression: no __name__
        elif query.startswith("DCGM_FI_DEV_GPU_UTIL"):
            for host, i, _ in self._gpus():
                labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", **host.labels(i)}
                values = [[t, _num(v)] for t in times if (v := host.util_sample(i, t)) is not None]
                if values and all(labels.get(k, "") == v for k, v in wanted):
                    out.append({"metric": labels, "values": values})
        else:
            raise UnknownQuery("unknown range query")
        return out
