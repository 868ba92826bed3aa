"""The user's choices survive a restart: the settings file (gputui.settings) is read at start, written
half a second after the last change (a burst of keys is one write, on a worker thread), and once more
as the app ends (a local file: quick, and quitting must not lose it). A file that could not be read is
one note, and is not written over until fixed. No path (tests, replays): nothing is read or written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.timer import Timer

from gputui.settings import Settings
from gputui.ui.widgets import layout as layouts
from gputui.ui.widgets.process_rows import BY_KEY, COLUMN_KEYS, View

if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.widgets.gpu_panes import GpuPanes
    from gputui.ui.widgets.process_table import ProcessTable

SAVE_AFTER_S = 0.5


class SettingsFile:
    def __init__(self, app: GpuTuiApp, path: Path | None, folded: Callable[[], bool]) -> None:
        """`folded`: whether the table folds the workers now (the table changes that on its own)."""
        self.app = app
        self.path = path
        self.settings = Settings()
        self._folded = folded
        self._may_save = path is not None
        self._pending: Timer | None = None
        self._warned = False

    def restore(self, interval: float | None) -> None:
        """Start the app as the user left it. `interval`: --interval, for this run (saved only when
        changed in the app); None: the saved one."""
        from gputui import settings as saved

        if self.path is None:
            return
        app = self.app
        allowed = {
            "theme": tuple(app.available_themes),
            "layout": layouts.CHOICES,
            "sort": COLUMN_KEYS,
            "hidden_columns": COLUMN_KEYS,
        }
        self.settings, warning = saved.load(self.path, allowed)
        if warning:
            app.notes.append(f"{warning} (not written over until fixed)")
            self._may_save = False
        s = self.settings
        app.theme = s.theme
        if interval is None:
            app.set_reactive(type(app).interval, s.interval)
        app.set_reactive(type(app).window, s.zoom)
        descending = BY_KEY[s.sort].descending if s.sort in BY_KEY else False
        sort = BY_KEY[s.sort].key if s.sort in BY_KEY else "gpu"  # a known key: settings checked it
        app.view = View(sort=sort, reverse=s.sort_descending != descending, tree=s.tree)
        app.sampler.want_relatives = s.tree

    def restore_widgets(self, panes: GpuPanes, table: ProcessTable) -> None:
        """What the widgets keep: the GPU layout, the folded workers, the hidden columns."""
        s = self.settings
        panes.set_layout(s.layout)
        table.workers_folded = s.folded_workers
        table.hidden = frozenset(s.hidden_columns)

    def remember_view(self, view: View) -> None:
        """The table's order is saved as an absolute one: descending or not, whatever the column's own."""
        descending = BY_KEY[view.sort].descending != view.reverse if view.sort in BY_KEY else False
        self.remember(sort=view.sort, sort_descending=descending, tree=view.tree)

    def remember(self, **changes: Any) -> None:
        """A choice the user made: saved SAVE_AFTER_S after the last one."""
        if self.path is None:
            return
        new = replace(self.settings, **changes)
        if new == self.settings:
            return
        self.settings = new
        if self._may_save:
            if self._pending is not None:
                self._pending.stop()
            self._pending = self.app.set_timer(SAVE_AFTER_S, self._save_soon)

    def _save_soon(self) -> None:
        self.app.run_worker(self._save_now, thread=True, group="settings")

    def _save_now(self) -> None:
        """On a worker thread."""
        from gputui import settings as saved

        if self.path is None or not self._may_save:
            return
        self._pending = None
        current = replace(self.settings, folded_workers=self._folded())
        warning = saved.save(current, self.path)
        if warning and not self._warned:  # said once: the app keeps running with what it has
            self._warned = True
            self.app.call_from_thread(self.app.say, warning, "warning")

    def save_at_exit(self) -> None:
        """What is not saved yet, now, on the app's thread."""
        if self.path is None or not self._may_save:
            return
        folded = self._folded()
        if self._pending is not None or folded != self.settings.folded_workers:
            from gputui import settings as saved

            self.settings = replace(self.settings, folded_workers=folded)
            saved.save(self.settings, self.path)
