"""The doctor on a shared box, run as root: a module planted in the current directory never runs, and no
string another user controls (a process's environment and command line, what a --python prints) reaches
the terminal with its control characters.

The probe tests ask the real Python of this virtualenv, which has a CPU build of torch: importing it takes
a few seconds, so there are few of them.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputui import cli
from gputui.doctor import report, torch_probe
from tests.doctor import pythons
from tests.doctor.pythons import printing
from tests.doctor.test_cli import check_lines, healthy_machine, keep_signals  # noqa: F401 (fixtures)
from tests.helpers import wait_until

TIMEOUT = 120
PLANTED = ("json", "torch", "warnings", "os", "site", "encodings")
HOSTILE = "0\x1b]52;c;cHduZWQ=\x07"  # OSC 52: writes the clipboard of the terminal it reaches
CONTROL = ("\x1b", "\x07", "\x9b")


def plant(directory: Path) -> Path:
    """Modules named like the ones the probe (or Python's start-up) imports, each of which writes a marker
    file when it runs; returns the marker's path."""
    marker = directory / "PLANTED-MODULE-RAN"
    for name in PLANTED:
        (directory / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")
    return marker


def torch_version() -> str | None:
    """The torch of this environment, if any (the planted-module tests hold without one too)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_probe_never_imports_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    found = torch_probe.probe(sys.executable)
    assert not marker.exists(), marker.read_text()
    if torch_version() is not None:
        assert found.error is None, found.error
        assert found.torch == torch_version()  # the real torch, not ./torch.py


def test_gputui_doctor_in_a_directory_with_planted_modules(tmp_path: Path) -> None:
    """The console script as a user runs it (it does not put the current directory on its own path)."""
    script = Path(sys.executable).with_name("gputui")
    if not script.exists():
        pytest.skip("gputui is not installed as a console script here")
    marker = plant(tmp_path)
    done = subprocess.run(
        [str(script), "doctor", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert not marker.exists(), marker.read_text()
    assert "Traceback" not in done.stderr, done.stderr
    found = [c["found"] for c in json.loads(done.stdout)["checks"] if c["area"] == "torch"]
    if torch_version() is not None:
        assert f"torch {torch_version()} in {sys.executable}" in found, found


def test_the_probe_still_honours_pythonpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTHONPATH is the user's own choice (some find torch that way): it stays on the probe's path."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        "__version__ = '9.9.9+from-pythonpath'\nclass version:\n    cuda = None\n    hip = None\n"
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    marker = plant(elsewhere)
    monkeypatch.chdir(elsewhere)
    found = torch_probe.probe(sys.executable, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert found.torch == "9.9.9+from-pythonpath", found
    assert not marker.exists()


def test_the_probe_leaves_no_directory_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    python = printing(tmp_path, {"python": "3.11.7"})
    before = set(tmp_path.iterdir())
    torch_probe.probe(python, env={"PATH": "/usr/bin:/bin"})
    assert set(tmp_path.iterdir()) == before


# -- what other users control never reaches the terminal raw ----------------------------------------------


@pytest.fixture
def hostile_process() -> Iterator[psutil.Process]:
    """A real process whose environment and command line carry terminal escapes (its owner chose them)."""
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "\x1b]0;owned\x07\x1b[2J"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env={
            "PATH": "/usr/bin:/bin",
            "CUDA_VISIBLE_DEVICES": HOSTILE,
            "CUDA_DEVICE_ORDER": "\x1b[31mPCI_BUS_ID",
        },
    )
    try:
        proc = psutil.Process(p.pid)
        assert wait_until(lambda: any("owned" in a for a in proc.cmdline()), 10.0)
        yield proc
    finally:
        p.kill()
        p.wait(timeout=10)


def hostile_python(directory: Path) -> str:
    """A Python (another user's virtualenv, say) whose torch says things with escapes in them."""
    return printing(
        directory,
        {
            "python": "3.11\x1b[8m",
            "torch": "2.5.1+cu124\x1b]52;c;eA==\x07",
            "cuda": "12.4\x9b2J",
            "hip": None,
            "available": False,
            "device_count": 0,
            "arch_list": ["sm_90\x1b[0m"],
            "capabilities": [],
            "cuda_error": "RuntimeError: \x1b[2Jcleared",
            "warnings": ["\x07bell"],
        },
    )


def test_doctor_pid_text_report_has_no_control_characters(
    tmp_path: Path,
    hostile_process: psutil.Process,
    healthy_machine: list[Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["doctor", "--pid", str(hostile_process.pid), "--python", hostile_python(tmp_path)])
    out, err = capsys.readouterr()
    assert code == report.EXIT_PROBLEM and err == ""
    for ch in CONTROL:
        assert ch not in out, repr(out)
    checks, _ = check_lines(out)
    visible = [ln for ln in checks if f"pid {hostile_process.pid}: its CUDA_VISIBLE_DEVICES" in ln]
    assert len(visible) == 1 and "0?]52;c;cHduZWQ=?" in visible[0], checks
    assert any("torch 2.5.1+cu124?]52;c;eA==?" in ln for ln in checks), checks
    assert any("?[2Jcleared" in ln for ln in checks), checks


def test_doctor_pid_json_report_has_no_control_characters(
    tmp_path: Path,
    hostile_process: psutil.Process,
    healthy_machine: list[Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli.main(["doctor", "--json", "--pid", str(hostile_process.pid), "--python", hostile_python(tmp_path)])
    out, _ = capsys.readouterr()
    doc = json.loads(out)
    for check in doc["checks"]:
        for value in check.values():
            assert isinstance(value, str) and value.isprintable(), check


def test_a_check_is_printable_whatever_it_is_given() -> None:
    c = report.problem("process", "pid 1 holds \x1b[2J/dev/nvidia0\u202e", "kill \x07it")
    assert c.found == "pid 1 holds ?[2J/dev/nvidia0?" and c.fix == "kill ?it"
    assert report.line(c).isprintable()


def test_a_relative_python_is_found_from_where_the_doctor_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "venv").mkdir()
    printing(tmp_path / "venv", {"python": "3.11.7", "torch": "2.5.1+cu124", "cuda": "12.4"})
    monkeypatch.chdir(tmp_path)
    found = torch_probe.probe("venv/python", env={"PATH": "/usr/bin:/bin"})
    assert found.error is None and found.torch == "2.5.1+cu124", found


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            {"torch": "2.5", "cuda": "12.4", "capabilities": [[1e308 * 10, 0], ["9", 0], [9, True]]},
            id="capabilities-not-small-ints",
        ),
        pytest.param(
            {"torch": "2.5", "cuda": "12.4", "device_count": True, "available": "yes"}, id="wrong-types"
        ),
        pytest.param(
            {"torch": "x" * 100_000, "warnings": ["w" * 100_000] * 1000, "arch_list": ["sm_90"] * 10_000},
            id="huge",
        ),
    ],
)
def test_whatever_the_probe_prints_is_bounded_and_never_crashes(
    tmp_path: Path, doc: dict[str, object]
) -> None:
    found = torch_probe.probe(printing(tmp_path, {"python": "3.11.7", **doc}), env={"PATH": "/usr/bin:/bin"})
    assert found.error is None
    assert all(0 <= n < 1000 for cap in found.capabilities for n in cap)
    assert found.device_count is None or type(found.device_count) is int
    assert len(found.torch or "") <= torch_probe.MAX_TEXT and len(found.warnings) <= torch_probe.MAX_ITEMS
    assert len(found.arch_list) <= torch_probe.MAX_ITEMS


def test_a_probe_answer_nested_too_deep_is_a_probe_that_failed(tmp_path: Path) -> None:
    python = pythons.write(
        tmp_path,
        "python",
        "printf '%s' '{\"a\":'\ni=0; while [ $i -lt 200000 ]; do printf '['; i=$((i+1)); done; echo",
    )
    found = torch_probe.probe(python, env={"PATH": "/usr/bin:/bin"})
    assert found.error is not None and "could not run the probe" in found.error
