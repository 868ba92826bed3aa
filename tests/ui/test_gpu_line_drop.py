"""What explains a number is never the part that is cut (issue 26): a GPU's summary line gives way in the
documented order (GpuPanes.fields), so throttle reasons and health warnings outlive clocks, PCIe, P-state,
fan and `ECC ok`, in panes, two columns and one line per GPU at 80, 120 and 200 columns; and a dip's glyph
shows without colour and on 16 colours."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.color import Color, ColorSystem
from rich.style import Style

from gputui import cells
from gputui.analyze.history import History
from gputui.model import GpuSample
from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.gpu_panes import GpuPanes, fit_name
from gputui.ui.widgets.layout import fit_fields
from gputui.ui.widgets.palette import Palette
from gputui.ui.widgets.spark import DIP_GLYPH
from tests.builders import h100, sample_of
from tests.ui import everyday
from tests.ui.conftest import first_frame

GIB = 1 << 30


# GPU 3, hot and throttled, with every field the summary line can show.
SAMPLE = h100(
    index=3,
    util_gpu=41,
    mem_used=int(40.3 * GIB),
    temperature=91,
    power=690.0,
    power_limit=700.0,
    sm_clock=1155,
    pstate=0,
    fan=55,
    pcie_rx=8.4e9,
    pcie_tx=7.2e8,
    nvlink_rx=2e10,
    nvlink_tx=1e10,
    ecc_errors=0,
    persistence_mode=True,
    compute_mode="Default",
    throttle_reasons=("hw_thermal", "sw_thermal"),
)


def _gpu(**kw: Any) -> GpuSample:
    return sample_of(SAMPLE, **kw)


def summary(g: GpuSample, width: int) -> str:
    return "".join(text for text, _ in fit_fields(GpuPanes(History()).fields(g), width))


def extras(g: GpuSample, width: int) -> str:
    return "".join(text for text, _ in fit_fields(GpuPanes(History()).line_extras(g), width))


# What each step of the drop order takes away, as a pattern of what it leaves no more.
ORDER = [
    ("modes", r"persist on"),
    ("ECC ok", r"ECC ok"),
    ("NVLink", r"NVLink"),
    ("P-state", r"  P0"),
    ("PCIe", r"PCIe"),
    ("fan", r"FAN"),
    ("SM clock", r"SM 1155"),
    ("long reasons", r"HW thermal"),  # (one priority with the power limit: the later field first)
    ("power limit", r"/700W"),
    ("power", r"690(/700)?W"),
    ("memory decimals", r"40\.3/80\.0G"),
    ("temperature", r"91°C"),
    ("reason", r"⚠ (HW )?thermal"),
    ("⚠", r"⚠"),
]


def gone_order(line_at: object, full_width: int, narrowest: int = 20) -> list[str]:
    """The steps in the order their text leaves the line as it narrows from `full_width`."""
    gone: list[str] = []
    for width in range(full_width, narrowest - 1, -1):
        line = line_at(width)  # type: ignore[operator]
        assert cells.width(line) <= width
        for name, pattern in ORDER:
            if name not in gone and not re.search(pattern, line):
                gone.append(name)
    return gone


def test_a_pane_line_gives_way_in_the_documented_order() -> None:
    g = _gpu()
    full = summary(g, 500)
    assert all(re.search(pattern, full) for _, pattern in ORDER), full
    # (The long form of the reasons and the power limit shorten at one priority: the later field first.)
    assert gone_order(lambda w: summary(g, w), cells.width(full)) == [name for name, _ in ORDER]
    assert "UTIL  41%" in summary(g, 20) and "MEM" in summary(g, 20)  # never dropped


def test_a_one_line_gpu_gives_way_in_the_same_order() -> None:
    g = _gpu()
    full = extras(g, 500)
    want = ["PCIe", "fan", "long reasons", "power limit", "power", "temperature", "reason", "⚠"]
    order = [name for name in gone_order(lambda w: extras(g, w), cells.width(full), 2) if name in want]
    assert order == want


def test_a_health_warning_outlives_the_temperature_and_the_clocks() -> None:
    g = _gpu(ecc_errors=3, throttle_reasons=())
    for width in range(cells.width(summary(g, 500)), 30, -1):
        line = summary(g, width)
        if "°C" in line or "SM" in line:
            assert "✖ ECC" in line or "⚠ ECC" in line, line


def test_the_short_forms() -> None:
    assert fit_name("H100 80GB HBM3", 10) == "H100 80GB "  # whole words
    assert fit_name("A100-SXM4-80GB", 9) == "A100-SXM…"
    g = _gpu(throttle_reasons=("sw_power_cap",), power=700.0)
    assert "700/700W  ⚠ power cap" in summary(g, 60)
    assert "700W  ⚠ power …" in summary(g, 54)  # the short form, before the power goes
    assert "W " not in summary(g, 48) and "⚠ power" in summary(g, 48)


# -- in the app, every layout at 80, 120 and 200 columns ------------------------------------------

CASES = [
    (size, kind)
    for size in ((80, 24), (120, 40), (200, 60))
    for kind in ("panes", "columns", "lines")
    if not (kind == "columns" and size[0] < 120)  # two columns need 112 cells
]


def gpu_summary(app: GpuTuiApp, gpu: int) -> str:
    """GPU `gpu`'s summary line as drawn (its pane's first row, its half of a two-column row, its line)."""
    panes = app.panes
    lay = panes.gpu_layout
    drawn = ["".join(ch for ch, _ in line) for line in panes._lines]
    if lay.kind == "lines":
        return drawn[gpu]
    if lay.columns == 1:
        return drawn[gpu * lay.rows_per_gpu]
    half = (len(drawn) - lay.axis_rows) // lay.rows_per_gpu
    col, slot = divmod(gpu, half)
    row = drawn[slot * lay.rows_per_gpu]
    left = lay.column_widths[0]
    return row[:left] if col == 0 else row[left:]


@pytest.mark.parametrize(("size", "kind"), CASES, ids=[f"{w}x{h}-{k}" for (w, h), k in CASES])
async def test_the_throttle_reason_is_kept_before_clocks_pcie_pstate_and_fan(
    size: tuple[int, int], kind: str
) -> None:
    app = everyday.app()
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        app.panes.set_layout(kind)
        await pilot.pause()
        assert app.panes.gpu_layout.kind == kind
        for g in range(everyday.GPUS):
            line = gpu_summary(app, g)
            assert f"{g} H100" in line, line
            if g == everyday.HOT_GPU:
                assert re.search(r"⚠ (HW )?thermal", line), (size, kind, line)
                assert "91°C" in line, line  # the temperature that explains it
            # (" MHz": the SM clock; GPM's "SM 92%" is kept longer than power, by design)
            if any(x in line for x in (" MHz", "PCIe", "FAN", " P0", "ECC ok")):
                assert "°C" in line and re.search(r"\d+W", line), line  # never before power and °C
        if size[0] >= 200 and kind != "lines":
            hot = gpu_summary(app, everyday.HOT_GPU)
            assert "⚠ HW thermal" in hot and re.search(r"SM +\d+% TC +\d+%", hot), hot  # GPM beside UTIL


# -- a dip's glyph without colour, and on 16 colours ----------------------------------------------


def _luma(style_color: Color) -> float:
    r, g, b = style_color.get_truecolor()
    return (0.299 * r + 0.587 * g + 0.114 * b) / 255


def visible(style: Style, system: ColorSystem | None) -> bool:
    """Whether a glyph drawn in `style` shows: its colour and its background differ once the terminal's
    colours (`system`: 16, 256 or truecolor) are applied. No colour of its own, or no background: the
    terminal's default pair, which differ."""
    fg, bg = style.color, style.bgcolor
    if fg is None or bg is None or fg.is_default or bg.is_default:
        return True
    if system is not None:
        fg, bg = fg.downgrade(system), bg.downgrade(system)
    if system is ColorSystem.STANDARD:
        return fg.number != bg.number
    return abs(_luma(fg) - _luma(bg)) >= 0.1


def test_the_check_sees_the_old_invisible_dip() -> None:
    red = Palette.default().error
    old = red + Style(bgcolor="red")  # a low bar in a dip, as it was drawn
    assert not visible(old, ColorSystem.STANDARD)
    theme_red = Style(color="#ba3c5b", bgcolor="#ba3c5b")
    assert not visible(theme_red, ColorSystem.STANDARD) and not visible(theme_red, ColorSystem.EIGHT_BIT)


def glyph_styles(app: GpuTuiApp) -> list[Style]:
    """The styles the terminal is sent for each dip glyph of the GPU area, after the app's filters."""
    update = app.screen._compositor.render_update(full=True)
    out = []
    for row in getattr(update, "strips", [])[: 2 + app.panes.gpu_layout.height]:
        for strip in row:
            for seg in strip:
                if DIP_GLYPH in seg.text and seg.style is not None:
                    out.append(seg.style)
    return out


@pytest.mark.parametrize("system", [ColorSystem.STANDARD, ColorSystem.EIGHT_BIT, ColorSystem.TRUECOLOR])
async def test_a_dip_glyph_shows_on_16_256_and_all_colours(system: ColorSystem) -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        styles = glyph_styles(app)
        assert len(styles) >= 8
        assert all(visible(style, system) for style in styles), styles[:3]


async def test_a_dip_glyph_shows_with_no_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")  # Textual greys every colour (its Monochrome filter)
    app = everyday.app()
    assert app.no_color
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        styles = glyph_styles(app)
        assert len(styles) >= 8
        greys = {tuple(s.color.get_truecolor()) for s in styles if s.color is not None}
        assert all(r == g == b for r, g, b in greys), greys  # (the filter is on: no colour is left)
        assert all(visible(style, None) for style in styles), styles[:3]


def test_the_palettes_dip_is_a_colour_for_the_glyph() -> None:
    from textual.theme import BUILTIN_THEMES

    for theme in BUILTIN_THEMES.values():  # the 16-colour ansi-dark and ansi-light too
        dip = Palette.from_theme(theme).dip
        assert dip.bgcolor is None and dip.color is not None, theme.name
    if "ansi-dark" in BUILTIN_THEMES:  # (the oldest Textual the package supports has no ansi themes)
        assert Palette.from_theme(BUILTIN_THEMES["ansi-dark"]).dip.color == Style(color="red").color
    assert Palette.default().dip.bgcolor is None
