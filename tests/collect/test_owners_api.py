"""The Docker API reader against hostile answers: a reply nested 100,000 deep (json.loads would recurse
into a RecursionError) or anything else that fails is one failed ask, retried later; the names thread
keeps going."""

from __future__ import annotations

import http.server
import socketserver
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.collect.procs import owners as owners_mod
from gputui.collect.procs.owners import ContainerNames, ask_container_name
from tests.collect.test_owners import Clock
from tests.helpers import wait_until

DEEP = "d" * 64
GOOD = "e" * 64
DEPTH = 100_000


class RawApi(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """/containers/ID/json on a unix socket, answering each id's body as given."""

    daemon_threads = True

    def __init__(self, path: str, bodies: dict[str, bytes]) -> None:
        self.bodies, self.requests = bodies, {cid: 0 for cid in bodies}
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                cid = self.path.split("/")[2]
                api.requests[cid] = api.requests.get(cid, 0) + 1
                body = api.bodies.get(cid)
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(path, Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def api() -> Iterator[tuple[RawApi, Path]]:
    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # a unix socket's path: at most 107 bytes
        path = Path(d) / "docker.sock"
        deep = b'{"Name": "/deep", "Config": ' + b"[" * DEPTH + b"]" * DEPTH + b"}"
        server = RawApi(str(path), {DEEP: deep, GOOD: b'{"Id": "x", "Name": "/trainer-3"}'})
        try:
            yield server, path
        finally:
            server.close()


def test_a_reply_nested_100000_deep_is_refused_not_raised(api: tuple[RawApi, Path]) -> None:
    _, path = api
    assert ask_container_name(str(path), DEEP) is None
    assert ask_container_name(str(path), GOOD) == "trainer-3"


def test_the_names_thread_outlives_a_deep_reply_and_asks_again_later(api: tuple[RawApi, Path]) -> None:
    server, path = api
    clock = Clock()
    names = ContainerNames({"docker": path}, monotonic=clock)
    assert names.get("docker", DEEP) is None
    assert names.get("docker", GOOD) is None
    assert wait_until(lambda: names.get("docker", GOOD) == "trainer-3", 5.0)
    assert names._thread is not None and names._thread.is_alive()
    clock.t += owners_mod.API_RETRY_S + 1  # the failed one is asked again, by the same thread
    names.get("docker", DEEP)
    assert wait_until(lambda: server.requests[DEEP] == 2, 5.0)
    assert wait_until(lambda: names.asks == 3, 5.0)
    assert names._thread.is_alive()


def test_any_failure_of_an_ask_is_one_failed_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever an ask raises (MemoryError included) ends that ask, not the thread."""
    calls: list[str] = []

    def ask(path: str, cid: str, timeout: float) -> str | None:
        calls.append(cid)
        if cid == DEEP:
            raise MemoryError
        return "ok"

    monkeypatch.setattr(owners_mod, "ask_container_name", ask)
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(f"{d}/s.sock")
        try:
            names = ContainerNames({"docker": Path(f"{d}/s.sock")})
            names.get("docker", DEEP)
            names.get("docker", GOOD)
            assert wait_until(lambda: names.get("docker", GOOD) == "ok", 5.0)
            assert calls == [DEEP, GOOD]
        finally:
            sock.close()


@pytest.mark.parametrize(
    ("body", "shallow"),
    [
        (b'{"Name": "/a", "Mounts": [{"x": [[[1]]]}]}', True),
        (
            b'{"Name": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}',
            True,
        ),  # in a string
        (b'{"Name": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', True),
        (b"[" * 40 + b"]" * 40, False),
        (b'{"a":' * 40 + b"1" + b"}" * 40, False),
        (b"[" * 10, False),  # never closed: not JSON, and refused before parsing
    ],
)
def test_the_depth_bound(body: bytes, shallow: bool) -> None:
    assert owners_mod._shallow(body) is shallow
