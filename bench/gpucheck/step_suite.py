"""The suite's gpu-marked tests on the real GPU; the real agent reply they record joins the fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET

from bench.gpucheck.common import REPO, Result, out_dir, python, work_dir

TESTS = (
    "tests/collect/test_nvml_real.py",
    "tests/agent/test_cuda_real.py",
    "tests/doctor/test_doctor_real.py",
)


def run(r: Result) -> None:
    junit = work_dir() / "junit.xml"
    env_extra = {"GPUTUI_RECORD_FIXTURES": str(work_dir())}

    done = subprocess.run(
        [
            python(),
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=-ra",
            f"--junitxml={junit}",
            *TESTS,
        ],
        cwd=REPO,
        env={**os.environ, **env_extra},
        capture_output=True,
        text=True,
        timeout=90,
    )
    print(done.stdout[-4000:], done.stderr[-2000:])
    try:
        suite = ET.parse(junit).getroot()
        cases = suite.iter("testcase")
        outcome = {}
        for case in cases:
            name = f"{case.get('classname')}.{case.get('name')}"
            kinds = [child.tag for child in case]
            outcome[name] = (
                "failed"
                if {"failure", "error"} & set(kinds)
                else ("skipped" if "skipped" in kinds else "passed")
            )
    except (OSError, ET.ParseError):
        outcome = {}
    r.number("tests", outcome)
    r.check(
        "gpu-marked tests pass",
        done.returncode == 0 and bool(outcome) and all(v == "passed" for v in outcome.values()),
        {k: v for k, v in outcome.items() if v != "passed"} or done.stdout[-300:],
        "all passed, none skipped",
    )
    recorded = work_dir() / "agent_stats_cuda_real.json"
    if recorded.exists():  # into the training step's fixture file: one file, every reply
        path = out_dir() / "agent_replies.json"
        replies = json.loads(path.read_text()) if path.exists() else {}
        replies["stats_test_cuda_real"] = json.loads(recorded.read_text())
        path.write_text(json.dumps(replies, indent=1))
