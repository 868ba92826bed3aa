"""The tests' shared helpers, one of each: waiting for a condition (`wait_until` in a thread, `until` under a
Textual pilot), real child processes that a test starts (`Children`, handed out by the `spawn` fixture of
tests/conftest.py, which reaps them; `ready_loop`, a Python in its loop to attach to), and reading what a
Textual screen shows (`static_text`, `screen_text`). Model values are built in tests/builders.py."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import psutil
from textual.app import App
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Static

from tests.processes import gone

# -- waiting -----------------------------------------------------------------------------------------


def wait_until(pred: Callable[[], object], timeout: float = 3.0, step: float = 0.02) -> bool:
    """Poll `pred` until it holds or `timeout` seconds pass; whether it held (the caller asserts it)."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


async def until(
    pilot: Pilot[Any], cond: Callable[[], object], timeout: float = 5.0, what: str = "", settle: bool = False
) -> None:
    """Let the app run until `cond()` is true; fails the test after `timeout` seconds, never hangs.
    `settle`: one more pause after, so that what the change set off is handled too."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what or cond}"
        await pilot.pause(0.02)
    if settle:
        await pilot.pause()


# -- reading the screen ------------------------------------------------------------------------------


def static_text(widget: Widget) -> str:
    """What `widget` draws, as text, one line per row (trailing blanks cut)."""
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(strip.text.rstrip() for strip in strips)


def screen_text(app: App[Any]) -> str:
    """The text of every Static on the screen on top (a dialog, when one is open)."""
    return "\n".join(static_text(s) for s in app.screen.query(Static))


# -- real child processes ----------------------------------------------------------------------------


class Children:
    """The real processes of one test. `end()` kills and reaps each one, and kills what they forked (and
    whatever `adopt` was given): reparented to init once its parent dies, nobody else would."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[str]] = []
        self.others: list[psutil.Process] = []

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        popen = subprocess.Popen(list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env=env, text=True)
        self.popens.append(popen)
        return popen

    def start(self, code: str, *args: str) -> tuple[psutil.Process, str]:
        """`python -I -S -c code args...`, once it printed its first line: returns it, and that line. A child
        that died before that fails the test instead of hanging it."""
        popen = self([sys.executable, "-I", "-S", "-c", code, *args], stderr=subprocess.DEVNULL)
        assert popen.stdout is not None
        line = popen.stdout.readline().strip()  # "" if it died: end of file, never a hang
        assert line, f"child {popen.pid} did not start"
        return psutil.Process(popen.pid), line

    def adopt(self, pid: int) -> psutil.Process:
        """A process started by one of ours: ended at teardown too (psutil refuses a reused PID)."""
        proc = psutil.Process(pid)
        self.others.append(proc)
        return proc

    def popen(self, proc: psutil.Process) -> subprocess.Popen[str]:
        return next(p for p in self.popens if p.pid == proc.pid)

    def stragglers(self, timeout: float = 10.0) -> list[psutil.Process]:
        """The adopted processes still not gone after `timeout` seconds (after `end()`)."""
        return [p for p in self.others if not wait_until(functools.partial(gone, p), timeout)]

    def end(self) -> None:
        for popen in self.popens:
            with contextlib.suppress(psutil.Error):
                for kid in psutil.Process(popen.pid).children(recursive=True):
                    if all(kid.pid != o.pid for o in self.others):
                        self.others.append(kid)
        for proc in self.others:  # a waiting grandchild first: its parent is still ours to reap
            with contextlib.suppress(psutil.Error):
                proc.kill()
        for popen in self.popens:
            if popen.poll() is None:
                popen.kill()
            popen.wait(timeout=10)
            for stream in (popen.stdin, popen.stdout, popen.stderr):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()


# A Python program that says "ready" once it is in its loop: a process to attach to, or to describe.
READY_LOOP = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.01)\n"


@contextlib.contextmanager
def ready_loop(python: Sequence[str], cwd: Path | None = None) -> Iterator[subprocess.Popen[str]]:
    """`python` (an interpreter and its flags) running READY_LOOP, handed over once it said "ready"
    (gdb then finds the interpreter's symbols); killed and reaped after, woken first in case a test
    stopped it."""
    proc = subprocess.Popen(
        [*python, "-c", READY_LOOP], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


# -- values ----------------------------------------------------------------------------------------------

_T = TypeVar("_T")


def known(value: _T | None) -> _T:
    """`value`, which the test knows is there (a reading the source always fills): a None fails here,
    and the checker knows the type from now on."""
    assert value is not None
    return value
