"""The allocator panel on the fixed world, with the recorded reply of a CUDA process's agent."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gputui.collect.agents.reply import parse
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Snapshot
from gputui.ui.app import GpuTuiApp, SnapshotReady
from gputui.ui.screens.allocator import AllocatorScreen, segment_map
from gputui.ui.screens.detail import DetailScreen
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.status import StatusLine
from tests.ui.conftest import first_frame, make_app
from tests.ui.world import trainer_pid

PID = trainer_pid(0)
FIXTURE = Path(__file__).parent.parent / "fixtures" / "agent_stats_cuda.json"
RAW = {**json.loads(FIXTURE.read_text()), "pid": PID}
REPLY = parse(PID, RAW)


class FakePoller:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str, dict[str, Any]]] = []

    def poll(self) -> dict[int, dict[str, Any]]:
        return {}

    def act(self, pid: int, op: str, **params: Any) -> dict[str, Any]:
        self.calls.append((pid, op, params))
        return {"ok": True, "message": f"{op} done", "path": "/tmp/x.pickle"}


def _app() -> tuple[GpuTuiApp, FakePoller]:
    app = make_app(gpus=4, interval=30.0)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    replay.snapshots = [dataclasses.replace(s, agents={PID: REPLY}) for s in replay.snapshots]
    poller = FakePoller()
    replay.agents = poller  # type: ignore[assignment]
    return app, poller


def _text(screen: AllocatorScreen) -> str:
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(screen.render_panel(screen.snapshot.agents.get(screen.pid)))
    return console.export_text()


def _with_counters(snap: Snapshot, **changes: int) -> Snapshot:
    reply = copy.deepcopy(RAW)
    reply["allocator"]["devices"][0].update(changes)
    return dataclasses.replace(snap, agents={PID: parse(PID, reply)})


async def test_badge_and_a_opens_the_panel() -> None:
    app, _ = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        table = app.query_one(ProcessTable)
        assert table.current is not None and table.current.pid == PID
        assert table.current.cells[1].plain == f"◆{PID}"  # the badge
        await pilot.press("a")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AllocatorScreen) and screen.pid == PID
        text = _text(screen)
        for expected in (
            "49.0 GiB (peak 57.0 GiB)",
            "62.0 GiB (peak 66.0 GiB)",
            "fragmentation 85%",
            "largest free block 2.0 GiB",
            "retries 3",
            "7.04 steps/s",
            "7% of step time",
            "expandable_segments:False",
            "outside torch",
        ):
            assert expected in text, expected
        # NVML's 68.7 GiB for the trainer minus 62.0 GiB reserved.
        nvml = next(p.used_memory for p in app.snapshot.processes if p.pid == PID and p.kinds)  # type: ignore[union-attr]
        outside = (nvml - RAW["allocator"]["devices"][0]["reserved"]) / 2**30
        assert f"{outside:.1f} GiB (NVML's" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, AllocatorScreen)


async def test_enter_on_an_agent_row_is_its_detail_a_its_panel_and_a_elsewhere_explains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gputui.actions.attach import Refusal

    # The world's pids are made up: whatever runs under them on this machine is not asked about.
    monkeypatch.setattr("gputui.actions.attach.check", lambda pid: Refusal(pid, f"no process with pid {pid}"))
    app, _ = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)  # the detail is reachable by key on a ◆ row too
        await pilot.press("escape")
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AllocatorScreen)
        await pilot.press("escape")
        await pilot.press("down")
        await pilot.press("a")
        await pilot.pause()
        assert not isinstance(app.screen, AllocatorScreen)
        assert "runs no gputui agent" in app.query_one(StatusLine).message


async def test_increases_of_retries_and_ooms_are_highlighted() -> None:
    app, _ = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")  # no replayed tick in between
        await pilot.press("a")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AllocatorScreen)
        assert app.snapshot is not None
        app.post_message(SnapshotReady(_with_counters(app.snapshot, num_alloc_retries=5, num_ooms=1)))
        await pilot.pause(0.1)
        text = _text(screen)
        assert "retries 5 (+2)" in text and "OOMs 1 (+1)" in text


async def test_actions_need_a_second_press_and_reach_the_agent() -> None:
    app, poller = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AllocatorScreen)
        await pilot.press("e")
        await pilot.pause()
        assert poller.calls == [] and "press e again" in screen.message
        await pilot.press("s")  # another action: re-arms for that one, still nothing sent
        await pilot.pause()
        assert poller.calls == [] and "press s again" in screen.message
        await pilot.press("s")
        for _ in range(20):
            await pilot.pause(0.05)
            if poller.calls:
                break
        assert poller.calls == [(PID, "dump_snapshot", {})]
        for _ in range(20):
            await pilot.pause(0.05)
            if "done" in screen.message:
                break
        assert "dump_snapshot: dump_snapshot done" in screen.message
        await pilot.press("h")
        await pilot.press("h")
        for _ in range(20):
            await pilot.pause(0.05)
            if len(poller.calls) == 2:
                break
        assert poller.calls[1] == (PID, "record_history", {"enabled": True})


async def test_an_agent_that_stops_answering() -> None:
    app, _ = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")
        await pilot.press("a")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AllocatorScreen) and app.snapshot is not None
        app.post_message(SnapshotReady(dataclasses.replace(app.snapshot, agents={})))
        await pilot.pause(0.1)
        assert "not answering" in _text(screen)


def test_segment_map() -> None:
    assert segment_map([]) == "n/a"
    assert segment_map([1.0, 0.0, 0.5]) == "█▁▄"
    assert len(segment_map([0.5] * 500, width=60)) <= 60


def test_agent_history_skips_malformed_replies() -> None:
    """An agent's reply comes from another process: a malformed one is unreadable, and adds no point."""
    from gputui.collect.agents.client import AgentHistory

    base = make_app(gpus=1).sampler.snapshots[-1]  # type: ignore[attr-defined]
    raw: dict[int, Any] = {
        1: {"allocator": "not a dict"},
        2: {"allocator": {"devices": 7}},
        3: {"allocator": {"devices": ["x", {"index": "0", "allocated": "many", "reserved": True}]}},
        4: "not a reply",
        5: {"allocator": {"devices": [{"index": 0, "allocated": float("nan")}]}},
    }
    bad = {pid: parse(pid, reply) for pid, reply in raw.items()}
    assert {r.status for r in bad.values()} == {"unreadable"}
    history = AgentHistory()
    history.add(dataclasses.replace(base, agents={**bad, PID: REPLY}))
    assert history.points(PID, 0) == [(52613349376, 66571993088)]
    assert list(history.series) == [(PID, 0)]


async def test_an_unreadable_or_hostile_agent_in_the_panel() -> None:
    """What another user's agent sends reaches the screen validated: an unreadable reply is a line
    saying so, escapes are replaced, the app keeps running."""
    app, _ = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")
        await pilot.press("a")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, AllocatorScreen) and app.snapshot is not None
        broken = parse(PID, {**RAW, "allocator": "oops"})
        app.post_message(SnapshotReady(dataclasses.replace(app.snapshot, agents={PID: broken})))
        await pilot.pause(0.1)
        assert "unreadable: bad reply: allocator: not an object" in _text(screen)
        hostile = parse(
            PID,
            {
                **RAW,
                "allocator": {
                    **RAW["allocator"],
                    "torch": "\x1b]0;pwned\x07",
                    "alloc_conf": "\x1b]52;c;cHduZWQ=\x07",
                },
            },
        )
        app.post_message(SnapshotReady(dataclasses.replace(app.snapshot, agents={PID: hostile})))
        await pilot.pause(0.1)
        text = _text(screen)
        assert "?]0;pwned?" in text and "?]52;c;cHduZWQ=?" in text and "\x1b" not in text
        assert app.is_running
