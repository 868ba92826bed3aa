"""One key table per app (gputui.ui.keys) yields its bindings, its help screen, its key bar and its palette
commands. Checked against what the running app binds, shows and offers, never against a list written
here: a key added to BINDINGS by hand, without help text or a palette decision, fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from textual.app import App, SystemCommand
from textual.pilot import Pilot

from gputui.export.fleet import FleetReader
from gputui.export.promql import Prometheus
from gputui.ui.base_app import BaseApp
from gputui.ui.fleet_app import FleetApp
from gputui.ui.keys import HIDDEN, TEXTUAL, Key, KeyTable, Offer, Row
from gputui.ui.screens.detail import HelpScreen
from gputui.ui.widgets.key_bar import KeyBar
from tests.export.fake_prometheus import FakePrometheus
from tests.helpers import screen_text, until
from tests.ui.conftest import first_frame, make_app

SIZE = (160, 40)


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus(hosts=1, gpus=1) as server:
        yield server


def _row_of(table: KeyTable, key: str, action: str) -> tuple[Row, Key]:
    """The help row and the table's key for one key Textual binds to `action`."""
    for row in table.rows:
        for k in row.keys:
            if k.action == action and key in k.keys.split(","):
                return row, k
    raise AssertionError(f"{key} -> {action} is bound but not in the key table")


def _app_bindings(app: BaseApp) -> list[tuple[str, str]]:
    """(key, action) of every binding the running app itself holds, but Textual's own (Ctrl+Q, Ctrl+P)."""
    textual_own = {k for b in App.BINDINGS if not isinstance(b, tuple) for k in b.key.split(",")}
    textual_own.add(app.COMMAND_PALETTE_BINDING)
    return [
        (key, active.binding.action)
        for key, active in app.screen.active_bindings.items()
        if active.node is app and key not in textual_own
    ]


def _app_commands(app: BaseApp) -> list[str]:
    """The titles of the app's palette commands beyond Textual's own."""
    textual_own = {c.title for c in App.get_system_commands(app, app.screen)}
    commands: list[SystemCommand] = list(app.get_system_commands(app.screen))
    return [c.title for c in commands if c.title not in textual_own]


async def _check(pilot: Pilot[int], app: BaseApp) -> None:
    table = app.KEYS
    bound = _app_bindings(app)
    assert bound
    for key, action in bound:
        row, entry = _row_of(table, key, action)
        assert row.shown and row.text, f"{key} has no help text"
        assert isinstance(entry.palette, Offer) or entry.palette in (HIDDEN, TEXTUAL)
    # The palette offers each Offer whose action the app allows now, and nothing else of its own.
    offered = [offer.title for k, offer in table.offers() if app.check_action(k.name, ())]
    assert _app_commands(app) == offered
    # The key bar: the first key of each action the table puts there, in its order (the palette's after).
    bar = app.screen.query_one(KeyBar)
    firsts = [next(k for k in table.every_key() if k.action == action) for action in table.bar]
    labels = [k.label for k in firsts if app.check_action(k.name, ())]  # read-only: no Kill
    assert [h[2] for h in bar.hints[: len(labels)]] == labels
    # The help screen: every row of the table.
    app.action_help()
    await until(pilot, lambda: isinstance(app.screen, HelpScreen), settle=True)
    text = screen_text(app)
    for shown, description in table.help():
        assert shown in text and description[:30] in text, (shown, description)


@pytest.mark.parametrize("readonly", [False, True])
async def test_the_monitor_derives_its_keys_from_its_table(readonly: bool) -> None:
    app = make_app(readonly=readonly)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await until(pilot, lambda: bool(app.screen.query_one(KeyBar).hints))
        await _check(pilot, app)
        if readonly:  # read-only: no signal is offered, by key or by command
            assert "Kill" not in _app_commands(app)


async def test_the_fleet_view_derives_its_keys_from_its_table(fake: FakePrometheus) -> None:
    app = FleetApp(FleetReader(Prometheus(fake.url, timeout=2.0)), interval=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: bool(app.screen.query_one(KeyBar).hints))
        await _check(pilot, app)


def test_a_table_refuses_a_key_bound_twice_and_a_bar_without_its_key() -> None:
    one = Key(keys="x", action="one", palette=HIDDEN)
    two = Key(keys="x", action="two", palette=HIDDEN)
    with pytest.raises(AssertionError, match="bound twice"):
        KeyTable((Row("x", "one", (one,)), Row("x", "two", (two,))), bar=())
    with pytest.raises(AssertionError, match="key bar"):
        KeyTable((Row("x", "one", (one,)),), bar=("two",))
