"""gputui as a user gets it: `python -m build` makes the sdist, then the wheel from that sdist (so a file
the sdist lacks breaks the build here, not on a packager's machine), and the wheel goes into a fresh venv
with its dependencies from the package index as pip is configured. The commands run from that venv's bin,
in an empty directory, so nothing of this checkout is on their path."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import tarfile
import time
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

import gputui

REPO = Path(__file__).resolve().parents[1]
PIP_TIMEOUT_S = 600  # dependencies from the index on a loaded 2-core machine
COMMAND_TIMEOUT_S = 60
DOCTOR_CODES = {0, 1, 2}  # nothing wrong, a problem found, the doctor could not run (README)
_ANNOUNCE = re.compile(r"http://[^\s:]+:(\d+)/metrics")


@dataclass(frozen=True)
class Installed:
    sdist: Path
    wheel: Path
    build_log: str
    bin: Path
    workdir: Path  # empty: the commands' current directory


def _env() -> dict[str, str]:
    """The user's environment less what would point Python at this checkout or at the test's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(args: list[str | Path], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _checked(args: list[str | Path], cwd: Path) -> str:
    result = _run(args, cwd, PIP_TIMEOUT_S)
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout + result.stderr


def _new_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    started = time.monotonic()
    tools = _new_venv(root / "build-venv")
    _checked([tools / "python", "-m", "pip", "install", "-q", "build"], root)
    dist = root / "dist"
    log = _checked([tools / "python", "-m", "build", "--outdir", dist, REPO], root)
    (sdist,) = dist.glob("gputui-*.tar.gz")
    (wheel,) = dist.glob("gputui-*.whl")
    built = time.monotonic()
    user = _new_venv(root / "venv")
    _checked([user / "python", "-m", "pip", "install", "-q", f"{wheel}[prometheus]"], root)
    workdir = root / "cwd"
    workdir.mkdir()
    print(
        f"\nbuilt sdist and wheel in {built - started:.1f} s, installed in {time.monotonic() - built:.1f} s"
    )
    return Installed(sdist, wheel, log, user, workdir)


def _gputui(installed: Installed, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([installed.bin / "gputui", *args], installed.workdir, COMMAND_TIMEOUT_S)


# -- what was built --------------------------------------------------------------------------------------


def test_the_build_draws_no_deprecation_warning(installed: Installed) -> None:
    # setuptools turns its deprecations into errors after a date: the license format was one of them.
    assert not re.search(r"deprecat", installed.build_log, re.IGNORECASE), installed.build_log[-5000:]


def test_the_sdist_holds_what_a_packager_needs(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as tar:
        top = f"gputui-{gputui.__version__}/"
        names = {n.removeprefix(top) for n in tar.getnames()}
    for needed in (
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "SECURITY.md",
        "pyproject.toml",
        "gputui/py.typed",
    ):
        assert needed in names, needed
    assert "tests/test_install.py" in names and "tests/ui/__snapshots__/test_snapshots/test_help.svg" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith((".venv", ".git/"))]


def test_the_wheel_carries_license_version_and_metadata(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        info = f"gputui-{gputui.__version__}.dist-info/"
        metadata = whl.read(info + "METADATA").decode()
    assert info + "licenses/LICENSE" in names
    assert {"gputui/py.typed", "gputui/schema/snapshot-v1.json", "gputui/ui/gputui.tcss"} <= names
    assert not [n for n in names if n.startswith("tests/")]
    fields = [line.split(": ", 1) for line in metadata.split("\n\n", 1)[0].splitlines() if ": " in line]
    assert ["Version", gputui.__version__] in fields
    assert ["License-Expression", "MIT"] in fields
    assert ["Classifier", "Operating System :: POSIX :: Linux"] in fields
    assert ["Project-URL", "Changelog, https://github.com/gputui/gputui/blob/main/CHANGELOG.md"] in fields
    requires = {value.split(";")[0].strip() for key, value in fields if key == "Requires-Dist"}
    assert {"rich>=14.2.0", "nvidia-ml-py>=12.570.86", "argcomplete>=3.5.2"} <= requires, requires


# -- what the user runs --------------------------------------------------------------------------------------


def test_version_is_the_packages(installed: Installed) -> None:
    result = _gputui(installed, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gputui {gputui.__version__}"


def test_json_demo_is_a_snapshot_with_gpus(installed: Installed) -> None:
    result = _gputui(installed, "--json", "--demo")
    assert result.returncode == 0, result.stderr
    snapshot = json.loads(result.stdout)
    assert snapshot["gpus"] and all("index" in gpu for gpu in snapshot["gpus"])


def test_doctor_json_exits_with_its_own_codes(installed: Installed) -> None:
    # Here without a GPU it finds problems (1); on a GPU machine it may find none (0).
    result = _gputui(installed, "doctor", "--json")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in DOCTOR_CODES, (result.returncode, result.stderr)
    report = json.loads(result.stdout)
    assert report["exit_code"] == result.returncode
    assert report["checks"] and {"area", "status", "found", "fix"} <= set(report["checks"][0])


def _line_within(stream: IO[bytes], seconds: float) -> str:
    """The first line written to `stream`, or what came before `seconds` ran out or the writer ended."""
    fd, got, deadline = stream.fileno(), b"", time.monotonic() + seconds
    while b"\n" not in got and (left := deadline - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        got += chunk
    return got.decode(errors="replace")


@pytest.fixture
def exporter(installed: Installed) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    proc = subprocess.Popen(
        [str(installed.bin / "gputui"), "export", "--demo", "--port", "0"],
        cwd=installed.workdir,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = _line_within(proc.stderr, COMMAND_TIMEOUT_S)  # it announces its URL once it listens
        found = _ANNOUNCE.search(line)
        assert found, (line, proc.poll())
        yield proc, int(found.group(1))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=COMMAND_TIMEOUT_S)


def test_export_serves_dcgm_metrics_and_stops_cleanly(exporter: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = exporter
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=COMMAND_TIMEOUT_S) as answer:
        body = answer.read().decode()
    assert re.search(r"^DCGM_FI_DEV_GPU_UTIL\{.*gpu=\"0\"", body, re.MULTILINE), body[:2000]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
    stderr = err.decode(errors="replace")
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr


def test_the_installed_gputui_is_the_wheels(installed: Installed) -> None:
    # Not this checkout's editable copy: what the commands above ran is what a user gets.
    where = _run(
        [installed.bin / "python", "-c", "import gputui; print(gputui.__file__)"], installed.workdir, 30
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.bin.parent / "lib"), where.stdout
