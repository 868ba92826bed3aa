"""Text wrapped in terminal cells: a long command line, reason or result takes more lines instead of being
cut. Pure: no Textual, no Rich."""

from __future__ import annotations

from gputui.cells import ELLIPSIS, cut, width


def wrap_cells(text: str, cells: int) -> list[str]:
    """`text` in lines of at most `cells` terminal cells, broken after a space where one is near (a
    command's arguments stay whole), never inside a wide character."""
    if cells <= 0:
        return [text]
    lines: list[str] = []
    line, used, last_space = "", 0, -1
    for ch in text:
        w = width(ch)
        if used + w > cells and line:
            if 0 <= last_space < len(line) - 1 and last_space >= len(line) // 2:
                lines.append(line[: last_space + 1].rstrip())
                line = line[last_space + 1 :]
            else:
                lines.append(line)
                line = ""
            used, last_space = width(line), line.rfind(" ")
        line += ch
        used += w
        if ch == " ":
            last_space = len(line) - 1
    return [*lines, line] if line or not lines else lines


def wrap_at_most(text: str, cells: int, lines: int) -> list[str]:
    """`text` wrapped in at most `lines` lines; the last one ends with `…` when text was left out."""
    wrapped = wrap_cells(text, cells)
    if len(wrapped) <= lines:
        return wrapped
    if lines <= 0:
        return []
    last = cut(wrapped[lines - 1], cells - 1, ellipsis="") + ELLIPSIS
    return [*wrapped[: lines - 1], last]
