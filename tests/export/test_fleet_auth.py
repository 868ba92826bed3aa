"""`gputui fleet` against a secured Prometheus, over real servers on 127.0.0.1: credentials in the URL
(HTTP Basic), a bearer token file, https checked against a CA file or not at all. Whatever fails says so
in one line, and neither the password nor the token is ever in a message, a repr or on the screen,
not even when a hostile server echoes them back."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
import ssl
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gputui.export import promql
from gputui.export.fleet import FleetReader
from gputui.export.promql import (
    MAX_ERROR_CHARS,
    AccessDenied,
    BadAnswer,
    Prometheus,
    PrometheusError,
    QueryRefused,
    check_url,
    connect,
)
from gputui.units import printable
from tests.export.fake_prometheus import FakePrometheus
from tests.export.hostile_prometheus import answer, drip, redirect
from tests.export.servers import NO_OPENSSL, OPENSSL, TlsFiles, make_tls_files

USER = "al@ice"
PASSWORD = "pa:ss/w@rd%-7f3a91"  # every character that must be percent-encoded in a URL's userinfo
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJncHV0dWkifQ.c2VjcmV0LXNpZ25hdHVyZQ"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
ENCODED = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
NEEDS = "needs credentials (HTTP 401): put user:password@ in the URL or use --bearer-token-file"


def with_credentials(url: str, user: str = "al%40ice", password: str = "pa%3Ass%2Fw%40rd%25-7f3a91") -> str:
    scheme, rest = url.split("://")
    return f"{scheme}://{user}:{password}@{rest}"


def no_secret(text: str) -> str:
    """`text`, checked: one printable line without a secret in it."""
    assert text and "\n" not in text and printable(text) == text, repr(text)
    return secret_free(text)


def secret_free(text: str) -> str:
    """`text`, checked: the password, the token, their parts and the forms that carry them are not in it."""
    for secret in (
        PASSWORD,
        "pa:ss/w@",
        "pa%3Ass%2Fw%40rd",
        TOKEN,
        TOKEN[:12],
        TOKEN[-12:],
        ENCODED,
        "7f3a91",
    ):
        assert secret not in text, text
    return text


def message(err: pytest.ExceptionInfo[Exception]) -> str:
    assert no_secret(repr(err.value))
    return no_secret(str(err.value))


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=2, gpus=2) as server:
        yield server


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    if not OPENSSL:
        pytest.skip(NO_OPENSSL)
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def https(tls: TlsFiles) -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=2, gpus=2, tls=tls.server_context()) as server:
        yield server


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n\n")  # surrounding whitespace, as editors and `echo` leave it
    return path


# --- HTTP Basic: credentials in the URL -----------------------------------------------------------------


def test_credentials_in_the_url_go_as_basic_auth_and_nowhere_else(fake: FakePrometheus) -> None:
    fake.auth = BASIC
    prom = Prometheus(with_credentials(fake.url + "/"), timeout=5)
    assert len(prom.query("up")) == 2
    [sent] = fake.received
    assert sent.authorization == BASIC  # percent-decoded: al@ice and pa:ss/w@rd%-...
    assert sent.path == "/api/v1/query"
    assert prom.url == prom.shown_url == fake.url
    assert prom.auth == "basic auth"
    assert no_secret(repr(prom)) == f"Prometheus({fake.url!r}, auth=basic auth)"
    assert "al%40ice" not in prom.shown_url


def test_a_user_without_a_password_is_basic_auth_with_an_empty_one(fake: FakePrometheus) -> None:
    fake.auth = "Basic " + base64.b64encode(b"apikey:").decode()
    Prometheus(fake.url.replace("//", "//apikey@"), timeout=5).query("up")
    assert fake.received[0].authorization == fake.auth


def test_wrong_credentials_are_refused_in_one_line(fake: FakePrometheus) -> None:
    fake.auth = BASIC
    prom = Prometheus(with_credentials(fake.url, password="wrong-7f3a91"), timeout=5)
    with pytest.raises(AccessDenied) as err:
        prom.query("up")
    assert message(err) == f"Prometheus at {fake.url} refused the credentials (HTTP 401)"


def test_missing_credentials_say_how_to_give_them(fake: FakePrometheus) -> None:
    fake.auth = BASIC
    with pytest.raises(AccessDenied) as err:
        Prometheus(fake.url, timeout=5).query("up")
    assert message(err) == f"Prometheus at {fake.url} {NEEDS}"
    assert fake.received[0].authorization == ""


def test_forbidden_is_access_denied_with_or_without_credentials(fake: FakePrometheus) -> None:
    fake.auth, fake.auth_status = "Basic nobody-gets-in", 403
    with pytest.raises(AccessDenied) as err:
        Prometheus(with_credentials(fake.url), timeout=5).query("up")
    assert message(err) == f"Prometheus at {fake.url} refused the credentials (HTTP 403)"
    with pytest.raises(AccessDenied) as err:
        Prometheus(fake.url, timeout=5).query("up")
    assert message(err).startswith(f"Prometheus at {fake.url} refused access (HTTP 403): if it needs")


def test_credentials_over_plain_http_are_sent_as_asked(fake: FakePrometheus) -> None:
    fake.auth = BASIC
    connect(with_credentials(fake.url), timeout=5).query("up")  # no refusal, no prompt: the user's call
    assert fake.received[0].authorization == BASIC


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://u:pa-7f3a91@prometheus:99999", "not a usable port in 'http://prometheus:99999'"),
        ("ftp://u:pa-7f3a91@prometheus", "not an http(s) URL: 'ftp://prometheus'"),
        ("http://u:pa-7f3a91@", "not an http(s) URL: 'http://'"),
        ("http://u:pa/7f3a91@prometheus", "'@' after the host in the URL: percent-encode"),
        ("http://u:pa?7f3a91@prometheus", "'@' after the host in the URL: percent-encode"),
        ("http://u:pa-7f3a91@prometheus/?x=1", "a query or fragment in 'http://prometheus/'"),
        ("http://u:pa-7f3a91%ff@prometheus", "is not UTF-8 once percent-decoded"),
        ("http://u:pa-7f3a91%07@prometheus", "has control characters in it"),
        ("http://u%3Ax:pa-7f3a91@prometheus", "a user name with ':' in it cannot be sent"),
        ("http://@prometheus", "an '@' but no user name or password"),
        ("http://u:pa-7f3a91@prom etheus", "spaces or control characters"),
    ],
)
def test_a_url_that_cannot_work_is_refused_without_showing_its_password(url: str, reason: str) -> None:
    for make in (check_url, Prometheus, lambda u: connect(u, timeout=1)):
        with pytest.raises(ValueError) as err:
            make(url)
        assert reason in message(err)


def test_check_url_keeps_the_credentials_for_prometheus_to_take_out() -> None:
    url = with_credentials("https://prometheus.example.com/prom/")
    assert check_url(url) == url.rstrip("/")
    assert Prometheus(check_url(url)).shown_url == "https://prometheus.example.com/prom"


# --- bearer token file ------------------------------------------------------------------------------------


def test_a_bearer_token_file_is_sent_as_a_bearer_token(fake: FakePrometheus, token_file: Path) -> None:
    fake.auth = f"Bearer {TOKEN}"
    prom = connect(fake.url, timeout=5, bearer_token_file=token_file)
    prom.query("up")
    prom.query_range("DCGM_FI_DEV_GPU_UTIL", 0, 30, 15)
    assert [r.authorization for r in fake.received] == [f"Bearer {TOKEN}"] * 2
    assert no_secret(repr(prom)) == f"Prometheus({fake.url!r}, auth=bearer token)"


def test_a_wrong_token_is_refused_in_one_line(fake: FakePrometheus, token_file: Path) -> None:
    fake.auth = "Bearer the-right-one"
    with pytest.raises(AccessDenied) as err:
        connect(fake.url, timeout=5, bearer_token_file=token_file).query("up")
    assert message(err) == f"Prometheus at {fake.url} refused the bearer token (HTTP 401)"


def test_a_rotated_token_file_is_read_again(fake: FakePrometheus, token_file: Path) -> None:
    prom = connect(fake.url, timeout=5, bearer_token_file=token_file)
    prom.query("up")
    new = token_file.with_name("token.new")
    new.write_text("rotated-token\n")
    os.replace(new, token_file)  # as kubelet swaps a projected token: a new file, renamed over
    prom.query("up")
    assert [r.authorization for r in fake.received] == [f"Bearer {TOKEN}", "Bearer rotated-token"]
    token_file.write_text("")  # emptied: the query fails, says why, and sends no stale token
    with pytest.raises(PrometheusError) as err:
        prom.query("up")
    assert message(err) == f"the bearer token file {token_file} is empty"
    assert len(fake.received) == 2


def test_a_token_from_a_pipe_is_read_once(fake: FakePrometheus) -> None:
    read, write = os.pipe()  # as `--bearer-token-file <(pass show prometheus)` gives it
    os.write(write, f"{TOKEN}\n".encode())
    os.close(write)
    try:
        prom = connect(fake.url, timeout=5, bearer_token_file=Path(f"/proc/self/fd/{read}"))
        prom.query("up")
        prom.query("up")
    finally:
        os.close(read)
    assert [r.authorization for r in fake.received] == [f"Bearer {TOKEN}"] * 2


def _write(content: bytes) -> Callable[[Path], Path]:
    def make(tmp_path: Path) -> Path:
        path = tmp_path / "token"
        path.write_bytes(content)
        return path

    return make


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda tmp: tmp / "absent", "cannot read the bearer token file {}: No such file or directory"),
        (lambda tmp: tmp, "cannot read the bearer token file {}: Is a directory"),
        (lambda tmp: Path("/dev/zero"), "the bearer token file {} is not a file"),
        (_write(b""), "the bearer token file {} is empty"),
        (_write(b" \n\t\n"), "the bearer token file {} is empty"),
        (_write(b"x" * (16 * 1024 + 1)), "the bearer token file {} is over 16 KiB: is it the right file?"),
        (
            _write(b"Bearer pa-7f3a91\n"),
            "the bearer token file {} starts with 'Bearer ': write the token alone",
        ),
        (_write(b"pa-7f3a91 second\n"), "the bearer token file {} is not one token"),
        (_write(b"pa-7f3a91\x1b[2J"), "the bearer token file {} is not one token"),
        (_write("pa-7f3a91é".encode()), "the bearer token file {} is not one token"),
    ],
    ids=["missing", "directory", "device", "empty", "blank", "too-big", "bearer", "space", "escape", "utf8"],
)
def test_a_token_file_that_holds_no_token_is_refused_in_one_line(
    fake: FakePrometheus, tmp_path: Path, make: Callable[[Path], Path], reason: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(ValueError) as err:
        connect(fake.url, timeout=5, bearer_token_file=path)
    assert message(err).startswith(reason.format(path))
    assert fake.received == []


def test_a_token_file_of_16_kib_is_taken(fake: FakePrometheus, tmp_path: Path) -> None:
    path = _write(b"t" * (16 * 1024 - 1) + b"\n")(tmp_path)
    connect(fake.url, timeout=5, bearer_token_file=path).query("up")
    assert fake.received[0].authorization == "Bearer " + "t" * (16 * 1024 - 1)


def test_options_that_contradict_each_other_are_refused(fake: FakePrometheus, token_file: Path) -> None:
    with pytest.raises(ValueError) as err:
        connect(with_credentials(fake.url), timeout=5, bearer_token_file=token_file)
    assert message(err) == "credentials in the URL and a bearer token file: give one of them"
    with pytest.raises(ValueError) as err:
        Prometheus(with_credentials(fake.url), bearer_token_file=token_file)
    assert message(err) == "credentials in the URL and a bearer token file: give one of them"
    with pytest.raises(ValueError) as err:
        connect(fake.url, timeout=5, ca_file=token_file, insecure=True)
    assert "--insecure and --ca-file contradict each other" in message(err)


# --- https ------------------------------------------------------------------------------------------------


def test_https_checked_against_the_ca_file(https: FakePrometheus, tls: TlsFiles) -> None:
    https.auth = BASIC
    prom = connect(with_credentials(https.url), timeout=5, ca_file=tls.ca)
    assert prom.tls_verified and prom.shown_url == https.url and https.url.startswith("https://")
    assert len(prom.query("up")) == 2
    assert https.received[0].authorization == BASIC


def test_a_ca_file_in_der_form_works_too(https: FakePrometheus, tls: TlsFiles, tmp_path: Path) -> None:
    der = tmp_path / "ca.der"
    der.write_bytes(ssl.PEM_cert_to_DER_cert(tls.ca.read_text()))
    assert len(connect(https.url, timeout=5, ca_file=der).query("up")) == 2


def test_without_the_ca_file_verification_fails_in_one_line(https: FakePrometheus) -> None:
    with pytest.raises(AccessDenied) as err:
        connect(https.url, timeout=5).query("up")
    assert message(err) == (
        f"cannot verify the TLS certificate of {https.url}: unable to get local issuer certificate: "
        "give the CA that signed it with --ca-file (or skip the check with --insecure)"
    )
    assert https.received == []  # nothing was sent over the unverified connection


def test_a_ca_that_did_not_sign_it_fails_too(https: FakePrometheus, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path)
    with pytest.raises(AccessDenied, match="cannot verify the TLS certificate"):
        connect(https.url, timeout=5, ca_file=other.ca).query("up")


def test_insecure_skips_the_check_and_says_so(https: FakePrometheus, token_file: Path) -> None:
    https.auth = f"Bearer {TOKEN}"
    prom = connect(https.url, timeout=5, bearer_token_file=token_file, insecure=True)
    assert len(prom.query("up")) == 2
    assert not prom.tls_verified
    assert no_secret(repr(prom)) == f"Prometheus({https.url!r}, auth=bearer token, TLS not verified)"


def test_plain_http_to_an_https_port_says_to_use_https(https: FakePrometheus) -> None:
    with pytest.raises(PrometheusError) as err:
        Prometheus(https.url.replace("https://", "http://"), timeout=5).query("up")
    assert message(err).endswith("hung up without answering (if it serves https, use an https URL)")


HUNG_UP = {
    "clean close": http.client.RemoteDisconnected("Remote end closed connection without response"),
    "reset, reading the answer": ConnectionResetError(104, "Connection reset by peer"),
    "reset, sending the query": urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer")),
    "broken pipe, sending the query": urllib.error.URLError(BrokenPipeError(32, "Broken pipe")),
}


class _HangsUp:
    """An opener whose server hangs up in the given way before it answers."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def open(self, request: object, timeout: float) -> None:
        raise self.error


@pytest.mark.parametrize("how", list(HUNG_UP))
def test_every_way_a_tls_port_hangs_up_on_plain_http_says_to_use_https(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which of these plain http to a TLS port meets is a matter of timing (the test above met each): the
    hint is the same for all of them, and only for http."""
    monkeypatch.setattr(promql, "_opener", lambda deadline, context: _HangsUp(HUNG_UP[how]))
    with pytest.raises(PrometheusError) as err:
        Prometheus("http://127.0.0.1:9", timeout=5).query("up")
    assert message(err) == (
        "Prometheus at http://127.0.0.1:9 hung up without answering (if it serves https, use an https URL)"
    )
    with pytest.raises(PrometheusError) as err:
        Prometheus("https://127.0.0.1:9", timeout=5).query("up")
    assert "https URL" not in message(err)


def test_https_to_a_plain_http_port_is_a_tls_failure_in_one_line(tls: TlsFiles) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def serve() -> None:  # as Go's net/http answers a TLS hello on a plain port
            conn, _ = server.accept()
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
                )

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        url = f"https://127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(PrometheusError) as err:
            connect(url, timeout=5, ca_file=tls.ca).query("up")
        thread.join(5)
    assert message(err).startswith(f"TLS with Prometheus at {url} failed: ") and "_ssl.c" not in str(
        err.value
    )


def test_the_deadline_holds_over_https(https: FakePrometheus, tls: TlsFiles) -> None:
    https.takeover = drip(https, where="body", every=0.1)
    began = time.monotonic()
    with pytest.raises(PrometheusError) as err:
        connect(https.url, timeout=1.0, ca_file=tls.ca).query("up")
    assert 0.9 <= time.monotonic() - began < 3.0  # the drip never ends: the 1 s deadline did
    assert message(err) == f"Prometheus at {https.url} did not answer within 1 s"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda tmp, tls: tmp / "absent.pem", "cannot read the CA file {}: No such file or directory"),
        (lambda tmp, tls: tmp, "cannot read the CA file {}: Is a directory"),
        (lambda tmp, tls: Path("/dev/zero"), "the CA file {} is not a file"),
        (lambda tmp, tls: _write(b"")(tmp), "the CA file {} holds no certificate (PEM or DER): it is empty"),
        (lambda tmp, tls: _write(b"hello\n")(tmp), "the CA file {} holds no certificate (PEM or DER): "),
        (lambda tmp, tls: tls.key, "the CA file {} holds no certificate (PEM or DER): "),
        (lambda tmp, tls: _write(b"x" * (4 * 2**20 + 1))(tmp), "the CA file {} is over 4 MiB"),
    ],
    ids=["missing", "directory", "device", "empty", "text", "a-key", "too-big"],
)
def test_a_ca_file_that_is_no_certificate_is_refused_in_one_line(
    tls: TlsFiles, tmp_path: Path, make: Callable[[Path, TlsFiles], Path], reason: str
) -> None:
    path = make(tmp_path, tls)
    with pytest.raises(ValueError) as err:
        connect("https://127.0.0.1:1", timeout=1, ca_file=path)
    text = message(err)
    assert text.startswith(reason.format(path)) and "_ssl.c" not in text


# --- redirects: the secret stays with its origin -------------------------------------------------------


@pytest.mark.parametrize("secret", ["basic", "token"])
@pytest.mark.parametrize("to", ["another-port", "https"])
def test_a_redirect_to_another_origin_is_refused_and_gets_no_secret(
    fake: FakePrometheus, tls: TlsFiles, token_file: Path, secret: str, to: str
) -> None:
    with FakePrometheus(hosts=1, tls=tls.server_context() if to == "https" else None) as other:
        location = f"{other.url}/api/v1/query"
        fake.takeover = redirect(location, 307)
        if secret == "basic":
            prom = connect(with_credentials(fake.url), timeout=5, ca_file=tls.ca)
        else:
            prom = connect(fake.url, timeout=5, bearer_token_file=token_file, ca_file=tls.ca)
        with pytest.raises(BadAnswer) as err:
            prom.query("up")
        assert message(err).startswith(f"Prometheus at {fake.url} redirected to {location}, another origin: ")
        assert fake.received[0].authorization  # the first hop had it, as it should
        assert other.received == []  # the second never saw a request, let alone the secret


def test_without_a_secret_a_redirect_to_another_port_is_followed(fake: FakePrometheus) -> None:
    with FakePrometheus(hosts=1) as other:
        fake.takeover = redirect(f"{other.url}/api/v1/query", 307)
        assert len(Prometheus(fake.url, timeout=5).query("up")) == 1
        assert [r.authorization for r in other.received] == [""]


def test_a_redirect_on_the_same_origin_keeps_the_credentials(https: FakePrometheus, tls: TlsFiles) -> None:
    https.auth = BASIC

    def serve(handler: BaseHTTPRequestHandler, endpoint: str, params: dict[str, str]) -> None:
        if endpoint.startswith("/moved/"):
            status, kind, body = https.answer("query", params)
            answer(status, body, kind)(handler, endpoint, params)
        else:
            redirect(f"{https.url}/moved/api/v1/query", 308)(handler, endpoint, params)

    https.takeover = serve
    assert len(connect(with_credentials(https.url), timeout=5, ca_file=tls.ca).query("up")) == 2
    assert [(r.path, r.authorization) for r in https.received] == [
        ("/api/v1/query", BASIC),
        ("/moved/api/v1/query", BASIC),
    ]


def test_a_redirect_with_credentials_in_it_is_refused_without_showing_them(fake: FakePrometheus) -> None:
    fake.takeover = redirect(f"http://{USER}:{PASSWORD}@127.0.0.1:{fake.port}/api/v1/query", 307)
    with pytest.raises(BadAnswer) as err:
        Prometheus(with_credentials(fake.url), timeout=5).query("up")
    assert message(err) == f"Prometheus at {fake.url} redirected to a URL with credentials in it: refused"
    assert len(fake.received) == 1


# --- secrets a hostile server echoes back ---------------------------------------------------------------


def _error_json(status: int, error: str) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps({"status": "error", "error": error}).encode()


ECHOES = {  # status, how the server echoes the secret, what the error is
    "503": (503, "unknown user {}", PrometheusError),
    "400": (400, "parse error near {}", QueryRefused),
    "in-a-200": (200, "bad data: {}", QueryRefused),
    "cut-mid-secret": (503, "x" * (MAX_ERROR_CHARS - 50) + "{}", PrometheusError),  # 300 cuts into it
}


@pytest.mark.parametrize("echo", ECHOES)
@pytest.mark.parametrize("secret", [PASSWORD, ENCODED, TOKEN], ids=["password", "basic", "token"])
def test_secrets_echoed_by_the_server_are_blanked_out(
    fake: FakePrometheus, token_file: Path, echo: str, secret: str
) -> None:
    status, text, kind = ECHOES[echo]
    fake.raw = _error_json(status, text.format(secret))
    if secret == TOKEN:
        prom = connect(fake.url, timeout=5, bearer_token_file=token_file)
    else:
        prom = Prometheus(with_credentials(fake.url), timeout=5)
    with pytest.raises(kind) as err:
        prom.query("up")
    assert "***" in message(err)


def _closed(prom: Prometheus) -> Prometheus:
    prom.close()
    return prom


def test_no_failure_shows_a_secret(fake: FakePrometheus, https: FakePrometheus) -> None:
    fake.auth = BASIC
    basic = with_credentials(fake.url)
    failures: dict[str, Callable[[], object]] = {
        "refused": lambda: Prometheus(with_credentials(fake.url, password="no"), timeout=2).query("up"),
        "slow": lambda: Prometheus(basic, timeout=0.2).query("up"),
        "unverified": lambda: connect(with_credentials(https.url), timeout=2).query("up"),
        "redirect": lambda: Prometheus(basic, timeout=2).query("up"),
        "closed": lambda: _closed(Prometheus(basic, timeout=2)).query("up"),
        "unreachable": lambda: Prometheus(with_credentials("http://127.0.0.1:1"), timeout=2).query("up"),
    }
    seen = set()
    for name, call in failures.items():
        fake.delay = 1.0 if name == "slow" else 0.0
        fake.takeover = redirect("http://127.0.0.2:1/api/v1/query") if name == "redirect" else None
        with pytest.raises(PrometheusError) as err:
            call()
        seen.add(message(err))
    assert len(seen) == len(failures), seen


def test_the_reader_marks_access_denied(fake: FakePrometheus) -> None:
    fake.auth = BASIC
    view = FleetReader(Prometheus(fake.url, timeout=5)).refresh()
    assert view.access_denied and not view.refused and not view.bad_answer
    assert view.error == f"Prometheus at {fake.url} {NEEDS}"
    fake.auth = None
    view = FleetReader(Prometheus(fake.url, timeout=5)).refresh()
    assert not view.access_denied and view.error is None


# --- the screen -----------------------------------------------------------------------------------------


async def _drawn(prom: Prometheus) -> tuple[str, str, str]:
    """(header, banner, table) of the fleet app once its first refresh is drawn."""
    from gputui.ui.fleet_app import FleetApp
    from tests.ui.drawn import lines

    app = FleetApp(FleetReader(prom), interval=60.0)
    async with app.run_test(size=(160, 30)) as pilot:
        deadline = time.monotonic() + 10
        while app.frames == 0:
            assert time.monotonic() < deadline, "no refresh"
            await pilot.pause(0.02)
        await pilot.pause()
        return "\n".join(lines(app.header)), "\n".join(lines(app.banner)), "\n".join(lines(app.table))


async def test_the_header_shows_the_url_without_credentials(fake: FakePrometheus) -> None:
    fake.auth = BASIC
    header, banner, table = await _drawn(Prometheus(with_credentials(fake.url), timeout=5))
    assert fake.url in no_secret(header) and "TLS not verified" not in header
    assert "al%40ice" not in header and "@" not in header
    assert "node001" in secret_free(table) and not banner.strip()


async def test_refused_credentials_are_the_banner_without_the_password(fake: FakePrometheus) -> None:
    fake.auth = "Basic somebody-else"
    _, banner, _ = await _drawn(Prometheus(with_credentials(fake.url), timeout=5))
    assert f"Prometheus at {fake.url} refused the credentials (HTTP 401)" in no_secret(banner)


async def test_the_header_marks_an_unverified_connection(https: FakePrometheus, token_file: Path) -> None:
    header, _, table = await _drawn(
        connect(https.url, timeout=5, bearer_token_file=token_file, insecure=True)
    )
    assert https.url in header and "TLS not verified" in no_secret(header)
    assert "node001" in table


def test_a_named_pipe_is_a_token_file_too(fake: FakePrometheus, tmp_path: Path) -> None:
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(f"{TOKEN}\n",), daemon=True)
    writer.start()
    connect(fake.url, timeout=5, bearer_token_file=fifo).query("up")
    writer.join(5)
    assert fake.received[0].authorization == f"Bearer {TOKEN}"
