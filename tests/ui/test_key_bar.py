"""The key hints: what they offer, on any width, and that a click presses the key."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding

from gputui.ui.widgets.key_bar import KeyBar
from tests.ui.conftest import first_frame, make_app
from tests.ui.drawn import lines


def bar_text(bar: KeyBar) -> str:
    return lines(bar)[0]


async def test_the_main_screen_offers_its_keys_and_the_palette_at_the_right() -> None:
    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.pause()
        text = bar_text(app.query_one(KeyBar))
        for hint in ("q Quit", "? Help", "/ Filter", "k Kill", "D Doctor"):
            assert hint in text, text
        assert text.rstrip().endswith("^p palette")
        assert text.index("q Quit") < text.index("k Kill")  # in the order of the bindings


async def test_a_narrow_bar_keeps_whole_hints_only() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        await pilot.pause()
        bar = app.query_one(KeyBar)
        text = bar_text(bar).rstrip()
        assert len(text) <= 80 and "q Quit" in text
        shown = [description for _, _, description, _ in bar.hints if f" {description}" in text]
        assert text.endswith(shown[-1])  # never a description cut in half
        assert "palette" not in text  # no room left for it


async def test_a_click_on_a_hint_presses_its_key() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.pause()
        bar = app.query_one(KeyBar)
        x = bar_text(bar).index("p Pause")
        assert not app.paused
        await pilot.click(KeyBar, offset=(x + 1, 0))
        await pilot.pause()
        assert app.paused


class Bindings(App[None]):
    BINDINGS = [
        Binding("x", "do", "Do it"),
        Binding("y", "never", "Never"),
        Binding("h", "do", "Hidden", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.done = 0

    def compose(self) -> ComposeResult:
        yield KeyBar()

    def action_do(self) -> None:
        self.done += 1

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "never" else True  # None: shown, but disabled


async def test_a_disabled_hint_is_shown_and_a_click_on_it_does_nothing() -> None:
    app = Bindings()
    async with app.run_test(size=(60, 3)) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        text = bar_text(bar)
        assert "x Do it" in text and "y Never" in text and "Hidden" not in text
        hints = [(key, enabled) for key, _, _, enabled in bar.hints if key != "ctrl+p"]
        assert hints == [("x", True), ("y", False)]
        await pilot.click(KeyBar, offset=(text.index("y Never") + 1, 0))
        await pilot.click(KeyBar, offset=(text.index("x Do it") + 1, 0))
        await pilot.pause()
        assert app.done == 1


async def test_the_hints_take_the_colours_of_a_new_theme() -> None:
    app = Bindings()
    async with app.run_test(size=(60, 3)) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        before = bar._lines[0][1][1]  # the style of the "x" of the first hint
        app.theme = "textual-light" if app.theme != "textual-light" else "textual-dark"
        await pilot.pause()
        await pilot.pause()
        after = bar._lines[0][1][1]
        assert bar._lines[0][1][0] == "x" and after.color != before.color
