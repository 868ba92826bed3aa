"""Sending signals safely.

A target is a (pid, create time) pair taken from the row the user confirmed, never the PID alone: if
the PID now belongs to another process, nothing is sent. Never signalled: pid <= 1, gputui itself, and
its ancestors (the shell, tmux, sshd that gputui runs under).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import psutil

from gputui.model import HostProcess
from gputui.units import printable

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL}
_CREATE_TIME_SLACK = 0.05  # psutil rounds start times to clock ticks


@dataclass(frozen=True, slots=True)
class Target:
    pid: int
    create_time: float | None  # None only when unknown; such a target is refused
    label: str = ""


# What became of one signal; the strings are what the UI says.
Result = Literal["sent", "gone", "already gone", "permission denied", "refused", "still alive"]


@dataclass(frozen=True, slots=True)
class Outcome:
    target: Target
    signal: str
    result: Result
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.result in ("sent", "gone")

    def __str__(self) -> str:
        text = f"{self.signal} → {self.target.pid}"
        if self.target.label:
            text += f" ({self.target.label[:40]})"
        text += f": {self.result}"
        return text + (f" — {self.detail}" if self.detail else "")


@dataclass(frozen=True, slots=True)
class Protected:
    """The processes gputui never signals: itself and its ancestors (its shell, tmux, sshd, ...)."""

    me: int
    ancestors: frozenset[int]

    def why(self, pid: int) -> str | None:
        if pid <= 1:
            return "never signals pid 0 or 1 (init)"
        if pid == self.me:
            return "that is gputui itself"
        if pid in self.ancestors:
            return "that is one of gputui's own ancestors (its shell, tmux, sshd, ...)"
        return None


def protected() -> Protected:
    """gputui and its ancestors, read now."""
    me = os.getpid()
    return Protected(me, frozenset(_ancestors() - {me}))


def describe(pid: int) -> HostProcess | None:
    """What the host says of `pid` now (None: no such process, or not readable): the live side of a
    kill plan, to tell a reused PID and to describe a parent that is not in the snapshot."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            try:
                user: str | None = proc.username()
            except (KeyError, psutil.Error):  # a uid with no name, or not readable
                user = None
            try:
                command = printable(" ".join(proc.cmdline()))
            except psutil.Error:
                command = ""
            return HostProcess(
                pid=pid,
                ppid=proc.ppid(),
                user=user,
                name=proc.name(),
                command=command or None,
                cpu_percent=None,
                rss=None,
                create_time=proc.create_time(),
                state=proc.status(),
            )
    except psutil.Error:
        return None


def same_start(recorded: float | None, live: float | None) -> bool:
    """The same process: the start time the row saw is the one the PID has now (psutil's rounding)."""
    return recorded is not None and live is not None and abs(recorded - live) <= _CREATE_TIME_SLACK


def _ancestors() -> set[int]:
    pids = set()
    try:
        proc: psutil.Process | None = psutil.Process()
        while proc is not None:
            pids.add(proc.pid)
            proc = proc.parent()
    except psutil.Error:
        pass
    return pids


def refusal(target: Target) -> str | None:
    """Why `target` must not be signalled, or None."""
    why = protected().why(target.pid)
    if why:
        return why
    if target.create_time is None:
        return "its start time is unknown, so it cannot be told apart from a reused PID"
    return None


def _matches(target: Target) -> psutil.Process | str:
    """The live process behind `target`, or why there is none."""
    try:
        proc = psutil.Process(target.pid)
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return "already gone"
    except psutil.Error as err:
        return f"cannot read it: {err}"
    if not same_start(target.create_time, started):
        return "the PID now belongs to another process"
    return proc


def target_for(pid: int) -> Target | None:
    """A target for a PID seen just now (the parent of a defunct process, say)."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return Target(pid, proc.create_time(), printable(" ".join(proc.cmdline()) or proc.name()))
    except psutil.Error:
        return None


def children_of(target: Target) -> list[Target]:
    """Descendants of a verified target, deepest first (so parents cannot respawn them)."""
    proc = _matches(target)
    if isinstance(proc, str):
        return []
    out = []
    try:
        kids = proc.children(recursive=True)
    except psutil.Error:
        return []
    for kid in reversed(kids):
        try:
            out.append(Target(kid.pid, kid.create_time(), printable(" ".join(kid.cmdline()) or kid.name())))
        except psutil.Error:
            continue
    return out


def send(targets: Iterable[Target], sig_name: str, include_children: bool = False) -> list[Outcome]:
    sig = SIGNALS[sig_name]
    outcomes: list[Outcome] = []
    for target in targets:
        # The target itself is vetted first: the children of a refused target are never touched.
        vetted = refusal(target) is None and not isinstance(_matches(target), str)
        family = [*children_of(target), target] if include_children and vetted else [target]
        outcomes.extend(_send_one(t, sig_name, sig) for t in family)
    return outcomes


def _send_one(target: Target, sig_name: str, sig: int) -> Outcome:
    why = refusal(target)
    if why:
        return Outcome(target, sig_name, "refused", why)
    proc = _matches(target)
    if isinstance(proc, str):
        result: Result = "already gone" if proc == "already gone" else "refused"
        return Outcome(target, sig_name, result, "" if result == "already gone" else proc)
    try:
        os.kill(target.pid, sig)
    except ProcessLookupError:
        return Outcome(target, sig_name, "already gone")
    except PermissionError:
        return Outcome(target, sig_name, "permission denied", "it belongs to another user; run as root")
    return Outcome(target, sig_name, "sent")


def gone(target: Target) -> bool:
    """Ended: no such process any more, another process has the PID, or it is a zombie (it is dead;
    only its parent's bookkeeping remains)."""
    proc = _matches(target)
    if isinstance(proc, str):
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def await_outcome(
    sent: Iterable[Outcome],
    timeout: float = 5.0,
    poll: float = 0.1,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Outcome]:
    """For each signal that was sent, in the order sent: gone, or still alive after `timeout` seconds.
    The order is the sending's, not the order the processes happened to end in, so that the same kill
    always reads the same (children first, as they were signalled)."""
    pending = dict(enumerate(o for o in sent if o.result == "sent"))
    done: dict[int, Outcome] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for i, o in list(pending.items()):
            if gone(o.target):
                done[i] = Outcome(o.target, o.signal, "gone")
                del pending[i]
        if not pending or time.monotonic() >= deadline:
            break
        sleep(poll)
    for i, o in pending.items():
        done[i] = Outcome(o.target, o.signal, "still alive", f"after {timeout:g} s")
    return [done[i] for i in sorted(done)]
