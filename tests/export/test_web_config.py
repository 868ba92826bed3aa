"""`gputui export --web-config-file`: the exporter-toolkit web config, over real HTTPS on 127.0.0.1.

Certificates are made here by the openssl command (a CA, the server's, two clients': one the CA signed,
one self-signed); requests are real (urllib, ssl, raw sockets); passwords are checked by the real bcrypt
(at its lowest cost, 4, to keep the suite quick). The file's format is the toolkit's
(docs/web-configuration.md): each refusal names what to change, in one line."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

bcrypt = pytest.importorskip("bcrypt", reason="the prometheus extra brings bcrypt")
pytest.importorskip("yaml", reason="the prometheus extra brings PyYAML")

from prometheus_client import CollectorRegistry, Gauge  # noqa: E402

from gputui.export import web_config  # noqa: E402
from gputui.export.exporter import MetricsServer  # noqa: E402
from gputui.export.web_config import (  # noqa: E402
    GO_CIPHERS,
    TLS13_SUITES,
    RateLimit,
    WebConfigError,
    WebConfigFile,
    load,
    sans_allowed,
)
from tests.export.servers import (  # noqa: E402
    NO_OPENSSL,
    NO_PROMETHEUS,
    OPENSSL,
    PROMETHEUS,
    PrometheusServer,
    free_port,
    make_tls_files,
)

pytestmark = pytest.mark.skipif(OPENSSL is None, reason=NO_OPENSSL)

GPUTUI = (sys.executable, "-m", "gputui")
USER, PASSWORD = "prometheus", "s3cret:with colon"
OTHER, OTHER_PASSWORD = "grafana", "another one"
CERTS = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"


def bcrypt_hash(password: str, rounds: int = 4) -> str:
    hashed: bytes = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds))  # importorskip: Any
    return hashed.decode()


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Path
    cert: Path
    key: Path
    client_cert: Path  # signed by the CA, SAN DNS:scraper.example and URI spiffe://cluster/prometheus
    client_key: Path
    rogue_cert: Path  # self-signed, SAN DNS:scraper.example: the right name, the wrong issuer
    rogue_key: Path
    other_cert: Path  # signed by the CA, SAN DNS:someone-else
    other_key: Path


def _openssl(*args: str | Path) -> None:
    assert OPENSSL
    subprocess.run([OPENSSL, *map(str, args)], check=True, capture_output=True, timeout=30)


def _client(directory: Path, name: str, san: str, ca: Path | None) -> tuple[Path, Path]:
    key, cert, ext = directory / f"{name}.key", directory / f"{name}.pem", directory / f"{name}.ext"
    ext.write_text(f"basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\nsubjectAltName={san}\n")
    new_key: list[str | Path] = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        key,
    ]
    if ca is None:
        _openssl(
            "req",
            "-x509",
            *new_key,
            "-out",
            cert,
            "-days",
            "30",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName={san}",
        )
        return cert, key
    request = directory / f"{name}.csr"
    _openssl("req", "-new", *new_key, "-out", request, "-subj", f"/CN={name}")
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca, "-CAkey", directory / "ca.key", "-set_serial", "7",
        "-days", "30", "-extfile", ext, "-out", cert,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    tls = make_tls_files(directory)
    client = _client(directory, "client", "DNS:scraper.example,URI:spiffe://cluster/prometheus", tls.ca)
    rogue = _client(directory, "rogue", "DNS:scraper.example", None)
    other = _client(directory, "other", "DNS:someone-else", tls.ca)
    return Pki(directory, tls.ca, tls.cert, tls.key, *client, *rogue, *other)


def write(directory: Path, text: str, name: str = "web.yml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


# -- reading the file ------------------------------------------------------------------------------------


def test_the_toolkits_sample_file_loads_with_paths_relative_to_it(pki: Pki) -> None:
    # docs/web-config.yml of the exporter toolkit, with its own (htpasswd, $2y$) hashes and our certificate.
    path = write(
        pki.directory,
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
        "basic_auth_users:\n"
        "  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze\n"
        "  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m\n"
        "rate_limit:\n  interval: 1s\n  burst: 20\n",
    )
    cwd = os.getcwd()
    os.chdir("/")  # relative to the file, not to where gputui runs
    try:
        config = load(path)
    finally:
        os.chdir(cwd)
    assert config.context is not None and config.context.verify_mode == ssl.CERT_NONE
    assert config.context.minimum_version == ssl.TLSVersion.TLSv1_2  # the toolkit's defaults
    assert config.context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert set(config.users) == {"alice", "bob"}
    assert (config.rate_interval, config.rate_burst) == (1.0, 20)
    assert config.files == (path, pki.directory / "server.pem", pki.directory / "server.key")


def test_an_empty_file_is_plain_http_without_auth(tmp_path: Path) -> None:
    config = load(write(tmp_path, ""))
    assert config.context is None and not config.users and config.header_lines == ""


def test_headers_are_the_toolkits_and_blank_ones_unset(tmp_path: Path) -> None:
    config = load(
        write(
            tmp_path,
            "http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n"
            "    Strict-Transport-Security: max-age=31536000; includeSubDomains\n"
            "    X-Content-Type-Options: nosniff\n    X-XSS-Protection: ''\n"
            "    Content-Security-Policy: \"default-src 'self'\"\n",
        )
    )
    assert config.header_lines.split("\r\n")[:-1] == [
        "X-Frame-Options: deny",
        "Strict-Transport-Security: max-age=31536000; includeSubDomains",
        "X-Content-Type-Options: nosniff",
        "Content-Security-Policy: default-src 'self'",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("hWkNKCp3fvIx3jKnsaBI\nTuEjdwNS8A2vYdFbiKqr\n", "the file must be a mapping"),
        ("tls_server_config:\n  cert_filse: server.pem\n", "unknown field cert_filse in tls_server_config"),
        ("basic_auth_users: {}\nbasic_auth_users: {}\n", "given twice"),
        ("tls_server_config: [\n", "not valid YAML"),
        ("tls_server_config:\n  cert_file: ''\n  key_file: server.key\n", "missing one of cert or cert_file"),
        (
            "tls_server_config:\n  cert_file: nothing-here.pem\n  key_file: server.key\n",
            "cert_file nothing-here.pem: no such file",
        ),
        (
            "tls_server_config:\n  cert_file: server.key\n  key_file: server.pem\n",
            "cannot load the certificate",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_ca_file: ca.pem\n",
            "without a client_auth_type",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "needs client_ca_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
            "  client_auth_type: RequireAnyClientCert\n",
            "use RequireAndVerifyClientCert",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  client_auth_type: x\n",
            "invalid client_auth_type: x",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS14\n",
            "unknown TLS version in min_version",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  min_version: TLS13\n"
            "  max_version: TLS12\n",
            "min_version is above max_version",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
            "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
            "unknown cipher: TLS_RSA_WITH_RC4_128_SHA",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"
            "  curve_preferences: [X25519, CurveP256]\n",
            "one of CurveP256, CurveP384 or CurveP521",
        ),
        ("basic_auth_users:\n  john: doe\n", "the password of john is not a bcrypt hash"),
        ("http_server_config:\n  headers:\n    Content-Type: foo\n", '"Content-Type" can not be configured'),
        ("http_server_config:\n  headers:\n    X-Frame-Options: foo\n", "invalid value for X-Frame-Options"),
        ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", "expected one of nosniff"),
        ("rate_limit:\n  interval: 1s\n  burst: 0\n", "would refuse every request"),
        ("rate_limit:\n  interval: soon\n  burst: 5\n", "not a duration: soon"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_and_the_fix(pki: Pki, text: str, says: str) -> None:
    path = write(pki.directory, text, "bad.yml")
    with pytest.raises(WebConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"web config {path}: "), message
    assert says in message and "\n" not in message, message


@pytest.mark.parametrize(
    "text",
    [
        CERTS + "  cipher_suites: [[1]]\n",
        CERTS + "  curve_preferences: [{a: 1}]\n",
        "tls_server_config:\n  cert_file: [server.pem]\n",
        CERTS + "  min_version: [1]\n",
        CERTS + "  client_allowed_sans: x\n",
        "basic_auth_users: [alice]\n",
        "basic_auth_users:\n  1: 2\n",
        "rate_limit: 5\n",
        "rate_limit:\n  interval: [1s]\n",
        "http_server_config:\n  headers: [1]\n",
        "http_server_config:\n  http2: maybe\n",
        "[1, 2]\n",
        "? [a]\n: b\n",
        "\x00\x01binary\n",
    ],
)
def test_odd_shapes_are_one_line_never_a_traceback(pki: Pki, text: str) -> None:
    path = write(pki.directory, text, "odd.yml")
    with pytest.raises(WebConfigError) as caught:
        load(path)
    assert str(caught.value).startswith(f"web config {path}: ") and "\n" not in str(caught.value)


def test_a_header_value_cannot_split_the_response(tmp_path: Path) -> None:
    path = write(
        tmp_path, 'http_server_config:\n  headers:\n    X-XSS-Protection: "1\\r\\nSet-Cookie: a=b"\n'
    )
    with pytest.raises(WebConfigError, match="printable ASCII on one line"):
        load(path)


def test_an_encrypted_key_is_refused_without_prompting(pki: Pki) -> None:
    locked = pki.directory / "locked.key"
    _openssl("pkey", "-in", pki.key, "-aes256", "-passout", "pass:hunter2", "-out", locked)
    path = write(
        pki.directory, "tls_server_config:\n  cert_file: server.pem\n  key_file: locked.key\n", "e.yml"
    )
    with pytest.raises(WebConfigError, match="the key is encrypted"):
        load(path)


def test_inline_certificate_and_key_as_the_toolkit_allows(pki: Pki) -> None:
    cert = pki.cert.read_text().replace("\n", "\n    ")
    key = pki.key.read_text().replace("\n", "\n    ")
    path = write(
        pki.directory, f"tls_server_config:\n  cert: |\n    {cert}\n  key: |\n    {key}\n", "inline.yml"
    )
    config = load(path)
    assert config.context is not None
    assert config.files == (path,)
    both = write(
        pki.directory, f"tls_server_config:\n  cert: |\n    {cert}\n  cert_file: server.pem\n", "both.yml"
    )
    with pytest.raises(WebConfigError, match=r"give tls_server_config\.cert or cert_file, not both"):
        load(both)


def test_every_go_cipher_suite_name_maps_to_this_openssl(pki: Pki) -> None:
    names = [*GO_CIPHERS, *sorted(TLS13_SUITES)]
    listed = "".join(f"    - {n}\n" for n in names)
    path = write(
        pki.directory,
        f"tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n  cipher_suites:\n{listed}",
        "ciphers.yml",
    )
    config = load(path)
    assert config.context is not None
    offered = {c["name"] for c in config.context.get_ciphers() if c["protocol"] != "TLSv1.3"}
    assert offered <= set(GO_CIPHERS.values()) and offered


def test_missing_bcrypt_or_yaml_is_one_line_with_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = write(tmp_path, f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n")
    monkeypatch.setitem(sys.modules, "bcrypt", None)  # import bcrypt now raises ImportError
    with pytest.raises(WebConfigError, match=r"basic_auth_users needs the bcrypt package: pip install"):
        load(users)
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(WebConfigError, match=r"reading it needs PyYAML: pip install 'gputui\[prometheus\]'"):
        load(users)


def test_go_durations(tmp_path: Path) -> None:
    for text, seconds in (
        ("1m30s", 90.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("0", 0.0),
        (2_000_000_000, 2.0),
    ):
        path = write(tmp_path, f"rate_limit:\n  interval: {text}\n  burst: 3\n")
        assert load(path).rate_interval == pytest.approx(seconds), text


def test_sans_are_matched_exactly_ips_canonically() -> None:
    allowed = frozenset({"scraper.example", "2001:db8::1", "spiffe://cluster/prometheus"})
    assert sans_allowed({"subjectAltName": (("DNS", "scraper.example"),)}, allowed)
    assert sans_allowed({"subjectAltName": (("IP Address", "2001:DB8:0:0:0:0:0:1\n"),)}, allowed)
    assert sans_allowed({"subjectAltName": (("URI", "spiffe://cluster/prometheus"),)}, allowed)
    assert not sans_allowed({"subjectAltName": (("DNS", "SCRAPER.example"),)}, allowed)
    assert not sans_allowed({"subjectAltName": (("DNS", "x.scraper.example"),)}, allowed)
    assert not sans_allowed({"subject": ((("commonName", "scraper.example"),),)}, allowed)  # not the CN
    assert not sans_allowed(None, allowed)


def test_the_rate_limit_is_a_token_bucket() -> None:
    now = [100.0]
    limit = RateLimit(monotonic=lambda: now[0])
    assert [limit.allow(10.0, 2) for _ in range(3)] == [True, True, False]
    now[0] += 10.0
    assert [limit.allow(10.0, 2) for _ in range(2)] == [True, False]
    assert all(limit.allow(0.0, 0) for _ in range(100))  # no interval: no limit


# -- serving ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def metrics_server(config: Path, request_timeout: float = 5.0) -> Iterator[tuple[MetricsServer, list[str]]]:
    registry = CollectorRegistry(auto_describe=False)
    gauge = Gauge("gputui_test_value", "A value for the test.", registry=registry)
    gauge.set(42)
    warnings: list[str] = []
    server = MetricsServer(
        registry, 0, "127.0.0.1", request_timeout, web=WebConfigFile(config, warn=warnings.append)
    )
    try:
        yield server, warnings
    finally:
        server.close()


def client_context(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


def get(
    url: str, context: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def tls_config(pki: Pki, extra: str = "", name: str = "web.yml") -> Path:
    return write(
        pki.directory, f"tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n{extra}", name
    )


def test_https_scrape_and_plain_http_refused(pki: Pki) -> None:
    with metrics_server(tls_config(pki)) as (server, _):
        assert server.tls
        status, _headers, body = get(f"https://127.0.0.1:{server.port}/metrics", client_context(pki))
        assert status == 200 and "gputui_test_value 42.0" in body
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        # the server is still fine after a client that spoke the wrong protocol
        assert get(f"https://localhost:{server.port}/metrics", client_context(pki))[0] == 200


def test_basic_auth_wrong_missing_and_right(pki: Pki) -> None:
    config = tls_config(
        pki,
        f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n  {OTHER}: {bcrypt_hash(OTHER_PASSWORD)}\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    with metrics_server(config) as (server, _):
        url, ctx = f"https://127.0.0.1:{server.port}/metrics", client_context(pki)
        for auth in (
            None,
            (USER, "wrong"),
            ("nobody", PASSWORD),
            (USER, OTHER_PASSWORD),
            (USER, PASSWORD + "x"),
        ):
            status, headers, body = get(url, ctx, auth)
            assert status == 401, auth
            assert headers["WWW-Authenticate"] == "Basic" and headers["X-Frame-Options"] == "deny"
            assert "gputui_test_value" not in body
        status, headers, body = get(url, ctx, (USER, PASSWORD))
        assert status == 200 and "gputui_test_value 42.0" in body and headers["X-Frame-Options"] == "deny"
        assert get(url, ctx, (OTHER, OTHER_PASSWORD))[0] == 200
        assert get(f"https://127.0.0.1:{server.port}/nothing", ctx)[0] == 401  # auth before routing


def test_a_verified_password_is_remembered_a_wrong_one_never(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bytes] = []
    real = web_config._bcrypt_matches

    def counted(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(web_config, "_bcrypt_matches", counted)
    config = write(pki.directory, f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n", "plain.yml")
    with metrics_server(config) as (server, _):
        assert not server.tls  # basic auth over plain HTTP, as the toolkit allows
        url = f"http://127.0.0.1:{server.port}/metrics"
        for _ in range(3):
            assert get(url, auth=(USER, PASSWORD))[0] == 200
        assert calls == [PASSWORD.encode()]  # bcrypt once, then remembered
        for _ in range(3):
            assert get(url, auth=(USER, "guess"))[0] == 401
        assert calls == [PASSWORD.encode()] + [b"guess"] * 3  # every wrong try pays bcrypt
        assert get(url, auth=(USER, PASSWORD))[0] == 200
        assert len(calls) == 4
        # a new hash for the user (the file changed): the remembered password no longer counts
        config.write_text(f"basic_auth_users:\n  {USER}: {bcrypt_hash('rotated')}\n")
        assert get(url, auth=(USER, PASSWORD))[0] == 401
        assert get(url, auth=(USER, "rotated"))[0] == 200


def test_scrapes_already_verified_do_not_wait_behind_bcrypt(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_config, "BCRYPT_WAIT_S", 0.2)
    config = write(pki.directory, f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n", "busy.yml")
    with metrics_server(config) as (server, _):
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert get(url, auth=(USER, PASSWORD))[0] == 200
        with server._auth._bcrypt:  # as if a flood of wrong passwords kept bcrypt busy
            started = time.monotonic()
            assert get(url, auth=(USER, PASSWORD))[0] == 200  # remembered: no bcrypt needed
            status, _headers, body = get(url, auth=(USER, "guess"))
            assert status == 503 and "busy checking passwords" in body
            assert time.monotonic() - started < 2.0


def test_client_certificates_required_and_verified(pki: Pki) -> None:
    config = tls_config(pki, "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n")
    with metrics_server(config) as (server, _):
        url = f"https://127.0.0.1:{server.port}/metrics"
        assert get(url, client_context(pki, pki.client_cert, pki.client_key))[0] == 200
        for context in (client_context(pki), client_context(pki, pki.rogue_cert, pki.rogue_key)):
            with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
                get(url, context)  # no certificate, or one the CA did not sign
        assert get(url, client_context(pki, pki.client_cert, pki.client_key))[0] == 200


def test_a_client_certificate_if_given_must_verify(pki: Pki) -> None:
    config = tls_config(
        pki, "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.pem\n", "ifgiven.yml"
    )
    with metrics_server(config) as (server, _):
        url = f"https://127.0.0.1:{server.port}/metrics"
        assert get(url, client_context(pki))[0] == 200
        assert get(url, client_context(pki, pki.client_cert, pki.client_key))[0] == 200
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            get(url, client_context(pki, pki.rogue_cert, pki.rogue_key))


def test_client_allowed_sans(pki: Pki) -> None:
    config = tls_config(
        pki,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
        "  client_allowed_sans: [spiffe://cluster/prometheus, not-this-one]\n",
        "sans.yml",
    )
    with metrics_server(config) as (server, _):
        url = f"https://127.0.0.1:{server.port}/metrics"
        assert get(url, client_context(pki, pki.client_cert, pki.client_key))[0] == 200
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError, http_errors())):
            get(url, client_context(pki, pki.other_cert, pki.other_key))  # signed by the CA, wrong SAN


def http_errors() -> type[Exception]:
    import http.client

    return http.client.HTTPException


def test_one_curve_restricts_the_key_exchange(pki: Pki) -> None:
    config = tls_config(pki, "  curve_preferences: [CurveP384]\n", "curve.yml")
    with metrics_server(config) as (server, _):
        assert OPENSSL
        shown = subprocess.run(
            [
                OPENSSL,
                "s_client",
                "-connect",
                f"127.0.0.1:{server.port}",
                "-groups",
                "X25519:P-256:P-384",
                "-brief",
            ],
            input=b"",
            capture_output=True,
            timeout=30,
        )
        assert "secp384r1" in (shown.stdout + shown.stderr).decode()
        refused = subprocess.run(
            [
                OPENSSL,
                "s_client",
                "-connect",
                f"127.0.0.1:{server.port}",
                "-groups",
                "X25519:P-256",
                "-brief",
            ],
            input=b"",
            capture_output=True,
            timeout=30,
        )
        assert refused.returncode != 0


def test_clients_that_never_finish_the_handshake_do_not_stall_scrapes(pki: Pki) -> None:
    # A scrape that waited behind the stalled handshakes would wait for their 3 s request timeout; one that
    # does not answers in tens of ms, and the bound (half the timeout) leaves a loaded box room on both sides.
    with metrics_server(tls_config(pki, name="slow.yml"), request_timeout=3.0) as (server, _):
        silent, partial = [], []
        try:
            for _ in range(30):  # connect, then say nothing
                silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
            for _ in range(30):  # the first bytes of a ClientHello's record, then nothing
                conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
                conn.sendall(b"\x16\x03\x01\x02\x00\x01")
                partial.append(conn)
            started = time.monotonic()
            status, _headers, body = get(f"https://127.0.0.1:{server.port}/metrics", client_context(pki))
            assert status == 200 and "gputui_test_value" in body
            assert time.monotonic() - started < 1.5, "a scrape waited behind stalled handshakes"
            for conn in (*silent, *partial):  # and each is closed by its deadline, not kept for ever
                conn.settimeout(10)
                assert conn.recv(100) == b""
        finally:
            for conn in (*silent, *partial):
                conn.close()


def test_a_dribbled_handshake_is_cut_at_the_deadline(pki: Pki) -> None:
    with metrics_server(tls_config(pki, name="drip.yml"), request_timeout=1.0) as (server, _):
        hello = _client_hello(pki)
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        started = time.monotonic()
        try:
            for byte in hello:  # one byte every 0.1 s: never complete within the deadline
                conn.sendall(bytes([byte]))
                time.sleep(0.1)
                if time.monotonic() - started > 3.0:
                    break
        except OSError:
            pass  # closed by the server: what should happen
        conn.settimeout(3)
        with contextlib.suppress(ConnectionResetError):
            assert conn.recv(100) == b""
        assert time.monotonic() - started < 3.0
        conn.close()


def _client_hello(pki: Pki) -> bytes:
    """A real ClientHello, as bytes (from ssl's memory BIOs)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(pki).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_file_is_read_again_when_it_changes_and_a_bad_one_fails_closed(pki: Pki) -> None:
    config = tls_config(pki, f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n", "reload.yml")
    good = config.read_text()
    with metrics_server(config) as (server, warnings):
        url, ctx = f"https://127.0.0.1:{server.port}/metrics", client_context(pki)
        assert get(url, ctx, (USER, PASSWORD))[0] == 200
        config.write_text(good.replace("basic_auth_users", "basic_auth_userz"))
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            get(url, ctx, (USER, PASSWORD))  # refused, not served without its password
        assert len(warnings) == 1 and "unknown field basic_auth_userz" in warnings[0]
        assert "refusing connections until it is fixed" in warnings[0] and "\n" not in warnings[0]
        config.write_text(f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n")  # TLS off: refused too
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            get(url, ctx, (USER, PASSWORD))
        assert "TLS was turned off: restart gputui export" in warnings[-1]
        config.write_text(good.replace(USER, OTHER))
        assert get(url, ctx, (USER, PASSWORD))[0] == 401
        assert get(url, ctx, (OTHER, PASSWORD))[0] == 200
        assert warnings[-1].endswith("read again, serving")


def test_a_bad_plain_config_answers_500(pki: Pki) -> None:
    config = write(pki.directory, f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n", "plain500.yml")
    with metrics_server(config) as (server, _):
        url = f"http://127.0.0.1:{server.port}/metrics"
        config.write_text("basic_auth_users: [\n")
        status, _headers, body = get(url, auth=(USER, PASSWORD))
        assert status == 500 and "gputui_test_value" not in body


def test_the_rate_limit_answers_429(pki: Pki) -> None:
    config = write(pki.directory, "rate_limit:\n  interval: 1h\n  burst: 2\n", "rate.yml")
    with metrics_server(config) as (server, _):
        url = f"http://127.0.0.1:{server.port}/metrics"
        assert [get(url)[0] for _ in range(3)] == [200, 200, 429]


# -- the command line --------------------------------------------------------------------------------------


def run_gputui(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tls_server_config:\n  cert_file: server.pem\n", "missing one of key or key_file"),
        ("basic_auth_users:\n  john: doe\n", "is not a bcrypt hash"),
        ("tls: [\n", "not valid YAML"),
    ],
)
def test_a_bad_file_on_the_command_line_is_one_line_and_exit_2(pki: Pki, text: str, says: str) -> None:
    path = write(pki.directory, text, "cli-bad.yml")
    done = run_gputui("export", "--demo", "--port", "0", "--web-config-file", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "--web-config-file" in done.stderr and says in done.stderr


def test_a_missing_file_on_the_command_line(tmp_path: Path) -> None:
    done = run_gputui("export", "--demo", "--web-config-file", str(tmp_path / "nope.yml"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "cannot read it: No such file or directory" in done.stderr


def test_gputui_export_serves_https_with_basic_auth(pki: Pki) -> None:
    config = tls_config(pki, f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n", "cli.yml")
    proc = subprocess.Popen(
        [*GPUTUI, "export", "--demo", "--demo-gpus", "1", "--port", "0", "--web-config-file", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"https://localhost:(\d+)/metrics|https://127\.0\.0\.1:(\d+)/metrics", line)
        assert found, line
        url = f"https://127.0.0.1:{found.group(1) or found.group(2)}/metrics"
        assert get(url, client_context(pki))[0] == 401
        status, _headers, body = get(url, client_context(pki), (USER, PASSWORD))
        assert status == 200 and "DCGM_FI_DEV_GPU_UTIL" in body
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


class _SecuredPrometheus(PrometheusServer):
    """Prometheus scraping one target over https, with a client certificate and basic auth."""

    def __init__(self, workdir: Path, port: int, pki: Pki) -> None:  # start() is all of the parent's it needs
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n  - job_name: gpu\n    scheme: https\n"
            f"    tls_config:\n      ca_file: {pki.ca}\n      cert_file: {pki.client_cert}\n"
            f"      key_file: {pki.client_key}\n"
            f"    basic_auth:\n      username: {USER}\n      password: '{PASSWORD}'\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        )
        self.start()


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
def test_a_real_prometheus_scrapes_through_tls_client_certificates_and_basic_auth(
    pki: Pki, tmp_path: Path
) -> None:
    config = tls_config(
        pki,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
        f"basic_auth_users:\n  {USER}: {bcrypt_hash(PASSWORD)}\n",
        "prometheus.yml",
    )
    with metrics_server(config) as (server, _):
        prom = _SecuredPrometheus(tmp_path, server.port, pki)
        try:
            value = prom.wait_for("gputui_test_value")
            assert value[0]["value"][1] == "42"
            assert prom.wait_for("up == 1")[0]["metric"]["instance"] == f"127.0.0.1:{server.port}"
        finally:
            prom.stop()
