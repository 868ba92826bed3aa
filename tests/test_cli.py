"""The command line, run as `python -m gputui` in a subprocess (no dependence on PATH)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version as dist_version
from pathlib import Path

import psutil
import pytest
from jsonschema import Draft202012Validator

import gputui
from gputui import cells
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource
from gputui.model import Snapshot
from gputui.output.jsonout import dumps, schema, snapshot_from_dict, snapshot_to_dict
from gputui.output.oneshot import render
from tests.processes import cmdline

TIMEOUT = 60


def gputui_run(
    *args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout


# -- --json --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_json() -> tuple[subprocess.CompletedProcess[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", "--demo", "--json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def test_demo_json_validates_against_the_schema(
    demo_json: tuple[subprocess.CompletedProcess[str], int],
) -> None:
    result, _ = demo_json
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    data = json.loads(result.stdout)
    Draft202012Validator.check_schema(schema())
    errors = sorted(Draft202012Validator(schema()).iter_errors(data), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
    assert data["schema_version"] == 1 and data["source"] == "demo"


def test_demo_json_has_every_gpu_and_the_trainers(
    demo_json: tuple[subprocess.CompletedProcess[str], int],
) -> None:
    result, gputui_pid = demo_json
    data = json.loads(result.stdout)
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2, 3]
    assert all(g["name"] == "NVIDIA H100 80GB HBM3" for g in data["gpus"])
    trainers = [
        p for p in data["processes"] if p["kinds"] and p["command"] and "--role trainer" in p["command"]
    ]
    assert sorted(p["gpu"] for p in trainers) == [0, 1, 2, 3]
    for p in trainers:
        assert p["visible"] is True
        assert p["ppid"] == gputui_pid  # children of that gputui
        assert f"--gpu {p['gpu']}" in p["command"]
        assert p["user"] and p["rss"] and p["create_time"]
        assert p["cpu_percent"] is None  # one reading: a rate needs two (tests/test_once_reading.py)
    assert len({p["pid"] for p in trainers}) == 4
    assert "processes[].cpu_percent" in data["one_reading"]["unmeasured"]
    invisible = [p for p in data["processes"] if not p["visible"]]
    assert [p["gpu"] for p in invisible] == [3]
    assert data["unaccounted_memory"]["0"] == (1 << 30) + (1 << 29)
    # Gone after gputui exited (a PID now in use must belong to a later process).
    for p in trainers:
        with contextlib.suppress(psutil.NoSuchProcess):
            assert abs(psutil.Process(p["pid"]).create_time() - p["create_time"]) > 0.01


def test_snapshot_round_trips_exactly() -> None:
    with Sampler(DemoSource(gpus=4, start_at=120.0)) as sampler:
        sampler.tick()
        snap = sampler.tick()
    as_dict = snapshot_to_dict(snap)
    assert snapshot_from_dict(as_dict) == snap
    assert snapshot_from_dict(json.loads(dumps(snap))) == snap
    assert not list(Draft202012Validator(schema()).iter_errors(json.loads(dumps(snap, indent=2))))


def test_snapshot_from_dict_refuses_other_records() -> None:
    with pytest.raises(ValueError, match="schema_version"):
        snapshot_from_dict({"schema_version": 2})
    with pytest.raises(ValueError):
        snapshot_from_dict({"schema_version": 1})


# -- --once --------------------------------------------------------------------------------------------


def test_demo_once_shows_gpus_processes_and_unaccounted_memory() -> None:
    result = gputui_run("--demo", "--once")
    assert result.returncode == 0, result.stderr
    _no_traceback(result)
    lines = result.stdout.splitlines()
    assert "DEMO" in lines[0] and lines[0].startswith(f"gputui {gputui.__version__}")
    gpu_at = [
        next(n for n, line in enumerate(lines) if re.match(rf"{i}\s+NVIDIA H100", line)) for i in range(4)
    ]
    assert gpu_at == sorted(gpu_at)
    sections = [lines[a:b] for a, b in zip(gpu_at, [*gpu_at[1:], len(lines)], strict=True)]
    pids = []
    for gpu, section in enumerate(sections):
        procs = [m for line in section if (m := re.match(r" {4} *(\d+) ", line))]
        pids += [int(m.group(1)) for m in procs]
        trainer = [line for line in section if f"--role trainer --gpu {gpu}" in line and " C " in line]
        assert len(trainer) == 1, section
        workers = [line for line in section if f"--role trainer --gpu {gpu}" in line and " worker " in line]
        assert len(workers) == 3, section  # the data-loader workers hold the GPU's device file
    # A trainer and 3 workers per GPU, the ghost on the last, the orphan and the defunct child on GPU 0.
    assert len(pids) == len(set(pids)) == 4 * 4 + 1 + 2
    assert any("not visible here" in line for line in sections[3])
    unaccounted = [line for line in lines if "unaccounted" in line]
    assert len(unaccounted) == 1 and unaccounted[0] in sections[0]
    assert "1.5" in unaccounted[0]


def test_render_shows_every_pid_of_a_snapshot() -> None:
    with Sampler(DemoSource(gpus=3, start_at=120.0)) as sampler:
        snap = sampler.tick()
    text = render(snap)
    for p in snap.processes:
        assert re.search(rf"^ +{p.pid} ", text, re.M), p.pid
    assert "DEMO" in text.splitlines()[0]
    narrow = [line for line in render(snap, 40).splitlines() if re.match(r" +\d+ ", line)]
    assert len(narrow) == len(snap.processes) and all(len(line) <= 40 for line in narrow)


# -- no driver -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_nvml() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"], capture_output=True, timeout=TIMEOUT
    )
    if probe.returncode == 0:
        pytest.skip("NVML works on this machine")


@pytest.mark.parametrize("args", [["--once"], ["--json"], []], ids=["once", "json", "live"])
def test_without_a_driver_one_line_and_exit_2(no_nvml: None, args: list[str]) -> None:
    result = gputui_run(*args, timeout=30)
    assert result.returncode == 2
    _no_traceback(result)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("gputui: ")
    assert "libnvidia-ml" in line or "NVIDIA driver" in line
    assert "--demo" in line and "gputui doctor" in line


# -- bad flags -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--interval", "0"],
        ["--interval", "abc"],
        ["--interval", "-1"],
        ["--interval", "nan"],
        ["--interval", "1e999"],
        ["--demo", "--demo-gpus", "17"],
        ["--demo", "--demo-gpus", "0"],
        ["--demo", "--demo-gpus", "two"],
        ["--seed", "x"],
        ["--devices-dir", "/nonexistent"],
        ["--once", "--json"],
        ["--demo", "--once", "--json"],
        ["--no-such-flag"],
        ["stray"],
    ],
)
def test_bad_flags_one_line_and_exit_2(args: list[str]) -> None:
    result = gputui_run(*args)
    assert result.returncode == 2
    _no_traceback(result)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gputui: error: ")


def test_version() -> None:
    result = gputui_run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gputui {gputui.__version__}"
    assert gputui.__version__ == dist_version("gputui")


def test_help() -> None:
    result = gputui_run("--help")
    assert result.returncode == 0
    for flag in ("--demo", "--demo-gpus", "--interval", "--once", "--json", "--devices-dir", "--seed"):
        assert flag in result.stdout


# -- stdout closed early -------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--demo", "--once"], ["--demo", "--json"]], ids=["once", "json"])
@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_reader_gone_before_the_output(args: list[str], buffered: bool, tmp_path: Path) -> None:
    """`gputui --once | head`: the reader may be gone before gputui writes. A quiet exit 0, whether stdout
    is block-buffered (the usual case for a pipe) or not (PYTHONUNBUFFERED)."""
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gputui", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # before gputui has written anything: it needs two ticks first
        try:
            returncode = proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        err.seek(0)
        stderr = err.read()
    assert "Traceback" not in stderr
    assert "Exception ignored" not in stderr, stderr
    assert returncode == 0


# -- the import wall -----------------------------------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_headless_modules_do_not_import_textual() -> None:
    result = _python(
        "import gputui.collect.sampler, gputui.collect.sources.demo, gputui.collect.sources.nvml\n"
        "import gputui.collect.procs.join\n"
        "import gputui.cli, gputui.output.oneshot, gputui.output.jsonout, gputui.model, sys\n"
        "import gputui.export.exporter, gputui.export.fleet, gputui.export.metrics, gputui.export.promql\n"
        "assert 'textual' not in sys.modules, sorted(m for m in sys.modules if m.startswith('textual'))\n"
    )
    assert result.returncode == 0, result.stderr


def test_the_parser_does_not_import_the_fleet_reader() -> None:
    """Every command builds the whole parser: fleet's http.client and ssl would slow each by 30 ms."""
    result = _python(
        "import sys\n"
        "from gputui import cli\n"
        "cli.build_parser()\n"
        "assert 'gputui.export.fleet' not in sys.modules\n"
        "import gputui.export.fleet as fleet\n"
        "assert (cli.FLEET_WINDOW_S, cli.FLEET_SORTS) == (fleet.DEFAULT_WINDOW_S, fleet.SORTS)\n"
    )
    assert result.returncode == 0, result.stderr


def test_demo_json_does_not_import_textual() -> None:
    result = _python(
        "import sys\n"
        "from gputui.cli import main\n"
        "rc = main(['--demo', '--json'])\n"
        "assert rc == 0, rc\n"
        "assert 'textual' not in sys.modules, sorted(m for m in sys.modules if m.startswith('textual'))\n"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["source"] == "demo"


# -- where the output goes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["--demo", "--json"], ["--demo", "--once"], ["doctor", "--json"]], ids=["json", "once", "doctor"]
)
def test_output_onto_a_full_disk_is_one_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "gputui", *args],
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
        )
    assert proc.returncode == 1
    prog = "gputui doctor" if args[0] == "doctor" else "gputui"
    assert proc.stderr.splitlines() == [f"{prog}: cannot write the output: No space left on device"]


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_stdout_that_is_not_utf8(encoding: str) -> None:
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    for args in (["--demo", "--once"], ["--demo", "--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "gputui", *args], capture_output=True, timeout=TIMEOUT, env=env
        )
        assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
        out = proc.stdout.decode(encoding)  # what it wrote is in the encoding it was given
        if "--json" in args:
            assert json.loads(out)["gpus"]
        else:
            assert "GPU" in out and "UTIL" in out


def _ours(proc: psutil.Process, token: str) -> bool:
    """Started with `token` in its environment (inherited from the gputui this test ran)."""
    try:
        return proc.environ().get("GPUTUI_TEST_TOKEN") == token
    except psutil.Error:
        return False


def test_without_a_terminal_the_monitor_says_what_to_use() -> None:
    # A token in the environment tells the demo this run would have started from those that other tests
    # (other xdist workers) start at the same time.
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    before = set(psutil.pids())
    result = gputui_run("--demo", env={**os.environ, "GPUTUI_TEST_TOKEN": token})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "gputui: standard input and output are not a terminal, and the monitor is full-screen; "
        "`gputui --once` prints a table, `gputui --json` a snapshot"
    ]
    started = [psutil.Process(pid) for pid in set(psutil.pids()) - before if psutil.pid_exists(pid)]
    assert not any("demo_train" in " ".join(cmdline(p)) and _ours(p, token) for p in started)


@pytest.mark.terminal
def test_with_term_dumb_the_monitor_says_what_to_use() -> None:
    from tests.ui.pty_run import PtyRun

    run = PtyRun([sys.executable, "-m", "gputui", "--demo"], env={"TERM": "dumb"})
    try:
        assert run.wait_exit(TIMEOUT) is not None
        assert run.proc is not None and run.proc.returncode == 2
        text = run.all_output().decode()
    finally:
        run.close()
    assert "TERM is dumb" in text and "gputui --once" in text
    assert "\x1b[" not in text  # the screen was never switched


def test_replay_without_a_terminal_is_one_line(tmp_path: Path) -> None:
    with Sampler(DemoSource(gpus=1, workers=0)) as sampler:
        (tmp_path / "rec.jsonl").write_text(dumps(sampler.tick()) + "\n")
    result = gputui_run("replay", str(tmp_path / "rec.jsonl"))
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("gputui replay: standard input and output are not a terminal")


# -- --once on a terminal: cells, not characters ---------------------------------------------------------

CJK_COMMAND = "python /data/訓練/トレーニング.py --name café\u0301 --tag データセット日本語" * 2


def _demo_snapshot(gpus: int = 2) -> Snapshot:
    with Sampler(DemoSource(gpus=gpus, start_at=120.0)) as sampler:
        sampler.tick()
        return sampler.tick()


@pytest.mark.parametrize("cols", [40, 60, 79, 80, 100, 120, 200])
def test_once_fits_any_terminal_width_in_cells_with_wide_characters(cols: int) -> None:
    snap = _demo_snapshot()
    rows = list(snap.processes)
    rows[0] = dataclasses.replace(rows[0], command=CJK_COMMAND, user="学生ユーザー名")
    gpus = [
        dataclasses.replace(snap.gpus[0], name="NVIDIA H100 80GB HBM3 ☃☃", throttle_reasons=("hw_slowdown",))
    ]
    snap = dataclasses.replace(snap, processes=tuple(rows), gpus=(*gpus, *snap.gpus[1:]))
    text = render(snap, cols)
    for line in text.splitlines():
        assert cells.width(line) <= cols, (cols, line)
    pid_lines = [line for line in text.splitlines() if re.match(r" +\d+ ", line)]
    assert len(pid_lines) == len(snap.processes)  # every process still has its line
    if cols >= 80:  # COMMAND keeps room on an 80-column terminal, and the start of the wide command shows
        assert "python /data/訓練" in text
        assert all(cells.width(line) == cols for line in pid_lines if "訓練" in line)


def test_once_shows_an_unknown_cpu_as_na_and_a_measured_one_as_a_number() -> None:
    snap = _demo_snapshot(gpus=1)
    first, second, *rest = snap.processes
    rows = (dataclasses.replace(first, cpu_percent=None), dataclasses.replace(second, cpu_percent=0.0), *rest)
    text = render(dataclasses.replace(snap, processes=rows))
    header = next(line for line in text.splitlines() if "CPU%" in line)
    column = slice(header.index("CPU%") - 1, header.index("CPU%") + 4)
    by_pid = {int(line.split()[0]): line for line in text.splitlines() if re.match(r" +\d+ ", line)}
    assert by_pid[first.pid][column].strip() == "n/a"
    assert by_pid[second.pid][column].strip() == "0%"


@pytest.mark.terminal
def test_gputui_once_on_an_80_column_terminal_fits_it() -> None:
    from tests.ui.pty_run import PtyRun

    run = PtyRun([sys.executable, "-m", "gputui", "--demo", "--once"], cols=80, rows=24)
    try:
        assert run.wait_exit(TIMEOUT) is not None
        assert run.proc is not None and run.proc.returncode == 0
        text = run.all_output().decode()
    finally:
        run.close()
    lines = [line for line in text.replace("\r", "").splitlines() if line]
    assert any("demo_train.py" in line for line in lines)
    assert max(cells.width(line) for line in lines) <= 80
