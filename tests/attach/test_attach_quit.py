"""A job whose GIL a long C call holds, and leaving gputui (or its timeout) in the middle of an attach: the
job lives on, runs, and is neither traced nor stopped; the agent's copy is removed once nobody needs it.

gdb never waits for the job's GIL: it queues the bootstrap (Py_AddPendingCall) and detaches within a
fraction of a second, and the job's main thread runs it when the hog lets go. Before, gdb waited inside
PyGILState_Ensure: a quit killed the job, and an interrupt that unwound the call, or even a wait that was
let finish, once left the GIL's condition variable wedged and the job hung for good.

The two moments a debugger can still be caught in are made long here by a `sleep` call in the job: before
the claim (as a malloc that waits on a lock would be), gdb is interrupted, unwinds and detaches; after it
(queueing), gdb is left to finish. Real gdb, real jobs (tests/attach/gil_hog.py). The monitor's own ways out
are tests/ui/test_quit_attach.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gputui.actions.attach import Outcome, debugger, run
from gputui.collect.agents.client import AgentPoller
from tests.attach.gil_hog import HOLD_S, Hog, copies_for, debuggers_of, wait_queued
from tests.helpers import wait_until
from tests.ui.pty_run import PtyRun

pytestmark = pytest.mark.skipif(
    shutil.which("gdb") is None or os.geteuid() != 0, reason="needs gdb, and root (ptrace)"
)
# abandon() waits for nothing; one that waited would wait at least the debugger's GRACE_S (2 s) or the held
# GIL (HOLD_S). Half of GRACE_S keeps that gap and what a loaded box adds (tens of ms) far from either.
QUICK_S = debugger.GRACE_S / 2


def _slow(monkeypatch: pytest.MonkeyPatch, seconds: int, before: Callable[[str], bool], mark: Path) -> Path:
    """gdb's script with a `sleep` call in the job inserted before the first line `before` accepts, and
    `mark` made just before that call: the file `inside` waits for."""
    real = debugger.gdb_script

    def script(boot: Path) -> str:
        lines = real(boot).splitlines()
        at = next(i for i, line in enumerate(lines) if before(line))
        slow = [f"shell touch {mark}", f"call (unsigned int) sleep({seconds})"]
        return "\n".join([*lines[:at], *slow, *lines[at:]])

    monkeypatch.setattr(debugger, "gdb_script", script)
    return mark


@pytest.fixture
def slow_malloc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Its first call waits 30 s: the moment before the claim, as a malloc that waits on a lock."""
    return _slow(monkeypatch, 30, lambda line: "malloc(" in line, tmp_path / "calling")


@pytest.fixture
def slow_queue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """3 s in the job once gdb has claimed the step: the moment it is never interrupted in."""
    return _slow(monkeypatch, 3, lambda line: "Py_AddPendingCall" in line, tmp_path / "calling")


def inside(hog: Hog, mark: Path) -> Path:
    """Until a debugger is inside its slow call in the job (its janitor's copy). Not a fixed pause after
    attaching: on a loaded box gdb may still be setting the call up, and an interrupt there is another
    moment than the one a test means (CI once saw the job sleep on in the call after gdb left). gdb made
    `mark` just before the call, and the job's main thread runs (in the call) instead of being held."""
    assert wait_until(lambda: hog.tracer() != 0 and len(copies_for(hog.pid)) == 1, 15.0)
    assert wait_until(mark.exists, 15.0)
    assert wait_until(lambda: hog.main_state() not in ("t", "T"), 15.0), hog.main_state()
    time.sleep(0.2)
    (copy,) = copies_for(hog.pid)
    return copy


def assert_runs_on(hog: Hog, copy: Path, agent: bool) -> None:
    """In the end: no debugger, the job neither traced nor stopped, ticking, its agent answering (or not),
    the agent's copy removed."""
    assert wait_until(lambda: debuggers_of(hog.pid) == [], HOLD_S + 10), debuggers_of(hog.pid)
    assert hog.runs_on(HOLD_S + 10), (hog.proc.poll(), hog.said()[-5:], hog.stacks())
    assert hog.tracer() == 0 and not any(s in "tT" for s in hog.state()), hog.state()
    answered = wait_until(lambda: AgentPoller().report(hog.pid) is not None, 10.0 if agent else 1.0)
    assert answered is agent
    assert wait_until(lambda: not copy.exists(), 5.0), copy
    assert hog.runs_on(5.0), "the job stopped ticking"
    assert hog.proc.poll() is None


class Attaching(threading.Thread):
    """attach() on a thread of its own, as the monitor runs it."""

    def __init__(self, pid: int, timeout: float = run.TIMEOUT_S) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.timeout = timeout
        self.outcome: Outcome | None = None
        self.start()

    def run(self) -> None:
        self.outcome = run.attach(self.pid, self.timeout)


@pytest.mark.slow
def test_a_job_whose_gil_a_long_call_holds_is_queued_and_never_held(hog: Hog) -> None:
    """gdb queues the bootstrap and is gone in a fraction of a second; the agent answers once the job's
    main thread runs Python again, and the copy is kept until then."""
    hog.hold()
    t0 = time.monotonic()
    outcome = run.attach(hog.pid, timeout=1.5)
    assert time.monotonic() - t0 < 1.5 + 1.0  # once: no second try
    assert outcome.pending and not outcome.ok and not outcome.timed_out, outcome
    assert "queued" in outcome.message and "next runs Python code" in outcome.message, outcome.message
    assert outcome.seconds is not None and outcome.seconds < 1.5, outcome.seconds  # gdb's whole run
    assert hog.tracer() == 0 and debuggers_of(hog.pid) == []  # nobody waits inside the job
    (copy,) = copies_for(hog.pid)
    assert copy.exists() and "alive" not in hog.said()  # kept: the job has not run the bootstrap yet
    assert_runs_on(hog, copy, agent=True)


@pytest.mark.slow
def test_quitting_while_the_agent_is_awaited_leaves_the_bootstrap_queued(hog: Hog) -> None:
    hog.hold()
    attaching = Attaching(hog.pid)
    copy = wait_queued(hog.pid)
    t0 = time.monotonic()
    (said,) = run.abandon()
    assert time.monotonic() - t0 < QUICK_S
    assert "queued" in said and "next runs Python code" in said, said
    attaching.join(QUICK_S + 1)
    outcome = attaching.outcome
    assert outcome is not None and outcome.abandoned and not outcome.ok, outcome
    assert_runs_on(hog, copy, agent=True)


def test_quitting_just_after_gdb_left_says_the_bootstrap_is_queued(
    hog: Hog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moment between gdb's end (the attempt's session let go) and the attach noting the queued
    bootstrap: a quit there once said "no debugger was at work in it" while the bootstrap was queued
    (tests/ui/test_quit_attach.py under load). The quit is made to land exactly there."""
    said: list[str] = []
    real = run._replaced

    def quit_first(pid: int, create_time: float | None, during: bool = False) -> Outcome | None:
        if during:
            said.extend(run.abandon())
        return real(pid, create_time, during)

    monkeypatch.setattr(run, "_replaced", quit_first)
    hog.hold()
    outcome = Attaching(hog.pid)
    outcome.join(run.TIMEOUT_S + 5)
    assert len(said) == 1 and "bootstrap is queued in pid" in said[0], said
    wait_queued(hog.pid)


def test_quitting_before_the_claim_stops_gdb(hog: Hog, slow_malloc: Path) -> None:
    hog.hold_briefly()
    attaching = Attaching(hog.pid)
    copy = inside(hog, slow_malloc)
    t0 = time.monotonic()
    (said,) = run.abandon()
    assert time.monotonic() - t0 < QUICK_S
    assert "stopped before it queued" in said and "runs on as it was" in said, said
    attaching.join(run.GRACE_S + 1)
    outcome = attaching.outcome
    assert outcome is not None and outcome.abandoned and not outcome.pending, outcome
    assert "stopped as gputui quit" in outcome.message and not outcome.message.endswith("(twice)")
    assert_runs_on(hog, copy, agent=False)


def test_quitting_after_the_claim_leaves_gdb_to_finish(hog: Hog, slow_queue: Path) -> None:
    hog.hold_briefly()
    attaching = Attaching(hog.pid)
    copy = inside(hog, slow_queue)
    assert (copy / debugger.TAKEN).exists()
    (said,) = run.abandon()
    assert "left to finish" in said and "not harmed" in said, said
    attaching.join(QUICK_S + 1)
    outcome = attaching.outcome
    assert outcome is not None and outcome.pending and outcome.abandoned, outcome
    assert debuggers_of(hog.pid) != []  # not interrupted
    assert_runs_on(hog, copy, agent=True)


def test_the_timeout_before_the_claim_stops_gdb_and_tries_again(hog: Hog, slow_malloc: Path) -> None:
    hog.hold_briefly()
    t0 = time.monotonic()
    outcome = run.attach(hog.pid, timeout=1.5)
    assert time.monotonic() - t0 < 2 * (1.5 + run.GRACE_S)
    assert outcome.timed_out and "stopped before it queued" in outcome.message, outcome.message
    assert outcome.message.endswith("(twice)")
    assert wait_until(lambda: copies_for(hog.pid) == [], 5.0)  # both copies removed
    assert hog.tracer() == 0 and hog.runs_on(5.0)
    assert AgentPoller().report(hog.pid) is None


def test_the_timeout_after_the_claim_leaves_gdb_to_finish(hog: Hog, slow_queue: Path) -> None:
    hog.hold_briefly()
    attaching = Attaching(hog.pid, timeout=1.5)
    copy = inside(hog, slow_queue)
    attaching.join(5)
    outcome = attaching.outcome
    assert outcome is not None and outcome.pending and not outcome.timed_out, outcome
    assert "left to finish" in outcome.message and "(twice)" not in outcome.message
    assert_runs_on(hog, copy, agent=True)


def test_nothing_is_started_once_abandoned_and_a_later_attach_works(hog: Hog) -> None:
    """abandon() gives up what runs now, nothing after: the next attach() works as ever."""
    assert run.abandon() == []  # none under way
    hog.hold_briefly()
    outcome = run.attach(hog.pid)
    assert outcome.ok, outcome.message
    assert wait_until(lambda: copies_for(hog.pid) == [], 5.0)  # the agent answers: its copy removed


# -- `gputui attach PID` on a terminal ------------------------------------------------------------------


def _leave(run_: PtyRun, how: str) -> None:
    assert run_.proc is not None
    if how == "ctrl+c":
        run_.type(b"\x03")  # the terminal sends SIGINT to its foreground process group
    else:  # what a shell does to its jobs when its terminal hangs up, the kernel when its leader exits
        os.killpg(run_.proc.pid, getattr(signal, how))


@pytest.mark.slow
@pytest.mark.terminal
@pytest.mark.parametrize("how", ["ctrl+c", "SIGHUP", "SIGTERM"])
def test_gputui_attach_interrupted_while_the_agent_is_awaited(hog: Hog, how: str) -> None:
    """Whatever reaches gputui's process group, the janitor and its copy are not in it: the bootstrap
    stays queued and runs, and gputui attach says so and exits at once."""
    hog.hold()
    cli = PtyRun([sys.executable, "-m", "gputui", "attach", "--yes", str(hog.pid)])
    try:
        copy = wait_queued(hog.pid)
        t0 = time.monotonic()
        _leave(cli, how)
        assert cli.wait_exit(5) is not None, f"still running after {how}:\n{cli.text()}"
        took = time.monotonic() - t0
        out = cli.all_output().decode(errors="replace")
        # Its own exit, even on a loaded box; waiting for the agent would last until the job's GIL is free
        # (HOLD_S = 6 s after hold()).
        assert took < 2.5, f"gputui attach took {took:.2f} s after {how}: {out}"
        assert "Traceback" not in out, out
        assert "queued" in out and "quit before its agent answered" in out, out
        assert cli.proc is not None
        assert cli.proc.returncode == 130, (cli.proc.returncode, out)
        assert_runs_on(hog, copy, agent=True)
    finally:
        cli.close()


def test_lldb_is_never_interrupted(tmp_path: Path) -> None:
    """lldb has no conditional in a batch: stopping it could unwind the queueing, so it is left to finish
    (its malloc has a timeout of its own)."""
    from gputui.actions.attach.preflight import Plan

    (tmp_path / debugger.GO).touch()
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        plan = Plan(sleeper.pid, 0, "root", "/usr/bin/python3", (3, 11), "lldb", "lldb")
        with tempfile.TemporaryFile() as output:
            session = debugger.Session(plan, tmp_path, sleeper, output)
            assert session.stop() is False
        assert sleeper.poll() is None and (tmp_path / debugger.GO).exists()
    finally:
        sleeper.kill()
        sleeper.wait()
