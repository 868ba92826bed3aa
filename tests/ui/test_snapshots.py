"""Pictures of the main views on the fixed world (tests/ui/world.py). `pytest --snapshot-update` rewrites
them; look at the SVGs under tests/ui/__snapshots__/ before committing new ones."""

from __future__ import annotations

import time

import pytest
from textual.pilot import Pilot

from tests.ui.conftest import first_frame, make_app


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the header's clock
    time.tzset()


def _snap(snap_compare, size: tuple[int, int], *keys: str, gpus: int = 4) -> bool:  # type: ignore[no-untyped-def]
    app = make_app(gpus=gpus, unaccounted=True)

    async def run_before(pilot: Pilot) -> None:
        await first_frame(pilot, app)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        for _ in range(3):
            await pilot.pause(0.05)

    return snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=["80x24", "120x40", "200x60"])
def test_main_view(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, size)


def test_main_view_8_gpus(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), gpus=8)


def test_help(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), "question_mark")


def test_detail(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), "down", "down", "enter")


def test_tree(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), "t")


def test_allocator_panel(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The allocator panel of a process whose agent answers (a recorded-shape reply, tests/fixtures)."""
    import dataclasses
    import json
    from pathlib import Path

    from gputui.collect.replay import ReplaySampler

    reply = json.loads((Path(__file__).parent.parent / "fixtures" / "agent_stats_cuda.json").read_text())
    app = make_app(gpus=4, interval=3600.0)  # no tick after the first: a fixed allocator history
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    from gputui.collect.agent_reply import parse

    report = parse(4101, reply)
    replay.snapshots = [dataclasses.replace(s, agents={4101: report}) for s in replay.snapshots]

    async def run_before(pilot: Pilot) -> None:
        await first_frame(pilot, app)
        await pilot.press("a")
        for _ in range(3):
            await pilot.pause(0.05)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
