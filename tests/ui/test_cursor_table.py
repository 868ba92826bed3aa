"""CursorTable leaves Textual's `visible` property alone: it once had a `visible()` method (the indices
of the drawn rows) that replaced the property, so a hidden table still took the focus and the clicks,
and `table.visible = False` hid nothing and then broke the next redraw."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import App, ComposeResult
from textual.widgets import Static

from gputui.ui.widgets.canvas import Line
from gputui.ui.widgets.cursor_table import CursorTable


@dataclass(frozen=True)
class Item:
    key: str


class Table(CursorTable):
    DEFAULT_CSS = "Table { height: 6; }"  # a header and 5 rows

    def build(self, width: int) -> list[Line]:
        return [Line().add("KEY"), *(Line().add(self.rows[i].key) for i in self.visible_rows())]


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Table(id="table")
        yield Static("below", id="below")


def drawn(table: Table) -> list[str]:
    return ["".join(s.text for s in table.render_line(y)).rstrip() for y in range(table.size.height)]


def test_visible_is_textuals_bool_property() -> None:
    table = Table()
    assert table.visible is True  # a bound method here was the bug: always truthy, never a bool
    assert callable(table.visible_rows)


async def test_the_drawn_rows_follow_the_cursor() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = app.query_one(Table)
        table.apply([Item(f"row{i}") for i in range(20)])
        await pilot.pause()
        assert table.visible_rows() == range(0, 5)
        table.action_move(7)
        assert table.visible_rows() == range(3, 8)
        assert drawn(table) == ["KEY", "row3", "row4", "row5", "row6", "row7"]


async def test_hiding_the_table_hides_it_from_focus_and_clicks() -> None:
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = app.query_one(Table)
        table.apply([Item(f"row{i}") for i in range(20)])
        table.focus()
        await pilot.pause()
        assert table.has_focus and table.focusable

        table.visible = False  # Textual's setter: a style, not an attribute over a method
        await pilot.pause()
        assert table.styles.visibility == "hidden" and table.visible is False
        assert not table.focusable
        await pilot.click("#table", offset=(1, 3))  # on row2 if the table took the click
        assert table.cursor == 0

        table.visible = True
        await pilot.pause()
        table.redraw()  # draws with visible_rows(): no bool called as a method
        await pilot.click("#table", offset=(1, 3))
        assert table.cursor == 2
        assert drawn(table)[:3] == ["KEY", "row0", "row1"]


async def test_apply_can_send_the_cursor_to_another_row() -> None:
    """A folded worker's row goes away: the cursor goes to its rank, not to whatever row took its index."""
    app = TableApp()
    async with app.run_test(size=(40, 12)) as pilot:
        table = app.query_one(Table)
        table.apply([Item(k) for k in ("a", "rank", "w1", "w2", "b")])
        table.action_move(3)
        assert table.current == Item("w2")
        table.apply([Item(k) for k in ("a", "rank", "b")], cursor_to="rank")
        await pilot.pause()
        assert table.current == Item("rank")
        table.apply(
            [Item(k) for k in ("b", "a", "rank")], cursor_to="gone"
        )  # no such row: it follows its own
        assert table.current == Item("rank")
