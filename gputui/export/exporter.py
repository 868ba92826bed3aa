"""`gputui export`: sample on a steady clock, serve the latest snapshot to Prometheus.

Sampling runs on its own schedule (every --interval seconds, 1 s by default) rather than per scrape, so
dips of a few seconds are seen whatever the scrape interval, and two Prometheus servers scraping the
same exporter cost nothing extra. A scrape only reads the latest sample: it never calls the sampler,
and the sample clock never waits on a scrape.

The HTTP server is our own, small on purpose: prometheus-client's start_http_server runs a thread per
connection with no timeout, so a thousand idle connections tied up a thousand threads, and a scrape
with them.
"""

from __future__ import annotations

import contextlib
import errno
import http
import queue
import re
import selectors
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gputui import __version__
from gputui.analyze.dips import DipDetector
from gputui.collect.sampler import Sampler
from gputui.export.metrics import DipCounters, XidCounters, families, printable_labels, retype_counters
from gputui.export.web_config import (
    BasicAuth,
    PasswordsBusy,
    RateLimit,
    WebConfigError,
    WebConfigFile,
    sans_allowed,
)
from gputui.model import Snapshot
from gputui.units import printable

REQUEST_TIMEOUT_S = 5.0  # a scraper sends its request at once; a client that dribbles it is cut off
SEND_TIMEOUT_S = 5.0  # and one that does not read its answer
MAX_HEAD_BYTES = 8192  # request line and headers
MAX_WAITING = 512  # connections open, their request not yet complete; beyond it the oldest is closed
WORKERS = 2  # scrapes answered at once
QUEUE = 8  # complete requests waiting for a worker; beyond it a request gets 503
_NOT_PRINTABLE_ASCII = re.compile(rb"[^\t\x20-\x7e]")
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Exporter:
    """A prometheus-client collector over a Sampler: `tick()` samples, `collect()` serves the latest."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.detector = DipDetector()
        self.dips = DipCounters()
        self.xids = XidCounters()
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
            self.xids.add(snap.xids)
            self.latest = snap
            self.sample_seconds = time.perf_counter() - started
        return snap

    def collect(self) -> list[Metric]:
        """What a scrape serves, built on the scrape's thread from a copy of the latest state: the lock is
        held only for that copy, and the sampler is never called."""
        with self._lock:
            snap, failures, took = self.latest, self.failures, self.sample_seconds
            dips = DipCounters(dict(self.dips.count), dict(self.dips.seconds), set(self.dips.ongoing))
            xids = XidCounters(dict(self.xids.last), dict(self.xids.count))
        return list(printable_labels(self._metrics(snap, failures, took, dips, xids)))

    def _metrics(
        self, snap: Snapshot | None, failures: int, took: float, dips: DipCounters, xids: XidCounters
    ) -> Iterator[Metric]:
        info = InfoMetricFamily("gputui_exporter", "The gputui exporter and what it reads.")
        info.add_metric(
            [],
            {"version": __version__, "source": self.sampler.source.name, "Hostname": self.sampler.hostname},
        )
        yield info
        fails = CounterMetricFamily("gputui_exporter_sample_failures", "Samples that raised an error.")
        fails.add_metric([], float(failures))
        yield fails
        if snap is None:
            return
        took_fam = GaugeMetricFamily("gputui_exporter_sample_seconds", "Time the last sample took.")
        took_fam.add_metric([], took)
        yield took_fam
        stamp = GaugeMetricFamily(
            "gputui_exporter_last_sample_timestamp_seconds", "Unix time of the sample being served."
        )
        stamp.add_metric([], snap.time)
        yield stamp
        yield from families(snap, dips, xids)


def serve(
    exporter: Exporter, port: int, bind: str, web: WebConfigFile | None = None
) -> tuple[MetricsServer, int]:
    """Start the HTTP server on its own threads; returns it and the port it listens on. `web`: the
    exporter-toolkit web config it runs under (TLS, basic auth, headers, rate limit), if any."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)  # Collector is a Protocol: collect() is all it asks for
    ProcessCollector(registry=registry)  # the exporter's own CPU and memory
    server = MetricsServer(registry, port, bind, web=web)
    return server, server.port


# -- the HTTP server -------------------------------------------------------------------------------------


@dataclass
class _Waiting:
    """A connection whose request head has not all arrived yet (or, over TLS, whose handshake has not)."""

    deadline: float
    head: bytearray = field(default_factory=bytearray)
    handshake: bool = False  # TLS: the handshake is still under way
    sans: frozenset[str] | None = None  # TLS: the client certificate must name one of these
    events: int = selectors.EVENT_READ  # what the selector waits for (a handshake may want to write)


class MetricsServer:
    """GET /metrics, safe against clients that tie connections up.

    One thread waits on every connection with a selector until its request head is complete: an idle
    connection costs a file descriptor, no thread and no CPU, and is closed REQUEST_TIMEOUT_S after it
    was accepted however it dribbles. Complete requests go to a fixed pool of WORKERS threads through a
    bounded queue; they render the registry and answer, one request per connection.

    Over TLS the handshake runs on the same thread, non-blocking, step by step as the client's bytes
    arrive, under the same deadline: a client that connects and never says hello costs what an idle
    connection costs. Basic authentication (bcrypt) and the rate limit are the workers'.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        port: int,
        bind: str,
        request_timeout: float = REQUEST_TIMEOUT_S,
        web: WebConfigFile | None = None,
    ) -> None:
        self.registry = registry
        self.request_timeout = request_timeout
        self.web = web
        self.tls = web is not None and web.tls
        self._auth = BasicAuth()
        self._rate = RateLimit()
        self._listener = _listen(bind, port)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        for sock, role in ((self._listener, "accept"), (self._wake_r, "wake")):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, role)
        self._waiting: dict[socket.socket, _Waiting] = {}  # in order of arrival, so of deadline
        self._requests: queue.Queue[tuple[socket.socket, bytes] | None] = queue.Queue(QUEUE)
        self._answering: set[socket.socket] = set()
        self._answering_lock = threading.Lock()
        self._stopping = False
        self._io = threading.Thread(target=self._loop, name="gputui-export-io", daemon=True)
        self._workers = [
            threading.Thread(target=self._work, name=f"gputui-export-{i}", daemon=True)
            for i in range(WORKERS)
        ]
        for thread in (self._io, *self._workers):
            thread.start()

    # -- waiting for requests (the I/O thread) -------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            for key, _events in self._selector.select(self._until_next_deadline()):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                elif key.fileobj in self._waiting:  # not closed earlier in this same round
                    self._read(key.fileobj, key.data)
            self._expire(time.monotonic())

    def _until_next_deadline(self) -> float | None:
        if not self._waiting:
            return None
        first = next(iter(self._waiting.values()))
        return max(0.0, first.deadline - time.monotonic())

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time: reads and timeouts get their turn too
            try:
                conn, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno not in _OUT_OF_DESCRIPTORS:
                    continue  # that one connection failed (reset before we took it)
                if not self._waiting:  # nothing of ours to close: pause rather than spin on it
                    time.sleep(0.05)
                    return
                self._drop(next(iter(self._waiting)))  # make room: the oldest has waited longest
                continue
            if len(self._waiting) >= MAX_WAITING:
                self._drop(next(iter(self._waiting)))
            conn.setblocking(False)
            waiting = _Waiting(time.monotonic() + self.request_timeout)
            if self.tls:
                wrapped = self._wrap(conn, waiting)
                if wrapped is None:
                    continue
                conn = wrapped
            self._waiting[conn] = waiting
            self._selector.register(conn, selectors.EVENT_READ, waiting)

    def _wrap(self, conn: socket.socket, waiting: _Waiting) -> ssl.SSLSocket | None:
        """The connection in TLS, its handshake not begun (it is read step by step); None, and closed,
        while the web config is bad (fail closed)."""
        assert self.web is not None
        try:
            config = self.web.current()
            assert config.context is not None  # self.tls: every good reading has one
            waiting.handshake, waiting.sans = True, config.allowed_sans
            return config.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        except (WebConfigError, OSError):
            conn.close()
            return None

    def _read(self, conn: socket.socket, waiting: _Waiting) -> None:
        if waiting.handshake and not self._handshake(conn, waiting):
            return
        chunk = self._receive(conn, waiting)
        if chunk is None:
            return
        if not chunk:
            self._drop(conn)
            return
        waiting.head += chunk
        end = waiting.head.find(b"\r\n\r\n")
        if end < 0 and len(waiting.head) <= MAX_HEAD_BYTES:
            return
        self._forget(conn)
        if end < 0 or end > MAX_HEAD_BYTES:
            _refuse(conn, 431)
            return
        try:
            self._requests.put_nowait((conn, bytes(waiting.head[:end])))
        except queue.Full:
            _refuse(conn, 503)

    def _receive(self, conn: socket.socket, waiting: _Waiting) -> bytes | None:
        """What the client sent (b"": it closed, or failed), None when nothing yet. Over TLS, also what
        the TLS layer already holds decrypted: the socket will not wake the selector for that."""
        try:
            chunk = conn.recv(4096)
            while isinstance(conn, ssl.SSLSocket) and conn.pending() and len(chunk) <= MAX_HEAD_BYTES:
                chunk += conn.recv(4096)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            self._want(conn, waiting, selectors.EVENT_READ)
            return None
        except ssl.SSLWantWriteError:
            self._want(conn, waiting, selectors.EVENT_WRITE)
            return None
        except OSError:
            return b""
        return chunk

    def _handshake(self, conn: socket.socket, waiting: _Waiting) -> bool:
        """One step of the TLS handshake: True once it is done (and the client certificate names an
        allowed SAN, where the config lists some); the connection is closed if it failed."""
        assert isinstance(conn, ssl.SSLSocket)
        try:
            conn.do_handshake()
        except ssl.SSLWantReadError:
            self._want(conn, waiting, selectors.EVENT_READ)
            return False
        except ssl.SSLWantWriteError:
            self._want(conn, waiting, selectors.EVENT_WRITE)
            return False
        except (OSError, ValueError):  # a bad hello, an unverified certificate, a reset
            self._drop(conn)
            return False
        if waiting.sans is not None and not sans_allowed(conn.getpeercert(), waiting.sans):
            self._drop(conn)
            return False
        waiting.handshake = False
        self._want(conn, waiting, selectors.EVENT_READ)
        return True

    def _want(self, conn: socket.socket, waiting: _Waiting, events: int) -> None:
        if waiting.events != events:
            waiting.events = events
            self._selector.modify(conn, events, waiting)

    def _expire(self, now: float) -> None:
        while self._waiting:
            conn, waiting = next(iter(self._waiting.items()))
            if waiting.deadline > now:
                return
            self._drop(conn)

    def _forget(self, conn: socket.socket) -> None:
        self._waiting.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)

    def _drop(self, conn: socket.socket) -> None:
        self._forget(conn)
        conn.close()

    # -- answering (the workers) ---------------------------------------------------------------------

    def _work(self) -> None:
        while (request := self._requests.get()) is not None:
            conn, head = request
            with self._answering_lock:
                if self._stopping:
                    conn.close()
                    continue
                self._answering.add(conn)
            try:
                conn.settimeout(SEND_TIMEOUT_S)  # for the whole answer: see socket.sendall
                conn.sendall(self._answer(head))
                conn.shutdown(socket.SHUT_WR)
            except Exception:  # the client went away or did not read in time; nothing may shrink the pool
                pass
            finally:
                with self._answering_lock:
                    self._answering.discard(conn)
                conn.close()

    def _answer(self, head: bytes) -> bytes:
        request = _parse(head)
        if request is None:
            return _response(400, b"bad request\n")
        method, path, headers = request
        extra = ""
        if self.web is not None:  # the toolkit's order: the file, the rate limit, then who asks
            try:
                config = self.web.current()
            except WebConfigError:
                return _response(500, b"internal server error: see the exporter's log\n")
            extra = config.header_lines
            if not self._rate.allow(config.rate_interval, config.rate_burst):
                return _response(429, b"too many requests\n", extra=extra)
            if config.users:
                try:
                    allowed = self._auth.allows(config.users, headers.get("authorization"))
                except PasswordsBusy:
                    return _response(503, b"busy checking passwords: try again\n", extra=extra)
                if not allowed:
                    return _response(401, b"unauthorized\n", extra=extra + "WWW-Authenticate: Basic\r\n")
        if path not in ("/", "/metrics"):
            return _response(404, b"not found: metrics are at /metrics\n", extra=extra)
        if method != "GET":
            return _response(405, b"only GET\n", extra=extra + "Allow: GET\r\n")
        if path == "/":
            return _response(200, b"gputui exporter: metrics are at /metrics\n", extra=extra)
        try:
            body, content_type = self._render(headers.get("accept", ""))
        except Exception as err:  # a collector failed: say so, and keep serving
            return _response(500, f"scrape failed: {type(err).__name__}\n".encode(), extra=extra)
        return _response(200, body, content_type, extra=extra)

    def _render(self, accept: str) -> tuple[bytes, str]:
        """The exposition format the scraper asked for (OpenMetrics or Prometheus text)."""
        try:
            encoder, content_type = choose_encoder(accept)
        except Exception:  # prometheus-client raises on some malformed Accept headers
            encoder, content_type = choose_encoder("")
        body = retype_counters(
            encoder(self.registry), content_type.startswith("application/openmetrics-text")
        )
        return body, content_type

    # -- stopping ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop serving and close every connection, within a fraction of a second whatever clients do."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._io.join(1.0)
        for conn in list(self._waiting):
            self._drop(conn)
        with contextlib.suppress(queue.Empty):
            while (request := self._requests.get_nowait()) is not None:
                request[0].close()
        with self._answering_lock:  # cut short answers still being sent
            for conn in self._answering:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for _ in self._workers:
            self._requests.put(None)
        deadline = time.monotonic() + 0.5
        for thread in self._workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()


def _listen(bind: str, port: int) -> socket.socket:
    """A listening socket on `bind` (an IPv4 or IPv6 address, or a name); raises OSError."""
    family, _type, _proto, _name, address = socket.getaddrinfo(
        bind or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address, family=family, backlog=socket.SOMAXCONN)


def _parse(head: bytes) -> tuple[str, str, dict[str, str]] | None:
    """(method, path, headers by lower-case name) of a request head, or None when it is malformed."""
    request_line, *header_lines = head.split(b"\r\n")
    if any(_NOT_PRINTABLE_ASCII.search(line) for line in (request_line, *header_lines)):
        return None
    parts = request_line.decode("ascii").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, _version = parts
    headers = {}
    for line in header_lines:
        name, colon, value = line.decode("ascii").partition(":")
        if not colon or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    return method, target.partition("?")[0], headers


def _response(
    status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", extra: str = ""
) -> bytes:
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + body


def _refuse(conn: socket.socket, status: int) -> None:
    """A short answer from the I/O thread, which never blocks: what does not fit in one send is lost."""
    with contextlib.suppress(OSError):
        conn.send(_response(status, f"{http.HTTPStatus(status).phrase.lower()}\n".encode()))
    conn.close()


def run(
    exporter: Exporter,
    interval: float,
    stop: threading.Event | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
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


def announce(port: int, bind: str, exporter: Exporter, interval: float, tls: bool = False) -> None:
    host = "localhost" if bind in ("", "0.0.0.0", "::") else bind
    if ":" in host:
        host = f"[{host}]"
    scheme = "https" if tls else "http"
    print(
        f"gputui export: {scheme}://{host}:{port}/metrics (Hostname={printable(exporter.sampler.hostname)}, "
        f"source {exporter.sampler.source.name}, sampled every {interval:g} s)",
        file=sys.stderr,
        flush=True,
    )
