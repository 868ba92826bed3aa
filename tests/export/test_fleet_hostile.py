"""`gputui fleet` against a hostile Prometheus: a real HTTP server on loopback that answers non-JSON, JSON of
the wrong shape, NaN and infinite times, labels with escape sequences, answers that never end or never
stop growing, and redirects to other schemes and hosts. Every one is a one-line error (the banner in the
TUI), never a crash, a hang or a terminal taken over."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gputui.export.fleet import FleetReader
from gputui.export.promql import MAX_ANSWER_BYTES, BadAnswer, Prometheus, PrometheusError
from gputui.units import printable
from tests.export.fake_prometheus import FakePrometheus, Takeover
from tests.export.hostile_prometheus import (
    MB,
    Flood,
    Listener,
    answer,
    drip,
    edited,
    matrix,
    redirect,
    vector,
)
from tests.helpers import until

ROOT = Path(__file__).resolve().parents[2]
SHAPE = "did not answer as Prometheus's HTTP API does"
Hostile = Callable[[FakePrometheus], Takeover]  # a takeover for the fake at hand


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=2, gpus=2) as server:
        yield server


def one_line(err: pytest.ExceptionInfo[PrometheusError]) -> str:
    text = str(err.value)
    assert text and "\n" not in text and printable(text) == text, repr(text)
    return text


def sample(value: str = '[1700000000,"1"]', metric: str = '{"job":"gpu"}') -> str:
    return f'[{{"metric":{metric},"value":{value}}}]'


# --- answers of the wrong shape ------------------------------------------------------------------------

WRONG_INSTANT = {
    "nan-time": vector(sample('[NaN,"1"]')),
    "infinity-time": vector(sample('[Infinity,"1"]')),
    "minus-infinity-time": vector(sample('[-Infinity,"1"]')),
    "1e999-time": vector(sample('[1e999,"1"]')),
    "time-a-string": vector(sample('["1700000000","1"]')),
    "time-true": vector(sample('[true,"1"]')),
    "time-of-9999-digits": vector(sample("[" + "9" * 9999 + ',"1"]')),
    "value-a-number": vector(sample("[1700000000,1]")),
    "value-null": vector(sample("[1700000000,null]")),
    "value-a-word": vector(sample('[1700000000,"lots"]')),
    "value-alone": vector(sample("[1700000000]")),
    "value-of-three": vector(sample('[1700000000,"1","2"]')),
    "value-an-object": vector(sample('{"t":1700000000,"v":"1"}')),
    "no-value": vector('[{"metric":{}}]'),
    "result-a-string": vector('"everything is fine"'),
    "result-an-object": vector('{"metric":{}}'),
    "result-null": vector("null"),
    "sample-a-list": vector('[["metric","value"]]'),
    "sample-a-string": vector('["up"]'),
    "metric-a-string": vector(sample(metric='"up"')),
    "metric-a-list": vector(sample(metric='["job","gpu"]')),
    "label-a-number": vector(sample(metric='{"gpu":0}')),
    "label-null": vector(sample(metric='{"gpu":null}')),
    "label-an-object": vector(sample(metric='{"gpu":{"x":"y"}}')),
    "matrix-for-an-instant-query": matrix('[{"metric":{},"values":[[1700000000,"1"]]}]'),
    "scalar": b'{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}',
    "no-status": b'{"data":{"resultType":"vector","result":[]}}',
    "status-a-number": b'{"status":1,"data":{"resultType":"vector","result":[]}}',
    "data-a-list": b'{"status":"success","data":[]}',
    "json-a-list": b"[]",
    "cut-short": vector(sample())[:-7],
    "not-utf-8": b"\xff\xfe\x00\x01garbage",
    "html": b"<html><body>Grafana</body></html>",
    "empty": b"",
    "nested-100000-deep": b"[" * 100_000 + b"]" * 100_000,
}

WRONG_RANGE = {
    "nan-time": matrix('[{"metric":{},"values":[[1700000000,"1"],[NaN,"2"]]}]'),
    "1e999-time": matrix('[{"metric":{},"values":[[1e999,"2"]]}]'),
    "values-a-string": matrix('[{"metric":{},"values":"1 2 3"}]'),
    "point-a-number": matrix('[{"metric":{},"values":[1700000000]}]'),
    "point-value-a-number": matrix('[{"metric":{},"values":[[1700000000,2]]}]'),
    "no-values": matrix('[{"metric":{}}]'),
    "metric-null": matrix('[{"metric":null,"values":[]}]'),
    "vector-for-a-range-query": vector(sample()),
}


@pytest.mark.parametrize("body", WRONG_INSTANT.values(), ids=WRONG_INSTANT.keys())
def test_an_instant_answer_of_the_wrong_shape_is_one_line(fake: FakePrometheus, body: bytes) -> None:
    fake.takeover = answer(200, body)
    with pytest.raises(BadAnswer) as err:
        Prometheus(fake.url).query("up")
    assert one_line(err).startswith(f"{fake.url} {SHAPE}")


@pytest.mark.parametrize("body", WRONG_RANGE.values(), ids=WRONG_RANGE.keys())
def test_a_range_answer_of_the_wrong_shape_is_one_line(fake: FakePrometheus, body: bytes) -> None:
    fake.takeover = answer(200, body)
    with pytest.raises(BadAnswer) as err:
        Prometheus(fake.url).query_range("DCGM_FI_DEV_GPU_UTIL", 0, 30, 15)
    assert one_line(err).startswith(f"{fake.url} {SHAPE}")


def test_the_error_says_where_the_answer_went_wrong(fake: FakePrometheus) -> None:
    fake.takeover = answer(200, vector(sample()[:-1] + ',{"metric":{},"value":[1e999,"1"]}]'))
    with pytest.raises(BadAnswer) as err:
        Prometheus(fake.url).query("up")
    assert one_line(err).endswith(": result[1].value[0] is not a finite time")
    fake.takeover = answer(200, vector(sample('[NaN,"1"]')))
    with pytest.raises(BadAnswer) as err:
        Prometheus(fake.url).query("up")
    assert one_line(err).endswith(": NaN is not JSON")


def test_values_that_are_not_finite_are_unknown(fake: FakePrometheus) -> None:
    # Prometheus itself writes NaN and ±Inf as "NaN", "+Inf", "-Inf"; "1e999" overflows to infinity.
    values = ["NaN", "+Inf", "-Inf", "1e999", "-1e999", "42.5"]
    fake.takeover = answer(
        200, vector(json.dumps([{"metric": {"v": v}, "value": [1700000000, v]} for v in values]))
    )
    result = Prometheus(fake.url).query("up")
    assert [(s.labels["v"], s.value) for s in result] == [(v, None) for v in values[:-1]] + [("42.5", 42.5)]
    fake.takeover = answer(
        200, matrix(json.dumps([{"metric": {}, "values": [[1, "NaN"], [2, "1e999"], [3, "7"]]}]))
    )
    [series] = Prometheus(fake.url).query_range("DCGM_FI_DEV_GPU_UTIL", 0, 30, 15)
    assert series.points == ((1.0, None), (2.0, None), (3.0, 7.0))


def test_labels_are_made_printable_and_bounded(fake: FakePrometheus) -> None:
    metric = (
        '{"Hostname":"evil\\u001b]0;pwned\\u0007\\u001b[2J","command":"\\u009b31mred",'
        '"lone":"\\ud800x","long":"' + "x" * 100_000 + '","\\u001b[1mkey":"v"}'
    )
    body = vector(sample(metric=metric)).replace(b'"v"}', b'"v","raw":"caf\xe9 \xff\xfe"}')
    fake.takeover = answer(200, body)
    [s] = Prometheus(fake.url).query("up")
    assert s.labels["Hostname"] == "evil?]0;pwned??[2J"
    assert s.labels["command"] == "?31mred"
    assert s.labels["lone"] == "?x"
    assert s.labels["raw"] == "caf\ufffd \ufffd\ufffd"  # bytes that are no UTF-8: replaced, not fatal
    assert s.labels["?[1mkey"] == "v"
    assert 0 < len(s.labels["long"]) <= 4096
    assert all(printable(k) == k and printable(v) == v for k, v in s.labels.items())


def test_an_error_text_from_the_server_is_one_printable_line(fake: FakePrometheus) -> None:
    fake.refusal = "bad\x1b]0;pwned\x07 query\nsecond line" + "!" * 10_000
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url).query("up")
    assert one_line(err).startswith("Prometheus refused the query: bad?]0;pwned? query?second line!")
    assert len(one_line(err)) <= 400


def test_a_reason_phrase_with_escape_sequences_is_printable(fake: FakePrometheus) -> None:
    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        handler.send_response(500, "\x1b[2J\x1b]0;owned\x07")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    fake.takeover = serve
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url).query("up")
    assert "answered HTTP 500 ?[2J?]0;owned?" in one_line(err)


# --- answers that never end, or never stop growing -------------------------------------------------------


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_server_that_drips_is_abandoned_at_the_timeout(fake: FakePrometheus, where: str) -> None:
    fake.takeover = drip(fake, where=where, every=0.1)  # each read gets a byte long before 1 s
    began = time.monotonic()
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url, timeout=1.0).query("up")
    took = time.monotonic() - began
    assert 0.9 <= took < 3.0, took  # the drip never ends: the 1 s deadline did (slack for load)
    assert one_line(err) == f"Prometheus at {fake.url} did not answer within 1 s"


def test_a_tls_handshake_that_drips_is_abandoned_at_the_timeout() -> None:
    """A TLS record header announcing 16 KiB, then a byte every 0.1 s: the handshake's reads each get a
    byte, so only the deadline ends it (through the connection's duplicate: TLS wrapped the original)."""
    stop = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def serve() -> None:
            conn, _ = server.accept()
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)  # the client's hello
                conn.sendall(b"\x16\x03\x03\x40\x00")  # handshake record, 16 KiB to come
                while not stop.wait(0.1):
                    conn.sendall(b"\x00")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        url = f"https://127.0.0.1:{server.getsockname()[1]}"
        began = time.monotonic()
        try:
            with pytest.raises(PrometheusError) as err:
                Prometheus(url, timeout=1.0).query("up")
        finally:
            stop.set()
            thread.join(5)
        assert 0.9 <= time.monotonic() - began < 3.0  # the drip never ends: the deadline did
        assert one_line(err) == f"Prometheus at {url} did not answer within 1 s"


def test_the_deadline_spans_the_redirects_too(fake: FakePrometheus) -> None:
    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        time.sleep(0.4)  # each answer well within the timeout; the three of them are not
        redirect(f"/hop{len(fake.received)}/api/v1/query", 307)(handler, endpoint, params)

    fake.takeover = serve
    began = time.monotonic()
    with pytest.raises(PrometheusError, match="did not answer within 1 s"):
        Prometheus(fake.url, timeout=1.0).query("up")
    assert time.monotonic() - began < 3.0  # the error, not the elapsed time, says which deadline


def test_an_answer_over_the_cap_is_abandoned_at_the_cap(fake: FakePrometheus) -> None:
    flood = Flood(100 * MB)  # no Content-Length: its size shows only as it is read
    fake.takeover = flood
    with pytest.raises(BadAnswer) as err:
        Prometheus(fake.url, timeout=30).query("up")
    assert one_line(err) == f"{fake.url} answered more than 64 MiB: refused"
    assert flood.done.wait(10)
    # What it wrote and the client never read sits in the two sockets' buffers (a few MiB on loopback).
    assert MAX_ANSWER_BYTES <= flood.sent <= MAX_ANSWER_BYTES + 16 * MB, flood.sent


def test_a_content_length_over_the_cap_is_refused_before_the_body(fake: FakePrometheus) -> None:
    flood = Flood(100 * MB, content_length=True)
    fake.takeover = flood
    with pytest.raises(BadAnswer, match="answered more than 64 MiB"):
        Prometheus(fake.url, timeout=30).query("up")
    assert flood.done.wait(10)
    assert flood.sent <= 16 * MB, flood.sent


def test_a_huge_error_answer_is_not_read_to_its_end(fake: FakePrometheus) -> None:
    flood = Flood(100 * MB, status=500)
    fake.takeover = flood
    with pytest.raises(PrometheusError, match="answered HTTP 500"):
        Prometheus(fake.url, timeout=30).query("up")
    assert flood.done.wait(10)
    assert flood.sent <= 16 * MB, flood.sent


@pytest.mark.parametrize("kind", ["100-mb", "63-mb-of-empty-lists"])
def test_memory_stays_bounded_while_a_big_answer_is_refused(fake: FakePrometheus, kind: str) -> None:
    if kind == "100-mb":  # refused at the cap
        fake.takeover, error = Flood(100 * MB), "answered more than 64 MiB"
    else:  # under the cap, but parsed it would take 1.7 GB (an empty list: 3 bytes here, 64 in Python)
        body = vector("[" + "[]," * (21 * MB) + "[]]")
        assert len(body) < MAX_ANSWER_BYTES
        fake.takeover, error = answer(200, body), "more than 3,000,000 JSON values"
    # VmHWM, not ru_maxrss: that one starts from the forking parent's peak (this test's, with its body).
    script = (
        "import re\n"
        "from gputui.export.promql import Prometheus, PrometheusError\n"
        "try:\n"
        f"    Prometheus({fake.url!r}, timeout=30).query('up')\n"
        "except PrometheusError as err:\n"
        "    print(err)\n"
        "with open('/proc/self/status') as status:\n"
        "    print(int(re.search(r'VmHWM:\\s*(\\d+) kB', status.read())[1]) // 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    printed, rss_mib = done.stdout.splitlines()
    assert error in printed
    # Python and the client take ~30 MiB; the answer's bytes, then its text, at most 64 MiB each.
    assert int(rss_mib) < 30 + 2 * 64 + 40, f"peak RSS {rss_mib} MiB"


# --- redirects ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["ftp", "file", "gopher"])
def test_a_redirect_off_http_is_refused_and_not_followed(fake: FakePrometheus, scheme: str) -> None:
    with Listener() as target:
        location = f"{scheme}://127.0.0.1:{target.port}/api/v1/query"
        fake.takeover = redirect(location)
        with pytest.raises(BadAnswer) as err:
            Prometheus(fake.url, timeout=2).query("up")
        text = one_line(err)
        assert f"redirected to {location}" in text and "only http and https" in text
        assert not target.reached()


def test_a_redirect_to_another_host_is_refused_and_not_followed(fake: FakePrometheus) -> None:
    with Listener("127.0.0.2") as target:
        location = f"http://127.0.0.2:{target.port}/api/v1/query"
        fake.takeover = redirect(location, 307)
        with pytest.raises(BadAnswer) as err:
            Prometheus(fake.url, timeout=2).query("up")
        assert f"redirected to another host: {location}" in one_line(err)
        assert not target.reached()


def test_an_escape_sequence_in_a_location_is_printable(fake: FakePrometheus) -> None:
    fake.takeover = redirect("ftp://x/\x1b]0;pwned\x07")
    with pytest.raises(BadAnswer) as err:
        Prometheus(fake.url, timeout=2).query("up")
    assert "\x1b" not in str(err.value) and "only http and https" in one_line(err)


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_on_the_same_host_is_followed_with_the_query(fake: FakePrometheus, code: int) -> None:
    good = fake.takeover

    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        if endpoint.startswith("/moved/"):
            status, kind, body = fake.answer(endpoint.removeprefix("/moved/api/v1/"), params)
            answer(status, body, kind)(handler, endpoint, params)
        else:
            redirect(f"/moved/api/v1/{endpoint}", code)(handler, endpoint, params)

    assert good is None
    fake.takeover = serve
    result = Prometheus(fake.url).query("up", at=1_700_000_000)
    assert sorted(s.labels["instance"] for s in result) == ["10.0.0.1:9400", "10.0.0.2:9400"]
    first, moved = fake.received
    assert (moved.method, moved.path, moved.params) == ("POST", "/moved/api/v1/query", first.params)


def test_endless_redirects_end(fake: FakePrometheus) -> None:
    fake.takeover = redirect("/api/v1/query", 307)
    with pytest.raises(BadAnswer, match="redirect"):
        Prometheus(fake.url, timeout=5).query("up")
    assert len(fake.received) <= 5


# --- the reader and the TUI ----------------------------------------------------------------------------


def nan_time_in_range(text: str, endpoint: str) -> str:
    return re.sub(r'\[([0-9.]+), "', '[NaN, "', text, count=1) if endpoint == "query_range" else text


def hostile_labels(text: str, endpoint: str) -> str:
    evil = "\\u001b]0;pwned\\u0007\\u001b[31mnode"
    return text.replace('"Hostname": "node', f'"Hostname": "{evil}').replace('"gpu": "0"', '"gpu": "\\u0007"')


@pytest.mark.parametrize(
    "hostile",
    [
        lambda fake: edited(fake, nan_time_in_range),
        lambda fake: answer(200, vector('"a string"')),
        lambda fake: answer(200, b"\x00\xff not json"),
        lambda fake: answer(200, b"[" * 100_000),
        lambda fake: redirect("ftp://127.0.0.1:1/x"),
    ],
    ids=["nan-time", "result-a-string", "not-json", "deep", "ftp-redirect"],
)
def test_the_reader_never_raises_and_keeps_the_last_fleet(fake: FakePrometheus, hostile: Hostile) -> None:
    reader = FleetReader(Prometheus(fake.url, timeout=2))
    good = reader.refresh()
    assert good.error is None and len(good.hosts) == 2
    fake.takeover = hostile(fake)
    view = reader.refresh()
    assert view.error and "\n" not in view.error and view.failures == 1
    assert view.hosts == good.hosts


def test_hostile_labels_reach_the_fleet_only_printable(fake: FakePrometheus) -> None:
    fake.takeover = edited(fake, hostile_labels)
    view = FleetReader(Prometheus(fake.url)).refresh()
    assert view.error is None
    assert sorted(h.name for h in view.hosts) == ["?]0;pwned??[31mnode001", "?]0;pwned??[31mnode002"]
    assert {g.gpu for h in view.hosts for g in h.gpus} == {"?", "1"}


# --- the TUI: a banner, never a crash; q always quits -----------------------------------------------------


async def test_bad_answers_mid_run_become_the_banner(fake: FakePrometheus) -> None:
    from gputui.ui.fleet_app import FleetApp
    from tests.ui.drawn import lines

    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=0.5)), interval=60.0)
    async with app.run_test(size=(160, 40)) as pilot:

        async def refreshed() -> None:
            frames = app.frames
            app.action_refresh()
            deadline = time.monotonic() + 10
            while app.frames == frames:
                assert time.monotonic() < deadline, "no refresh"
                await pilot.pause(0.02)
            await pilot.pause()

        await refreshed()
        hosts = app.view.hosts
        assert len(hosts) == 2
        cases: list[tuple[Takeover, str]] = [
            (edited(fake, nan_time_in_range), SHAPE),
            (answer(200, vector('{"metric":"x"}')), SHAPE),
            (answer(200, b"\xff{"), SHAPE),
            (drip(fake), "did not answer within 0.5 s"),
            (Flood(80 * MB), "answered more than 64 MiB"),
            (redirect("ftp://127.0.0.1:1/x"), "only http and https"),
        ]
        for takeover, error in cases:
            fake.takeover = takeover
            await refreshed()
            assert app.is_running and app.view.hosts == hosts
            assert error in lines(app.banner)[0]
        fake.takeover = edited(fake, hostile_labels)
        await refreshed()
        assert app.view.error is None
        assert {"?]0;pwned??[31mnode001", "?]0;pwned??[31mnode002"} <= {h.name for h in app.view.hosts}
        drawn = "\n".join(lines(app.table) + lines(app.banner) + lines(app.header))
        assert "?]0;pwned??[" in drawn and "\x1b" not in drawn and "\x07" not in drawn


async def test_quitting_cuts_the_request_in_flight(fake: FakePrometheus) -> None:
    from gputui.ui.fleet_app import FleetApp

    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=120)), interval=60.0)
    hang = drip(fake)
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.frames >= 1, 10.0, settle=True)
        fake.takeover = hang
        app.action_refresh()
        await until(pilot, hang.started.is_set, 10.0, settle=True)
        await pilot.press("q")
    # The refresh thread is abandoned, and its request cut: the server sees the hang-up at once.
    assert hang.ended.wait(1.0), "the request went on after the app quit"


async def test_extreme_values_and_hostile_labels_are_drawn_without_a_crash() -> None:
    from gputui.ui.fleet_app import FleetApp
    from gputui.ui.screens.fleet_host import HostScreen
    from tests.ui.drawn import lines

    evil = "\x1b]0;pwned\x07\x1b[2J\x9b31m"
    with FakePrometheus() as fake:
        fake.add_host(f"evil{evil}", gpus=1)
        box = fake.add_host("box", gpus=2, gputui=True, zombies={"defunct": 10**300, evil: -1})
        huge, tiny = 1.7e308, -1.7e308
        g0, g1 = box.gpus
        g0.util, g0.mem_used, g0.mem_free, g0.temperature, g0.power = huge, huge, huge, tiny, huge
        g0.dips, g0.unaccounted, g0.in_dip = huge, huge, True
        g1.util, g1.mem_used, g1.mem_free, g1.power = -5.0, -5.0, 10.0, tiny
        box.processes = [
            {"gpu": 0, "pid": evil, "user": evil, "command": evil * 500, "class": evil, "memory": huge}
        ]
        box.agents = [
            {
                "pid": evil,
                "cuda_device": evil,
                "command": evil,
                "values": {"allocated_bytes": huge, "fragmentation_percent": tiny, "ooms_total": huge},
            }
        ]
        app = FleetApp(FleetReader(Prometheus(fake.url)), interval=60.0)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: app.frames >= 1 and len(app.view.hosts) == 2, 10.0, settle=True)
            assert app.view.error is None
            app.action_sort("name")
            table = "\n".join(lines(app.table))
            await pilot.press("home", "enter")  # box, first by name
            assert app.reader.focus == "box"
            assert isinstance(app.screen, HostScreen)
            await until(
                pilot,
                lambda: app.view.detail is not None and bool(app.view.detail.processes),
                10.0,
                settle=True,
            )
            host = "\n".join(lines(app.screen.host_view))
            assert app.is_running and "evil?]0;pwned" in table and "?]0;pwned??[2J?31m" in host
            assert "ZOMBIES" in host and "n/a" in host
            assert not re.search(r"\d{16}", table + host), "a number too long for its column"
            assert not any(c in table + host for c in "\x1b\x07\x9b")


class PtyRun:
    """A command on a pty of its own (its controlling terminal); a thread keeps reading the master."""

    def __init__(self, args: list[str], cols: int = 120, rows: int = 30) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
        try:
            self.proc = subprocess.Popen(
                args,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=ROOT,
                env={**env, "TERM": "xterm-256color"},
                start_new_session=True,
                preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
            )
        finally:
            os.close(slave)
        self._out = bytearray()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            if not select.select([self.master], [], [], 0.05)[0]:
                if self.proc.poll() is not None:
                    return
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self._out += data

    def text(self) -> str:
        return bytes(self._out).decode(errors="replace")

    def wait_for(self, needle: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.text()[-2000:]}"
            assert time.monotonic() < deadline, f"no {needle!r} in {self.text()[-2000:]!r}"
            time.sleep(0.05)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._thread.join(5)
        os.close(self.master)


@contextlib.contextmanager
def fleet_in_pty(*args: str) -> Iterator[PtyRun]:
    run = PtyRun([sys.executable, *args])
    try:
        yield run
    finally:
        run.close()


@pytest.mark.terminal
def test_q_quits_within_1_s_while_a_request_hangs(fake: FakePrometheus) -> None:
    with fleet_in_pty(
        "-m", "gputui", "fleet", "--prometheus", fake.url, "--timeout", "120", "--interval", "60"
    ) as run:
        run.wait_for("2 hosts")
        fake.takeover = drip(fake)  # the next refresh hangs for two minutes
        asked = len(fake.received)
        run.type(b"r")
        deadline = time.monotonic() + 10
        while len(fake.received) == asked:
            assert time.monotonic() < deadline, "the refresh never reached the server"
            time.sleep(0.02)
        time.sleep(0.3)
        began = time.monotonic()
        run.type(b"q")
        try:
            run.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 5 s after q: {run.text()[-1500:]!r}")
        took = time.monotonic() - began
        assert took < 3.0, f"q took {took:.2f} s"  # a hang waits out the 5 s above; slack for load
        assert run.proc.returncode == 0 and "Traceback" not in run.text()


@pytest.mark.terminal
def test_a_crash_of_the_fleet_app_is_a_non_zero_exit_with_one_line(fake: FakePrometheus) -> None:
    script = (
        "import sys\n"
        "from gputui import cli\n"
        "from gputui.ui.fleet_app import FleetApp\n"
        "def broken(self, view):\n"
        "    raise RuntimeError('the table broke')\n"
        "FleetApp.show = broken\n"
        f"sys.exit(cli.main(['fleet', '--prometheus', {fake.url!r}]))\n"
    )
    with fleet_in_pty("-c", script) as run:
        run.proc.wait(timeout=30)
        text = run.text()
        assert run.proc.returncode == 1, text[-2000:]
        assert "gputui fleet: the fleet view crashed: RuntimeError: the table broke" in text


@pytest.mark.parametrize(
    ("hostile", "error"),
    [
        (lambda fake: edited(fake, nan_time_in_range), SHAPE),
        (lambda fake: answer(200, b"<html>"), SHAPE),
        (lambda fake: redirect("ftp://127.0.0.1:1/x"), "only http and https"),
    ],
    ids=["nan-time", "html", "ftp-redirect"],
)
def test_a_bad_answer_at_start_is_one_line_and_exit_2(
    fake: FakePrometheus, hostile: Hostile, error: str
) -> None:
    fake.takeover = hostile(fake)
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "fleet", "--prometheus", fake.url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gputui fleet: ") and error in done.stderr
