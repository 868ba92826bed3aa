"""The Xid table: every Xid issue 19 names has a meaning, a fix and a valid action and severity."""

from __future__ import annotations

import pytest

from gputui.analyze.xid import ACTIONS, SEVERITIES, XIDS, describe, xid_name

COMMON = (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120)


def test_the_common_xids_are_all_there() -> None:
    assert set(COMMON) <= set(XIDS)


@pytest.mark.parametrize("xid", COMMON)
def test_each_entry_is_complete(xid: int) -> None:
    info = XIDS[xid]
    assert info.xid == xid
    assert info.action in ACTIONS and info.severity in SEVERITIES
    for text in (info.name, info.what, info.fix):
        assert text and text == text.strip() and "\n" not in text and len(text) <= 110


def test_what_to_do_follows_the_kind_of_error() -> None:
    assert XIDS[79].action == "drain" and XIDS[79].severity == "error"  # fallen off the bus
    assert XIDS[64].action == "rma"  # a remap that failed
    assert XIDS[63].action == "reset" and "no process" in XIDS[63].fix  # a remap waiting for a reset
    assert XIDS[13].action == XIDS[31].action == "fix_app"  # the application's own fault
    assert XIDS[95].severity == "error" and XIDS[94].severity == "warning"  # uncontained vs contained


def test_an_unknown_xid_is_still_described() -> None:
    info = describe(999)
    assert info.xid == 999 and "999" in info.what and info.severity == "error"
    assert xid_name(79) == "GPU fallen off the bus" and xid_name(999) == "Xid error"
