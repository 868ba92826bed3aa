"""Terminal cells, not characters: a CJK character takes two cells, a combining mark none. Everything
that cuts or pads text for the screen (the canvas, the tables, `--once`) measures with these.
Standard library only, so `--once` can use it without Rich or Textual."""

from __future__ import annotations

import unicodedata
from functools import lru_cache

ELLIPSIS = "…"


@lru_cache(maxsize=4096)
def _char_cells(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    """How many cells `text` takes on a terminal (it holds no control characters: see units.printable)."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(ch) for ch in text)


def cut(text: str, cells: int, ellipsis: str = ELLIPSIS) -> str:
    """`text` in at most `cells` cells, ending with `ellipsis` when it was cut; never half a wide character
    (a cut that would split one pads with a space instead)."""
    if cells <= 0:
        return ""
    if width(text) <= cells:
        return text
    room = cells - width(ellipsis)
    if room < 0:
        return ellipsis[:cells]
    used, end = 0, 0
    for i, ch in enumerate(text):
        w = _char_cells(ch)
        if used + w > room:
            break
        used, end = used + w, i + 1
    return text[:end] + " " * (room - used) + ellipsis


def pad(text: str, cells: int, right: bool = False) -> str:
    """`text` cut to `cells` and padded with spaces to exactly `cells` (on the left when `right`)."""
    text = cut(text, cells)
    fill = " " * (cells - width(text))
    return fill + text if right else text + fill
