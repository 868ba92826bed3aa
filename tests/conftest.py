"""For the whole test session: a settings directory of its own, so that no test reads the settings of
whoever runs the suite, and no key a test presses is saved into their home (gputui.settings). For each
test: `spawn`, its real child processes, reaped at teardown (tests/helpers.py has the shared helpers);
`holders`, children holding a module's stand-in device files (tests/holders.py); `hog`, the gdb tests'
job. And a guard: `--snapshot-update` only where a person will look at what it rewrote."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers import Children
from tests.holders import Spawner

if TYPE_CHECKING:
    from tests.attach.gil_hog import Hog


def pytest_configure(config: pytest.Config) -> None:
    """Refuse `--snapshot-update` in CI (a picture rewritten there passes unseen) and under xdist (syrupy
    deletes the pictures its run did not use, and each worker runs only its share of them)."""
    if not config.getoption("--snapshot-update", default=False):
        return
    if os.environ.get("CI"):
        raise pytest.UsageError("--snapshot-update is refused in CI (CI is set): update snapshots locally")
    if config.getoption("numprocesses", default=None) or os.environ.get("PYTEST_XDIST_WORKER"):
        raise pytest.UsageError("--snapshot-update needs one process: add -n 0 (make test WORKERS=0)")


@pytest.fixture(autouse=True, scope="session")
def own_settings_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("xdg-config")
    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(directory)  # inherited by every gputui a test starts
    try:
        yield directory
    finally:
        if saved is None:
            os.environ.pop("XDG_CONFIG_HOME", None)
        else:
            os.environ["XDG_CONFIG_HOME"] = saved


@pytest.fixture
def spawn() -> Iterator[Children]:
    """`spawn(argv)` or `spawn.python(code)`: a real child process, killed and reaped when the test ends."""
    children = Children()
    try:
        yield children
    finally:
        children.end()


@pytest.fixture
def holders(devices: Path, spawn: Children) -> Iterator[Spawner]:
    """`holders(*names)`: a child holding those stand-in device files of the test module's `devices`
    (tests/holders.py); what it forked must be gone after the test, as well as itself."""
    spawner = Spawner(devices, spawn)
    yield spawner
    spawner.end()


@pytest.fixture
def hog() -> Iterator[Hog]:
    """A Python job whose GIL a C call holds for HOLD_S once asked (tests/attach/gil_hog.py); ended after."""
    from tests.attach.gil_hog import HOLD_S, Hog  # the gdb tests' only: not every test session's

    job = Hog(HOLD_S)
    try:
        yield job
    finally:
        job.close()
