"""The zombie hunt end to end, in a real terminal: `gputui --demo` in a tmux pane of its own, `z` for the
suspicious processes, the cursor onto the demo's orphaned worker, `k`, `y`: the orphan really ends, its row
goes, the status line says so; `q` then leaves nothing behind.

Whatever happens, the `finally` kills the tmux server (its own `-L` socket), gputui and every demo process
the test saw, and removes the demo's stand-in device directory (helpers in tests/ui/terminal.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator

import psutil
import pytest

from tests.helpers import wait_until as _wait_until
from tests.processes import describe as _describe
from tests.ui.terminal import DemoProcs, Tmux, _exited, _gputui_in_pane, needs_tmux

pytestmark = pytest.mark.terminal

GPUS = 2
WIDTH, HEIGHT = 120, 40


def _in_proc(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


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
    for line in lines[top + 1 :]:
        if not line.strip():
            break
        body.append(line)
    return lines[top], body


def _row_pid(line: str) -> int | None:
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _class(header: str, line: str) -> str:
    """The CLASS cell of a row (in the zombies view the column after it is REASON · COMMAND)."""
    return line[header.index("CLASS") : header.index("REASON")].strip()


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
        listed = [
            line.split()[1:4]
            for line in screen.splitlines()
            if line.lstrip().startswith("│") and len(line.split()) > 3 and line.split()[1].isdigit()
        ]
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
        assert _wait_until(ended, 8.0), (
            f"orphan {orphan} in /proc: {_in_proc(orphan)}, "
            f"still a demo process: {_describe([demo.orphan])}\n{screen}"
        )
        assert "Send a signal" not in screen
        # Everything else of the demo is untouched.
        assert all(
            not _exited(p) for p in demo.procs() if p.pid != orphan and p.status() != psutil.STATUS_ZOMBIE
        ), _describe(demo.procs())

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
        demo.assert_all_gone(timeout=5.0)  # init reaps slowly on some hosts
