"""Make Textual's partial screen updates write only the cells that changed.

Textual 8's ChopsUpdate.render_segments writes every dirty span from the *left edge of the widget* to
the span's end: a changed digit at column 60 of a GPU pane re-sends columns 0-60. Over SSH that is most
of gputui's traffic. This replacement starts each write at the span's first cell (measured in `make
bench`: 14.5 KB/s before, about 1 KB/s after, the widgets' own diffing included). It is applied once,
when the app starts, and only if Textual's class still has the shape it was written against.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.control import Control


def _render_segments(self: Any, console: Console) -> str:
    out: list[str] = []
    move_to = Control.move_to
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start, stop = max(x, x1), min(end, x2)
            piece = strip if (start, stop) == (x, end) else strip.crop(start - x, stop - x)
            out.append(move_to(start, y).segment.text)  # every piece is positioned: no newlines needed
            out.append(piece.render(console))
    return "".join(out)


def install() -> bool:
    """Patch Textual; False (and no change) if its internals are not what this was written for."""
    try:
        from textual._compositor import ChopsUpdate
    except ImportError:
        return False
    needed = ("chops", "spans", "chop_ends")
    if not callable(getattr(ChopsUpdate, "render_segments", None)):
        return False
    init_names = ChopsUpdate.__init__.__code__.co_varnames
    if not all(name in init_names for name in needed):
        return False
    # The patch itself: mypy forbids assigning to a method, which is what patching one is.
    ChopsUpdate.render_segments = _render_segments  # type: ignore[method-assign]
    return True
