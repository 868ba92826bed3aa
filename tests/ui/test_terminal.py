"""`gputui --demo` in real terminals: tmux panes of two sizes, and a pseudo-terminal (SIGHUP, mouse).

Each test starts gputui as a process of its own, records the demo's processes (psutil) as soon as they
exist, and in a `finally` ends whatever is left of them: gputui, the tmux server, the demo processes,
the stand-in device directory. Every process the test itself starts is waited for.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from tests.helpers import wait_until as _wait_until
from tests.processes import describe as _describe
from tests.ui.pty_run import PtyRun
from tests.ui.terminal import WORKERS, DemoProcs, Tmux, _exited, _gputui_cmd, _gputui_in_pane, needs_tmux

pytestmark = pytest.mark.terminal


@contextlib.contextmanager
def _demo_in_tmux(
    tmux: Tmux, width: int, height: int, gpus: int, drawn: Callable[[str], bool]
) -> Iterator[tuple[DemoProcs, str]]:
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
_ROW = re.compile(r"^\s*(\d{1,2})\s+(\d+)\s+\S+\s.*?\d [MG]iB\b")


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


class PtyGputui(PtyRun):
    """gputui on a pty of `cols` x `rows`; a thread keeps reading the master so gputui never blocks."""

    def __init__(self, args: list[str], cols: int = 120, rows: int = 40, ctty: bool = True) -> None:
        super().__init__(_gputui_cmd(*args), cols, rows, ctty=ctty)


@contextlib.contextmanager
def _demo_in_pty(args: list[str], gpus: int, ctty: bool = True) -> Iterator[tuple[PtyGputui, DemoProcs]]:
    """gputui --demo on a pty, drawn (its output shows a GPU name) and with every demo process up."""
    run = PtyGputui(["--demo-gpus", str(gpus), *args], ctty=ctty)
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


def _assert_ends_quietly(run: PtyGputui, demo: DemoProcs, cpu_limit: float) -> None:
    """gputui exits within 3.5 s of losing its terminal, without spinning, and leaves nothing behind."""
    assert run.proc is not None and demo.gputui is not None
    gputui = demo.gputui
    before = _cpu_seconds(gputui)
    start = time.monotonic()
    # Watch it exit without reaping it, so its final CPU time can still be read.
    exited = _wait_until(
        lambda: os.waitid(os.P_PID, gputui.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None,
        3.5,
        step=0.02,
    )
    took = time.monotonic() - start
    spent = _cpu_seconds(gputui) - before
    assert exited, f"gputui still running 3.5 s after its terminal went away (CPU {spent:.2f} s)"
    assert spent <= cpu_limit, f"gputui spun on the dead terminal: {spent:.2f} s CPU in {took:.2f} s"
    run.proc.wait(timeout=5)
    assert run.proc.returncode == 128 + signal.SIGHUP
    demo.assert_all_gone()


def test_sighup_after_the_terminal_went_away_exits_without_spinning() -> None:
    with _demo_in_pty(["--interval", "0.2"], gpus=2) as (run, demo):
        assert run.proc is not None
        run.hang_up()  # the kernel hangs up the terminal: its session leader, gputui, gets SIGHUP too
        run.proc.send_signal(signal.SIGHUP)
        _assert_ends_quietly(run, demo, cpu_limit=0.5)


def test_a_terminal_gone_without_a_sighup_ends_gputui_within_3_s() -> None:
    """No controlling terminal (a supervisor, setsid): closing the pty sends no signal. gputui must see
    the hang-up itself, not spin on the dead input nor block on its output while snapshots pile up."""
    with _demo_in_pty(["--interval", "0.2"], gpus=2, ctty=False) as (run, demo):
        run.hang_up()  # and no signal at all
        _assert_ends_quietly(run, demo, cpu_limit=1.0)


@pytest.mark.parametrize(
    ("args", "mouse"), [([], True), (["--no-mouse"], False)], ids=["default", "no-mouse"]
)
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


@pytest.mark.parametrize(
    "signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=["SIGHUP", "SIGTERM", "SIGINT"]
)
def test_a_signal_exits_cleanly_and_gives_the_terminal_back(signum: int) -> None:
    """On a live terminal: exit status 128 + signal, no traceback, the alternate screen left, the cursor
    shown and mouse tracking off again, and every demo process gone."""
    with _demo_in_pty(["--interval", "0.2"], gpus=2) as (run, demo):
        assert run.proc is not None
        drawn = len(run.all_output())
        run.proc.send_signal(signum)
        try:
            run.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gputui still running 5 s after signal {signum}:\n{run.text()[-2000:]}")
        out = run.all_output()
        tail = out[drawn:].decode(errors="replace")
        assert "Traceback" not in out.decode(errors="replace"), tail[-3000:]
        assert run.proc.returncode == 128 + signum
        assert out.rfind(b"\x1b[?1049l") > out.rfind(b"\x1b[?1049h"), "still on the alternate screen"
        assert out.rfind(b"\x1b[?25h") > out.rfind(b"\x1b[?25l"), "cursor left hidden"
        assert out.rfind(b"\x1b[?1000l") > out.rfind(b"\x1b[?1000h"), "mouse tracking left on"
        demo.assert_all_gone()
