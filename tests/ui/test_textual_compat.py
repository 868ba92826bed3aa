"""Each work-around in gputui/ui/_textual_compat.py, and a test that Textual still behaves the way it
works around. A failing `test_upstream_*` means upstream changed: read the entry in _textual_compat's
docstring and drop the work-around if it is no longer needed."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import time
import tty
from collections.abc import Iterable
from typing import Any

import pytest
from rich.console import Console
from rich.control import Control
from rich.segment import Segment
from textual import events
from textual.app import App, ComposeResult, ScreenStackError
from textual.geometry import Region
from textual.message import Message
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from gputui.ui import _textual_compat
from gputui.ui._textual_compat import DismissOnce
from tests.helpers import until, wait_until


def _update(text: str, span: tuple[int, int]) -> object:
    """One line drawn as one segment, of which only the cells span[0]..span[1] changed."""
    from textual._compositor import ChopsUpdate

    strip = Strip([Segment(text)])
    return ChopsUpdate([{0: strip}], [(0, *span)], [[len(text)]])


def _console() -> Console:
    return Console(width=80, color_system=None, force_terminal=True, legacy_windows=False)


# -- 1. partial updates ----------------------------------------------------------------------------


def test_upstream_partial_update_still_resends_the_left_of_a_segment() -> None:
    """Textual 8.2.8 (textual#5625): one changed cell at x=7 re-sends x=0..7."""
    upstream = _textual_compat.upstream_render_segments()
    written = upstream(_update("0123456789", (7, 8)), _console())
    assert "01234567" in written


def test_the_patch_writes_only_the_changed_cells() -> None:
    patched = _textual_compat.patched_render_segments()
    written = patched(_update("0123456789", (7, 8)), _console())
    assert written == Control.move_to(7, 0).segment.text + "7"  # moved to the cell, and that cell only


def test_install_is_idempotent_and_patches_the_class() -> None:
    from textual._compositor import ChopsUpdate

    assert _textual_compat.install() is True
    assert _textual_compat.install() is True
    assert _textual_compat.installed()
    assert ChopsUpdate.render_segments is _textual_compat.patched_render_segments()


def test_the_app_does_not_patch_textual_when_it_is_created() -> None:
    """Installed once when the program runs the app (BaseApp.run_async), not from App.__init__."""
    import inspect

    from gputui.ui import app as app_module
    from gputui.ui import base_app, fleet_app

    for module in (app_module, fleet_app):
        assert "_textual_compat.install" not in inspect.getsource(module)
    assert "_textual_compat.install()" in inspect.getsource(base_app.BaseApp.run_async)


# -- 2. dismiss once -------------------------------------------------------------------------------


class _Main(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("main")


class _PlainModal(ModalScreen[None]):
    def compose(self) -> ComposeResult:
        yield Static("plain")


class _OnceModal(DismissOnce[None]):
    def compose(self) -> ComposeResult:
        yield Static("once")


async def test_upstream_dismiss_twice_still_pops_the_screen_below() -> None:
    """Textual 8.2.8 (textual#2575): a second dismiss() of a closed screen pops whatever is on top."""
    app = _Main()
    async with app.run_test() as pilot:
        below, top = _PlainModal(), _PlainModal()
        await app.push_screen(below)
        await app.push_screen(top)
        top.dismiss()
        await pilot.pause()
        assert app.screen is below
        top.dismiss()  # the stray second close
        await pilot.pause()
        assert app.screen is not below and len(app.screen_stack) == 1


async def test_dismiss_once_closes_only_itself() -> None:
    app = _Main()
    async with app.run_test() as pilot:
        below, top = _OnceModal(), _OnceModal()
        await app.push_screen(below)
        await app.push_screen(top)
        top.dismiss()
        await pilot.pause()
        top.dismiss()  # the stray second close: nothing happens
        await pilot.pause()
        assert app.screen is below and len(app.screen_stack) == 2


# -- 3. the last screen ----------------------------------------------------------------------------


async def test_upstream_pop_of_the_last_screen_still_raises() -> None:
    app = _Main()
    async with app.run_test():
        with pytest.raises(ScreenStackError):
            app.pop_screen()


async def test_base_app_never_pops_its_main_screen() -> None:
    from tests.ui.conftest import first_frame, make_app

    app = make_app(interval=30.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        app.pop_screen()
        await pilot.pause()
        assert len(app.screen_stack) == 1 and app.is_running


# -- 4. the crash ----------------------------------------------------------------------------------


class _Crashes(App[None]):
    def on_mount(self) -> None:
        raise RuntimeError("boom")


async def test_upstream_keeps_the_crash_in_a_private_attribute() -> None:
    app = _Crashes()
    with pytest.raises(RuntimeError):
        async with app.run_test():
            pass
    assert app.return_code == 1 and app.return_value is None
    error = _textual_compat.unhandled_exception(app)
    assert isinstance(error, RuntimeError) and str(error) == "boom"


# -- 5. the dirty regions of a widget that draws its own lines ------------------------------------


class _OwnLines(Widget):
    """Draws its lines itself, as gputui's Canvas does: Widget.render_line is never called."""

    def render_line(self, y: int) -> Strip:
        return Strip.blank(self.size.width)


class _OwnLinesApp(App[None]):
    def compose(self) -> ComposeResult:
        yield _OwnLines()


async def test_upstream_refresh_still_keeps_regions_a_custom_render_line_never_clears() -> None:
    """Textual 8.2.8: refresh(*regions) adds them to Widget._dirty_regions, and a repaint through a custom
    render_line leaves them there."""
    app = _OwnLinesApp()
    async with app.run_test(size=(20, 4)) as pilot:
        widget = app.query_one(_OwnLines)
        await pilot.pause()
        widget._dirty_regions.clear()
        for x in range(3):
            widget.refresh(Region(x, 0, 1, 1))
        await pilot.pause()  # the repaint
        assert {Region(x, 0, 1, 1) for x in range(3)} <= widget._dirty_regions


async def test_forget_dirty_regions_empties_them_and_leaves_the_repaint_alone() -> None:
    app = _OwnLinesApp()
    async with app.run_test(size=(20, 4)) as pilot:
        widget = app.query_one(_OwnLines)
        await pilot.pause()
        widget.refresh(Region(1, 0, 1, 1))
        _textual_compat.forget_dirty_regions(widget)
        assert not widget._dirty_regions
        assert Region(1, 0, 1, 1) in widget._repaint_regions  # still painted
    _textual_compat.forget_dirty_regions(Static())  # a widget never mounted: nothing to do


# -- 6. the input thread ---------------------------------------------------------------------------


class _Input:
    """A driver's input thread reading a pseudo-terminal: what it sent, and how often it woke."""

    def __init__(self, driver_class: type[Any], monkeypatch: pytest.MonkeyPatch) -> None:
        from textual._xterm_parser import XTermParser

        self.messages: list[Message] = []
        self.wakeups = 0
        upstream_tick = XTermParser.tick

        def tick(parser: XTermParser) -> Iterable[Message]:
            self.wakeups += 1  # each turn of the thread's loop ends with one
            return upstream_tick(parser)

        monkeypatch.setattr(XTermParser, "tick", tick)
        # The driver installs SIGTSTP and SIGCONT handlers of its own: put back after.
        self.handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
        messages = self.messages

        class Collecting(driver_class):  # type: ignore[misc]
            def process_message(self, message: Message) -> None:
                messages.append(message)

        self.master, slave = os.openpty()
        tty.setraw(slave)  # as the driver puts its terminal: each byte readable as it comes
        self.driver = Collecting(App())
        self.driver.fileno = slave
        self.slave = slave
        self.thread = threading.Thread(target=self.driver.run_input_thread, daemon=True)

    def __enter__(self) -> _Input:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.driver.exit_event.set()
        self.thread.join(5)
        self.driver.close()
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        for sig, handler in self.handlers.items():
            signal.signal(sig, handler)

    def keys(self) -> list[str]:
        return [m.key for m in self.messages if isinstance(m, events.Key)]


async def test_upstream_input_thread_still_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual 8.2.8's LinuxDriver wakes every 0.1 s with no input at all."""
    from textual.drivers.linux_driver import LinuxDriver

    with _Input(LinuxDriver, monkeypatch) as idle:
        time.sleep(0.6)
        assert idle.wakeups >= 4


async def test_the_quiet_driver_sleeps_until_a_key_and_keeps_the_escape_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = _textual_compat.driver_class(App().get_driver_class())
    assert driver is _textual_compat.QuietLinuxDriver  # what a gputui app runs with on Linux
    with _Input(driver, monkeypatch) as quiet:
        time.sleep(0.6)
        assert quiet.wakeups <= 1  # (upstream: 6)
        os.write(quiet.master, b"a")
        assert wait_until(lambda: quiet.keys() == ["a"], timeout=2)
        os.write(quiet.master, b"\x1b")  # a lone ESC is the escape key once the delay is over
        assert wait_until(lambda: quiet.keys() == ["a", "escape"], timeout=2)
        os.write(quiet.master, b"\x1b[A")  # a whole sequence is one key at once
        assert wait_until(lambda: quiet.keys() == ["a", "escape", "up"], timeout=2)
        woke = quiet.wakeups
        time.sleep(0.4)
        assert quiet.wakeups == woke  # asleep again
        started = time.monotonic()
        quiet.driver.exit_event.set()
        quiet.thread.join(2)
        assert not quiet.thread.is_alive() and time.monotonic() - started < 0.2  # woken, not polled


async def test_the_quiet_driver_ends_when_its_terminal_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing more will come: the thread ends at once, neither spinning nor keeping the process up (it is
    not a daemon) should the way out never set its exit event."""
    with _Input(_textual_compat.QuietLinuxDriver, monkeypatch) as gone:
        os.close(gone.master)  # the terminal went away: its input reads as end of file (or EIO)
        gone.thread.join(1)
        assert not gone.thread.is_alive() and gone.wakeups <= 1
        gone.driver.exit_event.set()  # the way out still sets it: harmless


# -- 7. a strip that keeps itself ------------------------------------------------------------------


def test_upstream_divide_at_the_end_still_keeps_the_strip_in_itself() -> None:
    """Textual 8.2.8: Strip.divide([its length]) caches [self] in the strip: a reference cycle."""
    strip = Strip([Segment("0123456789")])
    assert _textual_compat.upstream_divide()(strip, [10]) == [strip]
    assert strip._divide_cache.get((10,)) == [strip]


def test_dividing_strips_leaves_no_cyclic_garbage() -> None:
    """What the compositor does to every line it draws; with the patch, a line no longer drawn is freed at
    once, not at Python's next full collection."""
    _textual_compat.install()

    def garbage_after(divide: Any) -> int:
        gc.collect()
        gc.disable()
        try:
            for n in range(200):
                strip = Strip([Segment(f"gpu {n}  util {n % 100:>3}%")])
                divide(strip, [strip.cell_length])
                divide(strip, [4, strip.cell_length])  # a real cut: cached, and no cycle either
            return gc.collect()
        finally:
            gc.enable()

    assert garbage_after(_textual_compat.upstream_divide()) >= 200  # (each such strip is a cycle)
    assert garbage_after(Strip.divide) == 0  # patched
    strip = Strip([Segment("0123456789")])
    assert [s.text for s in strip.divide([4, 10])] == ["0123", "456789"]
    assert strip.divide([10]) == [strip] and strip.divide([12]) == []  # as upstream: past the end
    assert _textual_compat.upstream_divide()(strip, [12]) == []


# -- 8. Region's caches ----------------------------------------------------------------------------


def test_upstream_region_methods_are_still_caches() -> None:
    """Textual 8.2.8: intersection and translate among them, each of 1,024 entries or more."""
    caches = {f.__wrapped__.__name__: f.cache_info().maxsize for f in _textual_compat.geometry_caches()}
    assert caches["intersection"] >= 1024 and caches["translate"] >= 1024


async def test_the_app_empties_regions_caches_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.ui.conftest import first_frame, make_app

    monkeypatch.setattr(_textual_compat, "GEOMETRY_TRIM_S", 0.2)
    app = make_app(interval=30.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        for x in range(300):  # regions at new places, as a canvas's spans are
            Region(x, 1000, 3, 1).intersection(Region(0, 1000, 400, 5))
        assert Region.intersection.cache_info().currsize >= 300
        await until(pilot, lambda: Region.intersection.cache_info().currsize < 300, what="a trim")
