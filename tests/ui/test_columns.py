"""`c` hides and shows process table columns; the choice survives a restart; PID and COMMAND always show."""

from __future__ import annotations

from pathlib import Path

from gputui import settings
from gputui.ui.screens.columns import CHOOSABLE, ColumnsScreen
from gputui.ui.widgets.process_rows import COLUMNS
from gputui.ui.widgets.process_table import ProcessTable
from tests.ui.conftest import first_frame
from tests.ui.test_settings_app import app_on


def _header(table: ProcessTable) -> str:
    return "".join(ch for ch, _ in table.build(120)[0].cells)


def _labels(layout: list[tuple[int, int]]) -> list[str]:
    return [COLUMNS[i].key for i, _ in layout]


def test_a_hidden_column_leaves_the_layout_and_its_room_goes_to_command() -> None:
    table = ProcessTable()
    every = table._layout(200)
    table.hidden = frozenset({"user", "bw"})
    fewer = table._layout(200)
    assert _labels(fewer) == [k for k in _labels(every) if k not in ("user", "bw")]
    widths = dict(every)  # sized to their content (here none: their labels)
    assert fewer[-1][1] == every[-1][1] + widths[2] + 1 + widths[6] + 1  # COMMAND got it


def test_pid_and_command_cannot_be_hidden() -> None:
    table = ProcessTable()
    table.hidden = frozenset({"pid", "command", "rss"})
    assert table.hidden == {"rss"}
    assert {"pid", "command"} <= set(_labels(table._layout(120)))
    assert not {"pid", "command"} & {c.key for c in CHOOSABLE}


async def test_hiding_a_column_in_the_app_persists(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    app = app_on(config)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert "USER" in _header(app.table)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ColumnsScreen)
        await pilot.press("down", "space", "escape")  # the second choice is USER: off
        await pilot.pause()
        assert not isinstance(app.screen, ColumnsScreen)
        header = _header(app.table)
        assert "USER" not in header and "PID" in header and "COMMAND" in header
        assert "hidden columns: USER" in app.status.message
    assert settings.load(config)[0].hidden_columns == ("user",)
    again = app_on(config)
    async with again.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, again)
        assert again.table.hidden == {"user"}
        assert "USER" not in _header(again.table)
