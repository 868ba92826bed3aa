"""A SIGTERM at any moment of the monitor's start-up ends it with 143 (as a shell shows it) and no traceback.

Before cli.main installs its handler the signal's default action ends it (a status of -15 here: the shell's
143 all the same); after, a SystemExit unwinds it, but never from the middle of the import machinery, where
Textual's few hundred milliseconds of imports made it another error (exit 1 with a traceback) or lost it
(the monitor started all the same): there the signal is held until the imports are done.

The real program on a pseudo-terminal; tests/start_signal.py sends the signal at exact moments."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.ui.pty_run import PtyRun

pytestmark = pytest.mark.terminal

ARGS = ["--demo", "--demo-gpus", "2"]


def shell_status(returncode: int) -> int:
    """What a shell says of it: killed by signal N is 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


def _ends_with_143(run: PtyRun, what: str) -> None:
    assert run.proc is not None
    took = run.wait_exit(15)
    out = run.all_output().decode(errors="replace")
    assert took is not None, f"still running 15 s after a SIGTERM {what}:\n{out[-2000:]}"
    assert "Traceback" not in out and "Exception ignored" not in out, out[-3000:]
    assert shell_status(run.proc.returncode) == 128 + signal.SIGTERM, (run.proc.returncode, out[-2000:])


@pytest.mark.parametrize("delay_ms", [0, 20, 50, 100, 200, 300, 500])
def test_sigterm_at_start_exits_143(delay_ms: int) -> None:
    run = PtyRun([sys.executable, "-m", "gputui", *ARGS])
    try:
        time.sleep(delay_ms / 1000)
        assert run.proc is not None
        run.proc.send_signal(signal.SIGTERM)
        _ends_with_143(run, f"{delay_ms} ms after the start")
    finally:
        run.close()


@pytest.mark.parametrize("where", ["set_name", "lock_callback"])
def test_sigterm_inside_textuals_import_exits_143(where: str, tmp_path: Path) -> None:
    marker = tmp_path / "sent"
    run = PtyRun([sys.executable, "-m", "tests.start_signal", where, str(marker), *ARGS])
    try:
        _ends_with_143(run, f"in {where}")
        if not marker.exists():
            pytest.skip(f"this Python's start-up never passed {where}")
    finally:
        run.close()
