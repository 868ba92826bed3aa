"""Widgets own their state (issue 29): the app sets a widget's `var`s and the widget's watchers redraw
it; nobody calls another widget's redraw(). A tick builds the header once, and a theme change repaints
every cell-drawn widget."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.style import Style
from textual.widget import Widget

import gputui.ui
from gputui.export.fleet import FleetReader
from gputui.export.promql import Prometheus
from gputui.ui.fleet_app import Banner, FleetApp, FleetHeader
from gputui.ui.widgets.canvas import Cell, CellCanvas, Line
from gputui.ui.widgets.header import HeaderBar
from gputui.ui.widgets.status import StatusLine
from tests.export.fake_prometheus import FakePrometheus
from tests.helpers import until
from tests.ui.conftest import first_frame, make_app, post
from tests.ui.drawn import lines

SIZE = (120, 40)


def _count_builds(monkeypatch: pytest.MonkeyPatch, *classes: type[CellCanvas]) -> Counter[str]:
    """How many times each class's build() runs from now on, by class name."""
    counts: Counter[str] = Counter()

    def counting(
        original: Callable[[CellCanvas, int], list[Line]],
    ) -> Callable[[CellCanvas, int], list[Line]]:
        def build(self: CellCanvas, width: int) -> list[Line]:
            counts[type(self).__name__] += 1
            return original(self, width)

        return build

    for cls in classes:
        monkeypatch.setattr(cls, "build", counting(cls.build))
    return counts


def _redrawn(monkeypatch: pytest.MonkeyPatch) -> list[Widget]:
    """The widgets whose redraw() runs from now on."""
    seen: list[Widget] = []
    original = CellCanvas.redraw

    def spying(self: CellCanvas) -> None:
        seen.append(self)
        original(self)

    monkeypatch.setattr(CellCanvas, "redraw", spying)
    return seen


def _styles(widget: CellCanvas) -> set[Style]:
    cells: list[list[Cell]] = widget._lines
    return {style for line in cells for _, style in line}


async def test_setting_the_header_state_redraws_it() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        header = app.header
        # Each assignment is drawn at once: no redraw() by whoever set it.
        header.paused = True
        assert "PAUSED" in lines(header)[0]
        header.interval = 30.0
        assert "every 30 s" in lines(header)[0]
        header.took = 2.5
        assert "sampling takes 2.5 s" in lines(header)[0]
        header.took = None
        header.paused = False
        assert "sampling takes" not in lines(header)[0] and "PAUSED" not in lines(header)[0]


async def test_the_app_state_reaches_the_header_status_and_panes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")
        await pilot.pause()
        assert app.header.paused and "PAUSED" in lines(app.header)[0]
        app.status.unreadable = 7
        assert any("7 processes not readable" in line for line in lines(app.status))
        app._select_gpu(1)
        assert any(line.startswith("▶ 1") for line in lines(app.panes))
        app._select_gpu(None)
        assert not any("▶" in line for line in lines(app.panes))


async def test_a_tick_builds_the_header_once_and_an_unchanged_status_not_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")  # no ticks of the sampler's own from here
        await pilot.pause()
        assert app.snapshot is not None
        counts = _count_builds(monkeypatch, HeaderBar, StatusLine)
        app.status.unreadable = app.status.unreadable  # the same count: nothing to draw
        assert counts["StatusLine"] == 0
        await post(pilot, app, app.snapshot)  # snapshot and replay position: one build
        assert counts["HeaderBar"] == 1


async def test_a_theme_change_repaints_every_cell_widget(monkeypatch: pytest.MonkeyPatch) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")
        await pilot.pause()
        app.status.say("something happened")
        old = app.palette
        redrawn = _redrawn(monkeypatch)
        app.theme = "textual-light"
        await pilot.pause()
        new = app.palette
        assert new.plain != old.plain  # the light theme's text is dark
        for canvas in (app.header, app.panes, app.status, app.row_note):
            assert canvas.palette is new
            assert canvas in redrawn, type(canvas).__name__
        for canvas in (app.header, app.panes, app.status):
            styles = _styles(canvas)
            assert new.plain in styles and old.plain not in styles, type(canvas).__name__


def test_the_palette_is_state_of_every_cell_canvas() -> None:
    """A canvas starts with the default palette; setting an equal one draws nothing again."""
    header = HeaderBar()
    before = header.palette
    header.palette = type(before).default()
    assert header.palette is before  # equal: not even stored, so no watcher ran


# -- the fleet view ----------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=2, gpus=2) as server:
        yield server


async def test_fleet_widgets_draw_their_own_state(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0)
    async with app.run_test(size=(140, 30)) as pilot:
        await until(pilot, lambda: len(app.view.hosts) == 2, 10.0, "the fleet", settle=True)
        app.header.sort = "name"
        assert "sort name" in lines(app.header)[0]  # drawn as it was set
        counts = _count_builds(monkeypatch, FleetHeader)
        app.show(app.view)  # a refresh: the header is built once
        assert counts["FleetHeader"] == 1
        app.sort = "idle"  # and a new order once more
        assert counts["FleetHeader"] == 2 and "sort idle" in lines(app.header)[0]
        old = app.palette
        redrawn = _redrawn(monkeypatch)
        app.theme = "textual-light"
        await pilot.pause()
        for canvas in (app.header, app.banner, app.table):
            assert canvas.palette is app.palette != old
            assert canvas in redrawn, type(canvas).__name__
        assert app.palette.plain in _styles(app.header) and old.plain not in _styles(app.header)


async def test_the_banner_counts_down_by_itself(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0)
    async with app.run_test(size=(140, 30)) as pilot:
        await until(pilot, lambda: len(app.view.hosts) == 2, 10.0, "the fleet", settle=True)
        builds = _count_builds(monkeypatch, Banner)  # (no view comes: the interval is a minute)
        await until(pilot, lambda: builds["Banner"] >= 2, 4.0, "the banner's own one-second clock")


def test_no_widget_is_redrawn_by_another() -> None:
    """The rule, held: `redraw` is only ever a widget's own (`self.redraw`); others set its state."""
    ui = Path(gputui.ui.__file__).parent
    code = re.compile(r"(?<!self)\.redraw\b")
    found = [
        f"{path.relative_to(ui)}:{n}: {line.strip()}"
        for path in sorted(ui.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if code.search(line.split("#")[0])
    ]
    assert found == []
