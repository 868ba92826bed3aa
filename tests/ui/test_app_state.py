"""The app's state and keys (issue 16): interval -> sparkline bucket, + never slower, status messages
that expire, the htop/nvitop function keys, Ctrl+C, the filter box's text and badge, Esc, Enter on a ◆
row. Each test asserts what is drawn or the state the drawing comes from."""

from __future__ import annotations

import dataclasses

import pytest
from textual.geometry import Region
from textual.widget import Widget

from gputui.collect.sources.replay import ReplaySampler
from gputui.ui.app import INTERVALS, GpuTuiApp, SnapshotReady, next_interval
from gputui.ui.screens.allocator import AllocatorScreen
from gputui.ui.screens.detail import DetailScreen, HelpScreen
from gputui.ui.widgets import status as status_module
from tests.helpers import until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app
from tests.ui.drawn import lines, shown_pids

SIZE = (120, 40)


def drawn(widget: Widget) -> str:
    """What the widget puts on the screen, borders included."""
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(strip.text for strip in strips)


def status_text(app: GpuTuiApp) -> str:
    return "\n".join(lines(app.status))


# -- interval ---------------------------------------------------------------------------------------


async def test_slower_interval_recomputes_the_sparkline_bucket_at_once() -> None:
    """`-` up to 30 s: each sparkline cell must hold at least one interval, from the key on, not from
    the next resize (before: ~7 blank cells between samples at 30 s)."""
    app = make_app(interval=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")  # no tick in between
        before = app.panes._bucket_s
        assert before < 30.0
        for _ in range(4):  # 1 -> 2 -> 5 -> 10 -> 30
            await pilot.press("minus")
        await pilot.pause()
        assert app.interval == 30.0
        assert app.panes._bucket_s >= 30.0
        assert "every 30 s" in lines(app.header)[0]
        for _ in range(4):
            await pilot.press("plus")
        await pilot.pause()
        assert app.interval == 1.0 and app.panes._bucket_s == before


def test_next_interval_never_goes_the_wrong_way() -> None:
    assert next_interval(0.1, -1) == 0.1  # faster than every step: + keeps it
    assert next_interval(0.1, +1) == INTERVALS[0]
    assert next_interval(1.0, -1) == 0.5 and next_interval(1.0, +1) == 2.0
    assert next_interval(0.7, -1) == 0.5 and next_interval(0.7, +1) == 1.0
    assert next_interval(60.0, +1) == 60.0 and next_interval(60.0, -1) == 30.0


async def test_plus_at_a_tenth_of_a_second_does_not_slow_sampling() -> None:
    app = make_app(interval=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("plus")
        await pilot.pause()
        assert app.interval == 0.1
        frames = app.frames
        await pilot.pause(0.6)  # at 0.1 s: about 6 ticks; at 0.25 s it would be 2
        assert app.frames - frames >= 4
        assert "every 0.1 s" in lines(app.header)[0]


# -- status messages --------------------------------------------------------------------------------


async def test_status_messages_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(status_module.EXPIRE_S, "information", 0.3)
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("z")
        await pilot.pause()
        assert "zombies:" in status_text(app)
        await until(pilot, lambda: "zombies:" not in status_text(app), timeout=2.0)
        assert app.status.message == ""


async def test_a_new_message_restarts_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(status_module.EXPIRE_S, "information", 0.5)
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        app.say("first")
        await pilot.pause(0.3)
        app.say("second")
        await pilot.pause(0.35)  # the first one's timer would have fired by now
        assert "second" in status_text(app)
        await until(pilot, lambda: "second" not in status_text(app), timeout=2.0)


# -- function keys and Ctrl+C -----------------------------------------------------------------------


async def test_f1_opens_the_help_and_it_lists_the_function_keys() -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = " ".join(key for key, _ in app.screen.keys)
        for name in ("F1", "F3", "F4", "F5", "F6", "F9", "F10", "Ctrl+C"):
            assert name in keys
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("key", ["f3", "f4"])
async def test_f3_and_f4_open_the_filter(key: str) -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press(key, *"mallory")
        await pilot.pause()
        assert app.filter_box.has_focus and app.filter_box.value == "mallory"
        assert shown_pids(app) == [world.WEIRD_PID]


async def test_f5_toggles_the_tree_and_f6_sorts() -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("f5")
        await pilot.pause()
        assert app.view.tree
        await pilot.press("f5", "f6")
        await pilot.pause()
        assert not app.view.tree and app.view.sort == "gpu_mem"
        assert "GPU MEM▼" in lines(app.table)[0]


async def test_f9_opens_the_kill_dialog() -> None:
    from gputui.ui.screens.kill import KillScreen

    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("f9")
        await until(pilot, lambda: isinstance(app.screen, KillScreen))


@pytest.mark.parametrize("key", ["f10", "ctrl+c", "q"])
async def test_f10_ctrl_c_and_q_quit(key: str) -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press(key)
        await pilot.pause()
    assert app.return_value == 0  # action_quit's; leaving run_test() without it leaves None


async def test_ctrl_c_quits_even_from_the_filter_box() -> None:
    """Input binds Ctrl+C to copy; here it must quit as everywhere else."""
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("slash", "x")
        assert app.filter_box.has_focus
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_value == 0


# -- filter -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(120, 40), (200, 60), (80, 24)])
async def test_the_typed_filter_text_is_drawn(size: tuple[int, int]) -> None:
    """Before: Input's `:focus` border won over the box's `border: none`: a box of height 1 drew only
    its top border (▔▔▔) and never the text."""
    app = make_app(interval=30.0)
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        await pilot.press("slash", *"mallo")
        await pilot.pause()
        box = app.filter_box
        assert box.size.height == 1
        assert "mallo" in drawn(box)
        assert "▔" not in drawn(box)
        # ... and nothing lies over it (docked at the bottom, the key bar covered it).
        on_top, _ = app.screen.get_widget_at(2, box.region.y)
        assert on_top is box
        assert box.region.bottom <= app.status.region.y  # above the status line, which stays


async def test_enter_keeps_the_filter_and_the_status_line_says_so() -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("slash", *"mallory", "enter")
        await pilot.pause()
        assert app.table.has_focus
        shown = status_text(app)
        assert "filter: mallory" in shown and "Esc clears" in shown
        assert shown_pids(app) == [world.WEIRD_PID]


async def test_esc_on_the_main_screen_clears_an_active_filter() -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        everyone = sorted(shown_pids(app))
        await pilot.press("slash", *"mallory", "enter")
        await pilot.pause()
        assert shown_pids(app) == [world.WEIRD_PID]
        await pilot.press("escape")
        await pilot.pause()
        assert app.view.filter == "" and app.filter_box.value == "" and not app.filter_box.display
        assert sorted(shown_pids(app)) == everyone
        assert "filter:" not in status_text(app)
        assert app.table.has_focus


async def test_esc_in_a_modal_closes_the_modal_and_keeps_the_filter() -> None:
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("slash", *"mallory", "enter", "question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        assert app.view.filter == "mallory"


# -- Enter on a ◆ row --------------------------------------------------------------------------------


def _agent_app() -> GpuTuiApp:
    from tests.ui.test_allocator import PID, REPLY, FakePoller

    app = make_app(gpus=4, interval=30.0)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    replay.snapshots = [dataclasses.replace(s, agents={PID: REPLY}) for s in replay.snapshots]
    replay.agents = FakePoller()  # type: ignore[assignment]
    return app


async def test_enter_on_an_agent_row_opens_the_detail_and_a_the_allocator() -> None:
    from tests.ui.test_allocator import PID

    app = _agent_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert app.table.current is not None and app.table.current.pid == PID
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        assert app.screen.process.pid == PID  # type: ignore[attr-defined]
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AllocatorScreen))


# -- state changes repaint only what derives from them -----------------------------------------------


async def test_app_state_changes_never_repaint_the_whole_screen(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `reactive` on an App refreshes the whole screen on each change: the snapshot, set every tick,
    would re-send every cell. The app's state is `var`: only the widgets' own redraws repaint."""
    app = make_app(interval=30.0)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        whole_screen: list[bool] = []
        original = type(app).refresh

        def refresh(self: GpuTuiApp, **kwargs: bool) -> GpuTuiApp:
            whole_screen.append(kwargs.get("repaint", True))
            return original(self, **kwargs)

        monkeypatch.setattr(type(app), "refresh", refresh)
        assert app.snapshot is not None
        frames = app.frames
        app.post_message(SnapshotReady(app.snapshot))
        await until(pilot, lambda: app.frames > frames)
        await pilot.press("p", "p", "plus", "right_square_bracket")
        await pilot.pause()
        assert app.interval == 10.0 and app.window == 900.0
        assert not any(whole_screen)
