"""The fleet table and the host view: sparkline cells show their share's mean with dips marked, and wide
characters (a CJK host name, user or command) never draw past the widget's width."""

from __future__ import annotations

import pytest
from rich.style import Style
from textual.app import App, ComposeResult

from gputui.cells import width
from gputui.export.fleet import FleetGpu, FleetHost, FleetProcess, FleetView, HostDetail
from gputui.ui.screens.fleet_host import HostView
from gputui.ui.widgets.canvas import CellCanvas
from gputui.ui.widgets.fleet_table import FIXED_WIDTH, FleetTable
from gputui.ui.widgets.spark import DIP_GLYPH

STEADY_80 = tuple(70.0 if i % 2 else 90.0 for i in range(60))
WITH_DIP = tuple(5.0 if 28 <= i < 31 else 90.0 for i in range(60))
CJK = "訓練サーバー日本語e\u0301\u0302"


def _host(name: str = "node-a", series: tuple[float | None, ...] = STEADY_80, gpus: int = 2) -> FleetHost:
    return FleetHost(
        name=name,
        instance=f"{name}:9400",
        job="gputui",
        gpus=tuple(
            FleetGpu(str(i), model="NVIDIA H100 80GB HBM3", util=80.0, series=series) for i in range(gpus)
        ),
        gputui=True,
    )


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetTable()


class HostApp(App[None]):
    def compose(self) -> ComposeResult:
        yield HostView("node-a")


def _text(canvas: CellCanvas, y: int) -> str:
    return "".join(c for c, _ in canvas._lines[y])


def _spark_of(canvas: CellCanvas, y: int, cells: int) -> list[tuple[str, Style]]:
    """The first GPU's sparkline cells: they start after the fixed columns."""
    return canvas._lines[y][FIXED_WIDTH : FIXED_WIDTH + cells]


async def test_a_host_at_80_percent_is_not_drawn_flat() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 10)) as pilot:
        table = app.query_one(FleetTable)
        table.apply([_host(series=STEADY_80)])
        table.redraw()
        await pilot.pause()
        cells, _ = table._spark_cells(120)
        spark = "".join(ch for ch, _ in _spark_of(table, 1, cells))
        assert spark == "▇" * cells  # 80 % is the seventh eighth, in every cell
        assert DIP_GLYPH not in spark


async def test_a_dip_is_marked_by_glyph_and_colour() -> None:
    app = TableApp()
    async with app.run_test(size=(120, 10)) as pilot:
        table = app.query_one(FleetTable)
        table.apply([_host(series=WITH_DIP)])
        table.redraw()
        await pilot.pause()
        cells, _ = table._spark_cells(120)
        spark = _spark_of(table, 1, cells)
        dip = table.palette.dip
        assert dip.bgcolor is None  # a colour for the glyph, never one under it (NO_COLOR greyed both alike)
        marked = [i for i, (ch, _) in enumerate(spark) if ch == DIP_GLYPH]
        assert len(marked) == 1  # one glyph per dip, on its first cell
        in_dip = [i for i, (_, style) in enumerate(spark) if style.color == dip.color]
        assert in_dip and in_dip[0] == marked[0]
        # The other cells show the busy level (90 %: a full block), not the dip's low point.
        assert all(ch == "█" for i, (ch, _) in enumerate(spark) if i not in in_dip)


@pytest.mark.parametrize("cols", [80, 101, 120])
async def test_a_cjk_host_name_stays_in_the_fleet_table(cols: int) -> None:
    app = TableApp()
    async with app.run_test(size=(cols, 10)) as pilot:
        table = app.query_one(FleetTable)
        table.apply([_host(name=CJK * 3, gpus=8), _host(name="ascii-host", gpus=8)])
        table.redraw()
        await pilot.pause()
        rows = [_text(table, y) for y in range(3)]
        assert all(width(r) == cols for r in rows)
        # The columns after the name line up, whatever the name's characters.
        assert width(rows[1][: rows[1].index("/8")]) == width(rows[2][: rows[2].index("/8")])
        assert "訓練" in rows[1]


@pytest.mark.parametrize("cols", [80, 120, 200])
async def test_cjk_commands_and_users_stay_in_the_host_view(cols: int) -> None:
    app = HostApp()
    async with app.run_test(size=(cols, 30)) as pilot:
        view = app.query_one(HostView)
        host = _host(name="node-a", series=WITH_DIP)
        procs = (FleetProcess("0", "4242", "学生" * 4, f"python {CJK} " * 10, "ok", 2.0**30),)
        view.view = FleetView(
            hosts=(host,), start=0.0, end=900.0, detail=HostDetail("node-a", procs, (), {"0": STEADY_80})
        )
        await pilot.pause()
        lines = [_text(view, y) for y in range(len(view._lines))]
        assert all(width(line) == cols for line in lines)
        assert any("4242" in line and "訓練" in line for line in lines)
        assert any(DIP_GLYPH in line for line in lines)  # the utilization sparkline marks the dip
