"""Widths in terminal cells: wide characters take two, combining marks none."""

from __future__ import annotations

import pytest

from gputui import cells


@pytest.mark.parametrize(
    "text, expected",
    [
        ("python train.py", 15),
        ("训练", 4),
        ("e\u0301", 1),
        ("\uff46\uff55\uff4c\uff4c", 8),
        ("", 0),
        ("a\u200bb", 2),
    ],
)
def test_width(text: str, expected: int) -> None:
    assert cells.width(text) == expected


@pytest.mark.parametrize("text", ["训练脚本 --epochs 3", "résumé\u0301 日本語 ok", "plain ascii text here"])
@pytest.mark.parametrize("room", range(0, 12))
def test_cut_never_exceeds_the_room_and_marks_the_cut(text: str, room: int) -> None:
    out = cells.cut(text, room)
    assert cells.width(out) <= room
    if cells.width(text) > room > 0:
        assert out.endswith(cells.ELLIPSIS) and cells.width(out) == room
    elif room > 0:
        assert out == text


def test_pad_is_exact_even_when_a_wide_character_would_be_split() -> None:
    assert cells.pad("日本語", 5) == "日本…"
    assert cells.pad("日本語", 4) == "日 …"
    assert cells.pad("ab", 4) == "ab  " and cells.pad("ab", 4, right=True) == "  ab"
