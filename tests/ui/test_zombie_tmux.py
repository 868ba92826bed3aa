"""The zombie hunt end to end, in a real terminal: `gputui --demo` in a tmux pane of its own, `z` for the
suspicious processes, the cursor onto the demo's orphaned worker, `k`, `y`: the orphan really ends, its row
goes, the status line says so; `q` then leaves nothing behind.

Whatever happens, the `finally` kills the tmux server (its own `-L` socket), gputui and every demo process
the test saw, and removes the demo's stand-in device directory (helpers copied from test_terminal.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")
WORKERS = 3  # data-loader workers per demo trainer (DemoSource's default)
GPUS = 2
WIDTH, HEIGHT = 120, 40
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


# -- processes ---------------------------------------------------------------------------------------


def _wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def _env() -> dict[str, str]:
    """Our environment without what would fix the terminal size or nest tmux."""
    drop = {"COLUMNS", "LINES", "TMUX", "TMUX_PANE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TERM"] = "xterm-256color"
    return env


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _not_running(proc: psutil.Process) -> bool:
    """Reaped (or its PID reused by another process: is_running() compares creation times)."""
    try:
        return not proc.is_running()
    except psutil.Error:
        return True


def _exited(proc: psutil.Process) -> bool:
    """Not running any more: reaped, or a zombie (its parent, not us, has still to reap it)."""
    if _not_running(proc):
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {p.status()} ppid={p.ppid()} {' '.join(p.cmdline())[-80:]}")
        except psutil.Error as err:
            out.append(f"{p.pid} ({type(err).__name__})")
    return out


class DemoProcs:
    """The processes of one running `gputui --demo`; everything ever seen is kept for the cleanup."""

    def __init__(self) -> None:
        self.gputui: psutil.Process | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.devices_dir: Path | None = None
        self.orphan: psutil.Process | None = None

    def procs(self) -> list[psutil.Process]:
        return list(self.seen.values())

    def scan(self, gpus: int) -> bool:
        """Record the demo's processes; True once all are up: a trainer per GPU with its workers, trainer
        0's defunct child, and the orphan (found through its environment: its parent is gone)."""
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
            for t in trainers:
                children = t.children()
                live = [c for c in children if c.status() != psutil.STATUS_ZOMBIE]
                defunct = len(children) - len(live)
                if len(live) != WORKERS or defunct != (1 if "--defunct" in _cmdline(t) else 0):
                    return False
        except (psutil.Error, KeyError):
            return False
        self.orphan = self._find_orphan()
        if self.orphan is None:
            return False
        self.seen.setdefault(self.orphan.pid, self.orphan)
        return True

    def _find_orphan(self) -> psutil.Process | None:
        if self.devices_dir is None:
            return None
        for p in psutil.process_iter(["cmdline"]):
            args = p.info["cmdline"] or []
            if not any(a.endswith("demo_train.py") for a in args) or "orphan-parent" not in args:
                continue
            with contextlib.suppress(psutil.Error):
                if (p.environ().get("GPUTUI_DEMO_DEVICES") == str(self.devices_dir)
                        and p.status() != psutil.STATUS_ZOMBIE):
                    return p
        return None

    def assert_all_gone(self, timeout: float = 5.0) -> None:
        procs = self.procs()
        # Prefer reaped; a zombie left to init (which reaps slowly on some hosts) is accepted at the end.
        if not _wait_until(lambda: all(_not_running(p) for p in procs), timeout):
            left = [p for p in procs if not _exited(p) or _ours(p)]
            assert not left, f"demo processes still alive: {_describe(left)}"
        assert self.devices_dir is not None
        assert _wait_until(lambda: not self.devices_dir.exists(), timeout), self.devices_dir

    def cleanup(self) -> None:
        """Kill whatever is left (gputui itself is ended by its owner first), remove the directory."""
        for p in self.procs():
            if self.devices_dir is None:
                with contextlib.suppress(psutil.Error, KeyError):
                    self.devices_dir = Path(p.environ()["GPUTUI_DEMO_DEVICES"])
        for p in self.procs():
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()  # psutil refuses to kill a reused PID
        d = self.devices_dir
        if d is not None and d.name.startswith("gputui-demo-"):
            shutil.rmtree(d, ignore_errors=True)


def _ours(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return proc.ppid() == os.getpid()
    return False


def _in_proc(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


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
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=10, env=_env(),
                              cwd=ROOT, check=False)
        if check:
            assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def start(self, width: int, height: int, cmd: list[str]) -> None:
        """`cmd` under a shell that prints its exit status when it ends and then keeps the pane open."""
        script = '"$@"; echo "exited with status $?"; exec sleep 60'
        self("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), "-c", str(ROOT),
             "/bin/sh", "-c", script, "sh", *cmd)
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


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    server = Tmux(tmp_path / "tmux.conf")
    try:
        yield server
    finally:
        server.kill()


def _gputui_in_pane(pane_pid: int) -> psutil.Process:
    """gputui: the pane's process (the shell) or one of its descendants."""
    top = psutil.Process(pane_pid)
    found: list[psutil.Process] = []

    def look() -> bool:
        with contextlib.suppress(psutil.Error):
            found[:] = [p for p in [top, *top.children(recursive=True)]
                        if _cmdline(p)[1:3] == ["-m", "gputui"]]  # not the shell: its argv has them too
        return bool(found)

    assert _wait_until(look, 5.0), f"no gputui in the pane: {_describe([top])}"
    return found[0]


@contextlib.contextmanager
def _demo_in_tmux(tmux: Tmux) -> Iterator[DemoProcs]:
    """gputui --demo --demo-gpus 2 in a 120x40 pane, drawn, every demo process up."""
    demo = DemoProcs()
    try:
        tmux.start(WIDTH, HEIGHT, [sys.executable, "-m", "gputui", "--demo", "--demo-gpus", str(GPUS)])
        assert tmux.pane("#{pane_width}x#{pane_height}") == f"{WIDTH}x{HEIGHT}"
        demo.gputui = _gputui_in_pane(int(tmux.pane("#{pane_pid}")))
        screen = ""

        def drawn() -> bool:
            nonlocal screen
            screen = tmux.screen()
            lines = screen.splitlines()
            return bool(lines) and "DEMO" in lines[0] and "demo_train.py" in screen

        assert _wait_until(drawn, 15.0), f"the screen never showed the demo:\n{screen}"
        assert _wait_until(lambda: demo.scan(GPUS), 5.0), f"demo incomplete: {_describe(demo.procs())}"
        yield demo
    finally:
        if demo.gputui is not None:
            demo.scan(GPUS)  # whatever appeared since
        tmux.kill()  # SIGHUP to the pane's process
        if demo.gputui is not None:
            gputui = demo.gputui
            _wait_until(lambda: _exited(gputui), 3.0)
            with contextlib.suppress(psutil.Error):
                gputui.kill()  # psutil refuses to kill a reused PID
        demo.cleanup()


# -- reading the screen ------------------------------------------------------------------------------


def _table(screen: str) -> tuple[str, list[str]]:
    """The process table's header line and the lines under it, up to the first blank one."""
    lines = screen.splitlines()
    top = next(i for i, line in enumerate(lines) if re.match(r"^\s*GPU\S*\s+PID", line))
    body = []
    for line in lines[top + 1:]:
        if not line.strip():
            break
        body.append(line)
    return lines[top], body


def _row_pid(line: str) -> int | None:
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _class(header: str, line: str) -> str:
    """The CLASS cell of a row (in the zombies view the column after it is REASON · COMMAND)."""
    return line[header.index("CLASS"):header.index("REASON")].strip()


@needs_tmux
def test_tmux_z_k_y_ends_the_orphan(tmux: Tmux) -> None:
    with _demo_in_tmux(tmux) as demo:
        assert demo.orphan is not None and demo.gputui is not None
        orphan = demo.orphan.pid
        tmux.keys("z")
        screen = ""

        def zombies_drawn() -> bool:
            nonlocal screen
            screen = tmux.screen()
            with contextlib.suppress(StopIteration):
                header, body = _table(screen)
                return "REASON · COMMAND" in header and orphan in map(_row_pid, body)
            return False

        assert _wait_until(zombies_drawn, 5.0), f"no orphan in the zombies view:\n{screen}"
        header, body = _table(screen)
        pids = [_row_pid(line) for line in body]
        index = pids.index(orphan)
        assert _class(header, body[index]) == "orphan", body[index]
        assert "parent gone" in body[index], body[index]
        # Only suspicious rows: no trainer (class ok) is listed.
        assert all(_class(header, line) != "ok" for line in body), screen

        tmux.keys("Home", *["Down"] * index, "k")

        def dialog() -> bool:
            nonlocal screen
            screen = tmux.screen()
            return "Send a signal to 1 process?" in screen

        assert _wait_until(dialog, 5.0), f"no kill dialog:\n{screen}"
        # The dialog's list, inside its frame: "│  PID  USER  CLASS ...".
        listed = [line.split()[1:4] for line in screen.splitlines()
                  if line.lstrip().startswith("│") and len(line.split()) > 3 and line.split()[1].isdigit()]
        assert [row[0] for row in listed] == [str(orphan)], f"not a dialog for the orphan {orphan}:\n{screen}"
        assert listed[0][2] == "orphan", screen
        assert "SIGTERM" in screen and "Cancel" in screen

        tmux.keys("y")
        status = re.compile(rf"SIGTERM → {orphan} \(.*\): gone")

        def ended() -> bool:
            nonlocal screen
            screen = tmux.screen()
            with contextlib.suppress(StopIteration):
                rows = [_row_pid(line) for line in _table(screen)[1]]
                return not _in_proc(orphan) and status.search(screen) is not None and orphan not in rows
            return False

        # init reaps the orphan: on some hosts only every second or two.
        assert _wait_until(ended, 8.0), (f"orphan {orphan} in /proc: {_in_proc(orphan)}, "
                                         f"still a demo process: {_describe([demo.orphan])}\n{screen}")
        assert "Send a signal" not in screen
        # Everything else of the demo is untouched.
        assert all(not _exited(p) for p in demo.procs() if p.pid != orphan
                   and p.status() != psutil.STATUS_ZOMBIE), _describe(demo.procs())

        tmux.keys("q")
        exit_status = re.compile(r"^exited with status (\d+)$", re.MULTILINE)
        gputui = demo.gputui

        def quit_() -> bool:
            nonlocal screen
            screen = tmux.screen()
            return _exited(gputui) and exit_status.search(screen) is not None

        assert _wait_until(quit_, 5.0), f"gputui did not exit on q:\n{screen}"
        assert "Traceback" not in screen, screen
        match = exit_status.search(screen)
        assert match is not None and match.group(1) == "0", screen
        demo.assert_all_gone()
