"""What the monitor (GpuTuiApp) and the fleet view (FleetApp) share: quitting (q, F10, Ctrl+C, signals,
a dropped terminal), the keys (one table each, gputui.ui.keys: bindings, help screen, command palette),
the palette that follows the theme, status messages, the exit status after a crash, and the one
background thread each app runs.

Reactive state on an App, two pitfalls:
- `reactive()` repaints on every change, and App.refresh() repaints the *whole screen*: a snapshot
  assigned every tick re-sent every cell. App state is `var()` (a reactive that refreshes nothing): the
  watchers redraw exactly the widgets that derive from it.
- Setting a reactive in __init__ runs its watcher at once, before compose() made the widgets it
  updates: __init__ uses set_reactive(), watchers are declared with init=False, and on_mount pushes the
  initial state explicitly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import partial
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import BindingType
from textual.driver import Driver
from textual.reactive import var
from textual.screen import Screen

from gputui.ui import _textual_compat, hangup, keys, memory
from gputui.ui.widgets.palette import Palette
from gputui.ui.widgets.status import StatusLine

DEFAULT_THEME = "textual-dark"


class BaseApp(App[int]):
    """Subclasses draw; this owns the plumbing. Override `apply_palette`, `close_source`, and `KEYS`
    with BINDINGS = KEYS.bindings() (the help screen and the palette's commands come from KEYS too)."""

    KEYS: ClassVar[keys.KeyTable] = keys.SHARED
    BINDINGS: ClassVar[list[BindingType]] = keys.SHARED.bindings()

    # The styles of the cell-drawn widgets, derived from the theme (watch_palette hands it out).
    palette: var[Palette] = var(Palette.default, init=False)

    def __init__(self, mouse: bool = True) -> None:
        super().__init__()
        self.mouse = mouse
        self.status_line: StatusLine | None = None  # set by compose() where the app has one
        self._wake = threading.Event()  # wakes the background thread now (a key asked for fresh data)
        self._stop = threading.Event()  # ends it
        self.theme = DEFAULT_THEME
        self.settles = False  # the real program's app freezes what exists once drawn (gputui.ui.memory)

    # -- start and end -----------------------------------------------------------------------------

    def get_driver_class(self) -> type[Driver]:
        return _textual_compat.driver_class(super().get_driver_class())

    async def run_async(self, **kwargs: Any) -> int:
        _textual_compat.install()  # the real program's only way in (run_test drives the app directly)
        hangup.guard(self.on_signal, self.close_source, terminal=not kwargs.get("headless"))
        self.settles = True
        await super().run_async(**kwargs)
        return self.exit_status

    def on_mount(self) -> None:
        self.palette = Palette.from_theme(self.current_theme)
        self.set_interval(_textual_compat.GEOMETRY_TRIM_S, _textual_compat.trim_geometry_caches)
        if self.settles:
            self.set_timer(memory.SETTLE_S, self._settle)
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _settle(self) -> None:
        memory.settle()
        self.set_interval(memory.TIDY_S, memory.tidy)

    def _theme_changed(self, _theme: object) -> None:
        self.palette = Palette.from_theme(self.current_theme)

    def watch_palette(self, palette: Palette) -> None:
        self.apply_palette(palette)

    def apply_palette(self, palette: Palette) -> None:
        """Hand `palette` to the widgets that draw with it."""

    def close_source(self) -> None:
        """Release what the background thread reads (NVML, a socket); called on a forced exit."""

    def on_signal(self, sig: int) -> None:
        """SIGHUP (the SSH connection dropped), SIGTERM or SIGINT (`kill -INT`; Ctrl-C in the terminal is a
        key, not a signal, while the app runs): leave now, never spin on a dead terminal."""
        self.stop_background()
        self.exit(128 + sig)
        hangup.exit_after(2.0, 128 + sig, self.close_source)  # exiting may hang on a dead terminal

    def stop_background(self) -> None:
        self._stop.set()
        self._wake.set()

    def sample_now(self) -> None:
        """Wake the background thread: fresh data now, not at the end of a long interval."""
        self._wake.set()

    def sleep_unless_woken(self, seconds: float) -> bool:
        """On the background thread: wait `seconds`, less when woken (sample_now, stopping); True if woken."""
        woken = self._wake.wait(seconds)
        self._wake.clear()
        return woken

    @property
    def stopping(self) -> bool:
        """The app is on its way out: start nothing that outlives it."""
        return self._stop.is_set()

    async def action_quit(self) -> None:
        self.stop_background()
        self.exit(0)

    def on_unmount(self) -> None:
        self.stop_background()

    @property
    def exit_status(self) -> int:
        """The process's exit status. After a crash Textual sets return_code 1 and leaves the return
        value None, which the command line turned into 0: a crash looked like a clean quit."""
        return self.return_code or self.return_value or 0

    @property
    def crash(self) -> str | None:
        """Why the app crashed, in one line; None when it did not."""
        if not self.return_code:
            return None
        error = _textual_compat.unhandled_exception(self)
        return "unknown error" if error is None else f"{type(error).__name__}: {error}"

    def pop_screen(self) -> AwaitComplete:
        """Never the main screen: a modal screen closed twice must not end the app (see _textual_compat)."""
        if _textual_compat.would_pop_last_screen(self):
            nothing: AwaitComplete = AwaitComplete.nothing()  # type: ignore[no-untyped-call]  # unannotated
            return nothing
        return super().pop_screen()

    # -- help and status ---------------------------------------------------------------------------

    def action_help(self) -> None:
        from gputui.ui.screens.detail import HelpScreen

        self.push_screen(HelpScreen(self.KEYS.help()))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's commands, then the app's (KEYS), each where its key would run it (check_action)."""
        yield from super().get_system_commands(screen)
        for key, offer in self.KEYS.offers():
            if self.check_action(key.name, ()):  # read-only: no Kill
                yield SystemCommand(offer.title, offer.help, partial(self.run_action, key.action))

    def say(self, message: str, severity: str = "information", expire_s: float | None = None) -> None:
        """A status message; it clears itself after a few seconds (`expire_s`: after that long instead).
        Without a status line, a toast."""
        if self.status_line is not None:
            self.status_line.say(message, severity, expire_s)
        elif message:
            self.notify(message, severity="error" if severity == "error" else "information", markup=False)
