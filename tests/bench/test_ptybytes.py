"""bench/ptybytes.py: a terminal stream's bytes to the cells they paint, and the cells to widgets."""

from __future__ import annotations

from bench.ptybytes import CHARTS, attribute, by_widget, paint

SYNC_ON, SYNC_OFF = b"\x1b[?2026h", b"\x1b[?2026l"


def test_a_positioned_write_belongs_to_the_cells_it_paints() -> None:
    # Row 3, column 5 (1-based): a colour, "ab", back to the default colour.
    stream = b"\x1b[3;5H" + b"\x1b[31m" + b"ab" + b"\x1b[0m"
    cells = attribute(stream)
    assert cells.cells[2, 4] == len(b"\x1b[3;5H") + len(b"\x1b[31m") + 1
    assert cells.cells[2, 5] == 1
    assert cells.cells[2, 6] == len(b"\x1b[0m")  # the reset: before whatever comes next
    assert cells.total == len(stream)


def test_the_escape_after_the_last_character_goes_to_the_next_cell() -> None:
    cells = attribute(b"\x1b[1;1Hx\x1b[0m")
    assert cells.cells == {(0, 0): len(b"\x1b[1;1H") + 1, (0, 1): len(b"\x1b[0m")}


def test_frame_brackets_and_modes_belong_to_no_cell() -> None:
    stream = SYNC_ON + b"\x1b[?25l" + b"\x1b[2;1Hz" + SYNC_OFF + b"\x1b]0;title\x07"
    cells = attribute(stream)
    assert cells.unplaced == len(SYNC_ON) + len(b"\x1b[?25l") + len(SYNC_OFF) + len(b"\x1b]0;title\x07")
    assert cells.cells == {(1, 0): len(b"\x1b[2;1Hz")}


def test_utf8_characters_advance_one_cell_and_charts_are_marked() -> None:
    stream = "\x1b[1;1H█▂ab".encode()
    cells = attribute(stream)
    assert cells.cells[0, 0] == len(b"\x1b[1;1H") + 3  # a 3-byte block element
    assert cells.cells[0, 1] == 3
    assert cells.cells[0, 2] == cells.cells[0, 3] == 1
    assert cells.chart_cells == {(0, 0), (0, 1)}


def test_relative_moves_and_newlines() -> None:
    # CHA (column 10), CUF 2, then CR LF: the cursor follows; a move belongs to the cell it moves to.
    stream = b"\x1b[5;1H\x1b[10Ga\x1b[2Cb\r\nc"
    cells = attribute(stream)
    assert cells.cells[4, 9] == len(b"\x1b[10G") + 1
    assert cells.cells[4, 12] == len(b"\x1b[2C") + 1  # "b"
    assert cells.cells[4, 13] == 1  # CR, after "b"
    assert cells.cells[4, 0] == len(b"\x1b[5;1H") + 1  # LF, after CR
    assert cells.cells[5, 0] == 1  # "c"


def test_a_stream_cut_inside_an_escape_counts_every_byte() -> None:
    stream = b"\x1b[1;1Hab\x1b[3"
    assert attribute(stream).total == len(stream)


def test_bytes_by_widget_split_charts_from_text() -> None:
    layout = [["header"] * 4, ["panes"] * 4, ["procs"] * 4]
    stream = SYNC_ON + b"\x1b[1;1Hgpu" + "\x1b[2;1Hu █▇".encode() + b"\x1b[3;1H1234" + SYNC_OFF
    counts = by_widget(attribute(stream), layout, frozenset({"panes"}))
    assert counts["header"] == len(b"\x1b[1;1Hgpu")
    assert counts["panes: text"] == len(b"\x1b[2;1Hu ")
    assert counts[f"panes: {CHARTS}"] == 6
    assert counts["procs"] == len(b"\x1b[3;1H1234")
    assert counts["(frame: sync, modes, cursor)"] == len(SYNC_ON) + len(SYNC_OFF)
    assert sum(counts.values()) == len(stream)


def test_cells_outside_the_layout_are_named_so() -> None:
    counts = by_widget(attribute(b"\x1b[9;9Hx"), [["a"]], frozenset())
    assert counts == {"(off screen)": len(b"\x1b[9;9Hx")}


def test_paint_shows_a_word_written_in_pieces_whole() -> None:
    """A program that redraws only the cells that changed writes "REASON" where "USER" ended in an R as
    "EASON" after a move: the screen reads "REASON"; the byte stream never holds the word."""
    stream = b"\x1b[2J\x1b[1;1HUSER" + b"\x1b[1;1H   " + b"\x1b[1;5HEASON"
    assert b"REASON" not in stream
    assert paint(stream, 2, 20) == ["   REASON", ""]


def test_paint_erases_and_wide_characters() -> None:
    stream = "\x1b[1;1Habcdef\x1b[1;3H\x1b[K\x1b[2;1H日x\x1b[3;1Hzz\x1b[2;2H\x1b[1J".encode()
    assert paint(stream, 3, 6) == ["", "  x", "zz"]  # J1: the rows above, and the line up to the cursor
    assert paint("\x1b[1;1H日本".encode(), 1, 4) == ["日本"]
    assert paint(b"\x1b[1;1Hab\x1b[2J\x1b[1;2Hc", 1, 3) == [" c"]
