"""`gputui export --web-config-file FILE`: the web configuration file of the Prometheus exporter toolkit.

The same YAML file node_exporter and dcgm-exporter read (`--web.config.file`): TLS (`tls_server_config`),
extra response headers (`http_server_config.headers`), basic authentication (`basic_auth_users`, bcrypt
hashes) and a request rate limit (`rate_limit`), with the toolkit's names and meanings. Relative paths are
relative to the file's directory; unknown and repeated keys are errors, as in the toolkit's strict
parsing. The file and the files it names are read again when one of them changes (a Kubernetes Secret
rotated under a running pod), checked on every connection and request, as the toolkit reads them on
every handshake and request; while the new file is bad, connections are refused (fail closed).

Go's crypto/tls and Python's ssl differ; what Python cannot honour is refused with the reason, never
silently weakened:
- `client_auth_type` RequestClientCert and RequireAnyClientCert ask for a certificate without verifying
  it, which Python's ssl cannot do: use RequireAndVerifyClientCert (the toolkit's own advice) or
  VerifyClientCertIfGiven, with `client_ca_file` / `client_ca`. Without a client CA, Go would verify
  against the system's roots; that is refused here too (it trusts every public CA's certificates).
- `curve_preferences`: one NIST curve restricts the key exchange to it (OpenSSL's groups, TLS 1.2 and
  1.3); a longer list or X25519 cannot be set through Python's ssl.
- `cipher_suites` take Go's names (mapped to OpenSSL's) and, as in Go, apply up to TLS 1.2; the TLS 1.3
  suites are accepted and, as in Go, change nothing.
- `http_server_config.http2` is accepted: gputui always answers HTTP/1.1 (and says so by ALPN).
- `rate_limit` with an interval and `burst: 0` would refuse every request: refused as a mistake.

Basic authentication compares in constant time and pays bcrypt once per user and password: a verified
(user, password) is remembered (as a keyed hash, never the password) until the user's hash changes; a
wrong one never is, so each wrong guess costs a bcrypt (one at a time: a flood of them gets 503s while
already verified scrapes are answered). An unknown user costs a bcrypt too (no user enumeration by time).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import hmac
import ipaddress
import os
import re
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputui.units import printable

INSTALL_HINT = "pip install 'gputui[prometheus]'"
MAX_FILE_BYTES = 1 << 20  # a web config is a few lines; a bigger file is a mistake (or /dev/zero)
BCRYPT_WAIT_S = 1.0  # a request that needs bcrypt waits this long for the one running, then gets 503
MAX_VERIFIED = 1024  # remembered (user, hash) pairs; a file holds a few users

# Go's crypto/tls names (tls.CipherSuites(), the toolkit accepts no others) -> OpenSSL's.
GO_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
GO_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": None}
CLIENT_AUTH = {
    "": ssl.CERT_NONE,
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
# The headers the toolkit lets a file set, with the values it accepts (None: any).
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_TOP = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)
_BCRYPT = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class WebConfigError(Exception):
    """A web config that cannot be used, in one line that names the file and what to change."""


@dataclass(frozen=True)
class WebConfig:
    """One reading of the file: what a connection and a request are held to."""

    context: ssl.SSLContext | None = None  # None: plain HTTP
    allowed_sans: frozenset[str] | None = None  # client certificates must name one of these
    header_lines: str = ""  # "Name: value\r\n" for every response
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash; empty: no auth
    rate_interval: float = 0.0  # seconds per request (0: no limit) ...
    rate_burst: int = 0  # ... with bursts of this many
    files: tuple[Path, ...] = ()  # the file and those it names: a change to one reloads it


def load(path: Path) -> WebConfig:
    """The file read and checked, its certificates loaded; raises WebConfigError."""
    where = printable(str(path))
    try:
        return _load(path)
    except WebConfigError as err:
        raise WebConfigError(f"web config {where}: {err}") from None
    except (TypeError, ValueError, AttributeError, KeyError) as err:  # a shape no check above foresaw
        raise WebConfigError(f"web config {where}: not a web config: {_one_line(err)}") from None


def _load(path: Path) -> WebConfig:
    try:
        import yaml
    except ImportError:
        raise WebConfigError(f"reading it needs PyYAML: {INSTALL_HINT}") from None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise WebConfigError(f"cannot read it: {err.strerror or err}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(f"larger than {MAX_FILE_BYTES >> 10} KiB: not a web config")
    try:
        data = yaml.load(raw, Loader=_strict_loader())  # a SafeLoader
    except yaml.YAMLError as err:
        raise WebConfigError(f"not valid YAML: {_one_line(err)}") from None
    if data is None:
        data = {}
    top = _mapping(data, "the file", _TOP)
    base = path.parent
    tls = _mapping(top.get("tls_server_config") or {}, "tls_server_config", _TLS_KEYS)
    context, sans = _tls(tls, base) if tls else (None, None)
    http = _mapping(top.get("http_server_config") or {}, "http_server_config", ("http2", "headers"))
    if "http2" in http:
        _boolean(http["http2"], "http_server_config.http2")
    headers = _headers(http.get("headers") or {})
    users = _users(top.get("basic_auth_users") or {})
    interval, burst = _rate_limit(top.get("rate_limit") or {})
    named = (tls.get(key) for key in ("cert_file", "key_file", "client_ca_file"))
    files = (path, *(base / name for name in named if isinstance(name, str) and name))
    return WebConfig(context, sans, headers, users, interval, burst, files)


# -- the parts of the file -----------------------------------------------------------------------------


def _tls(tls: dict[str, Any], base: Path) -> tuple[ssl.SSLContext, frozenset[str] | None]:  # noqa: C901
    def text(key: str) -> str:
        value = tls.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise WebConfigError(f"tls_server_config.{key} must be a string")
        return value

    cert, key, client_ca = text("cert"), text("key"), text("client_ca")
    cert_file, key_file, ca_file = text("cert_file"), text("key_file"), text("client_ca_file")
    auth = text("client_auth_type")
    if not (cert or cert_file or key or key_file or client_ca or ca_file or auth):
        raise WebConfigError("tls_server_config names no certificate (cert_file and key_file)")
    for inline, named in (("cert", cert_file), ("key", key_file), ("client_ca", ca_file)):
        if tls.get(inline) and named:
            raise WebConfigError(f"give tls_server_config.{inline} or {inline}_file, not both")
    if not (cert or cert_file):
        raise WebConfigError("tls_server_config: missing one of cert or cert_file")
    if not (key or key_file):
        raise WebConfigError("tls_server_config: missing one of key or key_file")
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise WebConfigError(
            f"client_auth_type {auth} takes a client certificate without verifying it, which Python's ssl "
            "cannot do (and which proves nothing): use RequireAndVerifyClientCert with client_ca_file"
        )
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"invalid client_auth_type: {printable(auth)}")
    verify = CLIENT_AUTH[auth]
    if (client_ca or ca_file) and verify == ssl.CERT_NONE:
        raise WebConfigError("client CA's have been configured without a client_auth_type")
    if verify != ssl.CERT_NONE and not (client_ca or ca_file):
        raise WebConfigError(f"client_auth_type {auth} needs client_ca_file (or client_ca): whom to trust")
    for key_name, name in (("cert_file", cert_file), ("key_file", key_file), ("client_ca_file", ca_file)):
        if name and not os.access(base / name, os.R_OK):
            problem = "no such file" if not (base / name).exists() else "not readable"
            raise WebConfigError(f"{key_name} {printable(name)}: {problem}")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(tls.get("min_version", "TLS12"), "min_version")
    context.maximum_version = _version(tls.get("max_version", "TLS13"), "max_version")
    if context.minimum_version > context.maximum_version:
        raise WebConfigError("tls_server_config: min_version is above max_version")
    with _pem_file(cert, base, cert_file) as certfile, _pem_file(key, base, key_file) as keyfile:
        try:
            context.load_cert_chain(certfile, keyfile, password=_encrypted_key)
        except WebConfigError:
            raise
        except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
            raise WebConfigError(f"cannot load the certificate and key: {_one_line(err)}") from None
    if verify != ssl.CERT_NONE:
        try:
            if ca_file:
                context.load_verify_locations(cafile=str(base / ca_file))
            else:
                context.load_verify_locations(cadata=client_ca)
        except (OSError, ValueError) as err:
            raise WebConfigError(f"cannot load the client CA: {_one_line(err)}") from None
        context.verify_mode = verify
    _ciphers(context, tls.get("cipher_suites") or [])
    prefer = _boolean(tls.get("prefer_server_cipher_suites", True), "prefer_server_cipher_suites")
    if prefer:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    _curves(context, tls.get("curve_preferences") or [])
    context.set_alpn_protocols(["http/1.1"])
    sans = tls.get("client_allowed_sans")
    if sans is None:
        return context, None
    if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
        raise WebConfigError("tls_server_config.client_allowed_sans must be a list of strings")
    if verify == ssl.CERT_NONE:
        raise WebConfigError("client_allowed_sans needs a client_auth_type that verifies certificates")
    return context, frozenset(_san(s) for s in sans)


@contextlib.contextmanager
def _pem_file(inline: str, base: Path, name: str) -> Iterator[str]:
    """A path OpenSSL can open for a PEM given inline: a memory-only file where Linux has them (the key
    never touches a disk), else a private temporary file, removed at once."""
    if name:
        yield str(base / name)
        return
    data = inline.encode()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("gputui-web-config", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as private:  # 0700
        pem = Path(private) / "pem"
        pem.write_bytes(data)
        yield str(pem)


def _encrypted_key() -> bytes:
    # Called by OpenSSL only for an encrypted key; without this, it would prompt on the terminal.
    raise WebConfigError("the key is encrypted: the toolkit's format has no passphrase (decrypt it)")


def _version(value: object, key: str) -> ssl.TLSVersion:
    if not isinstance(value, str) or value not in TLS_VERSIONS:
        raise WebConfigError(f"unknown TLS version in {key}: {printable(str(value))} (TLS10 to TLS13)")
    return TLS_VERSIONS[value]


def _ciphers(context: ssl.SSLContext, names: object) -> None:
    if not isinstance(names, list):
        raise WebConfigError("tls_server_config.cipher_suites must be a list")
    openssl = []
    for name in names:
        if not isinstance(name, str):
            raise WebConfigError("tls_server_config.cipher_suites must be a list of names")
        if name in GO_CIPHERS:
            openssl.append(GO_CIPHERS[name])
        elif name not in TLS13_SUITES:  # as in Go: TLS 1.3's suites are not configurable
            raise WebConfigError(f"unknown cipher: {printable(str(name))} (Go's names: TLS_ECDHE_...)")
    if openssl:
        try:
            context.set_ciphers(":".join(openssl))
        except ssl.SSLError:
            raise WebConfigError("this OpenSSL offers none of cipher_suites") from None


def _curves(context: ssl.SSLContext, names: object) -> None:
    if not isinstance(names, list):
        raise WebConfigError("tls_server_config.curve_preferences must be a list")
    for name in names:
        if not isinstance(name, str) or name not in GO_CURVES:
            raise WebConfigError(f"unknown curve: {printable(str(name))}")
    if not names:
        return
    if len(names) > 1 or GO_CURVES[names[0]] is None:
        raise WebConfigError(
            "curve_preferences: Python's ssl can restrict the key exchange to one of CurveP256, CurveP384 "
            "or CurveP521 only; leave one of those, or remove the list"
        )
    curve = GO_CURVES[names[0]]
    assert curve is not None
    context.set_ecdh_curve(curve)


def _san(text: str) -> str:
    """A SAN as compared: an IP address in its canonical form, anything else as written (Go compares
    net.IP.String(), which is canonical)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def sans_allowed(peer: Mapping[str, Any] | None, allowed: frozenset[str]) -> bool:
    """Whether a verified client certificate (ssl's getpeercert()) names one of `allowed` among its DNS,
    IP, e-mail and URI subject alternative names, exactly."""
    for kind, value in (peer or {}).get("subjectAltName", ()):
        if kind in ("DNS", "email", "URI") and value in allowed:
            return True
        if kind == "IP Address" and _san(value.strip()) in allowed:
            return True
    return False


def _headers(headers: object) -> str:
    if not isinstance(headers, dict):
        raise WebConfigError("http_server_config.headers must be a mapping")
    lines = []
    for name, value in headers.items():
        if name not in HEADERS:
            raise WebConfigError(f'HTTP header "{printable(str(name))}" can not be configured')
        if not isinstance(value, str):
            raise WebConfigError(f"the value of {name} must be a string")
        allowed = HEADERS[name]
        if allowed is not None and value not in allowed:
            raise WebConfigError(f"invalid value for {name}: expected one of {', '.join(allowed)}")
        if not value:
            continue  # "Unset if blank"
        if not all(ch == "\t" or " " <= ch <= "~" for ch in value):  # no header splitting
            raise WebConfigError(f"the value of {name} must be printable ASCII on one line")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines)


def _users(users: object) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise WebConfigError("basic_auth_users must be a mapping of user names to bcrypt hashes")
    found = {}
    for user, hashed in users.items():
        if not isinstance(user, str) or not isinstance(hashed, str):
            raise WebConfigError("basic_auth_users: quote user names and hashes (strings)")
        match = _BCRYPT.match(hashed)
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise WebConfigError(
                f"basic_auth_users: the password of {printable(user)} is not a bcrypt hash ($2y$10$...; "
                "make one with `htpasswd -nBC 10 '' | tr -d ':\\n'`)"
            )
        found[user] = hashed.encode()
    if found:
        try:
            import bcrypt  # noqa: F401 - checked now: a scrape must not find it missing
        except ImportError:
            raise WebConfigError(f"basic_auth_users needs the bcrypt package: {INSTALL_HINT}") from None
    return found


def _rate_limit(limit: object) -> tuple[float, int]:
    limit = _mapping(limit, "rate_limit", ("interval", "burst"))
    interval = _duration(limit.get("interval", 0))
    burst = limit.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise WebConfigError("rate_limit.burst must be a whole number")
    if interval > 0 and burst == 0:
        raise WebConfigError("rate_limit.burst 0 with an interval would refuse every request: give 1 or more")
    return interval, burst


def _duration(value: object) -> float:
    """A Go duration ("1s", "1m30s", "250ms"), in seconds; a bare integer is nanoseconds, as in Go."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value * 1e-9
    if isinstance(value, str):
        if value == "0":
            return 0.0
        parts = _DURATION.findall(value)
        if parts and "".join(n + u for n, u in parts) == value:
            return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    raise WebConfigError(f"rate_limit.interval: not a duration: {printable(str(value))} (e.g. 1s)")


def _mapping(value: object, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WebConfigError(f"{where} must be a mapping")
    for key in value:
        if key not in keys:
            raise WebConfigError(f"unknown field {printable(str(key))} in {where}")
    return value


def _boolean(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise WebConfigError(f"{key} must be true or false")
    return value


def _one_line(err: BaseException) -> str:
    return printable(" ".join(str(err).split()))


@functools.cache
def _strict_loader() -> type:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """Go's yaml.UnmarshalStrict: a key given twice is an error, not the last one silently."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    return StrictLoader


# -- the file, read again when it changes ---------------------------------------------------------------


class WebConfigFile:
    """The web config a server runs under: `current()` is the file's latest good reading, read again
    when the file or a file it names changes. Whether the server speaks TLS is decided at start (as in
    the toolkit): a change that turns TLS on or off is refused until a restart."""

    def __init__(self, path: Path, warn: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self._warn = warn or _to_stderr
        self._lock = threading.Lock()
        self._watched: tuple[Path, ...] = (self.path,)
        signature = self._digest(self._watched)  # before reading: a change while it is read is seen
        config = load(self.path)
        self._watched = config.files
        self._signature = signature + self._digest(config.files[1:])
        self._config: WebConfig | None = config
        self._error = ""
        self.tls = config.context is not None

    def current(self) -> WebConfig:
        """The config to apply now; raises WebConfigError while the file is bad."""
        with self._lock:
            signature = self._digest(self._watched)
            if signature != self._signature:
                self._reload(signature)
            if self._config is None:
                raise WebConfigError(self._error)
            return self._config

    def _reload(self, signature: tuple[bytes, ...]) -> None:
        self._signature = signature
        try:
            config = load(self.path)
            if (config.context is not None) != self.tls:
                raise WebConfigError(
                    f"web config {printable(str(self.path))}: TLS was turned {'off' if self.tls else 'on'}: "
                    "restart gputui export for that"
                )
        except WebConfigError as err:
            self._config, self._error = None, str(err)
            self._warn(f"{err}; refusing connections until it is fixed")
            return
        if self._config is None:
            self._warn(f"web config {printable(str(self.path))}: read again, serving")
        if config.files != self._watched:  # other files named: watch those from now on
            self._watched = config.files
            self._signature = self._digest(config.files)
        self._config = config

    @staticmethod
    def _digest(paths: tuple[Path, ...]) -> tuple[bytes, ...]:
        """A digest of each file's content (b"" when unreadable): a few small files, read in microseconds,
        and unlike timestamps it sees two writes within one clock tick, and a Secret's symlink swap."""
        signature = []
        for path in paths:
            try:
                with open(path, "rb") as f:
                    signature.append(hashlib.sha256(f.read(MAX_FILE_BYTES + 1)).digest())
            except OSError:
                signature.append(b"")
        return tuple(signature)


def _to_stderr(line: str) -> None:
    print(f"gputui export: {line}", file=sys.stderr, flush=True)


# -- per request -------------------------------------------------------------------------------------------


class PasswordsBusy(Exception):
    """bcrypt is busy with other requests' passwords: answer 503 rather than hold a worker."""


class BasicAuth:
    """Checks `Authorization: Basic` against the users' bcrypt hashes, remembering verified pairs."""

    def __init__(self) -> None:
        self._key = os.urandom(32)  # what is remembered is a keyed hash of the password, not it
        self._verified: dict[tuple[str, bytes], bytes] = {}
        self._lock = threading.Lock()
        self._bcrypt = threading.Lock()  # one bcrypt at a time: it costs tens of ms of CPU

    def allows(self, users: Mapping[str, bytes], authorization: str | None) -> bool:
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return False
        user, password = credentials
        hashed = users.get(user) if user is not None else None
        known = hashed is not None
        if hashed is None:  # an unknown user costs a bcrypt as dear as a known one's: no enumeration by time
            hashed = self._unknown(max((int(h[4:6]) for h in users.values()), default=10))
        digest = hmac.new(self._key, password, hashlib.sha256).digest()
        with self._lock:
            remembered = self._verified.get((user or "", hashed))
        if known and remembered is not None and hmac.compare_digest(remembered, digest):
            return True
        if not self._bcrypt.acquire(timeout=BCRYPT_WAIT_S):
            raise PasswordsBusy
        try:
            ok = _bcrypt_matches(password, hashed)
        finally:
            self._bcrypt.release()
        if ok and known and user is not None:
            with self._lock:
                if len(self._verified) >= MAX_VERIFIED:
                    self._verified.clear()
                self._verified[(user, hashed)] = digest
        return ok and known

    @functools.cache  # noqa: B019 - one hash per cost for the server's life: a few at most
    def _unknown(self, cost: int) -> bytes:
        """A hash of a random password at `cost`, which no password matches in practice."""
        import bcrypt

        return bytes(bcrypt.hashpw(os.urandom(16), bcrypt.gensalt(cost)))


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # longer than bcrypt's 72 bytes: Go's bcrypt refuses it too
        return False


def _basic_credentials(authorization: str | None) -> tuple[str | None, bytes] | None:
    """(user, password) of `Basic base64(user:password)` (user None when not UTF-8), or None."""
    if authorization is None or authorization[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(authorization[6:], validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    try:
        return user.decode(), password
    except UnicodeDecodeError:
        return None, password


class RateLimit:
    """A token bucket: `burst` requests at once, refilled at one per `interval` seconds (the toolkit's
    rate_limit, golang.org/x/time/rate)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._setting = (0.0, 0)
        self._tokens = 0.0
        self._at = 0.0

    def allow(self, interval: float, burst: int) -> bool:
        if interval <= 0:
            return True
        now = self._monotonic()
        with self._lock:
            if (interval, burst) != self._setting:  # new settings (or the first request): a full bucket
                self._setting, self._tokens, self._at = (interval, burst), float(burst), now
            self._tokens = min(float(burst), self._tokens + (now - self._at) / interval)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
