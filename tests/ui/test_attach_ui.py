"""`a` on a row without the ◆ badge: attach gputui's agent, after a confirmation, then open the panel.

gputui.actions.attach is played by fakes here (the fixed world's pids are made up); the last test attaches to
a real Python process with the real gdb.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

import gputui.actions.attach
from gputui.actions.attach import Outcome, Plan, Refusal
from gputui.actions.attach import run as attach_run
from gputui.agent import protocol
from gputui.collect.agents.client import AgentPoller
from gputui.collect.agents.reply import parse
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Snapshot
from gputui.ui import attach_flow
from gputui.ui.app import GpuTuiApp, SnapshotReady
from gputui.ui.screens import attach as attach_dialog
from gputui.ui.screens.allocator import AllocatorScreen
from gputui.ui.screens.attach import AttachScreen, CommandLine
from tests.helpers import screen_text, static_text, until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app
from tests.ui.drawn import lines

PID = world.trainer_pid(0)
UID = 1234
FIXTURE = Path(__file__).parent.parent / "fixtures" / "agent_stats_cuda.json"
REPLY = parse(PID, {**json.loads(FIXTURE.read_text()), "pid": PID})
PLAN = Plan(PID, UID, "alice", "/usr/bin/python3.11", (3, 11), "gdb", "/usr/bin/gdb")


class Fakes:
    """gputui.actions.attach as the test wants it to answer; what the app asked of it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.plan: Plan | Refusal = PLAN
        self.outcome = Outcome(PID, True, "attached", seconds=1.234)
        self.checked: list[int] = []
        self.attached: list[int] = []
        self.create_times: list[float | None] = []  # what reached attach(): the row's, never None
        self.expected: list[int] = []
        monkeypatch.setattr(gputui.actions.attach, "check", self.check)
        monkeypatch.setattr(gputui.actions.attach, "attach", self.attach)
        monkeypatch.setattr(attach_dialog, "another_process", lambda pid, started: None)

    def check(self, pid: int) -> Plan | Refusal:
        self.checked.append(pid)
        return self.plan

    def attach(self, pid: int, timeout: float = 8.0, create_time: float | None = None) -> Outcome:
        self.attached.append(pid)
        self.create_times.append(create_time)
        return self.outcome

    # the sampler's AgentPoller, as far as the app uses it here
    def expect(self, uid: int) -> None:
        self.expected.append(uid)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    return Fakes(monkeypatch)


def _app(fakes: Fakes, readonly: bool = False) -> GpuTuiApp:
    app = make_app(gpus=4, interval=30.0, readonly=readonly)
    assert isinstance(app.sampler, ReplaySampler)
    app.sampler.agents = fakes  # type: ignore[assignment]  # the poller's expect() only
    return app


def status(app: GpuTuiApp) -> str:
    return "\n".join(lines(app.status))


async def _open_dialog(pilot: Pilot[int], app: GpuTuiApp) -> AttachScreen:
    await first_frame(pilot, app)
    assert app.table.current is not None and app.table.current.pid == PID
    assert app.snapshot is not None and PID not in app.snapshot.agents
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AttachScreen))
    assert isinstance(app.screen, AttachScreen)
    return app.screen


def _with_agent(snap: Snapshot) -> Snapshot:
    return dataclasses.replace(snap, agents={PID: REPLY})


# -- no attach -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["readonly", "replay"])
async def test_readonly_and_replay_never_attach_nor_ask(fakes: Fakes, mode: str) -> None:
    if mode == "readonly":
        app = _app(fakes, readonly=True)
    else:
        replay, _past = world.sampler(gpus=4)
        app = GpuTuiApp(replay, interval=30.0, devices_dir=Path("/nonexistent"), replay=True)
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await pilot.pause(0.1)
        assert len(app.screen_stack) == 1
        assert fakes.checked == [] and fakes.attached == []
        said = status(app)
        assert ("read-only (--readonly)" if mode == "readonly" else "a replay") in said
        assert "attaches none" in said and "gputui run" in said


async def test_a_refusal_is_its_reason_on_one_line(fakes: Fakes) -> None:
    fakes.plan = Refusal(PID, f"pid {PID} is stopped (state T): resume it first (kill -CONT {PID})")
    app = _app(fakes)
    async with app.run_test(size=(200, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await pilot.pause(0.1)
        assert len(app.screen_stack) == 1 and fakes.attached == []
        assert fakes.checked == [PID]
        assert f"resume it first (kill -CONT {PID})" in status(app)
        assert app.status.severity == "warning"


# -- the dialog ------------------------------------------------------------------------------------------


async def test_the_dialog_says_what_will_happen_and_which_process(fakes: Fakes) -> None:
    app = _app(fakes)
    async with app.run_test(size=(120, 40)) as pilot:
        await _open_dialog(pilot, app)
        text = screen_text(app)
        assert f"Attach gputui's agent to pid {PID}?" in text
        flat = " ".join(text.split())  # the plan's line wraps in the dialog
        assert " ".join(PLAN.describe().split()) in flat
        assert "python train.py --config configs/llama-7b.yaml --rank 0" in text
        assert "Enter attach" in text and "Esc / n cancel" in text
        assert fakes.attached == []  # asking is not attaching


@pytest.mark.parametrize("key", ["escape", "n"])
async def test_esc_or_n_cancels_and_nothing_is_attached(fakes: Fakes, key: str) -> None:
    app = _app(fakes)
    async with app.run_test(size=(120, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press(key)
        await until(pilot, lambda: len(app.screen_stack) == 1)
        await pilot.pause(0.2)
        assert fakes.attached == []
        assert "nothing was attached" in status(app)


async def test_the_command_line_is_printable_and_cut_to_the_dialog() -> None:
    hostile = "python \x1b]0;pwned\x07evil.py " + "--flag " * 60
    screen = AttachScreen(PID, PLAN.describe(), hostile)
    app = make_app(gpus=2, interval=30.0)
    async with app.run_test(size=(80, 30)) as pilot:
        await first_frame(pilot, app)
        app.push_screen(screen)
        await pilot.pause(0.1)
        line = screen.query_one(CommandLine)
        drawn = static_text(line)
        assert "\x1b" not in drawn and "\x07" not in drawn
        assert drawn.startswith("python ") and "evil.py" in drawn
        assert "\n" not in drawn and len(drawn) <= line.size.width < 80 and drawn.endswith("…")


# -- attaching ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [["a"], ["enter"], ["a", "a", "a"]], ids=["a", "enter", "a-a-a"])
async def test_a_or_enter_attaches_once_and_the_panel_opens_with_the_badge(
    fakes: Fakes, keys: list[str]
) -> None:
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press(*keys)  # a third `a` while it attaches starts no second one
        await until(pilot, lambda: "opens when its agent answers" in status(app))
        await pilot.pause(0.1)
        assert fakes.attached == [PID]
        # the chosen row's start time travels to the debugger (a pid reused meanwhile is refused there)
        (started,) = fakes.create_times
        assert app.snapshot is not None and started is not None
        assert started == next(p.create_time for p in app.snapshot.processes if p.pid == PID)
        if len(keys) == 1:  # (the third `a` says it is attached already, without the time)
            assert f"attached to pid {PID} in 1.23 s" in status(app)
        assert fakes.expected == [UID]  # root looks at that user's directories at the next poll
        assert len(app.screen_stack) == 1  # no panel until its agent answers
        assert app.snapshot is not None
        app.post_message(SnapshotReady(_with_agent(app.snapshot)))
        await until(pilot, lambda: isinstance(app.screen, AllocatorScreen))
        assert isinstance(app.screen, AllocatorScreen) and app.screen.pid == PID
        assert app.table.current is not None and app.table.current.cells[1].plain == f"◆{PID}"
        assert fakes.attached == [PID]


async def test_a_failure_is_its_message_as_an_error(fakes: Fakes) -> None:
    fakes.outcome = Outcome(PID, False, f"the kernel refused to let gdb attach to pid {PID}")
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "kernel refused" in status(app))
        assert app.status.severity == "error" and fakes.expected == []
        assert app.snapshot is not None
        app.post_message(SnapshotReady(_with_agent(app.snapshot)))  # an agent started some other way
        await pilot.pause(0.2)
        assert len(app.screen_stack) == 1  # a failed attach opens nothing later


async def test_a_reused_pid_is_not_attached(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        attach_dialog, "another_process", lambda pid, started: "now belongs to another process"
    )
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "another process" in status(app))
        assert fakes.attached == [] and app.status.severity == "error"


async def test_no_panel_over_another_screen_and_none_after_the_wait(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "opens when its agent answers" in status(app))
        await pilot.press("question_mark")  # the user went to the help meanwhile
        await until(pilot, lambda: len(app.screen_stack) == 2)
        assert app.snapshot is not None
        app.post_message(SnapshotReady(_with_agent(app.snapshot)))
        await until(pilot, lambda: "`a` on its row opens" in status(app))
        assert not isinstance(app.screen, AllocatorScreen)

    monkeypatch.setattr(attach_flow, "AWAIT_AGENT_S", 0.2)
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "has not shown up in 0.2 s" in status(app))
        assert app.snapshot is not None
        app.post_message(SnapshotReady(_with_agent(app.snapshot)))  # too late: forgotten
        await pilot.pause(0.2)
        assert len(app.screen_stack) == 1


# -- a socket is there already -------------------------------------------------------------------------
#
# check() says `already` when a file has the agent's socket name: an earlier process with this pid left it,
# or someone made it. Only an agent that answers, as the monitor asks it (the peer is that very process and
# user), is "listening"; else it is as if there were none: the dialog, then the attach.


def _answering(monkeypatch: pytest.MonkeyPatch, answer: bool) -> list[int]:
    asked: list[int] = []

    def answers(pid: int, within: float, attempt: object = None) -> bool:
        asked.append(pid)
        return answer

    monkeypatch.setattr(attach_run, "answers", answers)
    return asked


async def test_a_socket_whose_agent_answers_is_listening(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes.plan = dataclasses.replace(PLAN, already=True)
    asked = _answering(monkeypatch, True)
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "agent is listening" in status(app))
        assert asked == [PID] and fakes.expected == [UID]
        assert len(app.screen_stack) == 1 and fakes.attached == []


async def test_a_socket_that_does_not_answer_is_as_if_there_were_none(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes.plan = dataclasses.replace(PLAN, already=True)
    asked = _answering(monkeypatch, False)
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AttachScreen))
        assert asked == [PID] and "listening" not in status(app) and fakes.expected == []
        flat = " ".join(screen_text(app).split())
        assert " ".join(PLAN.describe().split()) in flat  # what will happen: an attach, not "nothing to do"
        await pilot.press("a")
        await until(pilot, lambda: "opens when its agent answers" in status(app))
        assert fakes.attached == [PID]


async def test_a_socket_that_does_not_answer_where_no_attach_is_possible(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes.plan = Plan(PID, UID, "alice", "/usr/bin/python3.11", (3, 11), "agent", "", already=True)
    _answering(monkeypatch, False)
    app = _app(fakes)
    async with app.run_test(size=(200, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "does not answer" in status(app))
        assert "listening" not in status(app) and app.status.severity == "error"
        assert len(app.screen_stack) == 1 and fakes.attached == [] and fakes.expected == []


# -- quitting during an attach ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_quitting_during_an_attach_abandons_it_at_once(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """The attach is given up as the key is pressed (tests/ui/test_quit_attach.py: the real one)."""
    release = threading.Event()
    abandoned: list[float] = []

    def stuck_attach(pid: int, timeout: float = 8.0, create_time: float | None = None) -> Outcome:
        release.wait(10)
        return Outcome(pid, False, "interrupted", abandoned=True)

    def abandon() -> list[str]:
        abandoned.append(time.monotonic())
        release.set()
        return ["what became of it"]

    monkeypatch.setattr(gputui.actions.attach, "attach", stuck_attach)
    monkeypatch.setattr(attach_run, "abandon", abandon)
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open_dialog(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: "attaching to pid" in status(app))
        assert abandoned == []
        await pilot.press(key)
        await until(pilot, lambda: len(abandoned) == 1)  # at once, and once
    release.set()
    assert app.attach_flow.abandoned == ["what became of it"]  # said once the terminal is back (run_async)


async def test_quitting_without_an_attach_abandons_nothing(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    abandoned: list[float] = []

    def abandon() -> list[str]:
        abandoned.append(0.0)
        return []

    monkeypatch.setattr(attach_run, "abandon", abandon)
    app = _app(fakes)
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("q")
    assert abandoned == []


# -- the real thing ------------------------------------------------------------------------------------


class LiveAgents(ReplaySampler):
    """The fixed world, with each tick's agents asked live (the real AgentPoller): the ◆ shows when the
    attached process's agent answers."""

    agents: AgentPoller

    def tick(self) -> Snapshot:
        snap = super().tick()
        return dataclasses.replace(snap, agents=self.agents.poll())


@pytest.fixture
def python_child() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"], stdin=subprocess.DEVNULL
    )
    yield child
    child.kill()
    child.wait()


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("gdb") is None, reason="needs root and gdb")
async def test_real_attach_to_a_running_python(python_child: subprocess.Popen[bytes]) -> None:
    import psutil

    pid = python_child.pid
    time.sleep(0.2)  # the interpreter is up: gdb finds libpython's symbols
    started = psutil.Process(pid).create_time()
    snaps = [
        dataclasses.replace(
            s,
            processes=tuple(
                dataclasses.replace(p, pid=pid, create_time=started, command="python -c loop")
                if p.pid == PID
                else p
                for p in s.processes
            ),
        )
        for s in world.snapshots(gpus=2, seconds=20, weird=False)
    ]
    sampler = LiveAgents(snaps, devices_dir=Path("/nonexistent"))
    sampler.agents = AgentPoller()
    app = GpuTuiApp(sampler, interval=30.0, devices_dir=Path("/nonexistent"))
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.table.current is not None and app.table.current.pid == pid
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AttachScreen))
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AllocatorScreen), timeout=15.0)
        assert f"attached to pid {pid}" in status(app)
        assert app.table.current is not None and app.table.current.cells[1].plain == f"◆{pid}"
    assert python_child.poll() is None  # the loop keeps running


@pytest.mark.skipif(os.getuid() != 0 or shutil.which("gdb") is None, reason="needs root and gdb")
async def test_a_socket_made_for_a_process_without_an_agent_is_not_its_agent(
    python_child: subprocess.Popen[bytes],
) -> None:
    """Someone made (and listens on) the socket a Python without an agent would have: `a` said "its agent is
    listening" and attached nothing. Now the socket is asked, its listener is not that process, and the
    dialog offers the attach."""
    import psutil

    pid = python_child.pid
    time.sleep(0.2)
    started = psutil.Process(pid).create_time()
    snaps = [
        dataclasses.replace(
            s,
            processes=tuple(
                dataclasses.replace(p, pid=pid, create_time=started) if p.pid == PID else p
                for p in s.processes
            ),
        )
        for s in world.snapshots(gpus=2, seconds=20, weird=False)
    ]
    sampler = LiveAgents(snaps, devices_dir=Path("/nonexistent"))
    sampler.agents = AgentPoller()
    path = protocol.socket_path(pid, protocol.private_dir())
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    impostor.bind(str(path))
    impostor.listen(4)  # connections are taken (the backlog); the peer is this test, not pid
    try:
        plan = gputui.actions.attach.check(pid)
        assert isinstance(plan, Plan) and plan.already and plan.mechanism == "gdb", plan
        app = GpuTuiApp(sampler, interval=30.0, devices_dir=Path("/nonexistent"))
        async with app.run_test(size=(160, 40)) as pilot:
            await first_frame(pilot, app)
            assert app.table.current is not None and app.table.current.pid == pid
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, AttachScreen))
            assert "listening" not in status(app)
            await pilot.press("escape")
            await until(pilot, lambda: "nothing was attached" in status(app))
    finally:
        impostor.close()
        path.unlink(missing_ok=True)
