"""`gputui doctor --pid`: whether gputui could attach its agent to the process, said but never done. The
verdicts from made-up plans and refusals (gputui.actions.attach.check replaced); then real children: a
Python loop (it can), a stopped one (it cannot), one whose agent answers (nothing new is said), and the
command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.actions import attach as attaching
from gputui.actions.attach import Plan, Refusal
from gputui.doctor import process
from gputui.doctor.facts import SystemFacts
from gputui.doctor.report import OK, WARNING, Check
from tests.helpers import ready_loop, wait_until

PANEL = "allocator panel:"
TIMEOUT = 120


def plan(pid: int, **kw: object) -> Plan:
    base: dict[str, object] = dict(
        pid=pid,
        uid=1000,
        user="alice",
        exe="/usr/bin/python3.11",
        python=(3, 11),
        mechanism="gdb",
        tool="/usr/bin/gdb",
    )
    base.update(kw)
    return Plan(**base)  # type: ignore[arg-type]


def panel_lines(checks: list[Check]) -> list[Check]:
    return [c for c in checks if PANEL in c.found]


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    path = tmp_path / "dev"
    path.mkdir()
    return path


@pytest.fixture
def loop() -> Iterator[subprocess.Popen[str]]:
    with ready_loop([sys.executable]) as proc:
        yield proc


def examine(pid: int, devices: Path, **kw: object) -> tuple[process.ProcessFacts, list[Check]]:
    kw.setdefault("agent", lambda _pid: None)
    p = process.gather(pid, SystemFacts(), devices, **kw)  # type: ignore[arg-type]
    return p, process.checks(p, SystemFacts())


# -- the verdicts, from a replaced check -------------------------------------------------------------


def test_it_can_be_attached(
    loop: subprocess.Popen[str], devices: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    made = plan(loop.pid)

    def fake(pid: int) -> Plan:
        asked.append(pid)
        return made

    monkeypatch.setattr(attaching, "check", fake)
    p, checks = examine(loop.pid, devices)
    assert asked == [loop.pid] and p.attach == made
    assert panel_lines(checks) == [
        Check(
            "process",
            OK,
            f"pid {loop.pid}: allocator panel: gputui can attach its agent to this process "
            f"(`gputui attach {loop.pid}`, or `a` in the monitor): {made.describe()}",
        )
    ]
    assert checks[-1] == panel_lines(checks)[0]  # after what the process does with the GPU


def test_it_cannot_be_attached(
    loop: subprocess.Popen[str], devices: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = f"pid {loop.pid} belongs to bob: only bob or root can attach to it (sudo gputui attach)"
    monkeypatch.setattr(attaching, "check", lambda pid: Refusal(pid, reason))
    _, checks = examine(loop.pid, devices)
    (line,) = panel_lines(checks)
    assert line.status == WARNING
    assert line.found == (
        f"pid {loop.pid}: allocator panel: gputui cannot attach its agent to this process: {reason}"
    )
    assert "gputui run --" in line.fix  # the way that needs no attaching


def test_a_refusal_from_another_users_text_is_made_printable(
    loop: subprocess.Popen[str], devices: Path
) -> None:
    _, checks = examine(
        loop.pid, devices, attachable=lambda pid: Refusal(pid, "pid 1 is not a Python (/tmp/\x1b[2Jevil\n)")
    )
    (line,) = panel_lines(checks)
    assert "\x1b" not in line.found and "\n" not in line.found


def test_an_agent_socket_that_does_not_answer(loop: subprocess.Popen[str], devices: Path) -> None:
    already = plan(loop.pid, mechanism="agent", tool="/run/user/1000/gputui/agent.sock", already=True)
    _, checks = examine(loop.pid, devices, attachable=lambda _pid: already)
    (line,) = panel_lines(checks)
    assert line.status == WARNING
    assert (
        line.found == f"pid {loop.pid}: allocator panel: it has gputui's agent, but the agent did not answer"
    )
    assert line.fix


def test_an_agent_that_answers_is_not_asked_about(loop: subprocess.Popen[str], devices: Path) -> None:
    from tests.doctor.test_process import agent_reply, report

    def never(_pid: int) -> Plan:
        raise AssertionError("check() was asked although the agent answers")

    p, checks = examine(loop.pid, devices, agent=lambda pid: report(pid, agent_reply()), attachable=never)
    assert p.attach is None
    assert panel_lines(checks) == []


def test_made_up_facts_without_an_answer_say_nothing() -> None:
    facts = process.ProcessFacts(pid=4242, command="python", devices=(), environ={}, memory={})
    assert panel_lines(process.checks(facts, SystemFacts())) == []


# -- real processes ------------------------------------------------------------------------------------


def test_a_real_python_can_be_attached_and_the_doctor_does_not(
    loop: subprocess.Popen[str], devices: Path
) -> None:
    expected = attaching.check(loop.pid)
    _, checks = examine(loop.pid, devices)  # the real check
    (line,) = panel_lines(checks)
    if isinstance(expected, Refusal):  # a machine that forbids attaching: the reason is said
        assert line.status == WARNING and expected.reason in line.found
        return
    assert line.status == OK
    assert line.found.endswith(f"(`gputui attach {loop.pid}`, or `a` in the monitor): {expected.describe()}")
    # Asked, not done: no agent, no tracer, the loop still runs.
    after = attaching.check(loop.pid)
    assert isinstance(after, Plan) and not after.already
    status = Path(f"/proc/{loop.pid}/status").read_text()
    assert "\nTracerPid:\t0\n" in status
    assert loop.poll() is None


def test_a_real_stopped_python_cannot_be_attached(loop: subprocess.Popen[str], devices: Path) -> None:
    os.kill(loop.pid, signal.SIGSTOP)
    assert wait_until(lambda: "\nState:\tT" in Path(f"/proc/{loop.pid}/status").read_text(), 10)
    _, checks = examine(loop.pid, devices)
    (line,) = panel_lines(checks)
    assert line.status == WARNING
    assert f"pid {loop.pid} is stopped (state T): resume it first (kill -CONT {loop.pid})" in line.found


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt install gdb)")
def test_once_attached_nothing_new_is_said(loop: subprocess.Popen[str], devices: Path) -> None:
    if isinstance(attaching.check(loop.pid), Refusal):
        pytest.skip("this machine does not let gputui attach")
    outcome = attaching.attach(loop.pid)
    assert outcome.ok, outcome.message
    p, checks = examine(loop.pid, devices, agent=None)  # the real agent, asked as the doctor asks it
    assert p.attach is None
    assert panel_lines(checks) == []


def test_the_command_line_says_it(loop: subprocess.Popen[str]) -> None:
    expected = attaching.check(loop.pid)
    result = subprocess.run(
        [sys.executable, "-m", "gputui", "doctor", "--pid", str(loop.pid), "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    (line,) = [c for c in doc["checks"] if PANEL in c["found"]]
    assert line["area"] == "process"
    if isinstance(expected, Plan):
        assert line["status"] == "ok" and line["fix"] == ""
        assert f"gputui can attach its agent to this process (`gputui attach {loop.pid}`" in line["found"]
    else:
        assert line["status"] == "warning" and line["fix"]
    after = attaching.check(loop.pid)
    assert not (isinstance(after, Plan) and after.already), "the doctor attached by itself"


def test_a_program_that_is_not_python_gets_no_panel_line(devices: Path) -> None:
    """A CUDA binary that is not Python has no allocator panel to want: nothing to act on, nothing said."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        p, checks = examine(sleeper.pid, devices)
        assert isinstance(p.attach, Refusal) and not p.attach.applies
        assert panel_lines(checks) == []
    finally:
        sleeper.kill()
        sleeper.wait()
