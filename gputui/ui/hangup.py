"""Leaving on a signal, and when the terminal goes away with or without a SIGHUP.

When an SSH connection drops, the kernel sends SIGHUP to the terminal's foreground job and the apps
exit on it. A terminal can also vanish with no signal at all: a process without a controlling terminal
(started by a supervisor, by `setsid`, by a test harness) whose pty is closed. Textual then spins on its
dead input (select() is always ready) and its output thread dies, so the event loop blocks on a full
write queue while the sampler's snapshots pile up: an orphaned `gputui` measured 100 % of a core and
500 MiB after an hour. A thread blocked in poll() on the terminal, asking for no events, costs nothing
and wakes only on the hang-up; it then sends the SIGHUP that never came.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


def exit_after(seconds: float, code: int, cleanup: Callable[[], None] | None = None) -> None:
    """End the process in `seconds` should it still run: a clean exit can block on a dead terminal."""

    def end() -> None:
        try:
            if cleanup is not None:
                cleanup()
        finally:
            os._exit(code)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def finish_within(seconds: float, fn: Callable[[], None]) -> bool:
    """Call `fn` on a daemon thread; whether it returned within `seconds` (if not, it is left behind and
    ends with the process). Closing NVML may wait for the very call that is stuck. An exception of `fn`
    is raised here."""
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as err:
            errors.append(err)
        finally:
            done.set()

    threading.Thread(target=run, name="gputui-close", daemon=True).start()
    finished = done.wait(seconds)
    if errors:
        raise errors[0]
    return finished


def terminal_fd() -> int | None:
    """The terminal the app reads keys from (Textual reads stdin), or None when stdin is not one."""
    try:
        fd = sys.__stdin__.fileno() if sys.__stdin__ is not None else -1
    except (AttributeError, ValueError, OSError):
        return None
    return fd if fd >= 0 and os.isatty(fd) else None


def watch(fd: int, cleanup: Callable[[], None] | None = None) -> threading.Thread:
    """From now on, a hang-up of terminal `fd` is a SIGHUP to this process, and the process ends at
    most 2 s later (after `cleanup`) if the app's own SIGHUP handler cannot finish."""

    def wait() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # no events asked for: poll() returns on a hang-up or an error only
        while not any(events & _GONE for _, events in poller.poll()):
            pass
        exit_after(2.0, 128 + signal.SIGHUP, cleanup)
        os.kill(os.getpid(), signal.SIGHUP)

    thread = threading.Thread(target=wait, name="gputui-hangup", daemon=True)
    thread.start()
    return thread


class DaemonThreads(ThreadPoolExecutor):
    """The event loop's default executor, which runs Textual's thread workers: every call on a daemon
    thread of its own, and shutdown() never waits. asyncio.run() joins the default executor's threads
    when the app ends, and Python joins every ThreadPoolExecutor thread at exit: a sample stuck in a hung
    NVML call kept gputui running for 80 s after `q`, one stuck on an agent that never finished its
    answer, forever. What such a thread was doing is of no use once the app is gone."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as err:  # handed to whoever waits on the future, as the pool does
                future.set_exception(err)
            else:
                future.set_result(result)

        threading.Thread(target=run, name="gputui-worker", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # never wait for a thread that may never come back


def guard(
    on_signal: Callable[[int], None], cleanup: Callable[[], None] | None = None, terminal: bool = True
) -> None:
    """Call first thing on an app's event loop: SIGHUP, SIGTERM and SIGINT go to `on_signal` from the
    loop's first moment (before, cli.py's handler would raise SystemExit inside one of Textual's tasks,
    which prints a traceback), and, if `terminal`, a hang-up of the terminal becomes a SIGHUP. Thread
    workers run on daemon threads that the exit never waits for (see DaemonThreads)."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonThreads())
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    if terminal and (fd := terminal_fd()) is not None:
        watch(fd, cleanup)
