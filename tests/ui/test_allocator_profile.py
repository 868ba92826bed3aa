"""`P` in the allocator panel: armed by one press, sent by a second, then followed to its verdict."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gputui.collect.agents.profile_reply import ProfileStatus, parse_status
from gputui.collect.sources.replay import ReplaySampler
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens import allocator
from gputui.ui.screens.allocator import AllocatorScreen, fmt_us
from tests.helpers import until
from tests.ui.conftest import first_frame, make_app
from tests.ui.test_allocator import PID, REPLY, _text

LONG = "aten::" + "very_long_operator_name_" * 10 + "\x1b]0;pwned\x07"
DONE = {
    "state": "done",
    "steps": 20,
    "steps_done": 20,
    "path": "/tmp/gputui-1000/profile-42-1.json",
    "summary": {
        "steps": 20,
        "wall_s": 2.0,
        "steps_per_s": 10.0,
        "data_wait_share": 0.05,
        "cuda": True,
        "kernels": 4000,
        "short_kernel_share": 0.8,
        "gpu_idle_share": 0.6,
        "verdict": "launch-bound",
        "explanation": "many tiny kernels",
        "top_ops": [
            {"name": LONG, "count": 20, "self_cpu_us": 1_500_000.0, "self_device_us": 0.0},
            {"name": "aten::add_", "count": 400, "self_cpu_us": 2500.0, "self_device_us": 0.0},
        ],
        "top_device_ops": [{"name": "void gemm<>", "count": 20, "self_cpu_us": 0.0, "self_device_us": 812.0}],
    },
}


class ProfilingPoller:
    """An agent that records: waiting, 7 of 20 steps, then done (or whatever `statuses` says)."""

    def __init__(
        self, statuses: list[dict[str, Any]], hold: Callable[[dict[str, Any]], bool] | None = None
    ) -> None:
        self.calls: list[tuple[int, str, dict[str, Any]]] = []
        self.statuses = statuses
        self.hold = hold  # a status it keeps answering while this says so (until a test has seen it)

    def poll(self) -> dict[int, Any]:
        return {}

    def act(self, pid: int, op: str, **params: Any) -> dict[str, Any]:
        self.calls.append((pid, op, params))
        if op == "profile_status":
            status = self.statuses[0]
            if len(self.statuses) > 1 and not (self.hold is not None and self.hold(status)):
                self.statuses.pop(0)
            return {"ok": True, "message": "", "profile": parse_status(status)}
        return {"ok": True, "message": "recording the next 20 steps (at most 60 s)"}


def _app(poller: ProfilingPoller) -> GpuTuiApp:
    app = make_app(gpus=4, interval=30.0)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    replay.snapshots = [dataclasses.replace(s, agents={PID: REPLY}) for s in replay.snapshots]
    replay.agents = poller  # type: ignore[assignment]
    return app


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "PROFILE_POLL_S", 0.05)


async def test_p_twice_profiles_and_shows_progress_then_the_verdict() -> None:
    recording = {"state": "recording", "steps": 20, "steps_done": 7, "elapsed_s": 0.7}
    shown = threading.Event()  # the progress was on screen: the agent may finish (however slow the machine)
    waiting = {"state": "waiting", "steps": 20, "steps_done": 0}
    poller = ProfilingPoller(
        [waiting, recording, DONE], hold=lambda status: status is recording and not shown.is_set()
    )
    seen: list[str] = []
    app = _app(poller)
    async with app.run_test(size=(120, 50)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AllocatorScreen))
        screen = app.screen
        assert isinstance(screen, AllocatorScreen)
        await pilot.press("P")
        await pilot.pause()
        assert poller.calls == [] and "press P again to profile the next 20 steps" in screen.message
        await pilot.press("P")

        def progressed() -> bool:
            seen.append(_text(screen))
            if "profiling: 7/20 steps …" in seen[-1]:
                shown.set()
            return screen.profile is not None and screen.profile.state == "done"

        await until(pilot, progressed)
        assert poller.calls[0] == (PID, "profile", {"steps": 20, "max_seconds": 60.0})
        assert {op for _, op, _ in poller.calls[1:]} == {"profile_status"}
        assert any("profiling: 7/20 steps …" in text for text in seen), seen
        text = _text(screen)
        assert "launch-bound: many tiny kernels" in text
        assert "/tmp/gputui-1000/profile-42-1.json" in text
        assert "60% of wall time with no kernel running" in text and "4000 kernels, 80% under 10 µs" in text
        assert "over 20 profiled steps in 2.00 s" in text  # the window of the verdict
        # The panel's one data-wait number is the agent's (test_allocator_data_wait), not the profile's 5%.
        assert not re.search(r"(?<!\d)5%", text)
        assert "1.50 s self" in text and "2.5 ms self" in text and "812 µs self" in text
        assert "\x1b" not in text and "\x07" not in text  # the agent's strings never reach the terminal raw
        long_line = next(line for line in text.splitlines() if "very_long_operator" in line)
        assert "…" in long_line and len(long_line.rstrip()) <= 120  # cut to the panel, not wrapped
        calls = len(poller.calls)
        await pilot.pause(0.3)
        assert len(poller.calls) == calls  # done: no more polling
        # The app keeps the verdict, for the Events pane to name as the reason of a dip near it.
        (note,) = app.profiles
        gpu = next(r.gpu for r in screen.snapshot.processes if r.pid == PID and r.gpu is not None)
        assert (note.pid, note.gpu, note.verdict) == (PID, gpu, "launch-bound")
        assert note.end - note.start == pytest.approx(2.0) and abs(note.end - time.time()) < 5


async def test_a_failed_profile_says_why() -> None:
    poller = ProfilingPoller(
        [{"state": "failed", "steps": 20, "steps_done": 3, "error": "RuntimeError: boom"}]
    )
    app = _app(poller)
    async with app.run_test(size=(120, 50)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AllocatorScreen))
        screen = app.screen
        assert isinstance(screen, AllocatorScreen)
        await pilot.press("P", "P")
        await until(pilot, lambda: screen.profile is not None)
        assert isinstance(screen.profile, ProfileStatus)
        assert "failed: RuntimeError: boom" in _text(screen)


async def test_p_in_read_only_sends_nothing() -> None:
    poller = ProfilingPoller([DONE])
    app = _app(poller)
    async with app.run_test(size=(120, 50)) as pilot:
        await first_frame(pilot, app)
        assert app.snapshot is not None
        screen = AllocatorScreen(PID, None, app.snapshot, app.agent_history)  # what --readonly opens
        await app.push_screen(screen)
        await pilot.press("P", "P")
        await pilot.pause(0.2)
        assert poller.calls == [] and screen.armed is None and screen.profile is None
        assert "read-only: actions disabled" in _text(screen)


def test_times() -> None:
    assert (fmt_us(None), fmt_us(3.4), fmt_us(2500), fmt_us(1.5e6)) == ("n/a", "3 µs", "2.5 ms", "1.50 s")
