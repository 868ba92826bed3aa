"""Small helpers about real processes, shared by the tests that start them (the demo, gputui itself).
Waiting for one is tests/helpers.py's `wait_until`."""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil


def cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def not_running(proc: psutil.Process) -> bool:
    """Reaped (or its PID reused by another process: is_running() compares creation times)."""
    try:
        return not proc.is_running()
    except psutil.Error:
        return True


def gone(proc: psutil.Process) -> bool:
    """Not running, or at most a zombie that some other process (init, a subreaper) has still to reap."""
    if not_running(proc):
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() != os.getpid()
    except psutil.Error:
        return True


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    """One line per process, for assertion messages."""
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {p.status()} ppid={p.ppid()} {' '.join(p.cmdline())[-80:]}")
        except psutil.Error as err:
            out.append(f"{p.pid} ({type(err).__name__})")
    return out
