"""The process the user chose is the one attached to: its start time, read as it was described (before the
question), travels to attach(), which checks it just before the debugger starts and again once it has
returned. A pid that another process has taken since is refused in one line, and no debugger runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.actions.attach import Outcome, Plan, attach, check
from gputui.actions.attach import run as attach_run
from gputui.collect.agents.client import AgentPoller
from tests.helpers import ready_loop


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with ready_loop([sys.executable, "-I"], cwd=tmp_path) as proc:
        plan = check(proc.pid)
        if not isinstance(plan, Plan):
            pytest.skip(f"this machine does not let gputui attach: {plan.reason}")
        yield proc


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The start times the pid will have, one a reading (the last one stays): the test decides when its
    process is replaced."""
    times: list[float | None] = []
    real = attach_run.start_time

    def fake(pid: int) -> float | None:
        if not times:
            return real(pid)
        return times.pop(0) if len(times) > 1 else times[0]

    monkeypatch.setattr(attach_run, "start_time", fake)
    return times


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The debugger (or remote_exec) runs, recorded; each one 'succeeds' without touching the process."""
    ran: list[str] = []

    def fake(plan: Plan, boot: Path, timeout: float) -> Outcome:
        ran.append(plan.mechanism)
        return Outcome(plan.pid, True, f"attached to pid {plan.pid} with {plan.mechanism}", seconds=0.01)

    monkeypatch.setattr(attach_run, "run_debugger", fake)
    monkeypatch.setattr(attach_run, "run_remote_exec", fake)
    return ran


def test_replaced_before_the_debugger_starts(
    loop: subprocess.Popen[str], started: list[float | None], runs: list[str]
) -> None:
    chosen = attach_run.start_time(loop.pid)
    assert chosen is not None
    started[:] = [chosen, chosen + 100.0]  # the first check passes; just before the debugger, another one
    outcome = attach(loop.pid, create_time=chosen)
    assert not outcome.ok and runs == []
    assert (
        outcome.message
        == f"pid {loop.pid} is another process now (the one you chose has ended): nothing was attached"
    )


def test_ended_before_the_debugger_starts(
    loop: subprocess.Popen[str], started: list[float | None], runs: list[str]
) -> None:
    chosen = attach_run.start_time(loop.pid)
    started[:] = [chosen, None]
    outcome = attach(loop.pid, create_time=chosen)
    assert (
        not outcome.ok and runs == [] and outcome.message == f"pid {loop.pid} has ended: nothing was attached"
    )


def test_replaced_while_the_debugger_ran(
    loop: subprocess.Popen[str], started: list[float | None], runs: list[str]
) -> None:
    chosen = attach_run.start_time(loop.pid)
    assert chosen is not None
    started[:] = [chosen, chosen, chosen + 100.0]  # both checks before pass; after it returned, another one
    outcome = attach(loop.pid, create_time=chosen)
    assert len(runs) == 1 and not outcome.ok
    assert outcome.message == (
        f"pid {loop.pid} ended during the attach and is another process now: the agent may have started in "
        "that one, not in the one you chose"
    )
    assert "\n" not in outcome.message


def test_the_same_process_throughout_is_attached(loop: subprocess.Popen[str]) -> None:
    chosen = attach_run.start_time(loop.pid)
    plan = check(loop.pid)
    assert isinstance(plan, Plan)
    if plan.mechanism not in ("gdb", "cuda-gdb", "lldb", "remote_exec"):
        pytest.skip(plan.mechanism)
    outcome = attach(loop.pid, create_time=chosen)
    assert outcome.ok, outcome.message
    report = AgentPoller().report(loop.pid)
    assert report is not None and report.ok
