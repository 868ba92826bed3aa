"""Sending signals to real processes: refusals, outcomes, children first, PID reuse, permissions.

Every os.kill of the process under test goes through a spy for the length of a test: it records each
signal and delivers it only to processes this test started, so a regression in the refusals can never
signal init, pytest or its shell.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import gputui
from gputui.actions import signals
from gputui.actions.signals import Outcome, Target
from tests.helpers import wait_until

REPO = Path(gputui.__file__).resolve().parents[1]
REAL_KILL = os.kill
NOBODY = 65534

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)
WITH_A_CHILD = (
    "import subprocess, sys, time; "
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print(g.pid, flush=True); time.sleep(60)"
)
EXITS = "pass"

# Sends SIGTERM to a process as user nobody: imports as root, drops every privilege, then sends.
SEND_AS_NOBODY = r"""
import json, os, sys
from gputui.actions import signals
target = signals.Target(int(sys.argv[1]), float(sys.argv[2]))
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
print(json.dumps([[o.result, o.detail] for o in signals.send([target], "SIGTERM")]))
"""


def status(pid: int) -> str | None:
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return None


def alive(pid: int) -> bool:
    return status(pid) not in (None, psutil.STATUS_ZOMBIE)


class Lab:
    """The processes of one test, and the signals it sent."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[str]] = []
        self.ours: dict[int, psutil.Process] = {}
        self.sent: list[tuple[int, int]] = []  # (pid, signal) of every os.kill, but signal 0

    def kill(self, pid: int, sig: int) -> None:
        if sig == 0:  # an existence check (psutil makes some): harmless
            REAL_KILL(pid, sig)
            return
        self.sent.append((pid, sig))
        if pid in self.ours:
            REAL_KILL(pid, sig)

    def spawn(self, code: str) -> tuple[subprocess.Popen[str], str]:
        """A child running `code`; returns it with the first line it printed."""
        p = subprocess.Popen(
            [sys.executable, "-c", code, "gputui-signals-test"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children.append(p)
        self.adopt(p.pid)
        line = ""
        if code != EXITS:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            assert line, "the child did not start"
        return p, line

    def adopt(self, pid: int) -> None:
        self.ours[pid] = psutil.Process(pid)

    def signals_sent(self) -> list[tuple[int, int]]:
        return list(self.sent)

    def end(self) -> None:
        for proc in self.ours.values():  # grandchildren first: their parents are still ours
            with contextlib.suppress(psutil.Error, OSError):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    REAL_KILL(proc.pid, signal.SIGKILL)
        for p in self.children:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    REAL_KILL(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            if p.stdout is not None:
                p.stdout.close()


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    the_lab = Lab()
    monkeypatch.setattr(os, "kill", the_lab.kill)
    assert vars(signals)["os"].kill == the_lab.kill  # signals calls os.kill, not a copy bound at import
    try:
        yield the_lab
    finally:
        the_lab.end()


def target_of(pid: int, offset: float = 0.0) -> Target:
    return Target(pid, psutil.Process(pid).create_time() + offset, "test target")


def free_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


# -- refusals ----------------------------------------------------------------------------------------


def _refused_targets() -> list[tuple[str, Callable[[], Target], str]]:
    return [
        ("pid 0", lambda: Target(0, time.time()), "pid 0 or 1"),
        ("init", lambda: target_of(1), "pid 0 or 1"),
        ("itself", lambda: target_of(os.getpid()), "gputui itself"),
        ("parent", lambda: target_of(os.getppid()), "ancestors"),
        (
            "grandparent",
            lambda: target_of(
                psutil.Process().parents()[1].pid if len(psutil.Process().parents()) > 1 else os.getppid()
            ),
            "ancestors",
        ),
    ]


@pytest.mark.parametrize(
    ("make", "why"),
    [(m, w) for _, m, w in _refused_targets()],
    ids=[name for name, _, _ in _refused_targets()],
)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_refused_and_nothing_sent(lab: Lab, make: Callable[[], Target], why: str, sig: str) -> None:
    target = make()
    if target.pid <= 1:  # an ancestor that is init (the tests run under docker run, say)
        why = "pid 0 or 1"
    assert signals.refusal(target) is not None
    (outcome,) = signals.send([target], sig)
    assert outcome.result == "refused"
    assert why in outcome.detail
    assert not outcome.ok
    assert lab.signals_sent() == []
    assert signals.await_outcome([outcome], timeout=0.1) == []  # nothing was sent: nothing to wait for


def test_an_unknown_create_time_is_refused(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    (outcome,) = signals.send([Target(child.pid, None)], "SIGKILL")
    assert outcome.result == "refused"
    assert "start time is unknown" in outcome.detail
    assert lab.signals_sent() == []
    time.sleep(0.05)
    assert child.poll() is None and alive(child.pid)


@pytest.mark.parametrize("offset", [-1.0, 0.2, 3600.0])
def test_a_reused_pid_is_refused(lab: Lab, offset: float) -> None:
    child, _ = lab.spawn(SLEEPER)
    stale = target_of(child.pid, offset)  # the row the user confirmed was another process with this PID
    (outcome,) = signals.send([stale], "SIGKILL", include_children=True)
    assert outcome.result == "refused"
    assert "now belongs to another process" in outcome.detail
    assert lab.signals_sent() == []
    assert signals.children_of(stale) == []
    assert signals.gone(stale)  # that process has ended, whoever has the PID now
    time.sleep(0.05)
    assert child.poll() is None and alive(child.pid)


def test_create_times_within_a_clock_tick_match(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    for offset in (-0.04, 0.0, 0.04):
        assert not signals.gone(target_of(child.pid, offset))
    assert signals.gone(target_of(child.pid, 0.06))


# -- outcomes ----------------------------------------------------------------------------------------


def test_sigterm_to_a_child_and_it_is_gone(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    target = target_of(child.pid)
    sent = signals.send([target], "SIGTERM")
    assert [o.result for o in sent] == ["sent"] and sent[0].ok
    assert lab.signals_sent() == [(child.pid, signal.SIGTERM)]
    start = time.monotonic()
    (final,) = signals.await_outcome(sent, timeout=3)
    assert final.result == "gone" and final.ok and final.target == target
    assert time.monotonic() - start < 2.0  # polled, not waited out
    assert child.wait(timeout=5) == -signal.SIGTERM


def test_a_child_ignoring_sigterm_is_still_alive_then_sigkill(lab: Lab) -> None:
    child, _ = lab.spawn(IGNORES_TERM)
    target = target_of(child.pid)
    sent = signals.send([target], "SIGTERM")
    assert [o.result for o in sent] == ["sent"]
    start = time.monotonic()
    (final,) = signals.await_outcome(sent, timeout=1, poll=0.05)
    assert 0.9 <= time.monotonic() - start < 2.0
    assert final.result == "still alive"
    assert final.detail == "after 1 s"
    assert not final.ok
    assert alive(child.pid)

    sent = signals.send([final.target], "SIGKILL")
    assert [o.result for o in sent] == ["sent"]
    assert [o.result for o in signals.await_outcome(sent, timeout=3)] == ["gone"]
    assert child.wait(timeout=5) == -signal.SIGKILL


def test_include_children_signals_the_children_first(lab: Lab) -> None:
    child, line = lab.spawn(WITH_A_CHILD)
    grandchild = int(line)
    lab.adopt(grandchild)
    target = target_of(child.pid)
    assert [t.pid for t in signals.children_of(target)] == [grandchild]

    sent = signals.send([target], "SIGTERM", include_children=True)
    assert [(o.target.pid, o.result) for o in sent] == [(grandchild, "sent"), (child.pid, "sent")]
    assert lab.signals_sent() == [(grandchild, signal.SIGTERM), (child.pid, signal.SIGTERM)]
    final = signals.await_outcome(sent, timeout=3)
    assert [(o.target.pid, o.result) for o in final] == [(grandchild, "gone"), (child.pid, "gone")]
    assert child.wait(timeout=5) == -signal.SIGTERM
    assert wait_until(lambda: not alive(grandchild))


def test_outcomes_come_in_the_order_sent_whichever_ended_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent may end before its child is seen gone (the kernel's timing): the status line still
    names them as they were signalled, so the same kill always reads the same."""
    child, parent, stubborn = Target(4102, 1.0), Target(4101, 1.0), Target(4103, 1.0)
    looks = {4102: iter([False, False, True]), 4101: iter([True]), 4103: itertools.repeat(False)}
    monkeypatch.setattr(signals, "gone", lambda t: next(looks[t.pid]))
    sent = [Outcome(t, "SIGTERM", "sent") for t in (child, parent, stubborn)]
    already = Outcome(Target(4104, 1.0), "SIGTERM", "already gone")
    final = signals.await_outcome([sent[0], already, *sent[1:]], timeout=0.2, poll=0.01)
    assert [(o.target.pid, o.result) for o in final] == [
        (4102, "gone"),
        (4101, "gone"),
        (4103, "still alive"),
    ]


def test_children_of_a_childless_process(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    assert signals.children_of(target_of(child.pid)) == []
    sent = signals.send([target_of(child.pid)], "SIGKILL", include_children=True)
    assert [(o.target.pid, o.result) for o in sent] == [(child.pid, "sent")]


def test_an_exited_process_is_already_gone(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    target = target_of(child.pid)
    child.kill()
    child.wait(timeout=5)  # reaped: the PID is free
    assert signals.gone(target)
    (outcome,) = signals.send([target], "SIGTERM")
    assert outcome.result == "already gone" and outcome.detail == ""
    assert lab.signals_sent() == [(child.pid, signal.SIGKILL)]  # the test's own kill, nothing after it
    assert signals.await_outcome([outcome], timeout=0.1) == []


def test_a_pid_nobody_has(lab: Lab) -> None:
    pid = free_pid()
    (outcome,) = signals.send([Target(pid, time.time())], "SIGKILL")
    assert outcome.result == "already gone"
    assert lab.signals_sent() == []
    assert signals.target_for(pid) is None
    assert signals.gone(Target(pid, time.time()))


def test_a_defunct_target_counts_as_gone(lab: Lab) -> None:
    child, _ = lab.spawn(EXITS)  # exits at once; not waited for until the end: a zombie
    assert wait_until(lambda: status(child.pid) == psutil.STATUS_ZOMBIE)
    target = target_of(child.pid)
    assert signals.gone(target)
    sent = signals.send([target], "SIGTERM")  # the kernel accepts a signal for a zombie
    assert [o.result for o in sent] == ["sent"]
    start = time.monotonic()
    assert [o.result for o in signals.await_outcome(sent, timeout=3)] == ["gone"]
    assert time.monotonic() - start < 2.0  # at once, not the 3 s timeout (slack for load)
    assert child.wait(timeout=5) == 0


def test_target_for_gives_the_live_create_time(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    target = signals.target_for(child.pid)
    assert target is not None
    assert target.pid == child.pid
    assert target.create_time == psutil.Process(child.pid).create_time()
    assert "gputui-signals-test" in target.label
    assert signals.refusal(target) is None
    assert not signals.gone(target)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: drops privileges to user nobody")
def test_permission_denied(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)  # root's
    target = target_of(child.pid)
    out = subprocess.run(
        [sys.executable, "-c", SEND_AS_NOBODY, str(target.pid), repr(target.create_time)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    ((result, detail),) = json.loads(out.stdout)
    assert result == "permission denied"
    assert "another user" in detail
    time.sleep(0.05)
    assert child.poll() is None and alive(child.pid)


def test_outcome_text() -> None:
    t = Target(4242, 1.0, "python train.py --epochs 90")
    assert str(Outcome(t, "SIGTERM", "gone")) == "SIGTERM → 4242 (python train.py --epochs 90): gone"
    assert str(Outcome(Target(7, 1.0), "SIGKILL", "refused", "why")) == "SIGKILL → 7: refused — why"
    assert Outcome(t, "SIGINT", "sent").ok and not Outcome(t, "SIGINT", "permission denied").ok


# -- a bug: the children of a refused target ---------------------------------------------------------


@pytest.mark.parametrize("who", ["itself", "parent", "init"])
def test_the_children_of_a_refused_target_are_not_signalled(lab: Lab, who: str) -> None:
    child, _ = lab.spawn(SLEEPER)  # a descendant of this process, and of its ancestors and init
    pid = {"itself": os.getpid(), "parent": os.getppid(), "init": 1}[who]
    if pid == os.getpid() and who != "itself":
        pytest.skip("the tests run as pid 1")
    outcomes = signals.send([target_of(pid)], "SIGTERM", include_children=True)
    assert lab.signals_sent() == [], f"{len(lab.signals_sent())} signals sent, our own child among them"
    assert [o.result for o in outcomes] == ["refused"]
    assert alive(child.pid)


# -- the live side of a kill plan --------------------------------------------------------------------


def test_protected_is_gputui_and_its_ancestors() -> None:
    guard = signals.protected()
    assert guard.me == os.getpid() and guard.me not in guard.ancestors
    assert os.getppid() in guard.ancestors
    assert guard.why(0) == guard.why(1) == "never signals pid 0 or 1 (init)"
    assert guard.why(os.getpid()) == "that is gputui itself"
    assert "ancestors" in (guard.why(os.getppid()) or "")
    assert guard.why(free_pid()) is None


def test_describe_reads_a_live_process(lab: Lab) -> None:
    child, _ = lab.spawn(SLEEPER)
    live = signals.describe(child.pid)
    proc = psutil.Process(child.pid)
    assert live is not None
    assert (live.pid, live.ppid, live.user) == (child.pid, os.getpid(), proc.username())
    assert live.create_time == proc.create_time() and live.state != psutil.STATUS_ZOMBIE
    assert live.command is not None and "gputui-signals-test" in live.command
    assert signals.describe(free_pid()) is None


def test_describe_a_zombie(lab: Lab) -> None:
    child, _ = lab.spawn("import time; print('ready', flush=True); time.sleep(0.1)")
    assert wait_until(lambda: status(child.pid) == psutil.STATUS_ZOMBIE)
    live = signals.describe(child.pid)
    assert live is not None and live.state == psutil.STATUS_ZOMBIE and live.ppid == os.getpid()


def test_same_start() -> None:
    assert signals.same_start(100.0, 100.04)
    assert not signals.same_start(100.0, 100.2)
    assert not signals.same_start(None, 100.0) and not signals.same_start(100.0, None)
