"""Real children that hold stand-in device files (regular files named like /dev/nvidia0, nvidiactl, ... in a
private directory) exactly as a CUDA process holds the real ones, so that a scan reads their real
/proc/PID/fd. Shared by the holder scanner's tests and `gputui doctor --pid`'s.

Each child takes commands on its stdin and answers on its stdout, so a test knows when it has done what
it was asked:
  open PATH / close PATH       open or close a file; answers "ok"
  zombie                       forks a child that exits at once and is never waited for; answers its pid
  reap PID                     waits for that child after all
  fork-holder                  forks a child that inherits every open file and waits for a signal; its pid
With GPUTUI_TEST_DROP set it becomes user nobody after opening its files (and stays dumpable, so that
nobody can read its /proc/PID/fd).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.helpers import Children
from tests.processes import describe

CHILD = r"""
import os, signal, sys
fds = {}

def do(cmd, arg):
    if cmd == "open":
        fds[arg] = os.open(arg, os.O_RDONLY)
    elif cmd == "close":
        os.close(fds.pop(arg))
    elif cmd == "reap":
        os.waitpid(int(arg), 0)
    elif cmd in ("zombie", "fork-holder"):
        pid = os.fork()
        if pid == 0:
            if cmd == "fork-holder":
                while True:
                    signal.pause()
            os._exit(0)
        return str(pid)
    else:
        return "unknown command " + cmd
    return "ok"

for path in sys.argv[1:]:
    do("open", path)
if os.environ.get("GPUTUI_TEST_DROP"):
    import ctypes
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/PID/fd is nobody's
print("ready", flush=True)
for line in sys.stdin:
    cmd, _, arg = line.rstrip("\n").partition(" ")
    print(do(cmd, arg), flush=True)
"""


class Child:
    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self.popen = popen
        self.pid = popen.pid

    def ask(self, command: str) -> str:
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.popen.stdin.write(command + "\n")
        self.popen.stdin.flush()
        answer = self.popen.stdout.readline().strip()
        assert answer, f"child {self.pid} died on {command!r}"
        return answer


class Spawner:
    """`holders(*names)`: a child holding those files of `devices`. What it forks (`fork`) is ended with
    it, by the `holders` fixture's teardown, which then checks that every one of them is gone."""

    def __init__(self, devices: Path, children: Children) -> None:
        self.devices = devices
        self.children = children

    def __call__(self, *names: str, env: dict[str, str] | None = None, drop: bool = False) -> Child:
        if env is None:  # not the CUDA device choice of whoever runs the tests: `doctor --pid` reads it
            env = {
                k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
            }
        env = dict(env)
        if drop:
            env["GPUTUI_TEST_DROP"] = "1"
        argv = [sys.executable, "-c", CHILD, *(str(self.devices / n) for n in names)]
        child = Child(self.children(argv, stdin=subprocess.PIPE, env=env))
        assert child.popen.stdout is not None
        assert child.popen.stdout.readline().strip() == "ready", "the child did not start"
        return child

    def fork(self, parent: Child, command: str) -> int:
        """`command` ("zombie", "fork-holder") to `parent`; the PID of the grandchild it forked."""
        pid = int(parent.ask(command))
        with contextlib.suppress(psutil.NoSuchProcess):
            self.children.adopt(pid)
        return pid

    def end(self) -> None:
        self.children.end()
        # Grandchildren are reaped by their parent's reaper (init) once the parent is gone.
        left = self.children.stragglers()
        assert not left, describe(left)
