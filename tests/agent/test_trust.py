"""Root's monitor against agents that other users control: their directories, their sockets, their replies.

Each test is one attack from the issue "Safe as root on a shared box", played by a real process of
another uid (nobody) where it needs one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputui.agent import protocol, server
from gputui.collect.agents import client as agents
from gputui.collect.agents.client import AgentPoller
from tests.agent.impostors import Impostor, shared_base, users_dir
from tests.users import NOBODY

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to become another uid")

ME = os.getpid()
ESCAPES = "\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m"


def stats(**allocator: object) -> bytes:
    """A stats reply as an agent would send it (no pid: the impostor's pid is known only after fork)."""
    body = {
        "v": 1,
        "ok": True,
        "time": time.time(),
        "allocator": {"torch": "2.13.0", "cuda_initialized": True, "devices": [], **allocator},
        "progress": {"batches": 3},
    }
    return json.dumps(body).encode() + b"\n"


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """/tmp and /run/user of root and of nobody, played by directories of a shared base."""
    with shared_base() as path:

        def candidates(uid: int | None = None) -> tuple[Path, ...]:
            uid = os.getuid() if uid is None else uid
            return path / f"tmp-{uid}", path / f"run-{uid}"

        monkeypatch.setattr(protocol, "candidate_dirs", candidates)
        monkeypatch.setattr(agents, "_users_with_agents", lambda: {NOBODY})
        yield path


# -- directories -------------------------------------------------------------------------------------


def test_a_directory_another_user_made_for_root_is_not_roots(base: Path) -> None:
    """nobody creates root's fallback directory first and serves a socket named after root's process:
    root's process gets no ◆, and nothing it says is read."""
    taken = users_dir(base, "tmp-0")
    with Impostor(taken, stats(torch=ESCAPES), claim=ME):
        poller = AgentPoller()
        assert ME not in poller.discover()
        assert poller.poll() == {}


def test_a_socket_claiming_another_users_pid_is_refused(base: Path) -> None:
    """In its own directory, nobody names a socket after root's process: the kernel says who listens."""
    own = users_dir(base, f"tmp-{NOBODY}")
    with Impostor(own, stats(devices=[{"index": 0, "allocated": 1 << 40}]), claim=ME) as impostor:
        poller = AgentPoller()
        assert poller.discover()[ME].uid == NOBODY  # found in nobody's directory...
        assert poller.poll() == {}  # ...and not believed
        assert poller.refused[ME] == f"served by pid {impostor.pid}, not by pid {ME}"


def test_a_link_to_another_users_agent_is_refused(base: Path) -> None:
    """nobody links `<root's pid>.sock` to root's real agent elsewhere: the pid matches, the user does not."""
    elsewhere = base / "elsewhere"
    agent = server.Agent(directory=elsewhere)
    agent.start()
    try:
        assert agent.path is not None
        own = users_dir(base, f"tmp-{NOBODY}")
        (own / f"{ME}.sock").symlink_to(agent.path)
        poller = AgentPoller()
        assert poller.poll() == {}
        assert poller.refused[ME] == f"pid {ME} does not run as uid {NOBODY}, the owner of {own}"
        assert agent.requests == 0  # the refusal came from the credentials, before any request
    finally:
        agent.stop()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1733])
def test_a_directory_others_can_write_is_ignored(base: Path, mode: int) -> None:
    loose = users_dir(base, f"tmp-{NOBODY}", mode=mode)
    with Impostor(loose, stats()):
        assert AgentPoller().poll() == {}


def test_a_symlinked_directory_is_neither_read_nor_cleaned(base: Path) -> None:
    """root's candidate is a link to a directory of sockets: root must not follow it, nor unlink
    `<digits>.sock` files through it."""
    target = base / "victim"
    target.mkdir(mode=0o700)
    dead = target / "4000000.sock"  # no such process: discovery would remove it from a directory of its own
    dead.write_text("")
    (base / "tmp-0").symlink_to(target)
    agent = server.Agent(directory=target)
    agent.start()
    try:
        poller = AgentPoller()
        assert poller.discover() == {}
        assert poller.poll() == {}
        assert dead.exists()
    finally:
        agent.stop()


def test_stale_sockets_are_removed_only_from_our_own_directory(base: Path) -> None:
    mine = base / "tmp-0"
    mine.mkdir(mode=0o700)
    theirs = users_dir(base, f"tmp-{NOBODY}")
    for d in (mine, theirs):
        (d / "4000000.sock").write_text("")
    AgentPoller().poll()
    assert not (mine / "4000000.sock").exists()
    assert (theirs / "4000000.sock").exists()


def test_a_superscript_digit_name_stops_nothing(base: Path) -> None:
    """'²'.isdigit() is true and int('²') raises: such a file used to stop every sample."""
    own = users_dir(base, f"tmp-{NOBODY}")
    for name in ("\u00b2.sock", "\u0663.sock", "0.sock", "1.sock", "007.sock"):
        (own / name).write_text("")
    with Impostor(own, stats()) as impostor:
        out = AgentPoller().poll()
        assert list(out) == [impostor.pid] and out[impostor.pid].ok


def test_root_finds_agents_in_either_directory_of_each_user(base: Path) -> None:
    """The agent and the monitor meet whichever of /tmp/gputui-<uid> and /run/user/<uid>/gputui the
    agent chose."""
    first = users_dir(base, f"tmp-{NOBODY}")
    second = users_dir(base, f"run-{NOBODY}")
    with Impostor(first, stats()) as a, Impostor(second, stats()) as b:
        out = AgentPoller().poll()
        assert {a.pid, b.pid} <= set(out) and out[a.pid].ok and out[b.pid].ok


# -- what an agent of another user may say -----------------------------------------------------------


def test_escapes_in_a_reply_never_leave_the_boundary(base: Path) -> None:
    own = users_dir(base, f"tmp-{NOBODY}")
    with Impostor(
        own, stats(torch=ESCAPES, cuda=ESCAPES, alloc_conf=ESCAPES, allocator_backend=ESCAPES)
    ) as impostor:
        report = AgentPoller().poll()[impostor.pid]
    assert report.ok
    for text in (report.torch, report.cuda, report.alloc_conf, report.allocator_backend):
        assert text is not None and text.isprintable() and "\x1b" not in text and "\x07" not in text
        assert "pwned" in text  # replaced characters, not dropped text: the user sees what was sent


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (
            b'{"v":1,"ok":true,"allocator":{"devices":[{"index":0,"allocated":NaN}]}}\n',
            "allocator.devices[0].allocated: not a whole number",
        ),
        (b'{"v":1,"ok":true,"progress":{"steps_per_s":Infinity}}\n', "progress.steps_per_s: not a finite"),
        (b'{"v":1,"ok":true,"allocator":"oops"}\n', "allocator: not an object"),
        (b'{"v":1,"ok":true,"allocator":{"devices":"oops"}}\n', "allocator.devices: not a list"),
        (b'{"v":1,"ok":true,"progress":{"steps_per_s":"fast"}}\n', "progress.steps_per_s: not a number"),
        (b'{"v":1,"ok":true,"allocator":{"devices":[{"index":-1}]}}\n', "index: out of range"),
        (b'{"v":1,"ok":true,"allocator":{"devices":[{"allocated":1e300}]}}\n', "allocated: out of range"),
        (b'{"v":1,"ok":true,"progress":{"data_wait_share":1.5}}\n', "data_wait_share: not a finite"),
        (b'{"v":1,"ok":true,"pid":1}\n', "pid: says 1"),
        (b"[" * 100_000 + b"\n", "not JSON"),
        (b'{"v":1,"ok":true,"x":"' + b"a" * (2 << 20) + b'"}\n', "larger than"),
    ],
    ids=[
        "nan",
        "infinity",
        "allocator-string",
        "devices-string",
        "steps-string",
        "negative-index",
        "huge",
        "share-over-1",
        "other-pid",
        "deep",
        "oversize",
    ],
)
def test_a_bad_reply_makes_that_agent_unreadable(base: Path, reply: bytes, why: str) -> None:
    own = users_dir(base, f"tmp-{NOBODY}")
    with Impostor(own, reply) as impostor:
        report = AgentPoller().poll()[impostor.pid]
    assert report.status == "unreadable" and why in report.error, report.error
    assert report.devices == () and report.error.isprintable()


@pytest.mark.parametrize("behaviour", ["drip", "silent"])
def test_an_agent_that_never_finishes_costs_one_deadline(base: Path, behaviour: str) -> None:
    own = users_dir(base, f"tmp-{NOBODY}")
    with Impostor(own, b'{"v":1,"ok":true' + b" " * 1000, behaviour=behaviour) as impostor:
        poller = AgentPoller()
        started = time.monotonic()
        report = poller.poll()[impostor.pid]
        took = time.monotonic() - started
    # One deadline is 0.15 s, and without it the answer never ends: 1 s leaves room for a loaded box.
    assert took < 1.0, f"one poll took {took:.2f} s"
    assert report.status == "slow" and "no reply within 150 ms" in report.error


# -- many agents at once -------------------------------------------------------------------------------

AGENT = """
import sys, time
from pathlib import Path
from gputui.agent.server import Agent
Agent(directory=Path(sys.argv[1])).start()
print("up", flush=True)
time.sleep(120)
"""


def test_eight_stopped_agents_cost_one_deadline(tmp_path: Path) -> None:
    """A debugger or SIGSTOP halts eight ranks: a tick waits 150 ms for all of them, not 0.5 s each."""
    directory = tmp_path / "run"
    procs = [
        subprocess.Popen([sys.executable, "-c", AGENT, str(directory)], stdout=subprocess.PIPE)
        for _ in range(8)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"up\n"
        poller = AgentPoller(directory)
        assert all(r.ok for r in poller.poll().values()) and len(poller.poll()) == 8
        for p in procs:
            os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10.0
        for p in procs:  # the signal is delivered when the process is next scheduled
            while psutil.Process(p.pid).status() != psutil.STATUS_STOPPED:
                assert time.monotonic() < deadline, f"pid {p.pid} did not stop"
                time.sleep(0.01)
        started = time.monotonic()
        stopped = poller.poll()
        took = time.monotonic() - started
        # One deadline (0.15 s) for all, not one each (8 x 0.15 = 1.2 s); the rest is slack for load.
        assert took < 0.9, f"one poll of 8 stopped agents took {took:.2f} s"
        assert sorted(stopped) == sorted(p.pid for p in procs)
        assert {r.status for r in stopped.values()} == {"slow"}
        assert all(r.torch is None or r.torch for r in stopped.values())  # the last good answer, kept
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)
        assert {r.status for r in poller.poll().values()} == {"ok"}
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()


# -- the agent inside someone's training job -----------------------------------------------------------

START = """
import sys
from gputui.agent import protocol, server
from pathlib import Path
taken = (Path(sys.argv[1]), Path(sys.argv[2]))
protocol.candidate_dirs = lambda uid=None: taken
assert server.start() is None
assert server.start() is None
print("training goes on", flush=True)
"""


def test_start_never_raises_into_the_training_script(base: Path) -> None:
    """Another user pre-created both of the job's directories: the job runs on, warned once."""
    first = users_dir(base, "taken-tmp")
    second = users_dir(base, "taken-run")
    done = subprocess.run(
        [sys.executable, "-c", START, str(first), str(second)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "training goes on\n"
    (warning,) = done.stderr.splitlines()
    assert warning.startswith("gputui agent: not started, the program runs on without it:")
    assert str(first) in warning and str(second) in warning
