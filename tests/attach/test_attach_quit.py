"""Leaving gputui while gdb is inside its call in a job (the job's GIL held by a long C call, so gdb's
`PyGILState_Ensure` waits): the job lives on, runs, and is neither traced nor stopped; gdb is gone; the
agent's copy is removed. gdb runs in a session of its own (a hang-up of gputui's terminal or process group
never reaches it) and abandon() interrupts it as the timeout does (SIGINT: its call unwound, the job
detached).

Real gdb, real jobs (tests/attach/gil_hog.py). The monitor's own ways out (q, Ctrl+C, SIGTERM, SIGHUP, a
terminal gone) are tests/ui/test_quit_attach.py."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.attach import Outcome, run
from tests.attach.gil_hog import Hog, debuggers_of, payload_of, wait_until
from tests.ui.pty_run import PtyRun

pytestmark = pytest.mark.skipif(
    shutil.which("gdb") is None or os.geteuid() != 0, reason="needs gdb, and root (ptrace)"
)
HOLD_S = 6.0


@pytest.fixture
def hog() -> Iterator[Hog]:
    job = Hog(HOLD_S)
    try:
        yield job
    finally:
        job.close()


def assert_runs_on(hog: Hog, payload: Path) -> None:
    """gdb gone, the job neither traced nor stopped, the agent's copy removed; then it keeps ticking."""
    assert debuggers_of(hog.pid) == [], debuggers_of(hog.pid)
    assert hog.proc.poll() is None, f"the job died: {hog.proc.returncode}"
    assert hog.tracer() == 0 and not any(s in "tT" for s in hog.state()), hog.state()
    assert not payload.exists(), payload
    assert hog.runs_on(HOLD_S + 10), (hog.proc.poll(), hog.said()[-5:], hog.stacks())
    assert hog.runs_on(5.0), "the job stopped ticking"
    assert hog.proc.poll() is None


class Attaching(threading.Thread):
    """attach() on a thread of its own, as the monitor runs it."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.outcome: Outcome | None = None
        self.start()

    def run(self) -> None:
        self.outcome = run.attach(self.pid)


def test_abandon_interrupts_gdb_in_its_call_and_the_job_runs_on(hog: Hog) -> None:
    hog.hold()
    attaching = Attaching(hog.pid)
    hog.wait_in_call()
    assert run.under_way()
    payload = payload_of(hog.pid)  # the agent's copy, as gdb works
    t0 = time.monotonic()
    assert run.abandon(wait=run.ABANDON_S)
    took = time.monotonic() - t0
    assert took < run.GRACE_S, f"gdb took {took:.2f} s to unwind its call and detach"
    attaching.join(5)
    outcome = attaching.outcome
    assert outcome is not None and not outcome.ok and outcome.abandoned, outcome
    assert "interrupted as gputui quit" in outcome.message and "runs on as it was" in outcome.message
    assert not outcome.message.endswith("(twice)")  # no second try after it was given up
    assert not run.under_way()
    assert_runs_on(hog, payload)


def test_nothing_is_started_once_abandoned_and_a_later_attach_works(hog: Hog) -> None:
    """abandon() gives up what runs now, nothing after: the next attach() works as ever."""
    assert run.abandon(wait=1.0)  # none under way: nothing to wait for
    hog.hold()
    time.sleep(HOLD_S + 0.5)  # the GIL is free again
    outcome = run.attach(hog.pid)
    assert outcome.ok, outcome.message


SLOW_BOOT = """
import pathlib, time
pathlib.Path({marker!r}).write_text("started")
time.sleep(0.8)
pathlib.Path({marker!r}).write_text("finished")
"""


def test_a_bootstrap_that_holds_the_gil_is_let_finish(
    hog: Hog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quitting while gdb's calls hold the job's GIL (the bootstrap runs): unwound there, the job would be
    left in the middle of Python code with its GIL taken for good, and hang. It is let finish (GIL_WAIT_S at
    most): gdb gives the GIL back and detaches, and the job runs on."""
    marker = tmp_path / "boot"
    slow = tmp_path / "slow_boot.py"
    slow.write_text(SLOW_BOOT.format(marker=str(marker)))
    monkeypatch.setattr(run, "bootstrap", lambda boot: f"__import__('runpy').run_path('{slow}')")
    hog.hold_briefly()  # then it ticks: its GIL is free for gdb at once
    attaching = Attaching(hog.pid)
    assert wait_until(lambda: marker.exists(), 15.0), "the bootstrap never ran"
    payload = payload_of(hog.pid)
    assert run.abandon(wait=run.ABANDON_S)
    attaching.join(5)
    assert marker.read_text() == "finished"  # not unwound half-way
    assert attaching.outcome is not None and attaching.outcome.abandoned is False, attaching.outcome
    assert_runs_on(hog, payload)


# -- `gputui attach PID` on a terminal ------------------------------------------------------------------


def _leave(run_: PtyRun, how: str) -> None:
    assert run_.proc is not None
    if how == "ctrl+c":
        run_.type(b"\x03")  # the terminal sends SIGINT to its foreground process group
    else:  # what a shell does to its jobs when its terminal hangs up, the kernel when its leader exits
        os.killpg(run_.proc.pid, getattr(signal, how))


@pytest.mark.parametrize("how", ["ctrl+c", "SIGHUP", "SIGTERM"])
def test_gputui_attach_interrupted_while_gdb_is_in_its_call(hog: Hog, how: str) -> None:
    """The job lives on whatever reaches gputui's process group: gdb is not in it (before, a SIGHUP to it
    killed gdb in the middle of its call, and the job with it), and gputui interrupts gdb itself."""
    hog.hold()
    cli = PtyRun([sys.executable, "-m", "gputui", "attach", "--yes", str(hog.pid)])
    try:
        hog.wait_in_call()
        payload = payload_of(hog.pid)
        t0 = time.monotonic()
        _leave(cli, how)
        assert cli.wait_exit(run.ABANDON_S + 5) is not None, f"still running after {how}:\n{cli.text()}"
        took = time.monotonic() - t0
        out = cli.all_output().decode(errors="replace")
        assert took < run.GRACE_S + 0.5, f"gputui attach took {took:.2f} s after {how}: {out}"
        assert_runs_on(hog, payload)
        assert "Traceback" not in out, out
        assert "interrupted as gputui quit" in out and "runs on as it was" in out, out
        assert cli.proc is not None and cli.proc.returncode == 130, (cli.proc.returncode, out)
    finally:
        cli.close()
