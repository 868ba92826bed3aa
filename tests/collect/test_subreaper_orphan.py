"""An orphan is an orphan whatever adopted it: real processes reparented to a subreaper gputui has no name
for (a `python3` launcher that set PR_SET_CHILD_SUBREAPER, as a container's init started without --init
would adopt them), and what /proc tells of a parent (procs.adoption)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pytest

from gputui.analyze.classify import ORPHAN, SUBREAPERS, UNSEEN
from gputui.collect.procs.holders import HolderScanner
from gputui.collect.procs.join import HostInfo, ProcessJoiner, adoption
from gputui.model import ProcessRow
from tests.processes import describe

TIMEOUT = 10.0

# launcher DEPTH FILES: a subreaper (whatever its name) that starts a job of DEPTH processes, each
#   starting the next, the last holding FILES; the first link makes its own process group (as a shell
#   job does), prints the pids below it and exits, so that the second is reparented to the launcher.
# link DEPTH OWN FILES: one link; OWN=1: the first (its own group, exits once the rest are up).
# hold FILES: opens FILES and keeps them open.
# Every process waits for the end of its (inherited) stdin: closing the test's pipe ends them all.
CHAIN = """
import ctypes, os, subprocess, sys
PR_SET_CHILD_SUBREAPER = 36
role, args = sys.argv[1], sys.argv[2:]

def start(*argv):
    p = subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().split()

if role == "launcher":
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("prctl: " + os.strerror(ctypes.get_errno()))
    first, below = start("link", args[0], "1", *args[1:])
    first.wait()
    print(*below, flush=True)
elif role == "link":
    depth, own = int(args[0]), args[1] == "1"
    if own:
        os.setpgid(0, 0)
    nxt, below = start("hold", *args[2:]) if depth == 1 else start("link", str(depth - 1), "0", *args[2:])
    print(nxt.pid, *below, flush=True)
    if own:
        sys.exit(0)
else:
    fds = [os.open(p, os.O_RDONLY) for p in args]
    print(flush=True)
sys.stdin.read()
"""


@dataclass
class Job:
    launcher: subprocess.Popen[str]
    pids: list[int]  # below the first link (gone): pids[0] was adopted by the launcher, pids[-1] holds


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    d = tmp_path / "dev"
    d.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia0"):
        (d / name).write_bytes(b"")
    return d


@pytest.fixture
def launch(tmp_path: Path, devices: Path) -> Iterator[Callable[[int], Job]]:
    script = tmp_path / "chain.py"
    script.write_text(CHAIN)
    started: list[Job] = []

    def start(depth: int) -> Job:
        launcher = subprocess.Popen(
            [
                sys.executable,
                str(script),
                "launcher",
                str(depth),
                str(devices / "nvidiactl"),
                str(devices / "nvidia0"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert launcher.stdout is not None
        job = Job(launcher, [int(p) for p in launcher.stdout.readline().split()])
        started.append(job)
        assert len(job.pids) == depth, (job.pids, launcher.poll())
        assert psutil.Process(job.pids[0]).ppid() == launcher.pid, describe(map(psutil.Process, job.pids))
        return job

    yield start
    for job in started:
        with contextlib.suppress(OSError):
            job.launcher.stdin.close()  # type: ignore[union-attr]
        for pid in reversed(job.pids):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        job.launcher.kill()
        job.launcher.wait(timeout=TIMEOUT)
        with contextlib.suppress(OSError):
            job.launcher.stdout.close()  # type: ignore[union-attr]


def row(devices: Path, pid: int) -> ProcessRow:
    rows, _ = ProcessJoiner().join([], HolderScanner(devices).scan(), {0: 0})
    (mine,) = [r for r in rows if r.pid == pid]
    return mine


def test_an_orphan_adopted_by_an_unknown_subreaper_is_an_orphan(
    launch: Callable[[int], Job], devices: Path
) -> None:
    job = launch(1)
    (holder,) = job.pids
    adopter = psutil.Process(job.launcher.pid).name()
    assert adopter not in SUBREAPERS  # python3, python3.11, ...: no name gputui knows
    r = row(devices, holder)
    assert (r.gpu, r.ppid, r.kinds) == (0, job.launcher.pid, "")
    assert r.category == ORPHAN, r.reason
    assert f"parent gone (now {job.launcher.pid} {adopter}: the leader of its process group" in r.reason
    assert "has exited" in r.reason
    assert "not in NVML's list" in r.reason


def test_a_child_of_an_adopted_process_is_not_an_orphan(launch: Callable[[int], Job], devices: Path) -> None:
    """Its group's leader is gone too, but its parent, of the same group, is the one that started it."""
    job = launch(2)
    middle, holder = job.pids
    assert psutil.Process(holder).ppid() == middle
    r = row(devices, holder)
    assert r.category == UNSEEN, r.reason
    assert "parent gone" not in r.reason


# -- what /proc says of the parent, one fact at a time -------------------------------------------------

CHILD = HostInfo(None, "worker", None, None, None, None, "sleeping", 500, pgid=400, start_ticks=1000)
PARENT = HostInfo(None, "python3", None, None, None, None, "sleeping", 1, pgid=400, start_ticks=900)


def test_a_parent_as_old_and_of_its_group_says_nothing() -> None:
    assert adoption(CHILD, PARENT) is None
    assert adoption(CHILD, None) is None
    assert adoption(CHILD, replace(PARENT, start_ticks=1000)) is None  # the same tick: cannot tell


def test_a_parent_younger_than_its_child_adopted_it() -> None:
    assert adoption(CHILD, replace(PARENT, start_ticks=1001)) == "its parent started after it"


def test_the_init_of_a_pid_namespace_adopted_it() -> None:
    # A container's PID 1 (`python3 serve.py`, `bash`), seen from the host.
    assert "init of a PID namespace" in (adoption(CHILD, replace(PARENT, ns_pid=1)) or "")
    assert adoption(CHILD, replace(PARENT, ns_pid=7)) is None


def test_unknown_facts_say_nothing() -> None:
    unread = HostInfo(None, None, None, None, None, None, None, None)  # hidepid: nothing readable
    assert adoption(CHILD, unread) is None
    assert adoption(replace(CHILD, pgid=0), replace(PARENT, pgid=7)) is None  # a group outside our view
