"""`gputui doctor` on the command line: `python -m gputui doctor` in a subprocess on this machine, and
`cli.main` in-process with the machine's facts made up and a stand-in Python for the torch probe.

A full run asks the real Python about torch (importing it takes seconds), so there are few of them.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import gputui
from gputui import cli
from gputui.doctor import facts
from gputui.doctor.facts import GpuFact, SystemFacts
from tests.doctor.pythons import printing
from tests.helpers import wait_until

REPO = Path(gputui.__file__).resolve().parents[1]
TIMEOUT = 120
STATUSES = ("ok", "WARNING", "PROBLEM")
AREAS = ("driver", "gpus", "cuda", "torch", "process")
HEADER = "gputui doctor: why isn't my GPU being used?"
SUMMARY = re.compile(r"^(nothing wrong found|\d+ problems?(, \d+ warnings?)?|\d+ warnings?)$")
NO_DRIVER = not Path("/proc/driver/nvidia").exists()


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", "doctor", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
    )


def check_lines(stdout: str) -> tuple[list[str], str]:
    """The check lines and the summary of the text report, after checking the report's shape."""
    out = stdout.rstrip("\n").split("\n")
    assert out[0] == HEADER
    assert len(out) >= 3, stdout
    for ln in out[1:-1]:
        # "<status, 8 wide> <area, 8 wide> <what was found>[ — fix: <fix>]"
        status, area, found = ln[:8].rstrip(), ln[9:17].rstrip(), ln[18:]
        assert status in STATUSES and area in AREAS, ln
        assert ln[8] == " " and ln[17] == " " and found and not found.startswith(" "), ln
        assert (" — fix: " in found) == (status != "ok"), ln  # every problem and warning says what to do
    return out[1:-1], out[-1]


def summary_of(checks: list[str]) -> str:
    problems = sum(ln.startswith("PROBLEM ") for ln in checks)
    warnings = sum(ln.startswith("WARNING ") for ln in checks)
    parts = [f"{problems} problem{'s' * (problems != 1)}"] * bool(problems) + [
        f"{warnings} warning{'s' * (warnings != 1)}"
    ] * bool(warnings)
    return ", ".join(parts) or "nothing wrong found"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "gputui-doctor-test"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: "gputui-doctor-test" in psutil.Process(p.pid).cmdline(), 10.0)
        yield p
    finally:
        p.kill()
        p.wait(timeout=10)


# -- on this machine, in a subprocess ----------------------------------------------------------------


def test_text_report_with_a_pid(sleeper: subprocess.Popen[bytes]) -> None:
    result = doctor("--pid", str(sleeper.pid))
    assert result.stderr.count("Traceback") == 0, result.stderr
    checks, summary = check_lines(result.stdout)
    assert SUMMARY.match(summary) and summary == summary_of(checks)
    assert result.returncode == (1 if any(ln.startswith("PROBLEM ") for ln in checks) else 0)
    if NO_DRIVER:
        assert result.returncode == 1
        assert any(ln.startswith("PROBLEM  driver   ") for ln in checks), result.stdout
    process = [ln for ln in checks if ln[9:17] == "process "]
    assert process, result.stdout
    assert all(f"pid {sleeper.pid}" in ln for ln in process)
    # A plain Python that never touched a GPU holds no device file.
    never = f"PROBLEM  process  pid {sleeper.pid} holds no /dev/nvidia* file: it never initialized CUDA"
    assert any(ln.startswith(never) for ln in process)
    assert [ln[9:17].rstrip() for ln in checks].index("process") > 0  # after the machine's checks


def test_json_report() -> None:
    result = doctor("--json")
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"checks", "problems", "warnings", "exit_code"}
    assert doc["exit_code"] == result.returncode
    assert doc["problems"] == sum(c["status"] == "problem" for c in doc["checks"])
    assert doc["warnings"] == sum(c["status"] == "warning" for c in doc["checks"])
    assert doc["exit_code"] == (1 if doc["problems"] else 0)
    assert doc["checks"]
    for c in doc["checks"]:
        assert set(c) == {"area", "status", "found", "fix"}
        assert c["status"] in ("ok", "warning", "problem")
        assert c["area"] in AREAS and c["area"] != "process"  # no --pid, no process checks
        assert isinstance(c["found"], str) and c["found"]
        assert isinstance(c["fix"], str) and (c["fix"] == "") == (c["status"] == "ok")
    if NO_DRIVER:
        assert result.returncode == 1
        assert any(c["area"] == "driver" and c["status"] == "problem" for c in doc["checks"])


def test_a_pid_that_names_no_process() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert pid_max < 99999999
    result = doctor("--pid", "99999999")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == ["gputui doctor: no process with pid 99999999"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--pid", "abc"], "argument --pid: not a process id: 'abc'"),
        (["--pid", "0"], "argument --pid: not a process id: '0'"),
        (["--pid", "-5"], "argument --pid: "),
        (["--python", "/nonexistent"], "argument --python: not an executable: /nonexistent"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
    ids=["pid-abc", "pid-0", "pid-negative", "python-missing", "unknown-flag"],
)
def test_cannot_run_says_why_in_one_line(args: list[str], said: str) -> None:
    result = doctor(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("gputui doctor: error: "), line
    assert said in line
    assert "Traceback" not in result.stderr


def test_python_that_is_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho '{}'\n")  # no execute bit
    result = doctor("--python", str(script))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"gputui doctor: error: argument --python: not an executable: {script} (see gputui doctor --help)"
    ]


IMPORTS = """
import sys
from gputui.cli import main
code = main(['doctor', '--json'])
loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))
print('DOCTOR-EXIT', code)
print('DOCTOR-LOADED', ','.join(loaded) or '-')
"""


def test_the_doctor_never_imports_torch_or_textual() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    said = dict(ln.split(" ", 1) for ln in result.stdout.splitlines() if ln.startswith("DOCTOR-"))
    assert said["DOCTOR-EXIT"] in ("0", "1")
    assert said["DOCTOR-LOADED"] == "-"
    doc = json.loads(result.stdout[: result.stdout.index("DOCTOR-EXIT")])
    assert doc["exit_code"] == int(said["DOCTOR-EXIT"])
    torch_checks = [c["found"] for c in doc["checks"] if c["area"] == "torch"]
    assert torch_checks  # it did ask about torch: in a subprocess
    if importlib.util.find_spec("torch") is not None:
        assert torch_checks[0].startswith("torch ") and torch_checks[0].endswith(f" in {sys.executable}")


# -- in-process, with made-up facts and a stand-in Python ---------------------------------------------


@pytest.fixture
def keep_signals() -> Iterator[None]:
    """cli.main installs its own SIGTERM/SIGHUP/SIGINT handlers: give pytest back its own."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


HEALTHY = SystemFacts(
    kernel_module="550.54.14",
    library="/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14",
    driver_version="550.54.14",
    cuda_version="12.4",
    gpus=tuple(
        GpuFact(
            i,
            "NVIDIA H100 80GB HBM3",
            f"GPU-{i}1234567-89ab",
            f"00000000:{0x18 + i:02X}:00.0",
            minor=i,
            mig=False,
            capability=(9, 0),
            sm_clock_max=1980,
        )
        for i in range(2)
    ),
    device_files={p: "ok" for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1")},
)


@pytest.fixture
def healthy_machine(monkeypatch: pytest.MonkeyPatch, keep_signals: None) -> list[Path]:
    roots: list[Path] = []

    def gather(root: Path = Path("/"), maps: Path = Path("/proc/self/maps")) -> SystemFacts:
        roots.append(root)
        return HEALTHY

    monkeypatch.setattr(facts, "gather", gather)
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    return roots


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["doctor", "--json", *args])
    out, err = capsys.readouterr()
    assert err == ""
    return code, json.loads(out)


def test_a_cpu_only_torch_is_the_only_problem(
    tmp_path: Path, healthy_machine: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    python = printing(
        tmp_path,
        {
            "python": "3.11.7",
            "torch": "2.5.1+cpu",
            "cuda": None,
            "hip": None,
            "available": False,
            "device_count": 0,
            "arch_list": [],
            "capabilities": [],
            "warnings": [],
        },
    )
    code, doc = run_main(capsys, "--python", python)
    assert healthy_machine == [Path("/")]
    assert code == 1 and doc["exit_code"] == 1
    problems = [c for c in doc["checks"] if c["status"] == "problem"]
    assert doc["problems"] == 1 and len(problems) == 1
    assert problems[0]["area"] == "torch"
    assert problems[0]["found"] == "torch 2.5.1+cpu is a CPU-only build: it never uses a GPU"
    assert problems[0]["fix"] == "pip install torch --index-url https://download.pytorch.org/whl/cu124"
    assert doc["warnings"] == 0
    asked = {"area": "torch", "status": "ok", "found": f"torch 2.5.1+cpu in {python}", "fix": ""}
    assert asked in doc["checks"]
    assert {c["area"] for c in doc["checks"]} == {"driver", "gpus", "cuda", "torch"}


def test_a_healthy_machine_and_cuda_build(
    tmp_path: Path, healthy_machine: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    python = printing(
        tmp_path,
        {
            "python": "3.11.7",
            "torch": "2.5.1+cu124",
            "cuda": "12.4",
            "hip": None,
            "available": True,
            "device_count": 2,
            "arch_list": ["sm_80", "sm_90"],
            "capabilities": [[9, 0], [9, 0]],
            "warnings": [],
        },
    )
    code, doc = run_main(capsys, "--python", python)
    assert code == 0
    assert doc["exit_code"] == 0 and doc["problems"] == 0 and doc["warnings"] == 0
    assert all(c["status"] == "ok" and c["fix"] == "" for c in doc["checks"])
    found = [c["found"] for c in doc["checks"]]
    assert "built with CUDA 12.4; the driver supports up to 12.4" in found
    assert "torch.cuda.is_available() is True: 2 GPUs" in found
    assert "kernels for sm_90 in this build (sm_80 sm_90)" in found
    assert "2 GPUs visible to NVML: NVIDIA H100 80GB HBM3" in found


def test_the_text_report_of_a_healthy_machine(
    tmp_path: Path, healthy_machine: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    python = printing(
        tmp_path,
        {
            "python": "3.11.7",
            "torch": "2.5.1+cu124",
            "cuda": "12.4",
            "hip": None,
            "available": True,
            "device_count": 2,
            "arch_list": ["sm_80", "sm_90"],
            "capabilities": [[9, 0], [9, 0]],
            "warnings": [],
        },
    )
    assert cli.main(["doctor", "--python", python]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    checks, summary = check_lines(out)
    assert summary == "nothing wrong found"
    assert all(ln.startswith("ok       ") for ln in checks)


def test_a_doctor_that_breaks_says_so_in_one_line(
    healthy_machine: list[Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(root: Path = Path("/"), maps: Path = Path("/proc/self/maps")) -> SystemFacts:
        raise RuntimeError("the facts fell over")

    monkeypatch.setattr(facts, "gather", broken)
    assert cli.main(["doctor", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["gputui doctor: could not run: RuntimeError: the facts fell over"]
