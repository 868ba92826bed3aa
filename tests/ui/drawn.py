"""Reading what the app drew: the cells of its CellCanvas widgets, as text."""

from __future__ import annotations

from textual.widget import Widget

from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.process_table import ProcessTable


def lines(widget: Widget) -> list[str]:
    """The visible text of a CellCanvas, one string per drawn line."""
    return ["".join(ch for ch, _ in line).rstrip() for line in widget._lines]  # type: ignore[attr-defined]


def table(app: GpuTuiApp) -> ProcessTable:
    return app.table  # not app.query_one(): that searches a modal, when one is open


def header_line(app: GpuTuiApp) -> str:
    return lines(table(app))[0]


def body(app: GpuTuiApp) -> list[str]:
    return lines(table(app))[1:]


def shown_pids(app: GpuTuiApp) -> list[int]:
    """The PID column of the drawn process rows, top to bottom (not the per-GPU "unaccounted" rows)."""
    return [int(line.split()[1]) for line in body(app) if line.split()[1].isdigit()]
