"""Real servers for the exporter and fleet tests: `gputui export --demo` processes and a Prometheus
server (Debian's `prometheus`) on loopback, each with its own temporary files."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

PROMETHEUS = shutil.which("prometheus")
NO_PROMETHEUS = "the prometheus binary is not installed (apt-get install prometheus; .ci/run does)"
_ANNOUNCE = re.compile(r"http://[^:]+:(\d+)/metrics")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            return reply.read().decode()

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

    def query(self, promql: str) -> list[dict]:
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=5) as reply:
            return json.loads(reply.read())["data"]["result"]

    def wait_for(self, promql: str, count: int = 1, timeout: float = 30.0) -> list[dict]:
        """The query's result once it has at least `count` series."""
        end = time.monotonic() + timeout
        result: list[dict] = []
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
