"""`gputui doctor --pid PID --devices-dir DIR`: the process check looks for its device files in DIR; and a
process NVML lists with memory is never said to have "never initialized CUDA" for want of files there."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui import cli
from gputui.doctor import facts, process, torch_probe
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.report import OK, PROBLEM, WARNING
from gputui.doctor.torch_probe import TorchFacts
from gputui.model import GpuProcess

GIB = 1 << 30
HOLDER = (
    "import os, sys; fds = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]; "
    "print('ready', flush=True); sys.stdin.read()"
)
NEVER = "never initialized CUDA"


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    d = tmp_path / "driver-dev"  # not /dev: a driver container's, or a container's own
    d.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia3"):
        (d / name).write_bytes(b"")
    return d


@pytest.fixture
def holder(devices: Path) -> Iterator[int]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(devices / "nvidiactl"), str(devices / "nvidia3")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield p.pid
    finally:
        p.kill()
        p.wait(timeout=10)
        for stream in (p.stdin, p.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, holder: int) -> Iterator[list[Path | None]]:
    """A machine whose NVML lists `holder` with 3.9 GiB on GPU 3 (minor 3); what gather was told."""
    asked: list[Path | None] = []
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}

    def gather(
        root: Path = Path("/"), maps: Path = Path("/proc/self/maps"), devices_dir: Path | None = None
    ) -> SystemFacts:
        asked.append(devices_dir)
        return SystemFacts(
            kernel_module="550.54.14",
            driver_version="550.54.14",
            cuda_version="12.4",
            gpus=(GpuFact(3, "NVIDIA H100", "GPU-3", "00000000:3B:00.0", minor=3, mig=False),),
            processes=(GpuProcess(3, holder, "C", int(3.9 * GIB)),),
        )

    monkeypatch.setattr(facts, "gather", gather)
    monkeypatch.setattr(torch_probe, "probe", lambda python, env: TorchFacts(python, error="not asked"))
    monkeypatch.setattr(process, "_agent_stats", lambda _pid: None)
    yield asked
    for s, handler in saved.items():
        signal.signal(s, handler)


def process_checks(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    cli.main(["doctor", "--json", *args])
    out, _err = capsys.readouterr()
    return [c for c in json.loads(out)["checks"] if c["area"] == "process"]


def test_devices_dir_is_where_the_process_check_looks(
    machine: list[Path | None], holder: int, devices: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checks = process_checks(capsys, "--pid", str(holder), "--devices-dir", str(devices))
    assert machine == [devices]  # the system checks look there too
    found = [c["found"] for c in checks]
    held = ", ".join(sorted(str(devices.resolve() / n) for n in ("nvidiactl", "nvidia3")))
    assert {"area": "process", "status": OK, "found": f"pid {holder} holds {held}", "fix": ""} in checks
    assert f"pid {holder} uses 3.9 GiB on GPU 3" in found
    assert not any(NEVER in f for f in found)


def test_no_files_in_dev_but_memory_on_nvml_is_not_never_initialized(
    machine: list[Path | None], holder: int, capsys: pytest.CaptureFixture[str]
) -> None:
    checks = process_checks(capsys, "--pid", str(holder))  # looks in /dev: its files are not there
    assert machine == [None]
    assert not any(NEVER in c["found"] for c in checks)
    (where,) = [c for c in checks if "holds no" in c["found"]]
    assert where["status"] == WARNING
    assert where["found"] == (
        f"pid {holder} holds no /dev/nvidia* file, yet NVML lists GPU memory for it (GPU 3): "
        "its device files are elsewhere"
    )
    assert "--devices-dir DIR" in where["fix"]
    assert f"pid {holder} uses 3.9 GiB on GPU 3" in [c["found"] for c in checks]


def test_no_files_and_no_memory_is_still_never_initialized(tmp_path: Path) -> None:
    p = process.ProcessFacts(pid=4242, command="python train.py", devices=(), environ={}, memory={})
    (check,) = [c for c in process.checks(p, SystemFacts()) if "holds no" in c.found]
    assert check.status == PROBLEM
    assert check.found == f"pid 4242 holds no /dev/nvidia* file: it {NEVER}"


def test_the_flag_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["doctor", "--devices-dir", str(tmp_path)])
    assert args.devices_dir == tmp_path
    with pytest.raises(SystemExit) as stop:
        cli.build_parser().parse_args(["doctor", "--devices-dir", str(tmp_path / "none")])
    assert stop.value.code == 2
