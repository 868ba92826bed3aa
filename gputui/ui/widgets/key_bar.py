"""The key hints at the bottom: the active bindings, drawn as one line of cells.

Textual's Footer mounts a widget per key and composes them again each time the bindings change; at
start-up that cost about a tenth of a second on a small VM (`make bench`, first full frame). This bar is
a single CellCanvas: a click on a hint presses its key, as a click on the Footer does.
"""

from __future__ import annotations

from textual import events
from textual.screen import Screen

from gputui.cells import width as cells
from gputui.ui.styles import tcss
from gputui.ui.widgets.canvas import CellCanvas, Line


class KeyBar(CellCanvas):
    DEFAULT_CSS = tcss("KeyBar")
    COMPONENT_CLASSES = {"key-bar--key", "key-bar--description", "key-bar--disabled"}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hints: list[tuple[str, str, str, bool]] = []  # (key, shown as, description, enabled)
        self._spans: list[tuple[int, int, str, bool]] = []  # (x0, x1, key, enabled)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self.call_after_refresh(self._bindings_changed, self.screen)

    def notify_style_update(self) -> None:  # a new theme: the hints' styles come from its variables
        super().notify_style_update()
        if self.is_attached:
            self.call_after_refresh(self.redraw)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if not self.is_attached or screen is not self.screen:
            return
        hints, actions = [], set()
        palette_key = self.app.COMMAND_PALETTE_BINDING if self.app.ENABLE_COMMAND_PALETTE else None
        last = None
        for key, (_, binding, enabled, _tooltip) in screen.active_bindings.items():
            if key == palette_key:
                last = (key, self.app.get_key_display(binding), binding.description, enabled)
            elif binding.show and binding.action not in actions:  # one hint per action
                actions.add(binding.action)
                hints.append((key, self.app.get_key_display(binding), binding.description, enabled))
        self.hints = hints + ([last] if last else [])
        self.redraw()

    def build(self, width: int) -> list[Line]:
        key_style = self.get_component_rich_style("key-bar--key", partial=True)
        text_style = self.get_component_rich_style("key-bar--description", partial=True)
        off_style = self.get_component_rich_style("key-bar--disabled", partial=True)
        hints = self.hints
        palette = hints[-1] if hints and hints[-1][0] == self.app.COMMAND_PALETTE_BINDING else None
        if palette is not None:
            hints = hints[:-1]
        line, spans = Line(), []

        def add(hint: tuple[str, str, str, bool]) -> None:
            key, shown, description, enabled = hint
            x0 = len(line)
            line.add(f" {shown} ", key_style if enabled else off_style)
            line.add(f"{description} ", text_style if enabled else off_style)
            spans.append((x0, len(line), key, enabled))

        for hint in hints:  # whole hints only: the ones that do not fit are left out
            if len(line) + cells(hint[1]) + cells(hint[2]) + 3 > width:
                break
            add(hint)
        if palette is not None:  # at the right end, as in Textual's footer, when there is room
            room = width - len(line) - cells(palette[1]) - cells(palette[2]) - 3
            if room >= 0:
                line.add(" " * room)
                add(palette)
        self._spans = spans
        return [line]

    def on_mouse_down(self, event: events.MouseDown) -> None:
        for x0, x1, key, enabled in self._spans:
            if x0 <= event.x < x1:
                if enabled:
                    self.app.simulate_key(key)
                else:
                    self.app.bell()
                return
