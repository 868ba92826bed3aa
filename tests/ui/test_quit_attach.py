"""Quitting while an attach is under way on a job whose GIL a long C call holds: the job must live on. It
died of SIGSEGV when gdb, in gputui's session and process group, waited inside the job's PyGILState_Ensure
and was hung up with gputui. Now gdb only queues the bootstrap (Py_AddPendingCall) and detaches at once,
under a janitor in a session of its own that keeps the agent's copy until the job has run it; every way out
of gputui (q, Ctrl+C, SIGTERM, SIGHUP, the terminal gone) gives the attach up without waiting, gives the
terminal back, and says what became of it.

The real program in a pseudo-terminal (tests/ui/attach_app.py), the real gdb, a real job."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

import pytest

from gputui.collect.agents.client import AgentPoller
from tests.attach.gil_hog import HOLD_S, Hog, debuggers_of, wait_queued
from tests.helpers import wait_until
from tests.ui.pty_run import PtyRun

pytestmark = [
    pytest.mark.slow,
    pytest.mark.terminal,
    pytest.mark.skipif(
        shutil.which("gdb") is None or os.geteuid() != 0, reason="needs gdb, and root (ptrace)"
    ),
]
QUIT_WITHIN_S = 1.0
EXIT_STATUS = {"q": 0, "ctrl+c": 0, "SIGTERM": 143, "SIGHUP": 129, "hangup": 129}


def _leave(run: PtyRun, how: str) -> None:
    assert run.proc is not None
    if how == "q":
        run.type(b"q")
    elif how == "ctrl+c":
        run.type(b"\x03")  # a key while the app runs (raw mode), as in htop
    elif how == "hangup":
        run.hang_up()  # the SSH connection drops: no SIGHUP but the one the kernel sends
    else:
        run.proc.send_signal(getattr(signal, how))


@pytest.mark.parametrize("how", ["q", "ctrl+c", "SIGTERM", "SIGHUP", "hangup"])
def test_quitting_during_an_attach_leaves_the_job_running(hog: Hog, how: str) -> None:
    run = PtyRun([sys.executable, "-m", "tests.ui.attach_app", str(hog.pid)], cols=160, rows=40)
    try:
        assert run.proc is not None
        assert wait_until(lambda: b"H100" in run.output(), 20.0), run.text()
        run.type(b"a")
        assert wait_until(lambda: b"Attach gputui" in run.output(), 10.0), run.text()
        hog.hold()
        run.type(b"a")
        copy = wait_queued(hog.pid)  # gdb has queued the bootstrap and left; the agent is awaited
        start = time.monotonic()
        _leave(run, how)
        if how != "hangup":  # (nobody reads the terminal once it is gone)
            assert wait_until(run.left_alternate_screen, QUIT_WITHIN_S + 5, step=0.01), run.text()
            restored = time.monotonic() - start
            assert restored <= QUIT_WITHIN_S, f"the terminal was given back after {restored:.2f} s"
        assert run.wait_exit(QUIT_WITHIN_S + 5) is not None, (
            f"gputui still running after {how}:\n{run.text()}"
        )
        exited = time.monotonic() - start
        assert exited <= QUIT_WITHIN_S + 0.5, f"exited {exited:.2f} s after {how}"
        out = run.all_output().decode(errors="replace")
        print(f"\n{how}: gputui gone {exited:.2f} s after it")
        assert "Traceback" not in out, out[-3000:]
        assert run.proc.returncode == EXIT_STATUS[how], (run.proc.returncode, out[-2000:])
        if how != "hangup":
            assert "gputui: the bootstrap is queued in pid" in out, out[-2000:]
        # the job runs on, untraced: its C call returns, its main thread runs the bootstrap, and the copy goes
        assert debuggers_of(hog.pid) == [], debuggers_of(hog.pid)
        assert hog.runs_on(HOLD_S + 10), (hog.proc.poll(), hog.said()[-5:], hog.stacks())
        assert hog.tracer() == 0 and not any(s in "tT" for s in hog.state()), hog.state()
        assert wait_until(lambda: AgentPoller().report(hog.pid) is not None, 10.0)
        assert wait_until(lambda: not copy.exists(), 5.0), copy
        assert hog.runs_on(5.0), "the job stopped ticking"
    finally:
        run.close()
