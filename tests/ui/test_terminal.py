"""`gputui --demo` in real terminals: tmux panes of two sizes, and a pseudo-terminal (SIGHUP, mouse).

Each test starts gputui as a process of its own, records the demo's processes (psutil) as soon as they
exist, and in a `finally` ends whatever is left of them: gputui, the tmux server, the demo processes,
the stand-in device directory. Every process the test itself starts is waited for.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")
WORKERS = 3  # data-loader workers per demo trainer (DemoSource's default)
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


# -- helpers -----------------------------------------------------------------------------------------


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


def _gputui_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gputui", "--demo", *args]


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


def _gone(proc: psutil.Process) -> bool:
    """Not running, or at most a zombie that some other process (init, a subreaper) has still to reap."""
    if _not_running(proc):
        return True
    try:
        return proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() != os.getpid()
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
    """The processes of one running `gputui --demo`, as psutil sees them: everything ever seen is kept,
    so that cleanup can end it even if the test failed half-way through finding it."""

    def __init__(self) -> None:
        self.gputui: psutil.Process | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.devices_dir: Path | None = None
        self.trainers: list[psutil.Process] = []

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
        orphan = self._find_orphan()
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
                if (p.environ().get("GPUTUI_DEMO_DEVICES") == str(self.devices_dir)
                        and p.status() != psutil.STATUS_ZOMBIE):
                    return p
        return None

    def assert_all_gone(self, timeout: float = 3.0) -> None:
        procs = self.procs()
        # Prefer "really gone" (reaped); a zombie left to init is accepted only once the wait is over.
        if not _wait_until(lambda: all(_not_running(p) for p in procs), timeout):
            left = [p for p in procs if not _gone(p)]
            assert not left, f"demo processes still alive: {_describe(left)}"
        assert self.devices_dir is not None
        assert _wait_until(lambda: not self.devices_dir.exists(), timeout), self.devices_dir

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
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=10, env=_env(),
                              cwd=ROOT, check=False)
        if check:
            assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def start(self, width: int, height: int, cmd: list[str]) -> None:
        """Run `cmd` under a shell that prints its exit status in the pane when it ends, then holds the
        terminal open. (tmux 3.3 does not always reap a pane's process at once, so "#{pane_dead_status}"
        cannot be relied on; and what a process writes just before the last writer closes a pty may be
        lost to the reader, so the pane keeps a writer until the server is killed.)"""
        script = '"$@"; echo "exited with status $?"; exec sleep 60'
        self("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), "-c", str(ROOT),
             "/bin/sh", "-c", script, "sh", *cmd)
        self.socket = self("display-message", "-p", "#{socket_path}").strip()

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "main", check=False)

    def pane(self, fmt: str) -> str:
        return self("display-message", "-p", "-t", "main", fmt).strip()

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
            found[:] = [p for p in [top, *top.children(recursive=True)]
                        if _cmdline(p)[1:3] == ["-m", "gputui"]]  # not the shell: its argv has them too
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


@contextlib.contextmanager
def _demo_in_tmux(tmux: Tmux, width: int, height: int, gpus: int,
                  drawn: Callable[[str], bool]) -> Iterator[tuple[DemoProcs, str]]:
    """gputui --demo in a `width` x `height` pane until the screen passes `drawn` and every demo process
    is up; yields them and that screen. Afterwards the server is killed and the demo's leftovers too."""
    demo = DemoProcs()
    try:
        tmux.start(width, height, _gputui_cmd("--demo-gpus", str(gpus)))
        assert tmux.pane("#{pane_width}x#{pane_height}") == f"{width}x{height}"
        demo.gputui = _gputui_in_pane(int(tmux.pane("#{pane_pid}")))
        screen = ""

        def ready() -> bool:
            nonlocal screen
            screen = tmux.screen()
            return drawn(screen)

        assert _wait_until(ready, 15.0), f"the screen never showed everything:\n{screen}"
        assert _wait_until(lambda: demo.scan(gpus), 5.0), f"demo incomplete: {_describe(demo.procs())}"
        yield demo, screen
    finally:
        if demo.gputui is not None:
            demo.scan(gpus)  # whatever appeared since
        tmux.kill()  # SIGHUP to the pane's process
        if demo.gputui is not None:
            gputui = demo.gputui
            _wait_until(lambda: _exited(gputui), 3.0)
            with contextlib.suppress(psutil.Error):
                gputui.kill()  # psutil refuses to kill a reused PID
        demo.cleanup()


def _quit_with_q(tmux: Tmux, demo: DemoProcs) -> None:
    assert demo.gputui is not None
    tmux("send-keys", "-t", "main", "q")
    # Not psutil's wait(): gputui is not our child, and PIDs are reused fast on a busy machine. The
    # shell around it reaps it and prints its status in the pane.
    gputui = demo.gputui
    status = re.compile(r"^exited with status (\d+)$", re.MULTILINE)
    after = ""

    def ended() -> bool:
        nonlocal after
        after = tmux.screen()
        return _exited(gputui) and status.search(after) is not None

    if not _wait_until(ended, 5.0):
        pytest.fail(f"gputui did not exit on q:\n{after}")
    assert "Traceback" not in after, after
    match = status.search(after)
    assert match is not None and match.group(1) == "0", after
    demo.assert_all_gone()


def _header_says_demo(screen: str) -> bool:
    lines = screen.splitlines()
    return bool(lines) and "DEMO" in lines[0]


def _gpu_lines(screen: str, gpus: int) -> list[int]:
    """The index of the first line showing each GPU's name, -1 where none does."""
    lines = screen.splitlines()
    out = []
    for i in range(gpus):
        pattern = re.compile(rf"^\s*{i} H100\b")
        out.append(next((n for n, line in enumerate(lines) if pattern.match(line)), -1))
    return out


# GPU PID USER ... GPU MEM ...: narrow terminals drop some columns, never these.
_ROW = re.compile(r"^\s*(\d{1,2})\s+(\d+)\s+\S+\s.*?\d GiB\b")


def _rows(screen: str) -> dict[int, str]:
    """The process rows on screen, by pid."""
    return {int(m.group(2)): line for line in screen.splitlines() if (m := _ROW.match(line))}


@needs_tmux
def test_tmux_120x40_shows_every_gpu_and_quits_cleanly(tmux: Tmux) -> None:
    def drawn(screen: str) -> bool:
        return _header_says_demo(screen) and min(_gpu_lines(screen, 4)) >= 0 and "demo_train.py" in screen

    with _demo_in_tmux(tmux, 120, 40, 4, drawn) as (demo, screen):
        # Full layout: each GPU's pane has more than one line (its sparklines under the name).
        first = _gpu_lines(screen, 4)
        assert all(b - a > 1 for a, b in itertools.pairwise(first)), screen
        rows = _rows(screen)
        for trainer in demo.trainers:
            assert trainer.pid in rows, screen
            assert "demo_train.py" in rows[trainer.pid], rows[trainer.pid]
        assert len(demo.procs()) >= 4 + 4 * WORKERS + 1 + 1  # trainers, workers, the defunct, the orphan
        assert demo.devices_dir is not None and demo.devices_dir.is_dir()
        assert demo.devices_dir.name.startswith("gputui-demo-")
        _quit_with_q(tmux, demo)


@needs_tmux
def test_tmux_80x24_compact_layout(tmux: Tmux) -> None:
    def drawn(screen: str) -> bool:
        return _header_says_demo(screen) and min(_gpu_lines(screen, 4)) >= 0 and bool(_rows(screen))

    with _demo_in_tmux(tmux, 80, 24, 4, drawn) as (demo, screen):
        first = _gpu_lines(screen, 4)
        assert first == list(range(first[0], first[0] + 4)), screen  # one line per GPU, in order
        assert all(len(line) <= 80 for line in screen.splitlines())
        trainers = {t.pid for t in demo.trainers}
        assert trainers & set(_rows(screen)), screen  # a real demo trainer is listed
        _quit_with_q(tmux, demo)


@needs_tmux
def test_tmux_80x24_process_rows_show_the_command(tmux: Tmux) -> None:
    def drawn(screen: str) -> bool:
        return min(_gpu_lines(screen, 4)) >= 0 and bool(_rows(screen))

    with _demo_in_tmux(tmux, 80, 24, 4, drawn) as (demo, screen):
        header = next(line for line in screen.splitlines() if "PID" in line and "USER" in line)
        # Columns may be dropped to make room, but never the command: it says what a row is.
        assert "COMMAND" in header, screen
        rows = _rows(screen)
        shown = [t.pid for t in demo.trainers if t.pid in rows]
        assert shown, screen
        assert all("demo_train" in rows[pid] for pid in shown), screen


# -- a pseudo-terminal -------------------------------------------------------------------------------


def _take_terminal() -> None:
    """In the child, after setsid(): the pty becomes its controlling terminal, as a login shell's is."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyGputui:
    """gputui on a pty of `cols` x `rows`; a thread keeps reading the master so gputui never blocks."""

    def __init__(self, args: list[str], cols: int = 120, rows: int = 40) -> None:
        self.master, slave = os.openpty()
        self._out = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            self.proc = subprocess.Popen(_gputui_cmd(*args), stdin=slave, stdout=slave, stderr=slave,
                                         cwd=ROOT, env=_env(), start_new_session=True,
                                         preexec_fn=_take_terminal)
        except BaseException:
            os.close(self.master)
            raise
        finally:
            os.close(slave)  # only gputui holds it now: reading the master ends (EIO) when it is gone
        self._thread = threading.Thread(target=self._read, name="pty-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: nobody has the slave open any more
                return
            if not data:
                return
            with self._lock:
                self._out += data

    def output(self) -> bytes:
        with self._lock:
            return bytes(self._out)

    def text(self) -> str:
        return self.output().decode(errors="replace")

    def all_output(self, timeout: float = 2.0) -> bytes:
        """Everything it wrote, once the reader has seen the slave's end (or after `timeout`)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.output()

    def hang_up(self) -> None:
        """The terminal goes away, as when an SSH connection drops: close the master."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # its own session and process group
            self.proc.wait(timeout=10)
        self.hang_up()


@contextlib.contextmanager
def _demo_in_pty(args: list[str], gpus: int) -> Iterator[tuple[PtyGputui, DemoProcs]]:
    """gputui --demo on a pty, drawn (its output shows a GPU name) and with every demo process up."""
    run = PtyGputui(["--demo-gpus", str(gpus), *args])
    demo = DemoProcs()
    try:
        assert run.proc is not None
        demo.gputui = psutil.Process(run.proc.pid)
        assert _wait_until(lambda: b"H100" in run.output(), 12.0), run.text()[-3000:]
        assert _wait_until(lambda: demo.scan(gpus), 5.0), f"demo incomplete: {_describe(demo.procs())}"
        yield run, demo
    finally:
        if demo.gputui is not None:
            demo.scan(gpus)
        run.close()
        demo.cleanup()


def _cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def test_sighup_on_a_live_terminal_exits_within_2_s() -> None:
    with _demo_in_pty(["--interval", "0.2"], gpus=2) as (run, demo):
        assert run.proc is not None
        run.proc.send_signal(signal.SIGHUP)
        try:
            run.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gputui still running 2 s after SIGHUP:\n{run.text()[-2000:]}")
        out = run.all_output().decode(errors="replace")
        assert "Traceback" not in out, out[-3000:]
        assert run.proc.returncode == 128 + signal.SIGHUP, out[-2000:]
        demo.assert_all_gone()


def test_sighup_after_the_terminal_went_away_exits_without_spinning() -> None:
    with _demo_in_pty(["--interval", "0.2"], gpus=2) as (run, demo):
        assert run.proc is not None and demo.gputui is not None
        gputui = demo.gputui
        before = _cpu_seconds(gputui)
        run.hang_up()  # the kernel hangs up the terminal: its session leader, gputui, gets SIGHUP too
        run.proc.send_signal(signal.SIGHUP)
        # Watch it exit without reaping it, so its final CPU time can still be read.
        start = time.monotonic()
        exited = _wait_until(lambda: os.waitid(os.P_PID, gputui.pid,
                                               os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None, 3.5,
                             step=0.02)
        took = time.monotonic() - start
        spent = _cpu_seconds(gputui) - before
        assert exited, f"gputui still running 3.5 s after its terminal went away (CPU {spent:.2f} s)"
        assert spent <= 0.5, f"gputui spun on the dead terminal: {spent:.2f} s CPU in {took:.2f} s"
        run.proc.wait(timeout=5)
        assert run.proc.returncode == 128 + signal.SIGHUP
        demo.assert_all_gone()


@pytest.mark.parametrize(("args", "mouse"), [([], True), (["--no-mouse"], False)],
                         ids=["default", "no-mouse"])
def test_mouse_tracking_follows_no_mouse(args: list[str], mouse: bool) -> None:
    with _demo_in_pty(args, gpus=1) as (run, demo):
        assert run.proc is not None
        run.proc.send_signal(signal.SIGTERM)
        run.proc.wait(timeout=5)
        out = run.all_output()
        assert b"Traceback" not in out, out.decode(errors="replace")[-3000:]
        enables = [seq for seq in (b"\x1b[?1000h", b"\x1b[?1002h", b"\x1b[?1003h") if seq in out]
        if mouse:
            assert enables, "no mouse tracking enabled"
        else:
            assert not enables, f"mouse tracking enabled despite --no-mouse: {enables}"
        demo.assert_all_gone()
