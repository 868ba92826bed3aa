"""Textual calls a message handler of every class in a widget's MRO, base classes after the subclass: a
subclass that also calls `super().on_mount()` runs the base's twice (its timers, its subscriptions).
Each base handler runs once per message, and no handler calls its base's by hand."""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from collections import Counter
from pathlib import Path

import pytest
from textual.message import Message

import gputui
import gputui.ui
from gputui.export.fleet import FleetReader
from gputui.export.promql import Prometheus
from gputui.ui.base_app import BaseApp
from gputui.ui.fleet_app import FleetApp
from gputui.ui.widgets.canvas import CellCanvas
from gputui.ui.widgets.cursor_table import CursorTable
from gputui.ui.widgets.gpu_panes import GpuPanes
from tests.export.fake_prometheus import FakePrometheus
from tests.ui.conftest import first_frame, make_app

PACKAGE = Path(gputui.__file__).parent


def _counting(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> Counter[str]:
    """Count the calls of `cls.name`, by the class of the object it ran on."""
    calls: Counter[str] = Counter()
    original = cls.__dict__[name]

    @functools.wraps(original)  # Textual passes the message only to a handler that takes one
    def counted(self: object, *args: object) -> object:
        calls[type(self).__name__] += 1
        return original(self, *args)

    monkeypatch.setattr(cls, name, counted)
    return calls


async def test_the_monitors_base_mount_handler_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    mounts = _counting(monkeypatch, BaseApp, "on_mount")
    themes = _counting(monkeypatch, BaseApp, "_theme_changed")
    app = make_app(interval=60.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await first_frame(pilot, app)
        app.theme = "textual-light"
        await pilot.pause()
    assert mounts == {"GpuTuiApp": 1}
    assert sum(themes.values()) == 1  # one subscription to the theme's signal


async def test_the_fleets_base_mount_and_unmount_handlers_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    mounts = _counting(monkeypatch, BaseApp, "on_mount")
    unmounts = _counting(monkeypatch, BaseApp, "on_unmount")
    with FakePrometheus(hosts=1, gpus=1) as fake:
        app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
    assert mounts == {"FleetApp": 1}
    assert unmounts == {"FleetApp": 1}


async def test_a_resize_redraws_each_canvas_once(monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app(interval=60.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await first_frame(pilot, app)
        redraws = _counting(monkeypatch, CellCanvas, "on_resize")
        table_resizes = _counting(monkeypatch, CursorTable, "on_resize")
        pane_resizes = _counting(monkeypatch, GpuPanes, "on_resize")
        await pilot.resize_terminal(130, 36)
        await pilot.pause()
        await pilot.pause()
    # (one terminal resize may resize a widget twice: the app shares the rows out again)
    assert table_resizes["ProcessTable"] >= 1 and pane_resizes["GpuPanes"] >= 1
    assert redraws["ProcessTable"] == table_resizes["ProcessTable"]
    assert redraws["GpuPanes"] == pane_resizes["GpuPanes"]


def _handler_names() -> set[str]:
    """The handler name of every message class, Textual's events and gputui's own messages (a nested one's
    name has its widget's in it: `on_process_table_header_clicked`), every UI module imported first (the
    modal screens load when first opened)."""
    for module in pkgutil.walk_packages(gputui.ui.__path__, "gputui.ui."):
        importlib.import_module(module.name)
    names: set[str] = set()
    todo: list[type[Message]] = [Message]
    while todo:
        for sub in todo.pop().__subclasses__():
            names.add(sub.handler_name)
            todo.append(sub)
    return names | {f"_{name}" for name in names}


def test_no_handler_calls_its_base_classes_handler() -> None:
    handlers = _handler_names()
    assert {"on_mount", "on_resize", "on_unmount", "on_click", "on_process_table_header_clicked"} <= handlers
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.name not in handlers:
                continue
            for call in ast.walk(fn):
                if (
                    isinstance(call, ast.Attribute)
                    and call.attr in handlers
                    and isinstance(call.value, ast.Call)
                    and ast.unparse(call.value.func) == "super"
                ):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno} {fn.name}")
    assert not found, "Textual already calls the base class's handler: " + ", ".join(found)
