"""The allocator panel shows one data-wait number, the agent's, and says over which window it is."""

from __future__ import annotations

import dataclasses
import re

from rich.console import Console

from gputui.collect.agents.client import AgentHistory
from gputui.collect.agents.profile_reply import parse_status
from gputui.model import TrainingProgress
from gputui.ui.screens.allocator import AllocatorScreen
from tests.builders import snapshot
from tests.ui.test_allocator import PID, REPLY
from tests.ui.test_allocator_profile import DONE


def _panel_text(screen: AllocatorScreen) -> str:
    console = Console(width=120, record=True)
    console.print(screen.render_panel(screen.snapshot.agents.get(PID)))
    return console.export_text()


def _screen(progress: TrainingProgress) -> AllocatorScreen:
    report = dataclasses.replace(REPLY, progress=progress)
    snap = snapshot(hostname="host", agents={PID: report})
    return AllocatorScreen(PID, None, snap, AgentHistory())


def test_one_data_wait_number_with_its_window_after_a_profile() -> None:
    # The agent says 7% over its last 30 s; a profile of 20 steps measured 5% while it slowed them.
    screen = _screen(TrainingProgress(batches=212, steps_per_s=7.04, data_wait_share=0.071, window_s=30.0))
    screen.profile = parse_status(DONE)
    text = _panel_text(screen)
    waits = [line for line in text.splitlines() if "waiting for" in line]
    assert len(waits) == 1, waits
    assert "7% of step time waiting for data over the last 30 s (212 batches)" in waits[0]
    assert not re.search(r"(?<!\d)5%", text)  # the profile's own share is not a second number beside it
    assert "7.04 steps/s over the last 30 s (212 batches)" in text
    assert "over 20 profiled steps in 2.00 s (10.0/s while profiled)" in text  # the verdict's window
    assert "launch-bound: many tiny kernels" in text


def test_no_window_known_no_window_said_and_no_share_no_row() -> None:
    text = _panel_text(_screen(TrainingProgress(steps_per_s=2.0, data_wait_share=0.5)))
    assert "50% of step time waiting for data" in text and "over the last" not in text
    text = _panel_text(_screen(TrainingProgress(steps_per_s=2.0, window_s=30.0, batches=61)))
    assert "waiting for" not in text and "data wait" not in text
    assert "2.00 steps/s over the last 30 s (61 batches)" in text
