"""A process's command line is another user's writing: escape sequences in it must reach the terminal
as text, never as sequences. A real process whose argv carries a window-title change, a clipboard write
(OSC 52), a clear-screen and a byte that is not UTF-8 holds a stand-in device file; `gputui --demo
--devices-dir` finds it, shows it in the table, its detail (Enter) and the zombies view (z); every byte
gputui writes to the pseudo-terminal is kept and searched.

Textual writes escape sequences of its own for drawing, so the test looks for the hostile sequences
themselves, and checks that the hostile text did reach the screen (as harmless text)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_until as _wait_until
from tests.ui.pty_run import PtyRun
from tests.ui.terminal import DemoProcs, _gputui_cmd

TITLE = b"\x1b]0;pwned\x07"
CLIPBOARD = b"\x1b]52;c;cHduZWQ=\x07"
CLEAR = b"\x1b[2J"
NOT_UTF8 = b"\xff"
HOLD = "import sys; f = open(sys.argv[-1]); print('ready', flush=True); sys.stdin.read()"


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (d / name).touch()
    return d


@pytest.fixture
def hostile_holder(devices: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A Python process holding <devices>/nvidia0 whose argv[0] and arguments are hostile; it exits when
    its stdin closes."""
    argv: list[bytes | str] = [
        TITLE + b"trainer",
        "-c",
        HOLD,
        CLIPBOARD,
        CLEAR,
        b"x" + NOT_UTF8 + b"y",
        str(devices / "nvidia0"),
    ]
    proc = subprocess.Popen(argv, executable=sys.executable, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def _shows(run: PtyRun, *words: str) -> bool:
    screen = run.screen()  # one painting of the whole stream for all the words
    return all(w in screen for w in words)


def _hostile_sequences(out: bytes) -> list[bytes]:
    found = [seq for seq in (b"\x1b]0;", b"\x1b]52;", TITLE, CLIPBOARD, NOT_UTF8) if seq in out]
    # The hostile clear-screen would sit next to the text around it in the argv.
    found += [seq for seq in (CLEAR + b"x", b"?" + CLEAR) if seq in out]
    return found


@pytest.mark.terminal
def test_hostile_argv_reaches_the_terminal_only_as_text(
    devices: Path, hostile_holder: subprocess.Popen[bytes]
) -> None:
    pid = str(hostile_holder.pid)
    run = PtyRun(_gputui_cmd("--demo-gpus", "1", "--devices-dir", str(devices), "--interval", "0.3"))
    demo = DemoProcs()
    try:
        assert run.proc is not None
        demo.gputui = psutil.Process(run.proc.pid)
        assert _wait_until(lambda: _shows(run, "H100", pid), 15.0), run.screen()
        assert _wait_until(lambda: "0;pwned" in run.screen(), 5.0), "the holder's row was never drawn"
        assert _wait_until(lambda: demo.scan(1), 5.0)

        run.type(b"/pwned\r")  # the filter: only the hostile row is left under the cursor
        assert _wait_until(lambda: "filter: pwned" in run.screen(), 5.0), run.screen()
        time.sleep(0.5)  # an Enter that comes before the filter box let go of the focus is the box's
        run.type(b"\r")  # its detail: the whole command line, wrapped
        assert _wait_until(lambda: "children" in run.screen(), 10.0), run.screen()
        assert "cHduZWQ=" in run.screen()
        run.type(b"\x1b")
        time.sleep(0.5)  # a lone ESC: what follows it at once would read as Alt+key
        run.type(b"z")  # the zombies view: a holder NVML does not list, with its reason
        assert _wait_until(lambda: "REASON · COMMAND" in run.screen(), 5.0), run.screen()
        assert _shows(run, "not in NVML's list", "?]0;pwned?trainer"), run.screen()
        run.type(b"q")
        assert run.wait_exit(5.0) is not None, run.text()
        out = run.all_output()
        assert b"Traceback" not in out, out[-3000:].decode(errors="replace")
        assert run.proc.returncode == 0
        assert not _hostile_sequences(out), _hostile_sequences(out)
        assert b"?]0;pwned?" in out  # drawn, as text
    finally:
        run.close()
        if demo.gputui is not None:
            demo.scan(1)
        demo.cleanup()


def test_a_sampler_error_quoting_hostile_text_is_printable() -> None:
    """An exception's text may quote a process's name: it reaches a toast and the exit line made safe."""
    from gputui.ui.app import SamplerFailed

    assert SamplerFailed("psutil: \x1b]0;pwned\x07 gone").error == "psutil: ?]0;pwned? gone"
