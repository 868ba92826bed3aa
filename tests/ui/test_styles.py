"""The styles live in gputui/ui/gputui.tcss, one section per class (see gputui.ui.styles): every section
is some class's, every class's section exists and parses, and what Python also knows agrees with it."""

from __future__ import annotations

import re

import pytest
from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode
from textual.theme import BUILTIN_THEMES

from gputui.ui import styles
from gputui.ui.app import GpuTuiApp
from gputui.ui.fleet_app import Banner, FleetApp, FleetHeader
from gputui.ui.screens.attach import AttachScreen
from gputui.ui.screens.columns import ColumnsScreen
from gputui.ui.screens.detail import DetailScreen
from gputui.ui.screens.fleet_host import HostView
from gputui.ui.screens.kill import KillScreen
from gputui.ui.widgets.filter_input import FilterInput
from gputui.ui.widgets.fleet_table import FleetTable
from gputui.ui.widgets.gpu_panes import GpuPanes
from gputui.ui.widgets.header import HEADER_LINES, HeaderBar
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.process_table import ProcessTable
from gputui.ui.widgets.row_note import RowNote
from gputui.ui.widgets.status import StatusLine

STYLED: tuple[type[DOMNode], ...] = (
    FilterInput,
    HeaderBar,
    GpuPanes,
    ProcessTable,
    RowNote,
    StatusLine,
    KeyBar,
    FleetHeader,
    Banner,
    FleetTable,
    HostView,
    AttachScreen,
    ColumnsScreen,
    KillScreen,
)


def test_every_section_is_a_classs_and_every_class_has_its_own() -> None:
    named = {c.__name__ for c in STYLED} | {"GpuTuiApp", "FleetApp", "Modal"}
    assert set(styles.sections()) == named
    for cls in STYLED:
        assert styles.sections()[cls.__name__] in cls.DEFAULT_CSS
    assert styles.tcss("Modal") == DetailScreen.DEFAULT_CSS
    assert styles.tcss("GpuTuiApp") == GpuTuiApp.CSS and styles.tcss("FleetApp") == FleetApp.CSS


@pytest.mark.parametrize("cls", STYLED, ids=lambda c: c.__name__)
def test_each_section_parses_as_its_classs_default_css(cls: type[DOMNode]) -> None:
    sheet = Stylesheet(variables=BUILTIN_THEMES["textual-dark"].to_color_system().generate())
    sheet.add_source(cls.DEFAULT_CSS, ("gputui.tcss", cls.__name__), is_default_css=True, scope=cls.__name__)
    sheet.parse()
    assert sheet.rules


def test_the_header_is_as_high_as_the_layout_counts_it() -> None:
    height = re.search(r"HeaderBar \{ height: (\d+); \}", styles.tcss("HeaderBar"))
    assert height is not None and int(height.group(1)) == HEADER_LINES


def test_a_missing_section_is_named() -> None:
    with pytest.raises(KeyError, match="Nope"):
        styles.tcss("Nope")
