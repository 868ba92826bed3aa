"""Every work-around for Textual's behaviour, in one place. Written against Textual 8.2.8.

Each entry says what Textual does, why that hurts gputui, the upstream issue, and which test in
tests/ui/test_textual_compat.py asserts that Textual still does it: when such a test fails, upstream
changed, and the work-around may go.

1. Partial updates re-send cells that did not change (ChopsUpdate.render_segments).
   A dirty span's write starts at the first cell of the *segment* holding the span's start: a changed
   digit at column 60 of a line drawn as one styled run re-sends columns 0-60. Over SSH that was most of
   gputui's traffic (`make bench`: 14.5 KB/s before, about 1 KB/s after). Upstream: the same complaint,
   Textualize/textual#5625 ("Widget.refresh Method Not Cropping To Region Start Correctly", closed;
   8.2.8 still does it). Installed by `install()`, once, when the program starts the app.
   Test: test_upstream_partial_update_still_resends_the_left_of_a_segment.

2. Screen.dismiss() pops whatever screen is on top. Keys typed faster than a modal closes (a laggy SSH
   link delivers `g Enter Enter` in one read) dismissed it twice: the second popped the screen under it,
   or raised ScreenStackError for the main screen, which ended the app. Upstream:
   Textualize/textual#2575 ("Screen.dismiss should error if not the top-most screen", closed; 8.2.8
   still pops the top screen). Work-around: `DismissOnce`.
   Test: test_upstream_dismiss_twice_still_pops_the_screen_below.

3. App.pop_screen() of the last screen raises ScreenStackError, which ends the app. Any stray second
   close reaches it. No upstream issue found for this (it is documented behaviour). Work-around:
   `would_pop_last_screen`, checked by BaseApp.pop_screen.
   Test: test_upstream_pop_of_the_last_screen_still_raises.

4. After a crash Textual keeps the exception only in a private attribute (App._exception); the command
   line prints it in one line. No upstream issue found. Work-around: `unhandled_exception`.
   Test: test_upstream_keeps_the_crash_in_a_private_attribute.

5. Widget.refresh(*regions) records the regions in Widget._dirty_regions as well as in the repaint set;
   only Widget._render_content (called from Widget's own render_line) ever clears it. A widget that draws
   its lines itself (ui.widgets.canvas.Canvas) never calls that, so the set grew for as long as the app
   ran (`make soak`: ~100 MiB/h at 4 Hz). No upstream issue found (a private cache of Widget's own
   rendering). Work-around: `forget_dirty_regions`, after each partial refresh; the repaint itself uses
   Widget._repaint_regions, which it leaves alone.
   Test: test_upstream_refresh_still_keeps_regions_a_custom_render_line_never_clears.

6. LinuxDriver's input thread wakes every 0.1 s whether or not a key came (select(0.1) in a loop, for
   the escape key's delay and to see its exit event): ten wakeups a second, ~0.07 % of a core of an
   idle monitor (`make bench`'s box: 7 % of gputui's CPU). No upstream issue found. Work-around:
   `QuietLinuxDriver`, whose thread sleeps until input comes, the parser's escape delay is due, or its
   exit event is set (which writes to a pipe the thread also waits on); it ends when its terminal is
   gone, so nothing waits on it on the way out. `driver_class` hands it out where
   Textual would use LinuxDriver and its parser still keeps the delay where this reads it.
   Test: test_upstream_input_thread_still_polls.

7. Strip.divide() at the strip's own end returns [self] and keeps that list in the strip's own cache: the
   strip refers to itself. The compositor divides every line it draws, so every line drawn became
   cyclic garbage, freed only when Python's full collection ran (every few minutes): the monitor's
   memory crept up by ~1 MiB a minute in between (`make bench`'s box). No upstream issue found.
   Work-around: `_divide`, which answers that case without caching it; installed by `install()`.
   Test: test_upstream_divide_at_the_end_still_keeps_the_strip_in_itself.

8. Region's methods (translate, intersection, __contains__, ...) are lru caches of 1,024 to 4,096
   entries each, kept for the life of the process. A canvas repaints spans at new places every tick,
   so they fill for many minutes (~0.3 MiB a minute on the bench's box, ~2 MiB once full). No upstream
   issue found (bounded caches, by design). Work-around: `trim_geometry_caches`, which BaseApp calls
   every GEOMETRY_TRIM_S; they are pure, so emptying them changes nothing but their hit rate.
   Test: test_upstream_region_methods_are_still_caches.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from rich.cells import cell_len
from rich.console import Console
from rich.control import Control
from rich.segment import Segment
from textual.app import App
from textual.await_complete import AwaitComplete
from textual.driver import Driver
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget

from gputui.ui._sgr import Pen

TEXTUAL_VERSION = "8.2.8"  # the version every work-around here was measured on

_installed = False
_upstream_render_segments: Any = None  # Textual's own, kept for the test that watches upstream
_upstream_divide: Any = None


# -- 1. partial updates ----------------------------------------------------------------------------


def _render_segments(self: Any, console: Console) -> str:
    """ChopsUpdate.render_segments that writes each dirty span from its first cell, each style change
    as only what changed (gputui.ui._sgr)."""
    pen = Pen(console)
    move_to = Control.move_to
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start, stop = max(x, x1), min(end, x2)
            piece = strip if (start, stop) == (x, end) else _crop(strip, start - x, stop - x)
            pen.move(move_to(start, y).segment.text)  # every piece is positioned: no newlines needed
            pen.strip(piece)
    return pen.done()


def _cells(text: str) -> int:
    # Printable ASCII is one cell a character: measured here, not through Rich's cache of every string it
    # measured (4,096 of them, a new one for each number that changed).
    return len(text) if text.isascii() and text.isprintable() else cell_len(text)


def _crop(strip: Strip, start: int, end: int) -> list[Segment]:
    """The segments of Strip.crop (0 <= start < end < its length, or end at it), without keeping the
    piece in the strip's cache: a span is written once, and the strips of unchanged lines live on, each
    keeping up to 16 pieces (about half a MiB after 30 s of a busy box). Segments, not a Strip: a span
    is written and dropped, and a Strip makes seven caches of its own."""
    segments = iter(strip)
    out: list[Segment] = []
    pos = 0
    segment: Segment | None = None
    for segment in segments:
        end_pos = pos + _cells(segment.text)
        if end_pos > start:
            segment = segment.split_cells(start - pos)[1]
            break
        pos = end_pos
    else:
        return []
    if end >= strip.cell_length:
        out.append(segment)
        out.extend(segments)
        return out
    pos = start
    while segment is not None:
        end_pos = pos + _cells(segment.text)
        if end_pos >= end:
            out.append(segment.split_cells(end - pos)[0])
            break
        out.append(segment)
        pos = end_pos
        segment = next(segments, None)
    return out


def _chops_update_has_expected_shape() -> bool:
    try:
        from textual._compositor import ChopsUpdate
    except ImportError:
        return False
    if not callable(getattr(ChopsUpdate, "render_segments", None)):
        return False
    init_names = ChopsUpdate.__init__.__code__.co_varnames
    return all(name in init_names for name in ("chops", "spans", "chop_ends"))


def install() -> bool:
    """Patch Textual's partial updates, once per process; False (and no change) if its internals are not
    what this was written for."""
    global _installed, _upstream_render_segments, _upstream_divide
    if _installed:
        return True
    if not _chops_update_has_expected_shape():
        return False
    from textual._compositor import ChopsUpdate

    _upstream_render_segments = ChopsUpdate.render_segments
    # The patches themselves: mypy forbids assigning to a method, which is what patching one is.
    ChopsUpdate.render_segments = _render_segments  # type: ignore[method-assign]
    _upstream_divide = Strip.divide
    Strip.divide = _divide  # type: ignore[method-assign]
    _installed = True
    return True


def installed() -> bool:
    return _installed


def upstream_render_segments() -> Any:
    """Textual's ChopsUpdate.render_segments, patched or not."""
    if _upstream_render_segments is not None:
        return _upstream_render_segments
    from textual._compositor import ChopsUpdate

    return ChopsUpdate.render_segments


def patched_render_segments() -> Any:
    return _render_segments


# -- 2. dismiss once -------------------------------------------------------------------------------

ResultT = TypeVar("ResultT")


class DismissOnce(ModalScreen[ResultT]):
    """A modal screen that closes once, and only while it is the active screen."""

    closing = False

    def dismiss(self, result: ResultT | None = None) -> AwaitComplete:
        if self.closing or not self.is_active:
            nothing: AwaitComplete = AwaitComplete.nothing()  # type: ignore[no-untyped-call]
            return nothing
        self.closing = True
        return super().dismiss(result)


# -- 3. the last screen ----------------------------------------------------------------------------


def would_pop_last_screen(app: App[Any]) -> bool:
    return len(app.screen_stack) <= 1


# -- 4. the crash ----------------------------------------------------------------------------------


def unhandled_exception(app: App[Any]) -> BaseException | None:
    error = getattr(app, "_exception", None)
    return error if isinstance(error, BaseException) else None


# -- 5. the dirty regions of a widget that draws its own lines ------------------------------------


def forget_dirty_regions(widget: Widget) -> None:
    """Empty the set Widget.refresh(*regions) fills and only Widget's own render_line empties; nothing if
    Textual no longer has it."""
    regions = getattr(widget, "_dirty_regions", None)
    if isinstance(regions, set):
        regions.clear()


# -- 6. an input thread that sleeps until there is input ------------------------------------------

try:  # not on Windows (termios), where Textual uses its WindowsDriver anyway
    from textual._xterm_parser import XTermParser
    from textual.drivers.linux_driver import LinuxDriver
except ImportError:  # pragma: no cover
    LinuxDriver = None  # type: ignore[assignment,misc]


class _WakingEvent(threading.Event):
    """The driver's exit event: setting it also wakes the input thread's select."""

    def __init__(self, wake: int) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        if self._wake >= 0:
            with contextlib.suppress(OSError):  # the pipe is full: a wakeup is already pending
                os.write(self._wake, b"x")

    def close(self) -> None:
        wake, self._wake = self._wake, -1  # never written after: its number may be reused
        with contextlib.suppress(OSError):
            os.close(wake)


def _parser_keeps_its_delay() -> bool:
    return LinuxDriver is not None and "_timeout_time" in vars(XTermParser())


if LinuxDriver is not None:

    class QuietLinuxDriver(LinuxDriver):
        """LinuxDriver whose input thread sleeps until input comes, the escape delay is due, or input is
        disabled (see 6 above)."""

        def __init__(self, app: App[Any], **kwargs: Any) -> None:
            super().__init__(app, **kwargs)
            self._wake_read, wake_write = os.pipe()
            os.set_blocking(self._wake_read, False)
            os.set_blocking(wake_write, False)
            self.exit_event: _WakingEvent = _WakingEvent(wake_write)

        def run_input_thread(self) -> None:
            parser = XTermParser(self._debug)
            decode = getincrementaldecoder("utf-8")().decode
            # select(), as upstream: epoll and kqueue do not watch a terminal on every platform.
            with selectors.SelectSelector() as selector:
                selector.register(self.fileno, selectors.EVENT_READ)
                selector.register(self._wake_read, selectors.EVENT_READ)
                while not self.exit_event.is_set():
                    due: float | None = parser._timeout_time  # a lone ESC waits this long for more
                    timeout = None if due is None else max(0.0, due - time.monotonic())
                    for key, _ in selector.select(timeout):
                        if key.fd == self._wake_read:
                            self._drain_wakeups()
                        elif not self._feed(parser, decode):
                            # End of input (the terminal is gone): the thread ends, so that nothing
                            # waits on it on the way out (upstream spins here, or dies of EIO).
                            return
                    for event in parser.tick():
                        self.process_message(event)
            self._drain_wakeups()  # disable_input clears the event; a later thread starts quiet

        def _feed(self, parser: XTermParser, decode: Any) -> bool:
            """Read what came and send its events; False at the end of input."""
            try:
                data = os.read(self.fileno, 4096)
            except OSError:  # EIO: the terminal hung up
                return False
            if not data:
                return False
            for event in parser.feed(decode(data)):
                self.process_message(event)
            return True

        def _drain_wakeups(self) -> None:
            with contextlib.suppress(OSError):  # nothing left in it
                while os.read(self._wake_read, 64):
                    pass

        def close(self) -> None:
            super().close()
            self.exit_event.close()
            with contextlib.suppress(OSError):
                os.close(self._wake_read)


def driver_class(upstream: type[Driver]) -> type[Driver]:
    """The driver to run with: QuietLinuxDriver where Textual picked LinuxDriver and its parser still
    keeps the escape delay where QuietLinuxDriver reads it; `upstream` otherwise (Windows, a driver
    named in TEXTUAL_DRIVER, a Textual that changed)."""
    if upstream is LinuxDriver and _parser_keeps_its_delay():
        return QuietLinuxDriver
    return upstream


# -- 7. a strip that keeps itself ------------------------------------------------------------------


def _divide(self: Strip, cuts: Iterable[int]) -> Sequence[Strip]:
    """Strip.divide, but a cut at the strip's own end (the whole strip) is answered without keeping
    [self] in the strip's cache (see 7 above)."""
    cuts = list(cuts)
    length = self.cell_length
    if [cut for cut in cuts if cut <= length] == [length]:
        return [self]
    return upstream_divide()(self, cuts)  # type: ignore[no-any-return]


def upstream_divide() -> Any:
    """Textual's Strip.divide, patched or not."""
    return _upstream_divide if _upstream_divide is not None else Strip.divide


# -- 8. Region's caches ----------------------------------------------------------------------------

GEOMETRY_TRIM_S = 10.0


def geometry_caches() -> list[Any]:
    """The lru caches among Region's methods."""
    from textual.geometry import Region

    return [f for f in vars(Region).values() if callable(getattr(f, "cache_clear", None))]


def trim_geometry_caches() -> None:
    for cache in geometry_caches():
        cache.cache_clear()
