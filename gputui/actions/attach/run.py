"""Attaching: the agent's files put where the target can read them and nobody else can write, the
bootstrap run in the target (gdb, or sys.remote_exec on Python 3.14+), then its agent's answer awaited.

The bootstrap is one expression that binds no name in the target: it runs gputui_boot.py from the copy,
which starts the agent exactly as `gputui.agent.start()` does (the target's own gputui if it has one).

Leaving gputui during an attach never hurts the job (debugger.py says how a debugger at work is left):
`abandon()` (gputui quitting; Ctrl-C, SIGTERM or SIGHUP in `gputui attach`) stops a debugger that has not
taken the job's GIL yet and leaves one that has to finish on its own, and returns at once; the debugger's
wrapper removes the agent's copy when it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import psutil

import gputui
from gputui.actions.attach import debugger
from gputui.actions.attach.debugger import GRACE_S, Session, bootstrap, gdb_script, lldb_commands
from gputui.actions.attach.preflight import Plan, Refusal, check
from gputui.actions.signals import same_start
from gputui.collect.agents.client import AgentPoller
from gputui.units import printable

__all__ = ["GRACE_S", "bootstrap", "gdb_script", "lldb_commands"]

TIMEOUT_S = 8.0  # the debugger and the agent's first answer, together
POLL_S = 0.05  # how often a wait looks whether it was abandoned
AGENT = "agent"  # the package the target needs of gputui: standard library only, all of it copied
BOOT = "agent/autostart/gputui_boot.py"
_SAFE_PATH = re.compile(r"/[A-Za-z0-9_./-]+")  # quoted into a gdb command and a Python literal


@dataclass(frozen=True)
class Outcome:
    pid: int
    ok: bool
    message: str  # one line
    already: bool = False
    seconds: float | None = None  # how long the debugger held the target (at most: gdb's whole run)
    timed_out: bool = False  # the debugger was stopped at the timeout, before it took the GIL
    refused: bool = False  # nothing was started: the pid is another process's now
    abandoned: bool = False  # gputui is quitting: the debugger was stopped (or never started)
    pending: bool = False  # the debugger is left to finish in the job (its GIL held): the agent may start


# -- attaches under way, and giving them up --------------------------------------------------------------

_lock = threading.RLock()  # re-entrant: a signal handler (abandon) may run in the thread that holds it
_local = threading.local()  # the attempt of the attach() running in this thread
_copies: set[Path] = set()  # agent copies no debugger's wrapper has taken over: removed at exit


class _Attempt:
    """One attach() under way: what abandon() stops."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.abandoned = False
        self.session: Session | None = None
        self.queued = False  # the bootstrap is queued (or run) in the job: its agent's answer is awaited

    def abandon(self) -> str:
        """Give it up; what became of it, in one line."""
        with _lock:
            self.abandoned = True
            session, pid = self.session, self.pid
            if self.queued or (session is not None and debugger.queued(session.text())):  # (detaching)
                return (
                    f"the bootstrap is queued in pid {pid}: its agent starts when the job's main thread next "
                    "runs Python code (`a` on its row next time)"
                )
            if session is None or session.ended():
                return f"the attach to pid {pid} was given up (no debugger was at work in it)"
            name = session.plan.mechanism
            if session.stop():
                return (
                    f"{name} was stopped before it queued the bootstrap in pid {pid}: it detaches, and pid "
                    f"{pid} runs on as it was (nothing was attached)"
                )
            return (
                f"{name} is left to finish queueing the bootstrap in pid {pid} (a moment): the agent starts "
                "when the job's main thread next runs Python code, and the job is not harmed"
            )


_attempts: set[_Attempt] = set()


def abandon() -> list[str]:
    """Give up every attach under way in this process (gputui is quitting), without waiting: a debugger
    that has not taken its target's GIL is interrupted (its call unwound, the process detached, running as
    it was), one that has is left to finish; nothing is started again. What became of each, one line each.
    Safe in a signal handler."""
    with _lock:
        return [attempt.abandon() for attempt in list(_attempts)]


def under_way() -> bool:
    """Whether an attach() is running in this process."""
    with _lock:
        return bool(_attempts)


def _at_exit() -> None:
    """An attach() on a daemon thread is cut off at the interpreter's exit: its debugger is left as
    abandon() leaves it, and a copy it was still preparing is removed."""
    abandon()
    with _lock:
        for root in list(_copies):
            shutil.rmtree(root, ignore_errors=True)
        _copies.clear()


atexit.register(_at_exit)


@contextlib.contextmanager
def _registered() -> Iterator[_Attempt]:
    attempt = _Attempt()
    with _lock:
        _attempts.add(attempt)
    _local.attempt = attempt
    try:
        with _signals_abandon(attempt):
            yield attempt
    finally:
        _local.attempt = None
        with _lock:
            _attempts.discard(attempt)


@contextlib.contextmanager
def _signals_abandon(attempt: _Attempt) -> Iterator[None]:
    """In the main thread (`gputui attach`): SIGINT, SIGTERM and SIGHUP abandon the attach first, then go to
    the handler there was. The debugger has a session of its own: the Ctrl-C typed in the terminal, or its
    hang-up, no longer reaches it by itself. A default or ignored signal is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Callable[[int, FrameType | None], object]] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        attempt.abandon()
        previous[signal.Signals(signum)](signum, frame)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        before = signal.getsignal(sig)
        if callable(before):
            previous[sig] = before
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, then in previous.items():
            signal.signal(sig, then)


# -- attach ---------------------------------------------------------------------------------------------


def attach(pid: int, timeout: float = TIMEOUT_S, create_time: float | None = None) -> Outcome:
    """Start gputui's agent in `pid`; never raises. A second attach finds the agent and does nothing.
    `create_time`: the start time of the process the user chose (read as it was described to them, before
    the question): another process that has since got its pid is refused, checked again just before the
    debugger starts and said right after it returns. `abandon()` cuts it short (see there)."""
    with _registered() as attempt:
        return _attach(pid, timeout, create_time, attempt)


def _attach(pid: int, timeout: float, create_time: float | None, attempt: _Attempt) -> Outcome:
    attempt.pid = pid
    plan = check(pid)
    if isinstance(plan, Refusal):
        return Outcome(pid, False, plan.reason)
    if (changed := _replaced(pid, create_time)) is not None:
        return changed
    if plan.already:
        if answers(pid, 1.0, attempt):
            return Outcome(pid, True, plan.describe(), already=True)
        if plan.mechanism == "agent":  # and this process may not attach: nothing more to try
            return Outcome(pid, False, f"pid {pid} has an agent socket that does not answer")
        # A socket an earlier process with this pid left (or anyone of its user made): attach, and the
        # new agent takes its place.
    outcome = _once(plan, timeout, create_time, attempt)
    if outcome.timed_out and not attempt.abandoned:
        # Stopped at an unlucky instant (inside malloc, whose lock gdb's own call then waits for): the
        # call was unwound, the process runs on; another instant is almost surely fine.
        again = _once(plan, timeout, create_time, attempt)
        fine = again.ok or again.refused or again.pending or again.abandoned
        outcome = again if fine else replace(again, message=again.message + " (twice)")
    return outcome


_ABANDONED_WAITING = (
    "the bootstrap is queued in pid {pid}, and gputui quit before its agent answered (it starts when the "
    "job's main thread next runs Python code: `a` on its row next time)"
)
_QUEUED_WAITING = (
    "the bootstrap is queued in pid {pid}, but its main thread has not run it within {t:g} s (it is inside "
    "a long call, or waits): the agent starts when it next runs Python code, and its ◆ shows then"
)


def _once(plan: Plan, timeout: float, create_time: float | None, attempt: _Attempt) -> Outcome:
    """One try, with a copy of the agent of its own (a debugger's wrapper removes it when it ends)."""
    pid = plan.pid
    deadline = time.monotonic() + timeout
    if (changed := _replaced(pid, create_time)) is not None:
        return changed
    try:
        with payload(plan.uid) as boot:
            if plan.mechanism == "remote_exec":
                outcome = run_remote_exec(plan, boot, timeout)
            else:
                outcome = run_debugger(plan, boot, timeout)
            if outcome.refused or outcome.abandoned or outcome.pending:
                return outcome
            if (changed := _replaced(pid, create_time, during=True)) is not None:
                return replace(changed, seconds=outcome.seconds)
            if not outcome.ok:
                return outcome
            attempt.queued = True
            # gdb returns once the agent's socket is made; remote_exec once the script is queued.
            if answers(pid, max(0.5, deadline - time.monotonic()), attempt):
                return outcome
            if attempt.abandoned:
                return replace(outcome, ok=False, abandoned=True, message=_ABANDONED_WAITING.format(pid=pid))
            if plan.mechanism != "remote_exec":
                waiting = _QUEUED_WAITING.format(pid=pid, t=timeout)
                return replace(outcome, ok=False, pending=True, message=waiting)
    except OSError as err:
        return Outcome(pid, False, f"cannot prepare the agent's files: {printable(err.strerror or str(err))}")
    return Outcome(
        pid,
        False,
        f"the bootstrap was queued in pid {pid} but its agent did not answer within {timeout:g} s "
        "(its stderr says why; a Python started with -I or without a writable /tmp?)",
    )


def _replaced(pid: int, create_time: float | None, during: bool = False) -> Outcome | None:
    """Why not, in one line, when the process the user chose (started at `create_time`) is `pid` no more:
    before the debugger starts (`refused`: nothing was started), or once it has returned (`during`)."""
    if create_time is None:
        return None
    now = start_time(pid)
    if same_start(create_time, now):
        return None
    if not during:
        gone = "has ended" if now is None else "is another process now (the one you chose has ended)"
        return Outcome(pid, False, f"pid {pid} {gone}: nothing was attached", refused=True)
    if now is None:
        return Outcome(pid, False, f"pid {pid} ended during the attach")
    return Outcome(
        pid,
        False,
        f"pid {pid} ended during the attach and is another process now: the agent may have started in that "
        "one, not in the one you chose",
    )


def start_time(pid: int) -> float | None:
    """`pid`'s start time as psutil says it (what attach()'s `create_time` is compared with); None: none."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def answers(pid: int, within: float, attempt: _Attempt | None = None) -> bool:
    """Whether `pid`'s agent answers within `within` seconds, as the monitor asks it (AgentPoller: its socket
    in a trusted directory, served by that very process and user): a socket file alone proves nothing (an
    earlier process with this pid left it, or someone made it)."""
    poller = AgentPoller()
    end = time.monotonic() + within
    while True:
        report = poller.report(pid, deadline_s=min(1.0, within))
        if report is not None and report.ok:
            return True
        if time.monotonic() >= end or (attempt is not None and attempt.abandoned):
            return False
        time.sleep(POLL_S)


@contextlib.contextmanager
def payload(uid: int) -> Iterator[Path]:
    """A fresh copy of the agent in a new directory that only this user (the target's, or root) can write,
    readable by the target; removed afterwards (the target has imported what it needs by then), or by the
    wrapper of a debugger started on it, when the debugger ends. Yields the boot file's path."""
    source = Path(gputui.__file__).parent
    root = Path(tempfile.mkdtemp(prefix="gputui-attach-"))
    with _lock:
        _copies.add(root)
    try:
        for name in agent_files(source):
            dest = root / "gputui" / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, dest)
        if os.geteuid() == 0 and uid != 0:  # root's copy: the target may read it, only root write it
            for path in (root, *root.rglob("*")):
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
        boot = root / "gputui" / BOOT
        if not _SAFE_PATH.fullmatch(str(boot)):  # TMPDIR with a quote or a space in it
            raise OSError(f"the temporary directory {printable(str(root))!r} has characters gdb cannot quote")
        yield boot
    finally:
        with _lock:
            ours = root in _copies
            _copies.discard(root)
        if ours:
            shutil.rmtree(root, ignore_errors=True)


def agent_files(source: Path) -> list[str]:
    """What the target needs of gputui, relative to the package: every module of the agent package (found,
    not listed: a module added to the agent is copied too) and gputui/__init__.py, which imports nothing
    (a test reads the imports of the copy)."""
    modules = (p.relative_to(source) for p in (source / AGENT).rglob("*.py"))
    return ["__init__.py", *sorted(p.as_posix() for p in modules if "__pycache__" not in p.parts)]


# -- gdb and lldb (debugger.py) ---------------------------------------------------------------------


def run_debugger(plan: Plan, boot: Path, timeout: float) -> Outcome:
    """The debugger, once, on the copy at `boot`: until it has ended, or the timeout or abandon() stops
    it. One that cannot be stopped any more (queueing the bootstrap, or lldb) is left to finish: `pending`.
    Its janitor keeps the copy for the job, then removes it."""
    attempt: _Attempt = getattr(_local, "attempt", None) or _Attempt()
    name = plan.mechanism
    with _lock:  # abandon() either sees it started, or it is not started
        if attempt.abandoned:
            return Outcome(plan.pid, False, f"{name} was not started: gputui is quitting", abandoned=True)
        session = debugger.start(plan, boot, timeout)
        if isinstance(session, str):
            return Outcome(plan.pid, False, session)
        _copies.discard(session.root)  # the janitor's to remove now
        attempt.session = session
    try:
        if not _wait(session, attempt, session.started + timeout) and session.stop():
            _wait(session, None, time.monotonic() + GRACE_S)  # unwinding its malloc, detaching
    except BaseException:  # a signal's SystemExit or KeyboardInterrupt: left as abandon() leaves it
        session.stop()
        raise
    finally:
        with _lock:  # abandon() sees the session, or that the bootstrap is queued: never neither
            if debugger.queued(session.text()):
                attempt.queued = True
            attempt.session = None
    out = session.text()
    session.output.close()
    seconds = time.monotonic() - session.started
    pid = plan.pid
    if debugger.queued(out):
        return Outcome(pid, True, f"attached to pid {pid} with {name}", seconds=seconds)
    if not session.ended() and not session.stopped:
        return Outcome(
            pid,
            False,
            f"{name} is still at work in pid {pid}: it is left to finish on its own (never interrupted "
            "while it queues the bootstrap), and the agent starts when it is done; the job is not harmed",
            seconds=seconds,
            abandoned=attempt.abandoned,
            pending=True,
        )
    if session.stopped and attempt.abandoned:
        return Outcome(
            pid,
            False,
            f"{name} was stopped as gputui quit, before it queued the bootstrap: it detached, and pid {pid} "
            "runs on as it was (nothing was attached)",
            seconds=seconds,
            abandoned=True,
        )
    if session.stopped:
        return Outcome(
            pid,
            False,
            f"{name} did not finish within {timeout:g} s (the target may hold a lock its call needs): it was "
            f"stopped before it queued the bootstrap, and detached; pid {pid} runs on as it was",
            seconds=seconds,
            timed_out=True,
        )
    return Outcome(pid, False, debugger.failure(pid, name, out), seconds=seconds)


run_gdb = run_debugger  # the name the tests and the timeout's story use


def _wait(session: Session, attempt: _Attempt | None, deadline: float) -> bool:
    """Until the debugger has ended (True), or the deadline passes or the attach is abandoned."""
    while True:
        if session.ended():
            return True
        if (attempt is not None and attempt.abandoned) or time.monotonic() >= deadline:
            return False
        with contextlib.suppress(subprocess.TimeoutExpired):
            session.proc.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))


# -- sys.remote_exec (Python 3.14+) ------------------------------------------------------------------


def run_remote_exec(plan: Plan, boot: Path, timeout: float) -> Outcome:
    """The target's own interpreter (/proc/PID/exe: sys.remote_exec needs the same version) queues the
    bootstrap; the target runs it at its next safe point, without being stopped."""
    script = boot.parent / "attach_remote.py"
    script.write_text(bootstrap(boot) + "\n")
    if os.geteuid() == 0 and plan.uid != 0:
        os.chmod(script, 0o644)
    code = f"import sys; sys.remote_exec({plan.pid}, {str(script)!r})"
    started = time.monotonic()
    try:
        # -I -S: none of the user's site-packages or .pth files run in it (gputui may be root).
        done = subprocess.run(
            [plan.tool, "-I", "-S", "-c", code],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Outcome(plan.pid, False, f"sys.remote_exec did not return within {timeout:g} s")
    except OSError as err:
        why = printable(err.strerror or str(err))
        return Outcome(plan.pid, False, f"cannot run {printable(plan.tool)}: {why}")
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        return Outcome(plan.pid, False, f"sys.remote_exec failed: {printable(last[0])[:160]}")
    return Outcome(
        plan.pid, True, f"attached to pid {plan.pid} with sys.remote_exec", seconds=time.monotonic() - started
    )
