"""A Python job whose GIL a C call holds: the job a debugger's `PyGILState_Ensure` used to wait inside (and
quitting gputui then killed). Run as a program by the tests:

    python gil_hog.py SECONDS

It prints "ready", then waits for a line on its standard input (a number there: seconds instead of
SECONDS); then a thread holds the GIL for SECONDS (ctypes.PyDLL keeps it through libc's usleep()) while
"holding" is printed and the main thread waits in join(); once the thread lets go the main thread prints
"alive", then "tick N" every 50 ms for ever: a job that runs on.

`Hog` starts it and reads its lines on a thread of its own (its pipe never fills); `copies_for` and
`wait_queued` follow an attach through the janitor that keeps the agent's copy for it.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from gputui.actions.attach.debugger import JANITOR, TAKEN

HERE = Path(__file__)


def main(seconds: float) -> None:
    print("ready", flush=True)
    line = sys.stdin.readline().strip()
    seconds = float(line) if line else seconds
    libc = ctypes.PyDLL(None)  # PyDLL: the GIL is not released around the call
    hog = threading.Thread(target=lambda: libc.usleep(int(seconds * 1e6)))
    print("holding", flush=True)
    hog.start()
    hog.join()
    print("alive", flush=True)
    n = 0
    while True:
        n += 1
        print(f"tick {n}", flush=True)
        time.sleep(0.05)


HOLD_S = 6.0  # the tests' job: how long its C call holds the GIL (a debugger waits in it all that time)


class Hog:
    """The job, started; every line it printed is kept."""

    def __init__(self, seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # no terminal's hang-up or Ctrl-C reaches it but what a test sends
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, name="hog-reader", daemon=True).start()
        assert _wait_until(lambda: "ready" in self.said(), 20.0), "the job did not start"
        time.sleep(0.2)  # its libpython's symbols are mapped: a debugger finds PyGILState_Ensure

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def said(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def ticks(self) -> int:
        return sum(line.startswith("tick ") for line in self.said())

    def hold(self) -> None:
        """The thread takes the GIL now, for the SECONDS it was started with."""
        self._go("")
        time.sleep(0.2)  # the thread is in its C call with the GIL

    def hold_briefly(self) -> None:
        """A hold of 10 ms: from then on the job ticks, its GIL free for a debugger at once."""
        self._go("0.01")
        assert _wait_until(lambda: self.ticks() >= 1, 5.0)

    def _go(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert _wait_until(lambda: "holding" in self.said(), 5.0)

    def state(self) -> str:
        """Its threads' states (R, S, t, T, ...), one letter each."""
        out = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            out.append(stat.rsplit(")", 1)[1].split()[0])
        return "".join(out)

    def main_state(self) -> str:
        """Its main thread's state (R, S, t, ...); "" once it is gone."""
        try:
            return Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return ""

    def tracer(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def stacks(self) -> str:
        """Its threads' C stacks, for a message when it stops running on."""
        try:
            done = subprocess.run(
                ["gdb", "-p", str(self.pid), "--batch", "-nx", "-ex", "thread apply all bt 15"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"no stacks: {err}"
        return done.stdout[-6000:]

    def runs_on(self, within: float) -> bool:
        """It ticks (5 more than now) within `within` seconds."""
        ticks = self.ticks()
        return _wait_until(lambda: self.ticks() >= ticks + 5, within)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


# Not tests/helpers.py's: this file runs as a program too, where the `tests` package is not importable.
def _wait_until(pred, timeout: float, step: float = 0.02) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


def debuggers_of(pid: int) -> list[psutil.Process]:
    """The debuggers (gdb, cuda-gdb, lldb) with `-p PID` on their command line: attached, or about to be."""
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        name, cmdline = proc.info["name"] or "", proc.info["cmdline"] or []
        if ("gdb" in name or "lldb" in name) and str(pid) in cmdline:
            out.append(proc)
    return out


def copies_for(pid: int) -> list[Path]:
    """The agent's copies whose janitors (gputui.actions.attach.debugger.JANITOR) work for `pid`: each janitor
    keeps its copy until the job has run the bootstrap, has ended, or an hour has passed."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "-c" in cmdline and len(cmdline) > cmdline.index("-c") + 3:
            at = cmdline.index("-c")
            if cmdline[at + 1] == JANITOR and cmdline[at + 3] == str(pid):
                out.append(Path(cmdline[at + 2]))
    return out


def wait_queued(pid: int, timeout: float = 20.0) -> Path:
    """Until a debugger has queued the bootstrap in `pid` and left (its janitor keeps the copy): the copy."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        copies = copies_for(pid)
        if len(copies) == 1 and (copies[0] / TAKEN).exists() and debuggers_of(pid) == []:
            return copies[0]
        time.sleep(0.02)
    raise AssertionError(f"no debugger queued the bootstrap in pid {pid}")


if __name__ == "__main__":
    main(float(sys.argv[1]))
