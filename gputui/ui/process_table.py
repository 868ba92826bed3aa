"""The process table: rows updated by key, only changed cells repainted, the cursor kept on its process."""

from __future__ import annotations

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from gputui.ui.process_rows import COLUMNS, TableRow

_COMMAND = "command"


def _signature(cells: tuple[Text, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((c.plain, str(c.style)) for c in cells)


class ProcessTable(DataTable[Text]):
    DEFAULT_CSS = "ProcessTable { height: 1fr; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self._rows: dict[str, TableRow] = {}
        self._signatures: dict[str, tuple[tuple[str, str], ...]] = {}
        self._order: list[str] = []

    def on_mount(self) -> None:
        for col in COLUMNS:
            self.add_column(Text(col.label, justify=col.justify), width=col.width, key=col.key)  # type: ignore[arg-type]

    @property
    def current(self) -> TableRow | None:
        """The row under the cursor (its process, not its index)."""
        if not self._order or not 0 <= self.cursor_row < self.row_count:
            return None
        key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        return self._rows.get(key or "")

    def apply(self, rows: list[TableRow]) -> None:
        """Make the table show `rows` in this order, touching as little as possible."""
        keep = self.current
        wanted = {r.key for r in rows}
        for key in [k for k in self._rows if k not in wanted]:
            self.remove_row(key)
            del self._rows[key], self._signatures[key]
        for r in rows:
            sig = _signature(r.cells)
            old = self._signatures.get(r.key)
            if old is None:
                self.add_row(*r.cells, key=r.key)
            elif old != sig:
                for col, cell, was, now in zip(COLUMNS, r.cells, old, sig, strict=True):
                    if was != now:
                        self._set_cell(r.key, col.key, cell)
            self._rows[r.key] = r
            self._signatures[r.key] = sig
        order = [r.key for r in rows]
        if order != self._current_order():
            # The command cell objects identify their rows: sort by where `rows` wants them.
            position = {id(self.get_cell(key, _COMMAND)): i for i, key in enumerate(order)}
            self.sort(_COMMAND, key=lambda cell: position.get(id(cell), len(position)))
        self._order = order
        if keep is not None and keep.key in self._rows:
            index = self.get_row_index(keep.key)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False)

    def _current_order(self) -> list[str]:
        return sorted(self._rows, key=self.get_row_index) if self._rows else []

    def _set_cell(self, row: str, column: str, value: Text) -> None:
        # DataTable.update_cell repaints the whole table; over SSH that is every row, every tick.
        # Change the cell and repaint only its region (the render caches key on _update_count).
        self._data[RowKey(row)][column] = value  # type: ignore[index]
        self._update_count += 1
        self.refresh_coordinate(Coordinate(self.get_row_index(row), self.get_column_index(column)))
