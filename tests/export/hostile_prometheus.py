"""What a hostile or broken server answers `gputui fleet`: takeovers for FakePrometheus (a real HTTP server
on loopback) that write answers no honest Prometheus writes, byte for byte.

    fake.takeover = answer(200, b"{not json")              # any status and body
    fake.takeover = edited(fake, lambda text, endpoint: ...)  # the fleet's real answer, edited as text
    fake.takeover = drip(fake, where="body")               # a byte at a time, for ever (or a hang-up)
    fake.takeover = flood = Flood(100 * MB)                # a 100 MB answer; flood.sent: bytes it got out
    fake.takeover = redirect("ftp://127.0.0.1:2121/x")     # a redirect anywhere
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from tests.export.fake_prometheus import FakePrometheus, Takeover

MB = 1024 * 1024


def vector(result: str) -> bytes:
    """A success answer of an instant query whose result is the JSON text `result`, as it is."""
    return b'{"status":"success","data":{"resultType":"vector","result":' + result.encode() + b"}}"


def matrix(result: str) -> bytes:
    return b'{"status":"success","data":{"resultType":"matrix","result":' + result.encode() + b"}}"


def _head(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()


def answer(
    status: int, body: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
) -> Takeover:
    """Every request answered with `body` (bytes as they are: invalid UTF-8 stays invalid)."""

    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        _head(
            handler,
            status,
            {"Content-Type": content_type, "Content-Length": str(len(body)), **(headers or {})},
        )
        handler.wfile.write(body)

    return serve


def edited(fake: FakePrometheus, edit: Callable[[str, str], str]) -> Takeover:
    """The fake fleet's own answer to each query, its JSON text passed through edit(text, endpoint)."""

    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        status, kind, body = fake.answer(endpoint, params)
        text = edit(body.decode(), endpoint).encode("utf-8", "surrogateescape")
        answer(status, text, kind)(handler, endpoint, params)

    return serve


class Drip:
    """A byte every `every` seconds until the server stops or the client hangs up: in the status line and
    headers ("head") or, after complete headers announcing a megabyte, in the body ("body"). Each read
    gets a byte well within any per-read timeout, so only a deadline for the whole answer ends it.
    `started` is set when an answer begins, `ended` when the client hung up (or the server stopped)."""

    def __init__(self, fake: FakePrometheus, where: str = "body", every: float = 0.1) -> None:
        assert where in ("head", "body")
        self.fake, self.where, self.every = fake, where, every
        self.started = threading.Event()
        self.ended = threading.Event()

    def __call__(self, handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        out = handler.wfile
        self.started.set()
        try:
            if self.where == "head":
                out.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            else:
                _head(handler, 200, {"Content-Type": "application/json", "Content-Length": str(MB)})
                out.write(b"{")
            out.flush()
            while not self.fake.stopping.wait(self.every):
                out.write(b"a" if self.where == "head" else b" ")
                out.flush()
        finally:
            self.ended.set()


def drip(fake: FakePrometheus, where: str = "body", every: float = 0.1) -> Drip:
    return Drip(fake, where, every)


class Flood:
    """An answer of `total` bytes (a vector of small samples, valid JSON once whole), written a megabyte at
    a time; `sent` counts what the client took before it hung up. Without `content_length` it ends when
    the connection does (HTTP/1.0), so nothing tells the client its size before it reads it."""

    def __init__(self, total: int, content_length: bool = False, status: int = 200) -> None:
        self.total = total
        self.content_length = content_length
        self.status = status
        self.sent = 0
        self.done = threading.Event()  # the answer ended: all of it written, or the client hung up

    def __call__(self, handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        head = b'{"status":"success","data":{"resultType":"vector","result":['
        tail = b'{"metric":{},"value":[1,"1"]}]}}'
        item = b'{"metric":{"job":"gpu"},"value":[1700000000,"1"]},'
        chunk = item * (MB // len(item))
        try:
            _head(
                handler,
                self.status,
                {
                    "Content-Type": "application/json",
                    **({"Content-Length": str(self.total)} if self.content_length else {}),
                },
            )
            handler.wfile.write(head)
            self.sent = len(head)
            while self.sent + len(chunk) + len(tail) <= self.total:
                handler.wfile.write(chunk)
                self.sent += len(chunk)
            filler = b" " * (self.total - self.sent - len(tail))
            handler.wfile.write(filler + tail)
            self.sent = self.total
        finally:
            self.done.set()


def redirect(location: str, code: int = 302) -> Takeover:
    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        body = b"moved"
        _head(
            handler,
            code,
            {"Location": location, "Content-Type": "text/plain", "Content-Length": str(len(body))},
        )
        handler.wfile.write(body)

    return serve


class Listener:
    """A TCP port on `host` that accepts nothing: where a refused redirect points. A connection made to it
    waits in its backlog, so `reached()` can tell afterwards whether anyone came."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]

    def reached(self) -> bool:
        self.sock.setblocking(False)
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
