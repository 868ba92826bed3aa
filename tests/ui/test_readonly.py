"""`--readonly` and `gputui replay` act on nothing. They sent empty_cache, record_history and dump_snapshot
to live agents (allocator keys h/s/e): a replay sent them to whatever live process now has a recorded
pid; a replay's detail (Enter) and doctor (D) read /proc and NVML of the live machine for recorded pids.

The agent here is a real one (gputui.agent.server.Agent) serving in this test's own process: the pid the
"recording" names is a live process with a live agent, which is the dangerous case. Its request counter
says whether anything reached it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from textual.pilot import Pilot

from gputui.agent.server import Agent
from gputui.collect.agents.client import AgentPoller
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import AgentReport, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.allocator import AllocatorScreen
from gputui.ui.screens.detail import DetailScreen
from gputui.ui.screens.doctor import DoctorScreen
from tests.helpers import screen_text, until
from tests.ui import world
from tests.ui.conftest import first_frame
from tests.ui.drawn import lines

ME = os.getpid()
RECORDED_COMMAND = "python train.py --what-the-recording-says"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(directory=tmp_path / "run")
    a.start()
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture
def live_poller(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> AgentPoller:
    """A poller of the test's agent directory; also what the app gets if it makes a poller of its own."""
    assert agent.path is not None
    directory = agent.path.parent
    monkeypatch.setattr("gputui.ui.app.AgentPoller", lambda: AgentPoller(directory=directory))
    return AgentPoller(directory=directory)


def _recording(agents: dict[int, AgentReport]) -> list[Snapshot]:
    """The fixed world with trainer 0 replaced by this very process, as a recording would name a pid that
    a live process (with an agent) has now."""
    me = psutil.Process()
    out = []
    for snap in world.snapshots(gpus=2, seconds=20, weird=False):
        rows = tuple(
            dataclasses.replace(
                p,
                pid=ME,
                create_time=me.create_time(),
                command=RECORDED_COMMAND,
                user="alice",
                devices=("/dev/nvidia0",),
            )
            if p.pid == world.trainer_pid(0)
            else p
            for p in snap.processes
        )
        out.append(dataclasses.replace(snap, processes=rows, agents=agents))
    return out


def _app(snaps: list[Snapshot], replay: bool, poller: AgentPoller | None = None) -> GpuTuiApp:
    sampler = ReplaySampler(snaps, devices_dir=Path("/nonexistent"))
    if poller is not None:
        sampler.agents = poller
    return GpuTuiApp(sampler, interval=30.0, readonly=True, replay=replay)


async def _press_every_action(pilot: Pilot[int], app: GpuTuiApp) -> AllocatorScreen:
    await first_frame(pilot, app)
    assert app.table.current is not None and app.table.current.pid == ME
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AllocatorScreen))
    screen = app.screen
    assert isinstance(screen, AllocatorScreen)
    for key in "hhsseehse":  # each action armed and confirmed, then some more
        await pilot.press(key)
    await pilot.pause(0.3)  # time for a request a worker thread would have sent
    return screen


@pytest.mark.parametrize("replay", [False, True], ids=["readonly", "replay"])
async def test_allocator_actions_send_nothing(replay: bool, agent: Agent, live_poller: AgentPoller) -> None:
    report = live_poller.poll()[ME]  # what the recording (or the live sampler) holds of this agent
    before = agent.requests
    app = _app(_recording({ME: report}), replay=replay, poller=None if replay else live_poller)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _press_every_action(pilot, app)
        assert agent.requests == before, "a request reached the live agent"
        assert screen.armed is None  # no key armed an action either
        assert "read-only: actions disabled" in screen_text(app)


async def test_with_actions_allowed_the_same_keys_do_reach_the_agent(
    agent: Agent, live_poller: AgentPoller
) -> None:
    """The counterpart: the keys pressed above do send, when the app may act (so the test can fail)."""
    report = live_poller.poll()[ME]
    before = agent.requests
    sampler = ReplaySampler(_recording({ME: report}), devices_dir=Path("/nonexistent"))
    sampler.agents = live_poller
    app = GpuTuiApp(sampler, interval=30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await _press_every_action(pilot, app)
        await until(pilot, lambda: agent.requests >= before + 3)


def _forbid(monkeypatch: pytest.MonkeyPatch, target: str) -> list[str]:
    called: list[str] = []

    def forbidden(*args: object, **kwargs: object) -> object:
        called.append(target)
        raise AssertionError(f"{target} read the live machine in a replay")

    monkeypatch.setattr(target, forbidden)
    return called


async def test_replay_detail_shows_the_recording_only(monkeypatch: pytest.MonkeyPatch) -> None:
    called = _forbid(monkeypatch, "gputui.ui.screens.detail.describe") + _forbid(
        monkeypatch, "gputui.ui.screens.detail.py_spy_dump"
    )
    app = _app(_recording({}), replay=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.table.current is not None and app.table.current.pid == ME
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.pause(0.3)
        text = screen_text(app)
        assert not called
        assert "recording" in text
        assert RECORDED_COMMAND in text and "alice" in text and "/dev/nvidia0" in text
        live = " ".join(psutil.Process().cmdline())
        assert live not in text  # what this pid runs now is not what the recording says
        assert "reading /proc" not in text


async def test_replay_doctor_does_not_examine_the_live_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    called = _forbid(monkeypatch, "gputui.ui.screens.doctor.diagnose")
    app = _app(_recording({}), replay=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("D")
        await pilot.pause(0.3)
        assert not called
        assert not isinstance(app.screen, DoctorScreen)
        assert "live machine" in "\n".join(lines(app.status))


async def test_readonly_detail_reads_proc_but_never_attaches_py_spy(monkeypatch: pytest.MonkeyPatch) -> None:
    """--readonly on the live machine: the detail reads /proc (reading is fine), but py-spy, which stops
    the process to read its stacks, is not run."""
    called = _forbid(monkeypatch, "gputui.ui.screens.detail.py_spy_dump")
    app = _app(_recording({}), replay=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await until(pilot, lambda: screen.detail is not None and screen.stack is not None)
        assert screen.detail is not None and screen.detail.error is None  # this process, read live
        assert not called
        assert "read-only" in (screen.stack or "")


async def test_a_replay_is_read_only_even_if_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its pids are the recorded machine's: k must never signal whatever has that pid here now."""
    sent: list[object] = []

    def send(*args: object) -> list[object]:
        sent.append(args)
        return []

    monkeypatch.setattr("gputui.actions.signals.send", send)
    app = GpuTuiApp(
        ReplaySampler(_recording({}), devices_dir=Path("/nonexistent")), interval=30.0, replay=True
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("space", "k", "y", "K")
        await pilot.pause(0.2)
        assert app.readonly and len(app.screen_stack) == 1 and not sent
