"""The filter and Ctrl+C in a real terminal (tmux), at the sizes the issue was seen at: the typed text is
on screen, an active filter is shown after Enter, Esc clears it, Ctrl+C quits with status 0."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.helpers import wait_until as _wait_until
from tests.ui.terminal import Tmux, _exited, needs_tmux
from tests.ui.test_terminal import _demo_in_tmux, _gpu_lines, _header_says_demo

pytestmark = pytest.mark.terminal


def _drawn(screen: str) -> bool:
    return _header_says_demo(screen) and min(_gpu_lines(screen, 2)) >= 0 and "demo_train.py" in screen


def _until_screen(tmux: Tmux, cond: Callable[[str], object], timeout: float = 5.0) -> str:
    screen = ""

    def check() -> bool:
        nonlocal screen
        screen = tmux.screen()
        return bool(cond(screen))

    assert _wait_until(check, timeout), screen
    return screen


def _typed(screen: str) -> list[str]:
    """The lines that end with the typed text (the process rows' commands are cut or end otherwise)."""
    return [line for line in screen.splitlines() if line.strip().endswith("trainer")]


@needs_tmux
@pytest.mark.parametrize("size", [(120, 40), (200, 60)])
def test_tmux_filter_text_is_visible_then_shown_active_then_cleared(
    tmux: Tmux, size: tuple[int, int]
) -> None:
    width, height = size
    with _demo_in_tmux(tmux, width, height, 2, _drawn) as (demo, _):
        tmux.keys("/")
        tmux.keys("-l", "trainer")  # -l: the letters, not key names
        screen = _until_screen(tmux, lambda s: bool(_typed(s)))
        typed = _typed(screen)
        assert typed and "▔" not in typed[0], screen  # the text, not a lone top border

        tmux.keys("Enter")
        # Back on the table (the key bar offers Quit again), the filter still shown as active.
        screen = _until_screen(tmux, lambda s: "filter: trainer" in s and "Esc clears" in s and "q Quit" in s)
        assert "orphan" not in screen  # the orphan (--role orphan-parent): filtered out

        tmux.keys("Escape")
        screen = _until_screen(tmux, lambda s: "filter: trainer" not in s and "demo_train.py" in s)

        assert demo.gputui is not None
        gputui = demo.gputui
        tmux.keys("C-c")
        status = re.compile(r"^exited with status (\d+)$", re.MULTILINE)
        screen = _until_screen(tmux, lambda s: status.search(s) is not None and _exited(gputui))
        match = status.search(screen)
        assert match is not None and match.group(1) == "0", screen
        assert "Ctrl+Q" not in screen
