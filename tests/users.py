"""Another user, for the tests that play one: root becomes `nobody` in a forked child. The fixtures `top`
and `alice` are imported by the modules that use them (under other names, so that no test's argument
shadows an import)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

NOBODY = 65534


def become(uid: int = NOBODY) -> None:
    """In a forked child: drop every group and become `uid` for good."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def as_user(work: Callable[[], str], uid: int = NOBODY) -> str:
    """What `work()` returns, run by `uid` in a forked child."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            become(uid)
            os.write(write_end, work().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    return said


@pytest.fixture(name="top")
def top_fixture() -> Iterator[Path]:
    """A root-owned 0755 directory in /tmp: what every user can reach, like /home (pytest's own directories
    are 0700: another user could not reach them). Removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="gputui-users-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.fixture(name="alice")
def alice_fixture(top: Path) -> Path:
    """alice's home (nobody's), 0755."""
    home = top / "alice"
    home.mkdir(mode=0o755)
    os.chown(home, NOBODY, NOBODY)
    return home
