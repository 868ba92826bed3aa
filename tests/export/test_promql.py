"""The Prometheus HTTP API client against real HTTP servers on loopback: what it sends, what it makes of
each kind of answer, and one line a person can act on for every failure."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gputui.export.promql import (
    BadAnswer,
    Prometheus,
    PrometheusError,
    QueryRefused,
    check_url,
    label_value,
    matchers,
)
from tests.export.fake_prometheus import FakePrometheus


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=2, gpus=2) as server:
        yield server


def _json(doc: object, status: int = 200) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(doc).encode()


def _one_line(err: pytest.ExceptionInfo[PrometheusError]) -> str:
    text = str(err.value)
    assert text and "\n" not in text, text
    return text


# --- what it sends and returns ---------------------------------------------------------------------


def test_instant_query_is_a_form_encoded_post(fake: FakePrometheus) -> None:
    result = Prometheus(fake.url).query("up", at=1_700_000_000.25)
    assert sorted((s.labels["instance"], s.time, s.value) for s in result) == [
        ("10.0.0.1:9400", 1_700_000_000.25, 1.0),
        ("10.0.0.2:9400", 1_700_000_000.25, 1.0),
    ]
    [sent] = fake.received
    assert (sent.method, sent.path) == ("POST", "/api/v1/query")
    assert sent.content_type == "application/x-www-form-urlencoded"
    assert sent.params == {"query": "up", "time": "1700000000.250"}


def test_instant_query_without_a_time_leaves_it_to_prometheus(fake: FakePrometheus) -> None:
    Prometheus(fake.url).query("up")
    assert fake.received[0].params == {"query": "up"}


def test_range_query_sends_start_end_and_step(fake: FakePrometheus) -> None:
    result = Prometheus(fake.url).query_range(
        'DCGM_FI_DEV_GPU_UTIL{Hostname="node001"}', 1_700_000_000, 1_700_000_060, 15
    )
    [sent] = fake.received
    assert sent.path == "/api/v1/query_range"
    assert sent.params == {
        "query": 'DCGM_FI_DEV_GPU_UTIL{Hostname="node001"}',
        "start": "1700000000.000",
        "end": "1700000060.000",
        "step": "15",
    }
    assert sorted(s.labels["gpu"] for s in result) == ["0", "1"]  # the matcher reached the server
    assert [t for t, _ in result[0].points] == [1_700_000_000 + 15 * k for k in range(5)]


def test_a_fractional_step_is_sent_as_it_is(fake: FakePrometheus) -> None:
    Prometheus(fake.url).query_range("DCGM_FI_DEV_GPU_UTIL", 0, 10, 2.5)
    assert fake.received[0].params["step"] == "2.5"


def test_the_request_counter_counts_every_request_failed_or_not(fake: FakePrometheus) -> None:
    prom = Prometheus(fake.url)
    assert prom.requests == 0
    prom.query("up")
    prom.query_range("DCGM_FI_DEV_GPU_UTIL", 0, 30, 15)
    assert prom.requests == 2
    fake.refusal = "bad"
    with pytest.raises(QueryRefused):
        prom.query("up")
    fake.stop()
    with pytest.raises(PrometheusError):
        prom.query("up")
    assert prom.requests == 4
    assert len(fake.received) == 3  # the last one never arrived


def test_a_path_prefix_is_kept_in_front_of_the_api(fake: FakePrometheus) -> None:
    prom = Prometheus(fake.url + "/prometheus/")
    assert prom.url == fake.url + "/prometheus"
    with pytest.raises(PrometheusError) as err:
        prom.query("up")
    assert fake.received[0].path == "/prometheus/api/v1/query"  # the fake serves no prefix: 404
    assert _one_line(err) == f"{prom.url} answered HTTP 404 Not Found (is it Prometheus?)"
    assert not isinstance(err.value, QueryRefused)


# --- failures ----------------------------------------------------------------------------------------


def test_connection_refused_names_the_url_and_the_reason(fake: FakePrometheus) -> None:
    url = fake.url
    fake.stop()
    with pytest.raises(PrometheusError) as err:
        Prometheus(url).query("up")
    assert not isinstance(err.value, QueryRefused)
    assert _one_line(err) == f"cannot reach Prometheus at {url}: Connection refused"


def test_a_server_slower_than_the_timeout(fake: FakePrometheus) -> None:
    fake.delay = 10.0
    prom = Prometheus(fake.url, timeout=0.3)
    began = time.monotonic()
    with pytest.raises(PrometheusError) as err:
        prom.query("up")
    assert time.monotonic() - began < 5.0  # gave up on its own, long before the answer
    assert not isinstance(err.value, QueryRefused)
    assert _one_line(err) == f"Prometheus at {fake.url} did not answer within 0.3 s"


def test_http_400_with_prometheus_error_json_is_a_refused_query(fake: FakePrometheus) -> None:
    reason = 'parse error: unexpected "}" in label matching, expected string'
    fake.refusal = reason
    with pytest.raises(QueryRefused) as err:
        Prometheus(fake.url).query("DCGM_FI_DEV_GPU_UTIL{job=}")
    assert _one_line(err) == f"Prometheus refused the query: {reason}"


def test_status_error_in_a_200_answer_is_a_refused_query(fake: FakePrometheus) -> None:
    fake.raw = _json({"status": "error", "errorType": "bad_data", "error": "invalid parameter 'query'"})
    with pytest.raises(QueryRefused) as err:
        Prometheus(fake.url).query("up")
    assert _one_line(err) == "Prometheus refused the query: invalid parameter 'query'"
    fake.raw = _json({"status": "error"})
    with pytest.raises(QueryRefused) as err:
        Prometheus(fake.url).query("up")
    assert _one_line(err) == "Prometheus refused the query: no reason given"


@pytest.mark.parametrize(
    "answer",
    [
        (200, "text/html", b"<html><body>Grafana</body></html>"),
        (200, "text/plain", b""),
        _json(["not", "an", "object"]),
        _json({"status": "success"}),  # no data
        _json({"status": "success", "data": {"resultType": "vector", "result": None}}),
        _json({"status": "success", "data": "nothing"}),
    ],
    ids=["html", "empty", "json-list", "no-data", "null-result", "data-not-object"],
)
def test_an_answer_not_shaped_like_prometheus(fake: FakePrometheus, answer: tuple[int, str, bytes]) -> None:
    fake.raw = answer
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url).query("up")
    assert not isinstance(err.value, QueryRefused)
    assert _one_line(err).startswith(f"{fake.url} did not answer as Prometheus's HTTP API does: ")
    assert isinstance(err.value, BadAnswer)


def test_http_500_without_json_names_the_status(fake: FakePrometheus) -> None:
    fake.raw = (500, "text/plain", b"upstream exploded\n")
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url).query("up")
    assert not isinstance(err.value, QueryRefused)
    assert _one_line(err) == f"{fake.url} answered HTTP 500 Internal Server Error (is it Prometheus?)"


def test_http_error_with_json_lacking_an_error_names_the_status(fake: FakePrometheus) -> None:
    fake.raw = _json({"message": "no upstream"}, status=502)  # (401 and 403: test_fleet_auth.py)
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url).query("up")
    assert not isinstance(err.value, QueryRefused)
    assert "answered HTTP 502 Bad Gateway" in _one_line(err)


def test_a_prometheus_query_timeout_is_not_a_refused_query(fake: FakePrometheus) -> None:
    # What Prometheus answers when a query exceeds --query.timeout (web/api/v1: errorTimeout -> 503).
    fake.raw = _json(
        {"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"},
        status=503,
    )
    with pytest.raises(PrometheusError) as err:
        Prometheus(fake.url).query("up")
    assert "query timed out" in _one_line(err)
    assert not isinstance(err.value, QueryRefused)  # retrying may well help


# --- URLs, matchers and label values --------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://prometheus:9090", "http://prometheus:9090"),
        ("http://prometheus:9090/", "http://prometheus:9090"),
        ("https://metrics.example.com/prometheus/", "https://metrics.example.com/prometheus"),
        ("http://127.0.0.1:9090/a/b", "http://127.0.0.1:9090/a/b"),
    ],
)
def test_check_url_accepts_http_and_https(url: str, expected: str) -> None:
    assert check_url(url) == expected
    assert Prometheus(url).url == expected


@pytest.mark.parametrize("url", ["foo", "ftp://x", "http://", "prometheus:9090", "", "https:///path"])
def test_check_url_rejects_what_is_not_an_http_url(url: str) -> None:
    with pytest.raises(ValueError, match=r"not an http\(s\) URL") as err:
        check_url(url)
    assert repr(url) in str(err.value)
    with pytest.raises(ValueError):
        Prometheus(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:90a90", "http://prometheus:99999"])
def test_a_url_with_a_port_that_is_no_port_is_rejected(url: str) -> None:
    with pytest.raises(ValueError, match="not a usable port"):
        check_url(url)


def test_an_answer_that_is_not_http_is_a_prometheus_error() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")  # a port that is not Prometheus's

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        with pytest.raises(PrometheusError, match="cannot talk to Prometheus"):
            Prometheus(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=5).query("up")
        thread.join(5)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ('{job="gpu"}', 'job="gpu"'),
        ('job="gpu"', 'job="gpu"'),
        ('  { job="gpu", Hostname=~"node.*" }  ', 'job="gpu", Hostname=~"node.*"'),
        ('job="gpu",Hostname=~"node.*"', 'job="gpu",Hostname=~"node.*"'),
        ("{}", ""),
        ("", ""),
        ("   ", ""),
    ],
)
def test_matchers_with_and_without_braces(selector: str, expected: str) -> None:
    assert matchers(selector) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node-1", '"node-1"'),
        ('say "hi"', r'"say \"hi\""'),
        ("C:\\temp", r'"C:\\temp"'),
        ("two\nlines", r'"two\nlines"'),
        ('\\"', r'"\\\""'),  # a backslash before a quote: each escaped on its own
        ("", '""'),
    ],
)
def test_label_value_escapes_quotes_backslashes_and_newlines(text: str, expected: str) -> None:
    assert label_value(text) == expected
    assert "\n" not in label_value(text)


def test_an_escaped_label_value_selects_the_host_of_that_name(fake: FakePrometheus) -> None:
    odd = 'gpu "box"\\7'
    fake.add_host(odd, gpus=1)
    result = Prometheus(fake.url).query(f'{{__name__=~"DCGM_FI_DEV_(GPU_UTIL)",Hostname={label_value(odd)}}}')
    assert [s.labels["Hostname"] for s in result] == [odd]
