"""Keys typed faster than the app handles them (a laggy SSH link delivers `g Enter Enter` in one read;
key repeat). A modal screen's close or confirm key arriving twice closes that screen once, never the
screen under it (popping the main screen raised ScreenStackError, which ended gputui); keys typed
right after `/` go to the filter."""

from __future__ import annotations

import pytest
from textual import events
from textual.pilot import Pilot

from gputui.ui.app import GpuTuiApp
from gputui.ui.kill_flow import KillFlow
from gputui.ui.screens.detail import DetailScreen, GpuChooser
from tests.ui import world
from tests.ui.conftest import first_frame, make_app

KEY_CHARS = {"enter": "\r", "escape": "\x1b", "question_mark": "?", "slash": "/"}


def type_fast(app: GpuTuiApp, *keys: str) -> None:
    """All keys into the app's queue at once, as one read of the terminal delivers them: no key waits for
    the previous one to be handled (Pilot.press waits for the app to go idle between keys)."""
    assert app._driver is not None
    for key in keys:
        app._driver.send_message(events.Key(key, KEY_CHARS.get(key, key if len(key) == 1 else None)))


async def _settle(pilot: Pilot[int], app: GpuTuiApp) -> None:
    for _ in range(10):
        await pilot.pause(0.02)
    assert app.is_running, "the app ended"
    assert app.return_code in (None, 0), "the app crashed"


async def test_g_enter_enter_chooses_once_and_keeps_the_main_screen() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("g")
        assert isinstance(app.screen, GpuChooser)
        type_fast(app, "down", "down", "enter", "enter")  # GPU 1, then a second Enter
        await _settle(pilot, app)
        assert app.view.gpu == 1  # the first Enter's choice
        assert len(app.screen_stack) >= 1 and not isinstance(app.screen, GpuChooser)


async def test_pilot_g_enter_enter_without_pause() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("g", "enter", "enter")
        await _settle(pilot, app)
        assert app.view.gpu is None  # "all GPUs", the first option
        assert not isinstance(app.screen, GpuChooser)


@pytest.mark.parametrize(
    ("open_key", "close_keys"),
    [
        ("question_mark", ("escape", "escape")),
        ("D", ("escape", "escape")),
        ("e", ("escape", "escape")),
        ("enter", ("enter", "enter")),  # the detail: Enter opens it and closes it
    ],
)
async def test_a_close_key_twice_closes_one_screen(
    open_key: str, close_keys: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The doctor runs in a thread: keep it from examining this machine.
    monkeypatch.setattr("gputui.ui.screens.doctor.diagnose", lambda **_: [])
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press(open_key)
        await pilot.pause()
        modal = app.screen
        assert len(app.screen_stack) == 2, app.screen_stack
        type_fast(app, *close_keys)
        await _settle(pilot, app)
        assert modal not in app.screen_stack


async def test_the_kill_dialog_confirmed_twice_signals_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from gputui.ui.screens.kill import KillScreen

    sent: list[object] = []
    monkeypatch.setattr(KillFlow, "send", lambda self, request: sent.append(request))
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("k")
        assert isinstance(app.screen, KillScreen)
        app.screen.query_one("#send").focus()
        await pilot.pause()
        type_fast(app, "enter", "enter", "y", "y")  # the Send button twice, then its key twice
        await _settle(pilot, app)
        assert len(sent) == 1
        assert not isinstance(app.screen, KillScreen)


async def test_the_main_screen_is_never_popped() -> None:
    """Whatever screen asks: the app keeps its main screen."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("enter")
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, DetailScreen) and detail.process.pid == world.trainer_pid(0)
        detail.dismiss()
        detail.dismiss()
        app.pop_screen()
        await _settle(pilot, app)
        assert len(app.screen_stack) == 1


async def test_slash_and_a_filter_typed_in_one_read_all_go_to_the_filter() -> None:
    """`/pwned` in one read: the keys after `/` reached the table's bindings (p paused, e opened the
    events) because focus moved to the filter box only after them."""
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        type_fast(app, "slash", "p", "w", "n", "e", "d", "enter", "down")
        await _settle(pilot, app)
        assert app.filter_box.value == "pwned" and app.view.filter == "pwned"
        assert not app.paused and len(app.screen_stack) == 1
        assert app.focused is app.table  # Enter kept the filter and gave the keys back to the table


async def test_a_slash_in_the_filter_is_part_of_the_filter() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        type_fast(app, "slash", "c", "o", "n", "f", "i", "g", "s", "slash", "l")
        await _settle(pilot, app)
        assert app.view.filter == "configs/l"
        await pilot.press("escape")
        assert app.view.filter == "" and app.focused is app.table
