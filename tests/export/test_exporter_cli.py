"""`gputui export` as real processes: the demo exporter scraped over HTTP, bad flags, a busy port, a
missing prometheus-client, and SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputui import __version__
from gputui.analyze.classify import SUSPICIOUS
from gputui.export.metrics import DCGM_COUNTERS
from tests.export.servers import Exporter
from tests.helpers import wait_until
from tests.processes import describe, gone

TIMEOUT = 30
DCGM_NAMES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
)
Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            # prometheus-client's parser names a counter's samples `<name>_total`; Prometheus keeps
            # dcgm-exporter's own names
            name = fam.name if fam.name in DCGM_COUNTERS else s.name
            out.setdefault(name, []).append((dict(s.labels), s.value))
    return out


def gputui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gputui export: "), lines[0]
    return lines[0]


def demo_processes(exporter_pid: int) -> list[psutil.Process]:
    """The demo's processes: the exporter's descendants, and the orphaned worker reparented away (found by
    the stand-in device directory in its environment)."""
    children = psutil.Process(exporter_pid).children(recursive=True)
    devices = None
    for child in children:
        with contextlib.suppress(psutil.Error):
            devices = child.environ().get("GPUTUI_DEMO_DEVICES") or devices
    assert devices is not None, describe(children)
    mine = {c.pid: c for c in children}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid not in mine and p.environ().get("GPUTUI_DEMO_DEVICES") == devices:
                mine[p.pid] = p
    return list(mine.values())


# -- the demo exporter, scraped ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo() -> Iterator[tuple[Exporter, Samples]]:
    """One exporter for the scrape tests, scraped once it shows every zombie class the demo makes."""
    exporter = Exporter(f"test-host-{uuid.uuid4().hex[:8]}", gpus=2, interval=0.2)
    try:
        samples: Samples = {}

        def ready() -> bool:
            nonlocal samples
            samples = parse(exporter.scrape())
            zombies = {labels["class"]: v for labels, v in samples.get("gputui_zombie_processes", [])}
            return all(zombies.get(c, 0) >= 1 for c in ("defunct", "orphan", "nvml-only"))

        wait_until(ready, timeout=15, step=0.1)
        yield exporter, samples
    finally:
        exporter.stop()


def test_every_dcgm_field_for_every_demo_gpu(demo: tuple[Exporter, Samples]) -> None:
    exporter, samples = demo
    for name in DCGM_NAMES:
        series = samples.get(name, [])
        assert sorted(labels["gpu"] for labels, _ in series) == ["0", "1"], name
        for labels, value in series:
            assert labels["Hostname"] == exporter.hostname, labels
            assert labels["device"] == f"nvidia{labels['gpu']}"  # the demo's minor is its index
            assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
            assert labels["UUID"].startswith("GPU-") and labels["pci_bus_id"].startswith("00000000:")
            assert value >= 0
    fb_used = {labels["gpu"]: v for labels, v in samples["DCGM_FI_DEV_FB_USED"]}
    for labels, free in samples["DCGM_FI_DEV_FB_FREE"]:
        assert fb_used[labels["gpu"]] + free + 515 <= 81559  # an H100 80GB's MiB, less the reserved 515


def test_exporter_info_names_the_demo_and_the_hostname(demo: tuple[Exporter, Samples]) -> None:
    exporter, samples = demo
    assert samples["gputui_exporter_info"] == [
        ({"Hostname": exporter.hostname, "source": "demo", "version": __version__}, 1.0)
    ]
    assert samples["gputui_exporter_sample_failures_total"] == [({}, 0.0)]
    assert {labels["gpu"]: v for labels, v in samples["gputui_gpu_lost"]} == {"0": 0, "1": 0}


def test_process_memory_series_are_live_processes(demo: tuple[Exporter, Samples]) -> None:
    exporter, samples = demo
    series = samples["gputui_process_gpu_memory_bytes"]
    assert all(labels["Hostname"] == exporter.hostname for labels, _ in series)
    trainers = [labels for labels, v in series if "--role trainer" in labels["command"] and v > 0]
    assert sorted(labels["gpu"] for labels in trainers) == ["0", "1"]
    descendants = {p.pid for p in psutil.Process(exporter.proc.pid).children(recursive=True)}
    for labels in trainers:
        assert labels["class"] == "ok"
        assert labels["command"].startswith("python -IS demo_train.py")
        assert psutil.pid_exists(int(labels["pid"])) and int(labels["pid"]) in descendants
    # the nvml-only ghost: NVML lists it, no process here has its pid
    ghosts = [labels for labels, _ in series if labels["class"] == "nvml-only"]
    assert ghosts and all(not psutil.pid_exists(int(labels["pid"])) for labels in ghosts)
    assert len(series) == len(trainers) + len(ghosts), series


def test_zombie_classes_of_the_demo(demo: tuple[Exporter, Samples]) -> None:
    exporter, samples = demo
    zombies = {
        labels["class"]: v
        for labels, v in samples["gputui_zombie_processes"]
        if labels["Hostname"] == exporter.hostname
    }
    assert set(zombies) == set(SUSPICIOUS)
    assert zombies["defunct"] >= 1 and zombies["orphan"] >= 1 and zombies["nvml-only"] >= 1, zombies


def test_the_exporters_own_process_metrics(demo: tuple[Exporter, Samples]) -> None:
    exporter, samples = demo
    [(_, rss)] = samples["process_resident_memory_bytes"]
    actual = psutil.Process(exporter.proc.pid).memory_info().rss
    assert 0.5 * actual < rss < 2 * actual, (rss, actual)


# -- bad flags, a busy port, no prometheus-client ---------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ("--port", "70000"),
        ("--port", "abc"),
        ("--interval", "0"),
        ("--hostname", ""),
        ("--frobnicate",),
    ],
    ids=lambda f: " ".join(f) or "empty",
)
def test_bad_flags_exit_2_with_one_line(flags: tuple[str, ...]) -> None:
    err = one_line_error(gputui("export", "--demo", *flags))
    assert err.startswith("gputui export: error: "), err
    assert flags[-1] in err or flags[-1] == "", err


def test_a_port_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = dict(os.environ, TMPDIR=str(tmp_path))  # where the demo puts its stand-in device files
        err = one_line_error(gputui("export", "--demo", "--demo-gpus", "1", "--port", str(port), env=env))
    assert "cannot listen" in err and f"127.0.0.1:{port}" in err, err
    assert not list(tmp_path.glob("gputui-demo-*"))  # the demo it had started was closed


_BLOCK_PROMETHEUS = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "prometheus_client" or name.startswith("prometheus_client."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
from gputui.cli import main
raise SystemExit(main(["export", "--demo"]))
"""


def test_without_prometheus_client_it_says_how_to_install_it(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", _BLOCK_PROMETHEUS],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    err = one_line_error(result)
    assert "prometheus_client" in err and "pip install 'gputui[prometheus]'" in err, err
    assert not list(tmp_path.glob("gputui-demo-*"))  # it said so before starting the demo


# -- signals ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_stop_signal_ends_the_exporter_cleanly_with_its_demo_children(sig: signal.Signals) -> None:
    """How a service is stopped: a clean exit (0), and none of the demo's processes left behind."""
    exporter = Exporter(f"stop-{uuid.uuid4().hex[:8]}", gpus=1, interval=0.2)
    try:
        assert "DCGM_FI_DEV_GPU_UTIL" in exporter.scrape()
        demo = demo_processes(exporter.proc.pid)
        descendants = {p.pid for p in psutil.Process(exporter.proc.pid).children(recursive=True)}
        assert len(demo) >= 1 + 3 + 1, describe(demo)  # a trainer, its three workers, the orphan at least
        assert {p.pid for p in demo} - descendants, describe(demo)  # the orphan, reparented away
        started = time.monotonic()
        exporter.proc.send_signal(sig)
        code = exporter.proc.wait(timeout=10)
        took = time.monotonic() - started
        assert exporter.proc.stderr is not None
        stderr = exporter.proc.stderr.read()
    finally:
        exporter.stop()
    assert code == 0, stderr
    assert took < 5, took
    assert "Traceback" not in stderr, stderr
    assert wait_until(lambda: all(gone(p) for p in demo), timeout=5), describe(p for p in demo if not gone(p))
