"""Quit is quick whatever the source or an agent is doing: `q`, SIGTERM and SIGHUP give the terminal back
and end the process within a second while a sample is stuck in flight (a hung NVML call, an agent that
never answers), and the demo's child processes still go.

Each test runs the real program in a pseudo-terminal (tests/ui/rigged.py rigs one thing in it)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputui.ui.hangup import DaemonThreads
from tests.helpers import wait_until as _wait_until
from tests.processes import describe as _describe
from tests.ui.pty_run import PtyRun
from tests.ui.terminal import DemoProcs

GPUS = 2
QUIT_WITHIN_S = 1.0


@contextlib.contextmanager
def _running(cmd: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[PtyRun, DemoProcs]]:
    """The program on a pty, drawn and with every demo process up; afterwards nothing of it is left."""
    run = PtyRun(cmd, env=env)
    demo = DemoProcs()
    try:
        assert run.proc is not None
        demo.gputui = psutil.Process(run.proc.pid)
        assert _wait_until(lambda: b"H100" in run.output(), 15.0), run.text()
        assert _wait_until(lambda: demo.scan(GPUS), 5.0), f"demo incomplete: {_describe(demo.procs())}"
        yield run, demo
    finally:
        if demo.gputui is not None:
            demo.scan(GPUS)
        run.close()
        demo.cleanup()


def _rigged(mode: str, marker: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.ui.rigged",
        mode,
        str(marker),
        "--demo-gpus",
        str(GPUS),
        "--interval",
        "0.2",
    ]


def _leave(run: PtyRun, how: str) -> None:
    assert run.proc is not None
    if how == "q":
        run.type(b"q")
    else:
        run.proc.send_signal(getattr(signal, how))


EXIT_STATUS = {"q": 0, "SIGTERM": 128 + signal.SIGTERM, "SIGHUP": 128 + signal.SIGHUP}


def _assert_quick_and_clean(run: PtyRun, demo: DemoProcs, how: str) -> None:
    start = time.monotonic()
    _leave(run, how)
    restored = _wait_until(run.left_alternate_screen, QUIT_WITHIN_S + 5, step=0.01)
    restored_after = time.monotonic() - start
    took = run.wait_exit(QUIT_WITHIN_S + 5)
    exited_after = time.monotonic() - start
    assert restored, f"the terminal was not given back:\n{run.text()}"
    assert took is not None, f"gputui still running {exited_after:.1f} s after {how}:\n{run.text()}"
    assert restored_after <= QUIT_WITHIN_S, f"terminal given back after {restored_after:.2f} s"
    assert exited_after <= QUIT_WITHIN_S, f"exited {exited_after:.2f} s after {how}"
    out = run.all_output().decode(errors="replace")
    assert "Traceback" not in out, out[-3000:]
    assert run.proc is not None and run.proc.returncode == EXIT_STATUS[how]
    demo.assert_all_gone()


@pytest.mark.terminal
@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGHUP"])
def test_quit_while_the_source_is_stuck_in_a_read(how: str, tmp_path: Path) -> None:
    marker = tmp_path / "stuck"
    with _running(_rigged("stuck-source", marker)) as (run, demo):
        assert _wait_until(marker.exists, 10.0), "the source never got stuck"
        time.sleep(0.3)  # the sampler thread is inside read() for good
        _assert_quick_and_clean(run, demo, how)


@pytest.mark.terminal
@pytest.mark.parametrize("how", ["q", "SIGTERM"])
def test_quit_while_asking_an_agent_never_ends(how: str, tmp_path: Path) -> None:
    marker = tmp_path / "stuck"
    with _running(_rigged("stuck-agent", marker)) as (run, demo):
        assert _wait_until(marker.exists, 10.0), "the agent poll never got stuck"
        time.sleep(0.3)
        _assert_quick_and_clean(run, demo, how)


@pytest.mark.terminal
def test_quit_when_closing_the_source_hangs_as_well(tmp_path: Path) -> None:
    """nvmlShutdown may wait behind the stuck call: the terminal is back at once, and gputui leaves the
    source behind 2 s later, saying so."""
    marker = tmp_path / "stuck"
    with _running(_rigged("stuck-close", marker)) as (run, demo):
        assert _wait_until(marker.exists, 10.0), "the source never got stuck"
        start = time.monotonic()
        run.type(b"q")
        assert _wait_until(run.left_alternate_screen, QUIT_WITHIN_S, step=0.01), run.text()
        assert run.wait_exit(5.0) is not None, f"gputui still running after q:\n{run.text()}"
        assert time.monotonic() - start <= QUIT_WITHIN_S + 2.0 + 0.5
        out = run.all_output().decode(errors="replace")
        assert "the GPU source did not close within 2 s" in out, out[-2000:]
        assert "Traceback" not in out, out[-3000:]
        assert run.proc is not None and run.proc.returncode == 0
        demo.assert_all_gone()


@pytest.mark.terminal
def test_a_crash_mid_run_exits_non_zero(tmp_path: Path) -> None:
    """A widget that raises on a snapshot ends the app: with a non-zero status (it was 0, as a clean quit),
    the terminal given back and the demo's processes gone."""
    marker = tmp_path / "crashed"
    with _running(_rigged("crash", marker)) as (run, demo):
        assert _wait_until(marker.exists, 10.0), "the widget never crashed"
        assert run.wait_exit(5.0) is not None, f"gputui still running after the crash:\n{run.text()}"
        out = run.all_output()
        assert run.proc is not None and run.proc.returncode == 1, out[-2000:]
        assert run.left_alternate_screen()
        assert b"a widget choked on this snapshot" in out  # Textual's report of the bug
        demo.assert_all_gone()


def test_the_default_executor_never_waits_for_a_stuck_worker() -> None:
    """What asyncio.run() and the interpreter's exit do with Textual's thread workers: shut the default
    executor down. A worker that never returns must not hold that up; results and errors still arrive."""
    pool = DaemonThreads()
    release = threading.Event()
    stuck = pool.submit(release.wait)
    assert pool.submit(lambda: 6 * 7).result(timeout=5) == 42
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(timeout=5)
    start = time.monotonic()
    pool.shutdown(wait=True)
    # Without the fix it never returns (the stuck thread waits for ever): 2 s is slack for a loaded box.
    assert time.monotonic() - start < 2.0
    workers = [t for t in threading.enumerate() if t.name == "gputui-worker"]
    assert workers and all(t.daemon for t in workers)
    assert not stuck.done()
    release.set()
    assert stuck.result(timeout=5) is True
