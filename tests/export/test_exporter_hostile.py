"""`gputui export` against hostile processes and hostile clients: a command line that is not UTF-8 and
carries terminal escapes, a thousand idle connections, a slow-loris client, odd requests, and a stop
signal while all of that is open. Real processes and real sockets throughout."""

from __future__ import annotations

import contextlib
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gputui.collect.sampler import Sampler
from gputui.collect.sources.base import Reading
from gputui.collect.sources.demo import DemoSource
from gputui.export import exporter as ex
from gputui.model import GpuProcess
from tests.export.servers import Exporter as ExporterProcess
from tests.export.test_metrics import FakeSampler, snapshot
from tests.helpers import wait_until

IDLE_SOCKETS = 1000
HOSTILE_ARG = b"\xff\x1b]0;pwned\x07"


def scrape(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of one GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers.get("Content-Type", ""), err.read()


def assert_clean_exposition(body: bytes) -> None:
    """UTF-8, and no control character but the line ends: nothing a terminal or a parser trips on."""
    body.decode("utf-8")  # strict: raises on a lone surrogate's bytes or any invalid sequence
    bad = sorted({b for b in body if (b < 0x20 and b != 0x0A) or b == 0x7F})
    assert not bad, f"control bytes {bad} in the exposition"


def raw_exchange(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    """Send `request` as is and read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    return reply


@contextlib.contextmanager
def idle_sockets(port: int, count: int = IDLE_SOCKETS) -> Iterator[list[socket.socket]]:
    """`count` connections that are opened and never send a byte."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1024), hard))
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        yield opened
    finally:
        for s in opened:
            s.close()


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


# -- a command line that is not UTF-8 and carries escapes, end to end --------------------------------------


class HostileDemo(DemoSource):
    """The demo, plus one more GPU process: a real child whose argv is not UTF-8 and holds ESC and BEL,
    holding the stand-in nvidia0 open like a CUDA process."""

    hostile: subprocess.Popen[bytes] | None = None

    def open(self):  # type: ignore[no-untyped-def]
        info = super().open()
        # The device is opened here and inherited, so the command line stays short enough to be kept
        # whole in the label (60 characters).
        with open(self.devices_dir / "nvidia0", "rb") as device:
            self.hostile = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)", HOSTILE_ARG],
                stdin=subprocess.DEVNULL,
                pass_fds=(device.fileno(),),
                start_new_session=True,
            )
        return info

    def read(self, slow: bool) -> Reading:
        reading = super().read(slow)
        if self.hostile is None:
            return reading
        extra = GpuProcess(gpu=0, pid=self.hostile.pid, kinds="C", used_memory=1 << 30, sm_util=0, mem_util=0)
        return replace(reading, processes=(*reading.processes, extra))

    def close(self) -> None:
        if self.hostile is not None:
            self.hostile.kill()
            self.hostile.wait()
            self.hostile = None
        super().close()


def test_a_non_utf8_command_line_with_escapes_is_served_as_printable_utf8() -> None:
    source = HostileDemo(gpus=1, workers=1)
    with Sampler(source) as sampler:
        exporter = ex.Exporter(sampler)
        assert source.hostile is not None
        pid = source.hostile.pid

        def seen() -> bool:
            snap = exporter.tick()
            return snap is not None and any(
                p.pid == pid and "pwned" in (p.command or "") for p in snap.processes
            )

        assert wait_until(seen, timeout=10, step=0.1)
        server, port = ex.serve(exporter, 0, "127.0.0.1")
        try:
            status, ctype, body = scrape(f"http://127.0.0.1:{port}/metrics")
        finally:
            server.close()
    assert status == 200, body[:300]
    assert ctype.startswith("text/plain")
    assert_clean_exposition(body)
    series = [
        s
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
        if s.name == "gputui_process_gpu_memory_bytes" and s.labels["pid"] == str(pid)
    ]
    assert len(series) == 1, series
    assert series[0].labels["command"] == "python -c import time; time.sleep(60) ??]0;pwned?"  # \xff ESC BEL


def test_every_label_of_every_family_is_made_printable() -> None:
    """Hostile text in every kind of label: GPU name, user, command, hostname, and an agent's process."""
    from tests.export.test_metrics import agent_reply, gpu0, proc

    evil = "a\udcff\x1b[2J\x07\x9b\n\x7fz"
    hostile = [proc(7, command=f"/bin/{evil}", user=evil)]
    reply = {**agent_reply(), "pid": 7}
    snap = snapshot([gpu0(name=evil, uuid=evil)], processes=hostile, agents={7: reply})
    snap = replace(snap, hostname=evil)
    exporter = ex.Exporter(FakeSampler([snap], hostname=evil))  # type: ignore[arg-type]
    exporter.tick()
    registry = CollectorRegistry()
    registry.register(exporter)
    body = generate_latest(registry)  # raised UnicodeEncodeError on the lone surrogate
    assert_clean_exposition(body)
    samples = [s for fam in text_string_to_metric_families(body.decode()) for s in fam.samples]
    clean = "a??[2J????z"
    by_name = {s.name: s.labels for s in samples}
    assert by_name["gputui_exporter_info"]["Hostname"] == clean
    assert {by_name["DCGM_FI_DEV_GPU_UTIL"][k] for k in ("modelName", "UUID", "Hostname")} == {clean}
    assert {by_name["gputui_process_gpu_memory_bytes"][k] for k in ("command", "user")} == {clean}
    assert by_name["gputui_agent_allocated_bytes"]["command"] == clean  # the agent's families too
    assert all(v.isprintable() for s in samples for v in s.labels.values())


# -- the sample clock never waits on a scrape --------------------------------------------------------------


class CountingSampler(FakeSampler):
    """A sampler that records which threads call it."""

    def __init__(self) -> None:
        super().__init__([snapshot(time=1000.0 + i) for i in range(1000)])
        self.threads: set[str] = set()

    def tick(self):  # type: ignore[no-untyped-def]
        self.threads.add(threading.current_thread().name)
        return super().tick()


class BlockingCollector:
    """A collector that holds a scrape in the middle of its rendering until released."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def collect(self) -> list[object]:
        self.entered.set()
        self.release.wait(10)
        return []


def test_a_scrape_never_calls_the_sampler_and_never_holds_up_a_tick() -> None:
    sampler = CountingSampler()
    exporter = ex.Exporter(sampler)  # type: ignore[arg-type]
    exporter.tick()
    server, port = ex.serve(exporter, 0, "127.0.0.1")
    try:
        for _ in range(5):
            assert scrape(f"http://127.0.0.1:{port}/metrics")[0] == 200
        assert sampler.ticks == 1 and sampler.threads == {threading.current_thread().name}
    finally:
        server.close()

    # A scrape held half-way through rendering (the exporter's families done, another collector slow):
    # the sample clock goes on.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    blocker = BlockingCollector()
    registry.register(blocker)  # type: ignore[arg-type]
    slow_server = ex.MetricsServer(registry, 0, "127.0.0.1")
    url = f"http://127.0.0.1:{slow_server.port}/metrics"
    result: list[int] = []
    scraper = threading.Thread(target=lambda: result.append(scrape(url)[0]))
    try:
        scraper.start()
        assert blocker.entered.wait(5)
        started = time.monotonic()
        for _ in range(3):
            assert exporter.tick() is not None
        assert time.monotonic() - started < 3.0  # not held by the scrape (10 s): slack for load
        assert sampler.ticks == 4
    finally:
        blocker.release.set()
        scraper.join(5)
        slow_server.close()
    assert result == [200]


# -- hostile clients against a real `gputui export` --------------------------------------------------------


@pytest.fixture(scope="module")
def exporter_process() -> Iterator[ExporterProcess]:
    proc = ExporterProcess(f"hostile-{uuid.uuid4().hex[:8]}", gpus=1, interval=0.5)
    try:
        assert wait_until(lambda: "DCGM_FI_DEV_GPU_UTIL" in proc.scrape(), timeout=15, step=0.1)
        yield proc
    finally:
        proc.stop()


def test_a_thousand_idle_connections_neither_block_scrapes_nor_burn_cpu(
    exporter_process: ExporterProcess,
) -> None:
    ps = psutil.Process(exporter_process.proc.pid)
    with idle_sockets(exporter_process.port):
        started = time.monotonic()
        status, _, body = scrape(exporter_process.url, timeout=2)
        took = time.monotonic() - started
        assert status == 200 and b"DCGM_FI_DEV_GPU_UTIL" in body
        assert took < 2, took
        before, t0 = cpu_seconds(ps), time.monotonic()
        time.sleep(2.0)
        used = (cpu_seconds(ps) - before) / (time.monotonic() - t0)
        assert used < 0.25, f"{used:.0%} of a core with idle connections open"
        assert ps.num_threads() < 20, ps.num_threads()  # not a thread per connection
        for _ in range(3):  # as the first: one that waited behind the idle sockets would wait out their 5 s
            started = time.monotonic()
            assert scrape(exporter_process.url, timeout=2)[0] == 200
            assert time.monotonic() - started < 2


@pytest.mark.slow
def test_a_slow_loris_client_is_cut_off_at_the_request_timeout(exporter_process: ExporterProcess) -> None:
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    with socket.create_connection(("127.0.0.1", exporter_process.port), timeout=15) as s:
        started = time.monotonic()
        closed_after = None
        for byte in request:
            try:
                s.sendall(bytes([byte]))
            except OSError:  # reset: the server closed it
                closed_after = time.monotonic() - started
                break
            s.settimeout(1.0)
            try:
                if s.recv(4096) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass  # still open: one more byte
            except OSError:
                closed_after = time.monotonic() - started
                break
            assert scrape(exporter_process.url, timeout=2)[0] == 200  # others are served meanwhile
    assert closed_after is not None, "the slow client was never cut off"
    assert ex.REQUEST_TIMEOUT_S - 0.5 <= closed_after <= ex.REQUEST_TIMEOUT_S + 2, closed_after


def test_openmetrics_is_negotiated_and_a_malformed_accept_falls_back(
    exporter_process: ExporterProcess,
) -> None:
    status, ctype, body = scrape(
        exporter_process.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200 and ctype.startswith("application/openmetrics-text"), ctype
    assert body.endswith(b"# EOF\n")
    # prometheus-client's choose_encoder raises TypeError on this one
    status, ctype, body = scrape(
        exporter_process.url, headers={"Accept": "application/openmetrics-text; version=abc"}
    )
    assert status == 200 and ctype.startswith("text/plain"), ctype
    assert b"DCGM_FI_DEV_GPU_UTIL" in body


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"200"),
        (b"GET /nothing HTTP/1.1\r\n\r\n", b"404"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405"),
        (b"GET /metrics\r\n\r\n", b"400"),  # no version
        (b"GET /metrics HTTP/1.1\r\nbad header line\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nX: \x1b[2J\r\n\r\n", b"400"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200) + b"\r\n\r\n", b"400"),  # TLS hello
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", b"431"),
    ],
    ids=["pointer", "404", "post", "no-version", "bad-header", "escape-in-header", "tls", "huge-header"],
)
def test_odd_requests_get_a_short_answer_and_the_connection_closed(
    exporter_process: ExporterProcess, request_bytes: bytes, status: bytes
) -> None:
    try:
        reply = raw_exchange(exporter_process.port, request_bytes)
    except (ConnectionResetError, BrokenPipeError):  # the server may close before reading all of a huge head
        assert status == b"431"
        return
    assert reply.split(b" ", 2)[1] == status, reply[:200]
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"Connection: close" in head
    assert len(body) < 200 and b"\x1b" not in body
    if status == b"200":
        assert b"/metrics" in body
    assert scrape(exporter_process.url, timeout=2)[0] == 200  # still serving


# -- stop signals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_with_a_thousand_idle_connections_exits_at_once(sig: signal.Signals) -> None:
    proc = ExporterProcess(f"stop-{uuid.uuid4().hex[:8]}", gpus=1, interval=0.5)
    try:
        assert "DCGM_FI_DEV_GPU_UTIL" in proc.scrape()
        with idle_sockets(proc.port):
            assert scrape(proc.url, timeout=2)[0] == 200
            started = time.monotonic()
            proc.proc.send_signal(sig)
            code = proc.proc.wait(timeout=10)
            took = time.monotonic() - started
        assert proc.proc.stderr is not None
        stderr = proc.proc.stderr.read()
    finally:
        proc.stop()
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr
    # Within half the idle sockets' request timeout (5 s), which an exit that waited for them would take:
    # on a loaded box, a process exit with 1,000 sockets open can take a second of its own.
    assert took < 2.5, took


def test_a_socket_limit_reached_does_not_spin() -> None:
    """Out of file descriptors, accept() fails at once, again and again: the server must not spin on it,
    and must serve again once descriptors are free."""
    script = (
        "import resource, socket, sys, time\n"
        "from tests.export.test_metrics import FakeSampler, snapshot\n"
        "from gputui.export import exporter as ex\n"
        "e = ex.Exporter(FakeSampler([snapshot()])); e.tick()\n"
        "server, port = ex.serve(e, 0, '127.0.0.1')\n"
        "print(port, flush=True)\n"
        "sys.stdin.readline()\n"  # the parent has used up this process's descriptors by now
        "server.close()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        ps = psutil.Process(proc.pid)
        ps.rlimit(psutil.RLIMIT_NOFILE, (64, 64))
        with idle_sockets(port, count=200):
            before, t0 = cpu_seconds(ps), time.monotonic()
            time.sleep(1.5)
            used = (cpu_seconds(ps) - before) / (time.monotonic() - t0)
            assert used < 0.25, f"{used:.0%} of a core while out of descriptors"
            assert scrape(f"http://127.0.0.1:{port}/metrics", timeout=3)[0] == 200
    finally:
        if proc.stdin:
            with contextlib.suppress(OSError):
                proc.stdin.write("\n")
                proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
