"""Any command on a pseudo-terminal of its own, for the tests that read every byte gputui writes: a thread
keeps reading the master (so the program never blocks on a full terminal) and keeps all it read."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import threading
import time

from bench.ptybytes import paint
from tests.ui.terminal import ROOT, _env

ALT_SCREEN_ON = b"\x1b[?1049h"
ALT_SCREEN_OFF = b"\x1b[?1049l"


def _take_terminal() -> None:
    """In the child, after setsid(): the pty becomes its controlling terminal, as a login shell's is."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyRun:
    def __init__(
        self,
        cmd: list[str],
        cols: int = 120,
        rows: int = 40,
        env: dict[str, str] | None = None,
        ctty: bool = True,
    ) -> None:
        """`ctty`: the pty is its controlling terminal (a hang-up sends it SIGHUP), as in a login."""
        self.size = (cols, rows)
        self.master, slave = os.openpty()
        self._out = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            self.proc = subprocess.Popen(
                cmd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=ROOT,
                env={**_env(), **(env or {})},
                start_new_session=True,
                preexec_fn=_take_terminal if ctty else None,
            )
        except BaseException:
            os.close(self.master)
            raise
        finally:
            os.close(slave)  # only the program holds it now: reading the master ends (EIO) when it is gone
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

    def screen(self) -> str:
        """What the terminal shows now, line by line (gputui redraws only the cells that change, so a word
        may reach the terminal in pieces: search the screen, not the bytes, for what it says)."""
        cols, rows = self.size
        return "\n".join(paint(self.output(), rows, cols))

    def text(self, tail: int = 3000) -> str:
        return self.output()[-tail:].decode(errors="replace")

    def type(self, keys: bytes) -> None:
        """Keys as a user types them: all in one write, as fast as a laggy SSH link delivers them."""
        os.write(self.master, keys)

    def wait_exit(self, timeout: float) -> float | None:
        """Seconds until the program exited (None: still running after `timeout`)."""
        assert self.proc is not None
        start = time.monotonic()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - start

    def all_output(self, timeout: float = 2.0) -> bytes:
        """Everything it wrote, once the reader has seen the slave's end (or after `timeout`)."""
        self._thread.join(timeout)
        return self.output()

    def left_alternate_screen(self) -> bool:
        out = self.output()
        return out.rfind(ALT_SCREEN_OFF) > out.rfind(ALT_SCREEN_ON) >= 0

    def hang_up(self) -> None:
        """The terminal goes away, as when an SSH connection drops: close the master."""
        self._stop.set()
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
