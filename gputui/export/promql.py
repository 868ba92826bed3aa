"""A small client for Prometheus's HTTP API (standard library only): instant and range queries.

Whatever answers at the URL is treated as hostile: every answer is checked once, here, and becomes
Samples and Series with finite times, numbers or None, and printable, bounded label strings; nothing
downstream sees raw JSON. A request has one wall-clock deadline (connecting, headers, body and redirects
together), an answer is read in bounded chunks up to MAX_ANSWER_BYTES, and a redirect is followed only
to http(s) on the same host. Every failure becomes a PrometheusError with one printable line a person
can act on.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import string
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from gputui.units import printable

MAX_ANSWER_BYTES = 64 * 1024 * 1024  # the fleet's answers are a few MiB at 1000 hosts
# JSON values in one answer. Parsed, each costs up to ~70 bytes (an empty list: 56, a dict: 64 and up):
# 64 MiB of "[[],[],..." became 1.7 GB. A range query over 1000 hosts x 8 GPUs has 1.7 million.
MAX_JSON_VALUES = 3_000_000
MAX_ERROR_BODY_BYTES = 64 * 1024  # an HTTP error's body: its reason, if it is Prometheus's JSON
MAX_LABEL_CHARS = 1024  # a label value longer than this is cut: it is drawn in one table cell
MAX_ERROR_CHARS = 300  # an error is one line of the banner
MAX_REDIRECTS = 3
MAX_TIME = 1e11  # seconds since 1970 (year 5138): a larger "time" is no time
_CHUNK = 64 * 1024
_REDIRECTS = (301, 302, 303, 307, 308)


class PrometheusError(Exception):
    """Prometheus could not be reached, was too slow, or refused the query. Its text is one printable
    line, whatever the server put in it."""

    def __init__(self, message: str) -> None:
        text = printable(message)
        if len(text) > MAX_ERROR_CHARS:
            text = text[: MAX_ERROR_CHARS - 1] + "…"
        super().__init__(text)


class QueryRefused(PrometheusError):
    """Prometheus answered, and said the query is wrong (a bad selector): retrying will not help."""


class BadAnswer(PrometheusError):
    """What answered is not Prometheus's HTTP API, or not one to trust: a malformed answer, one too
    big, a redirect off http(s) or to another host."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant query's vector."""

    labels: dict[str, str]  # printable, at most MAX_LABEL_CHARS each
    value: float | None  # None: NaN or infinite
    time: float


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query's matrix."""

    labels: dict[str, str]
    points: tuple[tuple[float, float | None], ...]  # (time, value), value None where NaN or infinite


def check_url(url: str) -> str:
    """The API base URL without a trailing slash; ValueError with the reason when it is not usable."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r} (e.g. http://prometheus:9090)")
    try:
        parts.port  # noqa: B018 - raises for a port that is no number or out of range
    except ValueError:
        raise ValueError(f"not a usable port in {url!r} (e.g. http://prometheus:9090)") from None
    return url.rstrip("/")


def label_value(text: str) -> str:
    """`text` as a PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def matchers(selector: str) -> str:
    """A user's selector as matchers to put inside braces: `{job="gpu"}` and `job="gpu"` both work."""
    text = selector.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return text


# --- the answer's shape ------------------------------------------------------------------------------


class _Shape(ValueError):
    """Where an answer departs from the API's shape, e.g. "result[3].value[0] is not a finite time"."""


def _no_constant(name: str) -> None:
    raise _Shape(f"{name} is not JSON")  # json.loads takes NaN and Infinity unless told


def _json_values(text: str) -> int:
    """At least the number of values in the JSON `text` (each one but the first follows one of these)."""
    return 1 + sum(text.count(c) for c in "[{,:")


def _document(text: str) -> dict[str, Any]:
    if _json_values(text) > MAX_JSON_VALUES:
        raise _Shape(f"more than {MAX_JSON_VALUES:,} JSON values")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise _Shape("JSON nested too deeply") from None
    except _Shape:
        raise
    except ValueError:
        raise _Shape("not JSON") from None
    if not isinstance(doc, dict):
        raise _Shape("not a JSON object")
    return doc


def _result(doc: dict[str, Any], result_type: str) -> list[Any]:
    data = doc.get("data")
    if not isinstance(data, dict):
        raise _Shape("no data object")
    if data.get("resultType") != result_type:
        raise _Shape(f"resultType is not {result_type}")
    result = data.get("result")
    if not isinstance(result, list):
        raise _Shape("result is not a list")
    return result


def _field(item: Any, name: str, where: str) -> Any:
    if not isinstance(item, dict):
        raise _Shape(f"{where} is not an object")
    if name not in item:
        raise _Shape(f"{where} has no {name}")
    return item[name]


def _labels(metric: Any, where: str) -> dict[str, str]:
    if not isinstance(metric, dict):
        raise _Shape(f"{where} is not an object")
    labels = {}
    for name, value in metric.items():
        if not isinstance(value, str):
            raise _Shape(f"{where} has a label value that is not a string")
        labels[printable(name[:MAX_LABEL_CHARS])] = printable(value[:MAX_LABEL_CHARS])
    return labels


def _point(pair: Any, where: str) -> tuple[float, float | None]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise _Shape(f"{where} is not a [time, value] pair")
    t, v = pair
    # A range check, not math.isfinite: that raises for an integer too big for a float; NaN fails it too.
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= MAX_TIME:
        raise _Shape(f"{where}[0] is not a finite time")
    if not isinstance(v, str) or len(v) > 64:
        raise _Shape(f"{where}[1] is not a number in a string")
    try:
        value = float(v)
    except ValueError:
        raise _Shape(f"{where}[1] is not a number in a string") from None
    # Prometheus writes NaN and ±Inf as "NaN", "+Inf", "-Inf": values it has, none we can show.
    return float(t), value if math.isfinite(value) else None


def samples(doc: dict[str, Any]) -> list[Sample]:
    """An instant query's answer (a vector) as Samples; _Shape where it is not one."""
    out = []
    for i, item in enumerate(_result(doc, "vector")):
        where = f"result[{i}]"
        labels = _labels(_field(item, "metric", where), f"{where}.metric")
        t, value = _point(_field(item, "value", where), f"{where}.value")
        out.append(Sample(labels, value, t))
    return out


def series(doc: dict[str, Any]) -> list[Series]:
    """A range query's answer (a matrix) as Series; _Shape where it is not one."""
    out = []
    for i, item in enumerate(_result(doc, "matrix")):
        where = f"result[{i}]"
        labels = _labels(_field(item, "metric", where), f"{where}.metric")
        values = _field(item, "values", where)
        if not isinstance(values, list):
            raise _Shape(f"{where}.values is not a list")
        out.append(Series(labels, tuple(_point(p, f"{where}.values[{j}]") for j, p in enumerate(values))))
    return out


# --- one request, one deadline ------------------------------------------------------------------------


class _Deadline:
    """One wall-clock limit for a whole request. Socket timeouts limit each read, so a server sending a
    byte a second would hold a request for ever; at the deadline a timer shuts the request's connections
    down, which ends any read blocked on them at once."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError
        return left

    def watch(self, sock: socket.socket) -> None:
        # A duplicate: TLS wraps (and detaches) the socket it is given, the connection stays the same.
        dup = sock.dup()
        with self._lock:
            self._socks.append(dup)
            if self.expired:
                _shut(dup)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shut(sock)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._socks:
                sock.close()
            self._socks.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # not connected (any more)
        sock.shutdown(socket.SHUT_RDWR)


class _Cut:
    """A connection that connects within what is left of its deadline and is cut at its end."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._deadline = deadline
        self._create_connection = self._connect

    def _connect(self, address: tuple[str, int], timeout: float, source: Any = None) -> socket.socket:
        sock = socket.create_connection(address, min(timeout, self._deadline.left()), source)
        self._deadline.watch(sock)
        return sock


class _CutHTTPConnection(_Cut, http.client.HTTPConnection):
    pass


class _CutHTTPSConnection(_Cut, http.client.HTTPSConnection):
    pass


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_CutHTTPConnection, req, deadline=self.deadline)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_CutHTTPSConnection, req, context=self._context, deadline=self.deadline)


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """http and https (through the environment's proxies, as urllib does), no other scheme, and no
    redirect followed by urllib: _get follows them, after checking where they lead."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTP(deadline),
        _HTTPS(deadline),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def _read(reply: Any, limit: int) -> bytearray | None:
    """The body, read a chunk at a time; None when it is longer than `limit` (announced or not)."""
    length = (reply.headers.get("Content-Length") or "").strip()
    if length.isdigit() and int(length) > limit:
        return None
    body = bytearray()  # grows in place: no list of chunks joined into a second copy
    while chunk := reply.read(_CHUNK):
        if len(body) + len(chunk) > limit:
            return None
        body += chunk
    return body


class Prometheus:
    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self.requests = 0
        self._deadline: _Deadline | None = None  # of the request in flight
        self._closed = False

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._parse(self._get("query", params), samples)

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        return self._parse(
            self._get(
                "query_range",
                {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
            ),
            series,
        )

    def close(self) -> None:
        """No more requests: the one in flight (on another thread) ends now, any later one at once."""
        self._closed = True
        deadline = self._deadline
        if deadline is not None:
            deadline.expire()

    def _parse(self, text: str, shape: Any) -> Any:
        try:
            doc = _document(text)
            status = doc.get("status")
            if status == "error":
                raise QueryRefused(f"Prometheus refused the query: {doc.get('error') or 'no reason given'}")
            if status != "success":
                raise _Shape("status is neither success nor error")
            return shape(doc)
        except _Shape as err:
            raise BadAnswer(f"{self.url} did not answer as Prometheus's HTTP API does: {err}") from None

    def _get(self, endpoint: str, params: dict[str, str]) -> str:
        """The answer's text. Bytes that are no UTF-8 are replaced, not fatal: a label is still shown,
        with U+FFFD in it."""
        self.requests += 1
        if self._closed:
            raise PrometheusError("closed")
        deadline = self._deadline = _Deadline(self.timeout)
        try:
            return self._fetch(
                f"{self.url}/api/v1/{endpoint}", urllib.parse.urlencode(params).encode(), deadline
            )
        except PrometheusError:
            if deadline.expired:
                raise self._too_slow() from None
            raise
        except Exception as err:  # whatever a connection cut at the deadline raised, and every other
            if (
                deadline.expired
                or isinstance(err, TimeoutError)
                or isinstance(getattr(err, "reason", None), TimeoutError)
            ):
                raise self._too_slow() from None
            raise self._failure(err) from None
        finally:
            self._deadline = None
            deadline.close()

    def _fetch(self, url: str, data: bytes, deadline: _Deadline) -> str:
        for _ in range(MAX_REDIRECTS + 1):
            # POST: a long selector does not hit URL length limits of proxies in front of Prometheus.
            request = urllib.request.Request(
                url, data=data, method="POST", headers={"Accept": "application/json"}
            )
            try:
                with _opener(deadline).open(request, timeout=deadline.left()) as reply:
                    body = _read(reply, MAX_ANSWER_BYTES)
            except urllib.error.HTTPError as err:
                try:
                    if err.code not in _REDIRECTS or not err.headers.get("Location"):
                        raise self._http_error(err) from None
                    url = self._redirect(url, err.headers["Location"])
                finally:
                    err.close()  # unread: a redirect's body is of no use, however long
                continue
            if deadline.expired:  # cut short at the deadline, the body may look complete
                raise TimeoutError
            if body is None:
                raise BadAnswer(f"{self.url} answered more than {MAX_ANSWER_BYTES // 2**20} MiB: refused")
            return body.decode("utf-8", "replace")  # the bytes go as this returns: one copy at a time
        raise BadAnswer(f"Prometheus at {self.url} redirected more than {MAX_REDIRECTS} times: refused")

    def _redirect(self, url: str, location: str) -> str:
        """Where a redirect from `url` leads, if it is to be followed: http(s), the same host, no
        downgrade from https. The query is sent again there, as it was (Prometheus takes a POST)."""
        # http.client decoded the header as ISO-8859-1: its bytes back, unsafe ones %-escaped.
        target = urllib.parse.urljoin(
            url, urllib.parse.quote(location.strip(), encoding="iso-8859-1", safe=string.punctuation)
        )
        was, now = urllib.parse.urlsplit(url), urllib.parse.urlsplit(target)
        if now.scheme not in ("http", "https"):
            raise BadAnswer(
                f"Prometheus at {self.url} redirected to {target}: refused, only http and https are followed"
            )
        if now.hostname != was.hostname:
            raise BadAnswer(
                f"Prometheus at {self.url} redirected to another host: {target}: refused "
                "(if that is Prometheus, give its address to --prometheus)"
            )
        if (was.scheme, now.scheme) == ("https", "http"):
            raise BadAnswer(f"Prometheus at {self.url} redirected from https to http: {target}: refused")
        return target

    def _too_slow(self) -> PrometheusError:
        if self._closed:
            return PrometheusError("closed")
        return PrometheusError(f"Prometheus at {self.url} did not answer within {self.timeout:g} s")

    def _failure(self, err: Exception) -> PrometheusError:
        if isinstance(err, urllib.error.URLError):
            reason = err.reason
            text = getattr(reason, "strerror", None) or str(reason)
            return PrometheusError(f"cannot reach Prometheus at {self.url}: {text}")
        if isinstance(err, http.client.HTTPException):  # a malformed answer, or a URL http.client rejects
            return PrometheusError(f"cannot talk to Prometheus at {self.url}: {type(err).__name__}: {err}")
        if isinstance(err, OSError):  # a connection reset mid-answer
            return PrometheusError(f"cannot read from Prometheus at {self.url}: {err.strerror or err}")
        return PrometheusError(f"cannot read from Prometheus at {self.url}: {type(err).__name__}: {err}")

    def _http_error(self, err: urllib.error.HTTPError) -> PrometheusError:
        try:
            reason = json.loads(err.read(MAX_ERROR_BODY_BYTES))["error"]
        except (ValueError, KeyError, TypeError, OSError, RecursionError, http.client.HTTPException):
            return PrometheusError(f"{self.url} answered HTTP {err.code} {err.reason} (is it Prometheus?)")
        if err.code in (400, 422):  # bad_data, execution: the query itself is wrong
            return QueryRefused(f"Prometheus refused the query: {reason}")
        # 503 timeout / canceled and the like: a loaded Prometheus; asking again may work.
        return PrometheusError(f"Prometheus could not answer (HTTP {err.code}): {reason}")
