"""Shared by the real-terminal tests: the demo's process tree as psutil sees it, and a private tmux
server. Everything ever seen is kept so a test's cleanup can end it even when the test failed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_until as _wait_until
from tests.processes import cmdline as _cmdline
from tests.processes import describe as _describe
from tests.processes import gone as _gone
from tests.processes import not_running as _not_running

ROOT = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")
WORKERS = 3  # data-loader workers per demo trainer (DemoSource's default)
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


# -- helpers -----------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    """Our environment without what would fix the terminal size or nest tmux."""
    drop = {"COLUMNS", "LINES", "TMUX", "TMUX_PANE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TERM"] = "xterm-256color"
    return env


def _gputui_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gputui", "--demo", *args]


class DemoProcs:
    """The processes of one running `gputui --demo`, as psutil sees them: everything ever seen is kept,
    so that cleanup can end it even if the test failed half-way through finding it."""

    def __init__(self) -> None:
        self.gputui: psutil.Process | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.devices_dir: Path | None = None
        self.trainers: list[psutil.Process] = []
        self.orphan: psutil.Process | None = None

    def procs(self) -> list[psutil.Process]:
        return list(self.seen.values())

    def scan(self, gpus: int) -> bool:
        """Record the demo's processes; True once all of them are up: a trainer per GPU with its workers,
        trainer 0's defunct child, and the orphan (found through its environment: its parent is gone)."""
        if self.gputui is None:
            return False
        try:
            kids = self.gputui.children(recursive=True)
        except psutil.Error:
            return False
        for k in kids:
            self.seen.setdefault(k.pid, k)
        try:
            trainers = [k for k in kids if k.ppid() == self.gputui.pid and "trainer" in _cmdline(k)]
            if self.devices_dir is None and trainers:
                self.devices_dir = Path(trainers[0].environ()["GPUTUI_DEMO_DEVICES"])
            if len(trainers) != gpus:
                return False
            self.trainers = trainers
            for t in trainers:
                children = t.children()
                live = [c for c in children if c.status() != psutil.STATUS_ZOMBIE]
                defunct = len(children) - len(live)
                if len(live) != WORKERS or defunct != (1 if "--defunct" in _cmdline(t) else 0):
                    return False
        except (psutil.Error, KeyError):
            return False
        orphan = self.orphan = self._find_orphan()
        if orphan is None:
            return False
        self.seen.setdefault(orphan.pid, orphan)
        return True

    def _find_orphan(self) -> psutil.Process | None:
        if self.devices_dir is None:
            return None
        for p in psutil.process_iter(["cmdline"]):
            args = p.info["cmdline"] or []
            if not any(a.endswith("demo_train.py") for a in args) or "orphan-parent" not in args:
                continue
            with contextlib.suppress(psutil.Error):
                if (
                    p.environ().get("GPUTUI_DEMO_DEVICES") == str(self.devices_dir)
                    and p.status() != psutil.STATUS_ZOMBIE
                ):
                    return p
        return None

    def assert_all_gone(self, timeout: float = 3.0) -> None:
        procs = self.procs()
        # Prefer "really gone" (reaped); a zombie left to init is accepted only once the wait is over.
        if not _wait_until(lambda: all(_not_running(p) for p in procs), timeout):
            left = [p for p in procs if not _gone(p)]
            assert not left, f"demo processes still alive: {_describe(left)}"
        devices_dir = self.devices_dir
        assert devices_dir is not None
        assert _wait_until(lambda: not devices_dir.exists(), timeout), devices_dir

    def cleanup(self) -> None:
        """Kill whatever is left (gputui itself is ended by its owner first), remove the directory."""
        for p in self.procs():
            if self.devices_dir is None:  # found no trainer: any demo process names the directory
                with contextlib.suppress(psutil.Error, KeyError):
                    self.devices_dir = Path(p.environ()["GPUTUI_DEMO_DEVICES"])
        for p in self.procs():
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()  # psutil refuses to kill a reused PID
        d = self.devices_dir
        if d is not None and d.name.startswith("gputui-demo-"):
            shutil.rmtree(d, ignore_errors=True)


# -- tmux --------------------------------------------------------------------------------------------


class Tmux:
    """A tmux server of our own (`-L`, a fresh socket name): it never touches the user's server."""

    def __init__(self, conf: Path) -> None:
        assert TMUX is not None
        self.name = f"gputui-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        conf.write_text("set -g status off\n")  # the pane gets every line
        self.base = [TMUX, "-L", self.name, "-f", str(conf)]
        self.socket: str | None = None

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=10, env=_env(), cwd=ROOT, check=False
        )
        if check:
            assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def start(self, width: int, height: int, cmd: list[str]) -> None:
        """Run `cmd` under a shell that prints its exit status in the pane when it ends, then holds the
        terminal open. (tmux 3.3 does not always reap a pane's process at once, so "#{pane_dead_status}"
        cannot be relied on; and what a process writes just before the last writer closes a pty may be
        lost to the reader, so the pane keeps a writer until the server is killed.)"""
        script = '"$@"; echo "exited with status $?"; exec sleep 60'
        self(
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(ROOT),
            "/bin/sh",
            "-c",
            script,
            "sh",
            *cmd,
        )
        self.socket = self("display-message", "-p", "#{socket_path}").strip()

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "main", check=False)

    def pane(self, fmt: str) -> str:
        return self("display-message", "-p", "-t", "main", fmt).strip()

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "main", *keys)

    def kill(self) -> None:
        self("kill-server", check=False)
        if self.socket and self.socket.startswith("/"):
            with contextlib.suppress(OSError):
                os.unlink(self.socket)


def _exited(proc: psutil.Process) -> bool:
    """Not running any more: reaped, or a zombie (its parent, not us, has still to reap it)."""
    if _not_running(proc):
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _gputui_in_pane(pane_pid: int) -> psutil.Process:
    """gputui: the pane's process (the shell) or one of its descendants."""
    top = psutil.Process(pane_pid)
    found: list[psutil.Process] = []

    def look() -> bool:
        with contextlib.suppress(psutil.Error):
            found[:] = [
                p for p in [top, *top.children(recursive=True)] if _cmdline(p)[1:3] == ["-m", "gputui"]
            ]  # not the shell: its argv has them too
        return bool(found)

    assert _wait_until(look, 5.0), f"no gputui in the pane: {_describe([top])}"
    return found[0]


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    server = Tmux(tmp_path / "tmux.conf")
    try:
        yield server
    finally:
        server.kill()
