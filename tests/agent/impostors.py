"""Agents that another user runs: forked children that become `nobody` and serve what a test tells them.

A fork, not an exec: root's Python lives under /root, which nobody may not enter.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.users import NOBODY, become


@contextlib.contextmanager
def shared_base() -> Iterator[Path]:
    """A directory under /tmp that every user can enter (pytest's tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="gputui-test-trust-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def users_dir(base: Path, name: str, uid: int = NOBODY, mode: int = 0o700) -> Path:
    path = base / name
    path.mkdir()
    os.chmod(path, mode)
    os.chown(path, uid, uid)
    return path


class Impostor:
    """A process of `uid` listening on `<claim or its own pid>.sock` in `directory`.

    behaviour: "reply" (answers every request with `reply`), "drip" (sends `reply` a byte every 20 ms,
    never a newline), "silent" (accepts, never answers).
    """

    def __init__(
        self,
        directory: Path,
        reply: bytes = b"",
        behaviour: str = "reply",
        claim: int | None = None,
        uid: int = NOBODY,
    ) -> None:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read_end)
                become(uid)
                _serve(directory, reply, behaviour, claim, write_end)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        self.pid = pid
        with os.fdopen(read_end, "rb") as ready:
            self.path = Path(ready.readline().decode().strip())
        assert self.path.name.endswith(".sock"), "the impostor did not start"

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            self.path.unlink()

    def __enter__(self) -> Impostor:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _serve(directory: Path, reply: bytes, behaviour: str, claim: int | None, ready: int) -> None:
    path = directory / f"{claim or os.getpid()}.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    os.write(ready, f"{path}\n".encode())
    os.close(ready)
    held = []
    while True:
        conn, _ = listener.accept()
        if behaviour == "silent":
            held.append(conn)  # never answered, never closed
            continue
        with conn, contextlib.suppress(OSError):
            conn.settimeout(2)
            conn.recv(65536)
            if behaviour == "drip":
                for byte in reply:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.02)
            else:
                conn.sendall(reply)
