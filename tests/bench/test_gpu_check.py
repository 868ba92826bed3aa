"""`make gpu-check` without a GPU: every step skipped with the reason, the report written; and the oracle's
reading of nvidia-smi's text, which decides every comparison on the GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpucheck.__main__ import STEPS, run_step
from bench.gpucheck.common import Result
from bench.gpucheck.step_oracle import FIELDS, compare, parse

REPO = Path(__file__).resolve().parents[2]


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)  # a PATH without nvidia-smi, whatever this machine has
    env = {
        "PATH": str(empty),
        "GPU_CHECK_OUT": str(tmp_path / "out"),
        "GPU_CHECK_WORK": str(tmp_path / "work"),
    }
    return subprocess.run(
        [sys.executable, "-m", "bench.gpucheck", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_a_gpu_every_step_is_skipped_with_its_reason(tmp_path: Path) -> None:
    done = _check(tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    assert report["result"] == "skipped"
    assert [s["step"] for s in report["steps"]] == [name for name, _, _ in STEPS]
    for step in report["steps"]:
        assert step["status"] == "skip"
        assert "nvidia-smi" in step["skipped"]
    summary = (out / "summary.md").read_text()
    assert "result: skipped" in summary and summary.count("| skip |") == len(STEPS)
    assert "| env | skip |" in done.stdout  # the one-screen summary is printed too
    assert len([p for p in out.rglob("*") if p.is_file()]) <= 8


def test_a_subset_of_steps_and_an_unknown_one(tmp_path: Path) -> None:
    done = _check(tmp_path, "--steps", "oracle,tui")
    assert done.returncode == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == ["oracle", "tui"]
    bad = _check(tmp_path, "--steps", "oracle,nope")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "gpu-check: unknown step(s): nope"


def test_a_step_that_breaks_is_an_error_and_the_next_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_CHECK_WORK", str(tmp_path))
    env = {"PATH": "/usr/bin:/bin", "GPU_CHECK_WORK": str(tmp_path), "GPU_CHECK_OUT": str(tmp_path / "out")}
    with open(tmp_path / "log", "wb") as log:
        result = run_step("no_such_step", 30, env, log)
    assert result["status"] == "error"
    (failed,) = result["checks"]
    assert failed["name"] == "step ran to its end" and "ModuleNotFoundError" in failed["value"]
    assert b"ModuleNotFoundError" in (tmp_path / "log").read_bytes()


def test_a_result_is_saved_as_it_grows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_CHECK_WORK", str(tmp_path))
    r = Result("oracle")
    r.check("one", True, 1, "1")
    r.number("ms", 0.123456)
    saved = json.loads((tmp_path / "oracle.json").read_text())
    assert saved["checks"] == [{"name": "one", "ok": True, "value": 1, "expect": "1"}]
    assert saved["numbers"] == {"ms": 0.1235}


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [
        ("fan.speed", "[N/A]", None),
        ("fan.speed", "[Not Supported]", None),
        ("pstate", "P0", 0),
        ("pstate", "P8", 8),
        ("persistence_mode", "Enabled", True),
        ("mig.mode.current", "Disabled", False),
        ("mig.mode.current", "[N/A]", None),
        ("clocks_event_reasons.active", "0x0000000000000004", 4),
        ("power.draw.instant", "113.25", 113.25),
        ("name", "NVIDIA H200", "NVIDIA H200"),
    ],
)
def test_nvidia_smi_text_is_read_as_gputui_holds_it(field: str, text: str, value: object) -> None:
    assert parse(field, text) == value


def test_unknown_stays_unknown_and_a_value_moves_within_the_two_readings() -> None:
    assert compare("moves:2", None, (None, None))
    assert not compare("moves:2", None, (0, 0))  # never 0 for "n/a"
    assert not compare("moves:2", 40.0, (None, None))  # never n/a for a value
    assert compare("moves:10", 55.0, (40, 70))
    assert not compare("moves:10", 95.0, (40, 70))
    assert compare("1", 81559.0, (81559.5, 81559.5))
    assert not compare("1", 81559.0, (79649.9, 79649.9))  # MiB read as MB would show here
    assert not compare("moves:30", 700.0, (0.7, 0.7))  # watts read as kilowatts
    assert compare("same", "Default", ("Default", "Default"))
    assert compare("bits", 0x4, (0x4 | 0x1, 0x1))  # a reason nvidia-smi saw, in one of ours
    assert not compare("bits", 0x40, (0x4, 0x4))


def test_every_field_is_compared_by_a_known_rule() -> None:
    rules = {rule.split(":")[0] for _, _, rule in FIELDS}
    assert rules <= {"same", "moves", "bits", "0", "1"}
    assert len({f for f, _, _ in FIELDS}) == len(FIELDS)
