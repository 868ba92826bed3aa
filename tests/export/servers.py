"""Real servers for the exporter and fleet tests: `gputui export --demo` processes and a Prometheus
server (Debian's `prometheus`) on loopback, each with its own temporary files; and a CA with a
certificate for 127.0.0.1, for the https tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus")
NO_PROMETHEUS = "the prometheus binary is not installed (apt-get install prometheus; .ci/run does)"
_ANNOUNCE = re.compile(r"http://[^:]+:(\d+)/metrics")
OPENSSL = shutil.which("openssl")
NO_OPENSSL = "the openssl command is not installed (apt-get install openssl): no certificates for https"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port)
        return port


class Exporter:
    """`gputui export --demo` in a child process, on a port of its own choosing."""

    def __init__(self, hostname: str, *extra: str, gpus: int = 2, interval: float = 0.5) -> None:
        self.hostname = hostname
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gputui",
                "export",
                "--demo",
                "--demo-gpus",
                str(gpus),
                "--port",
                "0",
                "--hostname",
                hostname,
                "--interval",
                str(interval),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.proc.stderr.readline() if self.proc.stderr else ""
        match = _ANNOUNCE.search(line)
        if not match:
            self.stop()
            raise RuntimeError(f"gputui export did not start: {line!r}")
        self.port = int(match.group(1))
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as reply:
            body: bytes = reply.read()
            return body.decode()

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.proc.stderr:
            self.proc.stderr.close()
        return self.proc.returncode


class PrometheusServer:
    """Prometheus scraping `targets` every second, with its data in `workdir`."""

    def __init__(self, workdir: Path, targets: list[int], scrape_s: float = 1.0) -> None:
        assert PROMETHEUS, NO_PROMETHEUS
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        listed = ", ".join(f"'127.0.0.1:{p}'" for p in targets)
        self.config.write_text(
            f"global:\n  scrape_interval: {scrape_s:g}s\n  evaluation_interval: {scrape_s:g}s\n"
            f"scrape_configs:\n  - job_name: gpu\n    static_configs:\n      - targets: [{listed}]\n"
        )
        self.start()

    def start(self) -> None:
        """(Re)start on the same port and data directory."""
        assert PROMETHEUS is not None, NO_PROMETHEUS
        self.log = open(self.workdir / "prometheus.log", "a")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def query(self, promql: str) -> list[dict[str, Any]]:
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=5) as reply:
            result: list[dict[str, Any]] = json.loads(reply.read())["data"]["result"]
            return result

    def wait_for(self, promql: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The query's result once it has at least `count` series."""
        end = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < end:
            result = self.query(promql)
            if len(result) >= count:
                return result
            time.sleep(0.3)
        raise AssertionError(f"{promql!r}: {len(result)} series after {timeout} s, wanted {count}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


# --- certificates -------------------------------------------------------------------------------------

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = gputui test CA
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA's certificate (PEM): what --ca-file is given
    cert: Path  # the server's, for 127.0.0.1 and localhost, signed by the CA
    key: Path  # the server's key

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA of its own and a server certificate it signed, made by the openssl command (EC P-256 keys,
    valid 10 years; X.509 v3 extensions as strict verifiers want them)."""
    assert OPENSSL, NO_OPENSSL
    config = directory / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG)
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, request = directory / "server.pem", directory / "server.key", directory / "server.csr"
    ten_years = ["-days", "3650"]
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout"]
    _openssl("req", "-x509", "-config", config, "-extensions", "ca", *new_key, ca_key, "-out", ca, *ten_years)
    _openssl("req", "-new", "-config", config, *new_key, key, "-out", request, "-subj", "/CN=127.0.0.1")
    signed_by_ca: list[str | Path] = ["-CA", ca, "-CAkey", ca_key, "-set_serial", "2", *ten_years]
    _openssl(
        "x509",
        "-req",
        "-in",
        request,
        *signed_by_ca,
        "-extfile",
        config,
        "-extensions",
        "server",
        "-out",
        cert,
    )
    return TlsFiles(ca, cert, key)


def _openssl(*args: str | Path) -> None:
    assert OPENSSL, NO_OPENSSL
    subprocess.run([OPENSSL, *map(str, args)], check=True, capture_output=True, timeout=30)
