"""Where a terminal program's bytes go: each byte of a captured output stream is given to the screen cell
the cursor is on when it is written, following the cursor through the escapes that move it.

A full-screen program positions every write (CSI row;col H), then sets styles (SGR) and prints; so the
bytes of a write belong to the cells it paints, its escapes to the cell they precede. Bytes that belong
to no cell (synchronized-output brackets, mode switches, OSC strings) are counted apart as `unplaced`.
Pure: no terminal, no I/O.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

ESC = 0x1B
Cell = tuple[int, int]  # (row, column), from 0


def is_chart_glyph(char: str) -> bool:
    """Block elements (bars, sparklines) and braille (line charts)."""
    code = ord(char)
    return 0x2580 <= code <= 0x259F or 0x2800 <= code <= 0x28FF


def char_width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


@dataclass
class CellBytes:
    """Bytes per cell, the cells where a chart glyph was drawn, and the bytes tied to no cell."""

    cells: Counter[Cell] = field(default_factory=Counter)
    chart_cells: set[Cell] = field(default_factory=set)
    unplaced: int = 0

    @property
    def total(self) -> int:
        return sum(self.cells.values()) + self.unplaced


def _params(raw: bytes) -> list[int]:
    out = []
    for part in raw.split(b";"):
        out.append(int(part) if part.isdigit() else 0)
    return out


class _Cursor:
    def __init__(self) -> None:
        self.row = self.col = 0

    def csi(self, private: bool, raw: bytes, final: int) -> bool:
        """Apply a CSI sequence; False if it concerns no cell (a private mode, a query)."""
        if private:
            return False
        args = _params(raw)
        n = max(1, args[0]) if args else 1
        if final in b"Hf":
            self.row = max(1, args[0] if args else 1) - 1
            self.col = max(1, args[1] if len(args) > 1 else 1) - 1
        elif final == ord("G"):
            self.col = n - 1
        elif final == ord("d"):
            self.row = n - 1
        elif final == ord("A"):
            self.row = max(0, self.row - n)
        elif final == ord("B"):
            self.row += n
        elif final == ord("C"):
            self.col += n
        elif final == ord("D"):
            self.col = max(0, self.col - n)
        return final in b"HfGdABCDmKJX@P"


def _csi_end(stream: bytes, i: int) -> int:
    """The index of the final byte of the CSI that starts at stream[i] (ESC [), or len(stream)."""
    j = i + 2
    while j < len(stream) and not 0x40 <= stream[j] <= 0x7E:
        j += 1
    return j


def _string_end(stream: bytes, i: int) -> int:
    """The last index of an OSC/DCS string starting at stream[i]: up to BEL or ESC \\."""
    j = i + 2
    while j < len(stream):
        if stream[j] == 0x07:
            return j
        if stream[j] == ESC and j + 1 < len(stream) and stream[j + 1] == ord("\\"):
            return j + 1
        j += 1
    return len(stream) - 1


def _utf8_length(lead: int) -> int:
    return 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1


@dataclass(frozen=True, slots=True)
class Step:
    """Bytes of the stream that go together: a character, a control, or one escape sequence."""

    row: int  # the cell they belong to: the one a character paints, the one a move lands on
    col: int
    size: int
    placed: bool  # False: bytes of no cell (synchronized-output brackets, modes, OSC strings)
    char: str = ""  # the character printed, if one is
    erase: str = ""  # an erase (CSI J or K) with its argument: "J2", "K0", ...


def walk(stream: bytes) -> Iterator[Step]:
    """The stream, step by step, with the cursor followed through the escapes that move it."""
    cur = _Cursor()
    i, n = 0, len(stream)
    while i < n:
        b = stream[i]
        if b == ESC and i + 1 < n and stream[i + 1] == ord("["):
            end = _csi_end(stream, i)
            body = stream[i + 2 : end]
            private = body[:1] in (b"?", b">", b"<", b"=")
            placed = end < n and cur.csi(private, body, stream[end])
            erase = stream[end : end + 1] + body if placed and stream[end] in b"JK" else b""
            yield Step(
                cur.row, cur.col, min(end, n - 1) - i + 1, placed, erase=erase.decode("ascii", "replace")
            )
            i = end + 1
        elif b == ESC and i + 1 < n and stream[i + 1] in b"]PX^_":
            end = _string_end(stream, i)
            yield Step(cur.row, cur.col, end - i + 1, False)
            i = end + 1
        elif b == ESC:
            yield Step(cur.row, cur.col, min(2, n - i), False)  # ESC 7, ESC 8, ESC =, ...
            i += 2
        elif b < 0x20 or b == 0x7F:
            yield Step(cur.row, cur.col, 1, True)
            if b == 0x0D:
                cur.col = 0
            elif b == 0x0A:
                cur.row += 1
            elif b == 0x08:
                cur.col = max(0, cur.col - 1)
            i += 1
        else:
            size = _utf8_length(b)
            char = stream[i : i + size].decode("utf-8", errors="replace")[:1] or "\ufffd"
            yield Step(cur.row, cur.col, size, True, char)
            cur.col += char_width(char)
            i += size


def attribute(stream: bytes) -> CellBytes:
    """Every byte of `stream` to the cell it paints or precedes."""
    out = CellBytes()
    for step in walk(stream):
        if not step.placed:
            out.unplaced += step.size
            continue
        out.cells[step.row, step.col] += step.size
        if step.char and is_chart_glyph(step.char):
            out.chart_cells.add((step.row, step.col))
    return out


def paint(stream: bytes, rows: int, cols: int) -> list[str]:
    """What a terminal of `rows` x `cols` shows after `stream`: its text, a line per row (styles dropped).
    A program that redraws only the cells that changed writes a word in pieces; the screen has it whole."""
    grid = [[" "] * cols for _ in range(rows)]
    for step in walk(stream):
        row, col = step.row, step.col
        if step.erase:
            _erase(grid, step.erase, row, col)
        elif step.char and row < rows and col < cols:
            grid[row][col] = step.char
            if char_width(step.char) == 2 and col + 1 < cols:
                grid[row][col + 1] = ""  # the right half of a wide character
    return ["".join(line).rstrip() for line in grid]


def _erase(grid: list[list[str]], erase: str, row: int, col: int) -> None:
    """CSI J (the screen: 0 from the cursor on, 1 up to it, 2 or 3 all) and CSI K (the same of a line)."""
    how = erase[1:] or "0"
    lines = range(len(grid))
    if erase[0] == "J":
        lines = range(row + 1, len(grid)) if how == "0" else range(row) if how == "1" else lines
        for r in lines:
            grid[r] = [" "] * len(grid[r])
        if how in ("2", "3"):
            return
    if row < len(grid):
        line = grid[row]
        if how == "0":
            line[col:] = [" "] * max(0, len(line) - col)
        elif how == "1":
            line[: col + 1] = [" "] * min(len(line), col + 1)
        else:
            grid[row] = [" "] * len(line)


CHARTS = "charts and bars"


def by_widget(cells: CellBytes, layout: Sequence[Sequence[str]], split: frozenset[str]) -> Counter[str]:
    """Bytes per widget, `layout[row][col]` naming the widget of each cell; a widget named in `split`
    is counted in two parts, the cells where it drew a chart glyph apart from the rest."""
    out: Counter[str] = Counter()
    for (row, col), count in cells.cells.items():
        name = layout[row][col] if row < len(layout) and col < len(layout[row]) else "(off screen)"
        name = name or "(no widget)"
        if name in split:
            name = f"{name}: {CHARTS}" if (row, col) in cells.chart_cells else f"{name}: text"
        out[name] += count
    if cells.unplaced:
        out["(frame: sync, modes, cursor)"] += cells.unplaced
    return out
