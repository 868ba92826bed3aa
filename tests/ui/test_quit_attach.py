"""Quitting while gdb is inside its call in the job (the job's GIL held by a long C call, so gdb's
`PyGILState_Ensure` waits): the job must live on. It died of SIGSEGV: gdb, in gputui's session and process
group, was hung up with it (the terminal's SIGHUP as gputui ended) while the job ran gdb's call, and the
job then returned into gdb's dummy frame. Now gdb runs in a session of its own, and every way out of gputui
(q, Ctrl+C, SIGTERM, SIGHUP, the terminal gone) interrupts it as the timeout does (SIGINT: the call is
unwound, the job detached), gives the terminal back first and waits for gdb after that, at most
GRACE_S, then removes the agent's copy.

The real program in a pseudo-terminal (tests/ui/attach_app.py), the real gdb, a real job."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from gputui.attach.run import GRACE_S
from tests.attach.gil_hog import Hog, debuggers_of, payload_of, wait_until
from tests.ui.pty_run import PtyRun

pytestmark = pytest.mark.skipif(
    shutil.which("gdb") is None or os.geteuid() != 0, reason="needs gdb, and root (ptrace)"
)
HOLD_S = 6.0  # how long the job's C call holds the GIL: gdb waits in its call all that time
QUIT_WITHIN_S = 1.0
EXIT_STATUS = {"q": 0, "ctrl+c": 0, "SIGTERM": 143, "SIGHUP": 129, "hangup": 129}


@pytest.fixture
def hog() -> Iterator[Hog]:
    job = Hog(HOLD_S)
    try:
        yield job
    finally:
        job.close()


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
def test_quitting_while_gdb_is_in_its_call_leaves_the_job_running(hog: Hog, how: str) -> None:
    run = PtyRun([sys.executable, "-m", "tests.ui.attach_app", str(hog.pid)], cols=160, rows=40)
    try:
        assert run.proc is not None
        assert wait_until(lambda: b"H100" in run.output(), 20.0), run.text()
        run.type(b"a")
        assert wait_until(lambda: b"Attach gputui" in run.output(), 10.0), run.text()
        hog.hold()
        run.type(b"a")
        hog.wait_in_call()  # gdb waits for the GIL inside PyGILState_Ensure
        payload = payload_of(hog.pid)
        start = time.monotonic()
        _leave(run, how)
        if how != "hangup":  # (nobody reads the terminal once it is gone)
            assert wait_until(run.left_alternate_screen, QUIT_WITHIN_S + 5, step=0.01), run.text()
            restored = time.monotonic() - start
            assert restored <= QUIT_WITHIN_S, f"the terminal was given back after {restored:.2f} s"
        took = run.wait_exit(QUIT_WITHIN_S + GRACE_S + 5)
        assert took is not None, f"gputui still running after {how}:\n{run.text()}"
        exited = time.monotonic() - start
        # it waits for gdb to detach after the terminal is back: GRACE_S at most
        assert exited <= QUIT_WITHIN_S + GRACE_S + 0.5, f"exited {exited:.2f} s after {how}"
        out = run.all_output().decode(errors="replace")
        print(f"\n{how}: the terminal back and gputui gone {exited:.2f} s after it")
        assert "Traceback" not in out, out[-3000:]
        assert run.proc.returncode == EXIT_STATUS[how], (run.proc.returncode, out[-2000:])
        # gdb is gone, the job is neither traced nor stopped, and the agent's copy is removed
        assert debuggers_of(hog.pid) == [], debuggers_of(hog.pid)
        assert hog.proc.poll() is None, f"the job died: {hog.proc.returncode}"
        assert hog.tracer() == 0 and not any(s in "tT" for s in hog.state()), hog.state()
        # and it runs on: its C call returns, the main thread gets the GIL and keeps ticking
        assert hog.runs_on(HOLD_S + 10), (hog.proc.poll(), hog.said()[-5:], hog.stacks())
        assert hog.runs_on(5.0), "the job stopped ticking"
        assert hog.proc.poll() is None
        assert not payload.exists(), payload
    finally:
        run.close()
