"""A small client for Prometheus's HTTP API (standard library only): instant and range queries.

Whatever answers at the URL is treated as hostile: every answer is checked once, here, and becomes
Samples and Series with finite times, numbers or None, and printable, bounded label strings; nothing
downstream sees raw JSON. A request has one wall-clock deadline (connecting, headers, body and redirects
together), an answer is read in bounded chunks up to MAX_ANSWER_BYTES, and a redirect is followed only
to http(s) on the same host. Every failure becomes a PrometheusError with one printable line a person
can act on.

Secured Prometheus: credentials in the URL (`https://user:password@host`) go as HTTP Basic auth, a
bearer token file as `Authorization: Bearer`, a CA file or --insecure set how the certificate is
checked (`connect` takes the CLI's options). The secrets never reach a URL, a message or a repr: every
message names `shown_url`, which has no credentials, and has the secrets blanked out as a last resort.
A redirect to another origin is refused while there are credentials to send.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import os
import re
import socket
import ssl
import stat
import string
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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
MAX_TOKEN_BYTES = 16 * 1024  # a bearer token file: JWTs of a few KiB fit
MAX_CA_BYTES = 4 * 1024 * 1024  # a CA file: a whole system bundle is ~200 KiB
_CHUNK = 64 * 1024
# How a server hangs up: RemoteDisconnected is a ConnectionResetError.
_HUNG_UP = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_MIN_SCRUBBED = 4  # secrets this long or longer are blanked out of messages; shorter ones would blank words
_REDIRECTS = (301, 302, 303, 307, 308)


class PrometheusError(Exception):
    """Prometheus could not be reached, was too slow, or refused the query. Its text is one printable
    line, whatever the server put in it."""

    def __init__(self, message: str) -> None:
        text = self.untruncated = printable(message)  # Prometheus.redact works on the whole of it
        if len(text) > MAX_ERROR_CHARS:
            text = text[: MAX_ERROR_CHARS - 1] + "…"
        super().__init__(text)


class QueryRefused(PrometheusError):
    """Prometheus answered, and said the query is wrong (a bad selector): retrying will not help."""


class AccessDenied(PrometheusError):
    """Prometheus wants credentials or refused ours (HTTP 401/403), or its certificate cannot be
    verified: asking again will not help until the user changes the credentials or TLS options."""


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


_PERCENT_ENCODE = "percent-encode / ? # @ in a user name or password (%2F %3F %23 %40)"


class _Secret:
    """A string that is never shown: its str and repr are a placeholder, so a traceback that prints
    its holder's locals, or a stray f-string, shows no secret."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<hidden>"

    __str__ = __repr__


def _split(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the API base URL: no credentials, no trailing slash; (user, password) from the URL, or None).
    ValueError with the reason, which never shows the credentials."""
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("the URL has spaces or control characters in it (e.g. http://prometheus:9090)")
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.path + parts.query + parts.fragment:
        # "http://u:pa/ss@host" splits at the "/": "pa" would be a port, "ss@host" a path.
        raise ValueError(f"'@' after the host in the URL: {_PERCENT_ENCODE}")
    userinfo, at, hostport = parts.netloc.rpartition("@")
    shown = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path, "", "")) if at else url
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {shown!r} (e.g. http://prometheus:9090)")
    try:
        parts.port  # noqa: B018 - raises for a port that is no number or out of range
    except ValueError:
        raise ValueError(f"not a usable port in {shown!r} (e.g. http://prometheus:9090)") from None
    if parts.query or parts.fragment:
        raise ValueError(f"a query or fragment in {shown!r}: give scheme://host:port/path-prefix only")
    base = urllib.parse.urlunsplit((parts.scheme, hostport, parts.path.rstrip("/"), "", ""))
    return base, (_credentials(userinfo) if at else None)


def _credentials(userinfo: str) -> tuple[str, str]:
    """The user and password of a URL's "user:password", percent-decoded, fit for HTTP Basic auth."""
    user_part, _, password_part = userinfo.partition(":")
    try:
        user = urllib.parse.unquote(user_part, errors="strict")
        password = urllib.parse.unquote(password_part, errors="strict")
    except UnicodeDecodeError:  # its message quotes the bytes
        raise ValueError("the user name or password in the URL is not UTF-8 once percent-decoded") from None
    if not user and not password:
        raise ValueError("the URL has an '@' but no user name or password before it")
    if ":" in user:  # Basic auth is "user:password": the first colon ends the user name
        raise ValueError("a user name with ':' in it cannot be sent as HTTP Basic auth")
    if not (user + password).isprintable():
        raise ValueError("the user name or password in the URL has control characters in it")
    return user, password


def check_url(url: str) -> str:
    """`url` without a trailing slash; ValueError with the reason when it is not usable. Credentials in
    it (http://user:password@host) stay, for Prometheus to take out: do not show the result, show
    Prometheus.shown_url."""
    _split(url)
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


def _connector(deadline: _Deadline) -> Callable[..., socket.socket]:
    """http.client's connect, within what is left of `deadline`, with the connection cut at its end."""

    def connect(address: tuple[str, int], timeout: float, source: Any = None) -> socket.socket:
        sock = socket.create_connection(address, min(timeout, deadline.left()), source)
        deadline.watch(sock)
        return sock

    return connect


class _CutHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, *, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._create_connection = _connector(deadline)


class _CutHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, *, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)  # TLS wraps the socket _create_connection returns
        self._create_connection = _connector(deadline)


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        deadline = self.deadline

        def connection(host: str, /, **kwargs: Any) -> http.client.HTTPConnection:
            return _CutHTTPConnection(host, deadline=deadline, **kwargs)

        return self.do_open(connection, req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline, tls: Callable[[], ssl.SSLContext]) -> None:
        super().__init__()
        self.deadline = deadline
        self.tls = tls

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        deadline = self.deadline

        def connection(host: str, /, **kwargs: Any) -> http.client.HTTPSConnection:
            return _CutHTTPSConnection(host, deadline=deadline, **kwargs)

        return self.do_open(connection, req, context=self.tls())


def _opener(deadline: _Deadline, tls: Callable[[], ssl.SSLContext]) -> urllib.request.OpenerDirector:
    """http and https (through the environment's proxies, as urllib does), no other scheme, and no
    redirect followed by urllib: _get follows them, after checking where they lead."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTP(deadline),
        _HTTPS(deadline, tls),
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


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit // 1024} KiB"


def _read_small(path: Path, limit: int, what: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a file or pipe (`--ca-file <(...)`), at most `limit` of them, and its stat; a device
    (it could be /dev/zero) or a directory is refused. ValueError in one line."""
    shown = printable(str(path))
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
                raise ValueError(f"{what} {shown} is not a file")
            data = f.read(limit + 1)
    except OSError as err:
        raise ValueError(f"cannot read {what} {shown}: {err.strerror or err}") from None
    if len(data) > limit:
        raise ValueError(f"{what} {shown} is over {_size(limit)}: is it the right file?")
    return data, st


def _token(data: bytes, shown: str) -> str:
    token = data.strip()
    if not token:
        raise ValueError(f"the bearer token file {shown} is empty")
    if token[:7].lower() == b"bearer ":
        raise ValueError(f"the bearer token file {shown} starts with 'Bearer ': write the token alone")
    if not all(0x21 <= b <= 0x7E for b in token):
        raise ValueError(
            f"the bearer token file {shown} is not one token: "
            "it has spaces, control characters or non-ASCII in it"
        )
    return token.decode("ascii")


class _Basic:
    """HTTP Basic auth with the user and password from the URL."""

    kind = "basic auth"
    noun = "the credentials"

    def __init__(self, user: str, password: str) -> None:
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        self._header = _Secret("Basic " + encoded)
        # As a server could echo them back: as typed, as in a URL, as sent.
        self._secrets = tuple(_Secret(s) for s in (password, urllib.parse.quote(password, safe=""), encoded))

    def header(self) -> str:
        return self._header.reveal()

    def secrets(self) -> list[str]:
        return [s.reveal() for s in self._secrets]


class _TokenFile:
    """`Authorization: Bearer` with the token in a file. A file that changes is read again: tokens are
    rotated (Kubernetes rewrites a service account's token file well before the old one expires).
    A pipe is read once."""

    kind = "bearer token"
    noun = "the bearer token"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._token = _Secret("")
        self._version: tuple[int, int, int] | None = None  # of a regular file: inode, size, mtime
        self._load()

    def _load(self) -> None:
        data, st = _read_small(self.path, MAX_TOKEN_BYTES, "the bearer token file")
        self._token = _Secret(_token(data, printable(str(self.path))))
        self._version = (st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None

    def _changed(self) -> bool:
        if self._version is None:
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return True  # _load says why
        return (st.st_ino, st.st_size, st.st_mtime_ns) != self._version

    def header(self) -> str:
        if self._changed():
            try:
                self._load()
            except ValueError as err:
                raise PrometheusError(str(err)) from None
        return "Bearer " + self._token.reveal()

    def secrets(self) -> list[str]:
        return [self._token.reveal()]


def _ssl_reason(err: ssl.SSLError) -> str:
    reason = str(err.args[1] if len(err.args) > 1 else err)
    # Where in CPython's C it was raised, and the name of ssl's argument: no help to a person.
    return re.sub(r"\s*\(_ssl\.c:\d+\)|: cadata does not contain a certificate", "", reason)


def _ca_context(path: Path) -> ssl.SSLContext:
    """A context that trusts the certificates in `path` (PEM, or one in DER) and no others. Read here,
    bounded, rather than by OpenSSL (cafile=): that would read a device for ever, and takes no pipe."""
    data, _ = _read_small(path, MAX_CA_BYTES, "the CA file")
    shown = printable(str(path))
    if not data.strip():  # no cadata at all would be the system's CAs
        raise ValueError(f"the CA file {shown} holds no certificate (PEM or DER): it is empty")
    # PEM is ASCII; a bundle's comments may not be: they are dropped, the certificates are not.
    cadata: str | bytes = data.decode("ascii", "ignore") if b"-----BEGIN" in data else data
    try:
        context = ssl.create_default_context(cadata=cadata)
    except ssl.SSLError as err:
        # Not PEM: OpenSSL's reason for bytes that are not DER either ("not enough data") says nothing.
        why = _ssl_reason(err) if isinstance(cadata, str) else "no -----BEGIN CERTIFICATE----- and not DER"
        raise ValueError(f"the CA file {shown} holds no certificate (PEM or DER): {why}") from None
    if not context.cert_store_stats()["x509"]:
        raise ValueError(f"the CA file {shown} holds no certificate (PEM or DER)")
    return context


def _unverified_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False  # first: CERT_NONE is refused while hostnames are checked
    context.verify_mode = ssl.CERT_NONE
    return context


_BOTH = "credentials in the URL and a bearer token file: give one of them"


def connect(
    url: str,
    *,
    timeout: float,
    bearer_token_file: Path | None = None,
    ca_file: Path | None = None,
    insecure: bool = False,
) -> Prometheus:
    """The Prometheus that `gputui fleet`'s options describe. ValueError with one line, no secret in it,
    for options that cannot work. Credentials or a token over plain http are sent as asked: whoever
    can watch that network can read them, which is the user's call."""
    _, credentials = _split(url)
    if credentials is not None and bearer_token_file is not None:
        raise ValueError(_BOTH)
    if insecure and ca_file is not None:
        raise ValueError("--insecure and --ca-file contradict each other: --insecure checks no certificate")
    tls = _unverified_context() if insecure else _ca_context(ca_file) if ca_file is not None else None
    return Prometheus(url, timeout, bearer_token_file=bearer_token_file, tls=tls)


class Prometheus:
    def __init__(
        self,
        url: str,
        timeout: float = 5.0,
        *,
        bearer_token_file: Path | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`url` may hold credentials (http://user:password@host): they are sent as HTTP Basic auth.
        `tls`: how https is checked; None: against the system's CAs."""
        self.url, credentials = _split(url)  # where requests go: no credentials in it
        if credentials is not None and bearer_token_file is not None:
            raise ValueError(_BOTH)
        self._auth: _Basic | _TokenFile | None = None
        if credentials is not None:
            self._auth = _Basic(*credentials)
        elif bearer_token_file is not None:
            self._auth = _TokenFile(bearer_token_file)
        self._tls = tls
        self.tls_verified = tls is None or tls.verify_mode != ssl.CERT_NONE
        self.timeout = timeout
        self.requests = 0
        self._deadline: _Deadline | None = None  # of the request in flight
        self._closed = False

    @property
    def shown_url(self) -> str:
        """The URL to show a person: it never holds credentials."""
        return self.url

    @property
    def auth(self) -> str | None:
        """How requests authenticate: "basic auth", "bearer token", or None."""
        return None if self._auth is None else self._auth.kind

    def __repr__(self) -> str:
        tls = "" if self.tls_verified else ", TLS not verified"
        return f"Prometheus({self.shown_url!r}, auth={self.auth}{tls})"

    def redact(self, text: str) -> str:
        """`text` with this client's secrets blanked out: a server can echo what it was sent."""
        for secret in self._auth.secrets() if self._auth else ():
            if len(secret) >= _MIN_SCRUBBED:
                text = text.replace(secret, "***")
        return text

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:  # made once: loading the system's CAs takes milliseconds
            self._tls = ssl.create_default_context()
        return self._tls

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        result: list[Sample] = self._ask("query", params, samples)
        return result

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        result: list[Series] = self._ask("query_range", params, series)
        return result

    def close(self) -> None:
        """No more requests: the one in flight (on another thread) ends now, any later one at once."""
        self._closed = True
        deadline = self._deadline
        if deadline is not None:
            deadline.expire()

    def _ask(self, endpoint: str, params: dict[str, str], shape: Any) -> Any:
        try:
            return self._parse(self._get(endpoint, params), shape)
        except PrometheusError as err:
            clean = self.redact(err.untruncated)
            if clean == err.untruncated:
                raise
            raise type(err)(clean) from None

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
            if self._auth is not None:
                # Unredirected: were urllib ever to follow a redirect itself, it would not forward it.
                request.add_unredirected_header("Authorization", self._auth.header())
            try:
                reply = _opener(deadline, self._context).open(request, timeout=deadline.left())
            except urllib.error.HTTPError as err:
                try:
                    if err.code not in _REDIRECTS or not err.headers.get("Location"):
                        raise self._http_error(err) from None
                    url = self._redirect(url, err.headers["Location"])
                finally:
                    err.close()  # unread: a redirect's body is of no use, however long
                continue
            except OSError as err:
                # Hung up before any answer. Plain http to a TLS port ends so, in one of three ways as the
                # timing goes: a clean close (RemoteDisconnected), a reset (the server closed with our
                # request unread), or a broken pipe (it closed while the request was being sent).
                if url.startswith("http:") and isinstance(getattr(err, "reason", err), _HUNG_UP):
                    raise PrometheusError(
                        f"Prometheus at {self.url} hung up without answering (if it serves https, use an "
                        "https URL)"
                    ) from None
                raise
            with reply:
                body = _read(reply, MAX_ANSWER_BYTES)
            if deadline.expired:  # cut short at the deadline, the body may look complete
                raise TimeoutError
            if body is None:
                raise BadAnswer(f"{self.url} answered more than {MAX_ANSWER_BYTES // 2**20} MiB: refused")
            return body.decode("utf-8", "replace")  # the bytes go as this returns: one copy at a time
        raise BadAnswer(f"Prometheus at {self.url} redirected more than {MAX_REDIRECTS} times: refused")

    def _redirect(self, url: str, location: str) -> str:
        """Where a redirect from `url` leads, if it is to be followed: http(s), the same host, no
        downgrade from https, and, with credentials to send, the same origin. The query is sent again
        there, as it was (Prometheus takes a POST)."""
        # http.client decoded the header as ISO-8859-1: its bytes back, unsafe ones %-escaped.
        target = urllib.parse.urljoin(
            url, urllib.parse.quote(location.strip(), encoding="iso-8859-1", safe=string.punctuation)
        )
        was, now = urllib.parse.urlsplit(url), urllib.parse.urlsplit(target)
        if now.scheme not in ("http", "https"):
            raise BadAnswer(
                f"Prometheus at {self.url} redirected to {target}: refused, only http and https are followed"
            )
        if "@" in now.netloc:  # not shown: they may be ours, echoed
            raise BadAnswer(f"Prometheus at {self.url} redirected to a URL with credentials in it: refused")
        if now.hostname != was.hostname:
            raise BadAnswer(
                f"Prometheus at {self.url} redirected to another host: {target}: refused "
                "(if that is Prometheus, give its address to --prometheus)"
            )
        if (was.scheme, now.scheme) == ("https", "http"):
            raise BadAnswer(f"Prometheus at {self.url} redirected from https to http: {target}: refused")
        if self._auth is not None and _origin(now, target) != _origin(was, url):
            # Refused rather than followed without them: the other origin would answer 401, blamed on
            # the credentials, or answer without asking, and its data would pass for this one's.
            raise BadAnswer(
                f"Prometheus at {self.url} redirected to {target}, another origin: refused, so as not "
                f"to send it {self._auth.noun} (if that is Prometheus, give its address to --prometheus)"
            )
        return target

    def _too_slow(self) -> PrometheusError:
        if self._closed:
            return PrometheusError("closed")
        return PrometheusError(f"Prometheus at {self.url} did not answer within {self.timeout:g} s")

    def _failure(self, err: Exception) -> PrometheusError:
        reason = err.reason if isinstance(err, urllib.error.URLError) else err
        if isinstance(reason, ssl.SSLCertVerificationError):
            return AccessDenied(
                f"cannot verify the TLS certificate of {self.url}: {reason.verify_message}: give the CA "
                "that signed it with --ca-file (or skip the check with --insecure)"
            )
        if isinstance(reason, ssl.SSLError):  # e.g. WRONG_VERSION_NUMBER: https to a plain http port
            return PrometheusError(f"TLS with Prometheus at {self.url} failed: {_ssl_reason(reason)}")
        if isinstance(err, urllib.error.URLError):
            text = getattr(reason, "strerror", None) or str(reason)
            return PrometheusError(f"cannot reach Prometheus at {self.url}: {text}")
        if isinstance(err, http.client.HTTPException):  # a malformed answer, or a URL http.client rejects
            return PrometheusError(f"cannot talk to Prometheus at {self.url}: {type(err).__name__}: {err}")
        if isinstance(err, OSError):  # a connection reset mid-answer
            return PrometheusError(f"cannot read from Prometheus at {self.url}: {err.strerror or err}")
        return PrometheusError(f"cannot read from Prometheus at {self.url}: {type(err).__name__}: {err}")

    def _http_error(self, err: urllib.error.HTTPError) -> PrometheusError:
        if err.code in (401, 403):
            return self._denied(err.code)
        try:
            reason = json.loads(err.read(MAX_ERROR_BODY_BYTES))["error"]
        except (ValueError, KeyError, TypeError, OSError, RecursionError, http.client.HTTPException):
            return PrometheusError(f"{self.url} answered HTTP {err.code} {err.reason} (is it Prometheus?)")
        if err.code in (400, 422):  # bad_data, execution: the query itself is wrong
            return QueryRefused(f"Prometheus refused the query: {reason}")
        # 503 timeout / canceled and the like: a loaded Prometheus; asking again may work.
        return PrometheusError(f"Prometheus could not answer (HTTP {err.code}): {reason}")

    def _denied(self, code: int) -> AccessDenied:
        if self._auth is not None:
            return AccessDenied(f"Prometheus at {self.url} refused {self._auth.noun} (HTTP {code})")
        if code == 401:
            return AccessDenied(
                f"Prometheus at {self.url} needs credentials (HTTP 401): "
                "put user:password@ in the URL or use --bearer-token-file"
            )
        return AccessDenied(
            f"Prometheus at {self.url} refused access (HTTP 403): if it needs credentials, "
            "put user:password@ in the URL or use --bearer-token-file"
        )


def _origin(parts: urllib.parse.SplitResult, url: str) -> tuple[str, str | None, int]:
    """(scheme, host, port) of a URL, its scheme's default port filled in."""
    try:
        port = parts.port
    except ValueError:
        raise BadAnswer(f"a redirect to {url}: its port is no port") from None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)
