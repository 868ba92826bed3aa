"""The GPU area as drawn: the layouts at the sizes the issue names, the newest sample at the right edge,
dips marked by a glyph, summary lines that give way by priority, and the host line in the header."""

from __future__ import annotations

import dataclasses
from typing import Any

from gputui import cells
from gputui.analyze.history import History
from gputui.model import GpuSample, HostStats, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.gpu_panes import GpuPanes, throttled
from gputui.ui.widgets.header import HeaderBar, uptime
from gputui.ui.widgets.layout import LABEL, fit_fields
from gputui.ui.widgets.spark import DIP_GLYPH, GLYPHS, view_start
from tests.builders import h100, sample_of
from tests.ui.conftest import first_frame, make_app, post
from tests.ui.drawn import lines

SPARK = set(GLYPHS[1:]) | {DIP_GLYPH}
GIB = 1 << 30


def spark_cells(row: str) -> int:
    return sum(ch in SPARK for ch in row)


# -- layouts in the app ---------------------------------------------------------------------------


async def test_8_gpus_at_120x40_show_every_gpus_util_and_memory_history_and_20_table_rows() -> None:
    app = make_app(gpus=8)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.gpu_layout.kind == "columns" and not panes.compact
        drawn = lines(panes)
        assert len(drawn) == 4 * 3 + 1  # and the time scale under both columns
        assert drawn[-1].split() == ["-5m", "-4m", "-3m", "-2m", "-1m", "now"] * 2, drawn[-1]
        drawn = drawn[:-1]
        halves = [[row[:60] for row in drawn], [row[60:] for row in drawn]]
        for col, half in enumerate(halves):
            for slot in range(4):
                head, util, mem = half[slot * 3 : slot * 3 + 3]
                assert head.startswith(f" {4 * col + slot:>2} H100") and "UTIL" in head
                # the demo's H100s serve GPM: the busy sparkline is SM activity's (labelled so)
                assert util.lstrip().startswith("SM act") and spark_cells(util) >= 40
                assert mem.lstrip().startswith("mem") and spark_cells(mem) >= 40
        assert app.table.size.height >= 21  # its header and 20 rows


async def test_16_gpus_at_200x60_are_one_line_each_with_40_cell_util_and_memory_sparklines() -> None:
    app = make_app(gpus=16)
    async with app.run_test(size=(200, 60)) as pilot:
        await first_frame(pilot, app)
        assert app.panes.compact
        drawn = lines(app.panes)
        assert len(drawn) == 16
        for g, row in enumerate(drawn):
            assert row.startswith(f" {g:>2} H100 80GB HBM3 ")  # the whole name
            runs = [run for run in "".join(ch if ch in SPARK else " " for ch in row).split() if run]
            assert len(runs) == 2 and all(len(run) >= 40 for run in runs), row
            assert cells.width(row) >= 170
        assert max(cells.width(row) for row in drawn) >= 196  # the area's right columns are used


async def test_4_gpus_on_a_tall_terminal_get_taller_charts() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(200, 60)) as pilot:
        await first_frame(pilot, app)
        lay = app.panes.gpu_layout
        assert lay.kind == "panes" and lay.spark_rows >= 2
        drawn = lines(app.panes)
        per = 1 + 2 * lay.spark_rows
        assert len(drawn) == 4 * per + 1  # and the time scale
        for g in range(4):
            pane = drawn[g * per : (g + 1) * per]
            assert pane[0].startswith(f" {g:>2} H100")
            assert pane[1].startswith("  SM act") and pane[1 + lay.spark_rows].startswith("    mem")
            assert all(len(row) == 200 for row in app.panes._lines)


async def test_v_cycles_the_layout_and_the_choice_is_exposed_by_name() -> None:
    app = make_app(gpus=8)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.layout_name == "auto"
        kinds = []
        for want in ("panes", "columns", "lines", "auto"):
            assert panes.cycle_layout() == want == panes.layout_name
            await pilot.pause()
            kinds.append(panes.gpu_layout.kind)
            assert len(panes._lines) == panes.gpu_layout.height
        assert kinds == ["panes", "columns", "lines", "columns"]
        panes.set_layout("no-such-layout")  # from an old settings file
        assert panes.layout_name == "auto"


async def test_v_skips_a_layout_that_would_look_the_same() -> None:
    app = make_app(gpus=8)
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.gpu_layout.kind == "lines"
        # Two columns of panes do not fit 80 cells (they would be one column): v goes from panes to lines.
        assert [panes.cycle_layout() for _ in range(3)] == ["panes", "lines", "auto"]


# -- the right edge, the bucket, the dip glyph ----------------------------------------------------


def _util_row(app: GpuTuiApp, gpu: int = 0) -> list[str]:
    """GPU `gpu`'s util sparkline cells, in a one-column pane layout with one-row sparklines."""
    lay = app.panes.gpu_layout
    assert lay.kind == "panes" and lay.spark_rows == 1
    return [ch for ch, _ in app.panes._lines[gpu * 3 + 1][LABEL:]]


def _with_util(snap: Snapshot, t: float, util: int) -> Snapshot:
    """GPU 0 at `util` %, NVML's and GPM's SM activity alike (the pane draws SM activity where known)."""

    def changed(g: GpuSample) -> GpuSample:
        gpm = dataclasses.replace(g.gpm, sm_active=float(util)) if g.gpm is not None else None
        return dataclasses.replace(g, util_gpu=util, gpm=gpm)

    gpus = tuple(changed(g) if g.index == 0 else g for g in snap.gpus)
    return dataclasses.replace(snap, time=t, gpus=gpus)


async def test_the_newest_sample_is_the_rightmost_cell_and_a_new_bucket_shifts_one_cell() -> None:
    app = make_app(gpus=4, interval=30.0)  # the sampler sleeps: the test's snapshots stay shown
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        app.paused = True
        bucket = app.panes._bucket_s
        assert bucket == 30.0  # the interval: five minutes take 10 of 112 cells
        before = _util_row(app)
        assert before[-1] != " " and before[0] == " "  # history fills from the right edge
        assert app.snapshot is not None
        t = (app.snapshot.time // bucket + 1) * bucket  # the next bucket
        await post(pilot, app, _with_util(app.snapshot, t, 0))
        after = _util_row(app)
        assert after[-1] == GLYPHS[1]  # 0 %: the newest sample, at the right edge
        assert after[:-1] == before[1:]  # everything else moved one cell left
        await post(pilot, app, _with_util(app.snapshot, t + bucket, 100))
        last = _util_row(app)
        # The 0 % bucket is now the first of a dip: marked by the dip glyph rather than its level.
        assert last[-2] in (GLYPHS[1], DIP_GLYPH) and last[-1] == GLYPHS[8]


async def test_a_new_interval_recomputes_the_bucket_at_once() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        first = app.panes._bucket_s
        app.panes.interval = 10.0
        assert app.panes._bucket_s == 10.0 != first


async def test_every_dip_starts_with_a_glyph_that_needs_no_colour() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        dip = app.panes.palette.dip
        assert dip.bgcolor is None  # a colour for the glyph, never one under it
        for g in range(4):
            row = app.panes._lines[g * 3 + 1][LABEL:]
            track = app.panes._tracks[g]
            start = view_start(track.util.latest, len(row))
            marked = [x for x in range(len(row)) if start + x in app.panes.marked_buckets(g)]
            assert marked, g
            assert all(row[x][1].color == dip.color for x in marked)
            starts = [x for x in marked if x - 1 not in marked]
            assert [x for x, (ch, _) in enumerate(row) if ch == DIP_GLYPH] == starts


# -- summary lines by priority --------------------------------------------------------------------


# GPU 3 at work: its tests add the throttle reasons and warnings they are about.
SAMPLE = h100(
    index=3,
    util_gpu=97,
    mem_used=40 * GIB,
    temperature=81,
    power=690.0,
    power_limit=700.0,
    sm_clock=1755,
    pstate=0,
    fan=55,
    pcie_rx=8.4e9,
    pcie_tx=7.2e8,
    persistence_mode=True,
    compute_mode="Default",
)


def _gpu(**kw: Any) -> GpuSample:
    return sample_of(SAMPLE, **kw)


def summary(g: GpuSample, width: int) -> str:
    panes = GpuPanes(History())
    return "".join(text for text, _ in fit_fields(panes.fields(g), width))


def test_four_throttle_reasons_keep_both_thermal_ones_first() -> None:
    g = _gpu(throttle_reasons=("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal"))
    assert throttled(g)[:2] == ["HW thermal", "thermal"]
    assert "HW thermal, thermal, HW slowdown, power cap" in summary(g, 200)
    for width in (100, 80, 60, 40):
        line = summary(g, width)
        assert cells.width(line) <= width
        # Narrower, the reasons shorten (`⚠ thermal, slowdown, power`, `⚠ thermal +2`), thermal first.
        assert "⚠ thermal" in line or "⚠ HW thermal" in line, line


def test_a_narrow_line_drops_whole_fields_least_useful_first_and_ends_with_an_ellipsis() -> None:
    g = _gpu(throttle_reasons=("sw_thermal",), enc_util=40, dec_util=55)
    full = summary(g, 500)
    assert "ENC  40% DEC  55%" in full and "PCIe" in full and "FAN" in full and not full.endswith("…")
    kept_before: set[str] = {w for w in full.split() if w[0] not in "0123456789"}
    for width in range(cells.width(full) - 1, 30, -1):
        line = summary(g, width)
        assert cells.width(line) <= width and line.endswith("…"), (width, line)
        assert ("ENC" in line) == ("DEC" in line), line  # ENC/DEC is one field: never half of it
        words = {w for w in line.split() if w[0] not in "0123456789"}  # power: "690/700 W", then "690 W"
        assert words - {"…"} <= kept_before, line  # a narrower line never shows something new
        kept_before = words
    # What goes first and what stays longest.
    assert "persist" not in summary(g, cells.width(full) - 1)
    narrow = summary(g, 50)
    assert "UTIL" in narrow and "MEM" in narrow and "°C" in narrow and "PCIe" not in narrow


def test_the_fields_that_were_never_drawn_are_there_when_the_width_allows() -> None:
    line = summary(_gpu(ecc_errors=0, nvlink_rx=2e10, nvlink_tx=1e10), 500)
    for want in ("FAN  55%", "PCIe ↓8.4G ↑720M/s", "NVLink ↓ 20G ↑ 10G/s", "ECC ok", "persist on", "Default"):
        assert want in line, (want, line)
    assert "ECC 3 errors" in summary(_gpu(ecc_errors=3), 80)  # errors outrank the clocks and PCIe


# -- the host line --------------------------------------------------------------------------------

HOST = HostStats(
    cpu_percent=23.4,
    cpu_count=64,
    mem_total=503 * GIB,
    mem_used=120 * GIB,
    swap_total=8 * GIB,
    swap_used=GIB,
    load=(12.5, 11.0, 9.75),
    uptime=3 * 86400 + 4 * 3600 + 12 * 60 + 30,
)


def host_line(host: HostStats | None, width: int) -> str:
    header = HeaderBar()
    return "".join(text for text, _ in fit_fields(header.host_fields(host), width))


def test_the_host_line_shows_cpu_memory_swap_load_and_uptime() -> None:
    line = host_line(HOST, 200)
    assert "CPU  23% of 64" in line
    assert "MEM 120 GiB/503 GiB" in line
    assert "SWP 1.0 GiB/8.0 GiB" in line
    assert "LOAD 12.50 11.00 9.75" in line
    assert "UP 3d 04:12" in line


def test_a_narrow_host_line_keeps_cpu_and_memory_longest() -> None:
    full = host_line(HOST, 200)
    widths = range(cells.width(full) - 1, 10, -1)
    order = []
    for width in widths:
        line = host_line(HOST, width)
        assert cells.width(line) <= width and line.endswith("…")
        for label in ("UP", "SWP", "LOAD"):
            if label not in line and label not in order:
                order.append(label)
    assert order == ["UP", "SWP", "LOAD"]
    assert "CPU" in host_line(HOST, 30) and "MEM" in host_line(HOST, 30)


def test_host_stats_unknown_are_said_so_not_zero() -> None:
    assert "CPU  n/a" in host_line(dataclasses.replace(HOST, cpu_percent=None), 200)
    assert "not recorded" in host_line(None, 200)
    assert uptime(59) == "00:00" and uptime(3600 * 25) == "1d 01:00"


async def test_the_header_draws_the_host_line_under_the_first() -> None:
    app = make_app(gpus=4, interval=30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        app.paused = True
        assert app.snapshot is not None
        await post(pilot, app, dataclasses.replace(app.snapshot, time=app.snapshot.time + 30, host=HOST))
        first, second = lines(app.header)
        assert first.startswith(" gputui ")
        assert "CPU" in second and "LOAD 12.50" in second and "UP 3d 04:12" in second


async def test_the_host_line_changes_at_most_every_two_seconds() -> None:
    app = make_app(gpus=4, interval=30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        app.paused = True
        assert app.snapshot is not None
        t = app.snapshot.time + 30
        busy = dataclasses.replace(HOST, cpu_percent=99.0)
        await post(pilot, app, dataclasses.replace(app.snapshot, time=t, host=HOST))
        await post(pilot, app, dataclasses.replace(app.snapshot, time=t + 1, host=busy))
        assert "CPU  23%" in lines(app.header)[1]  # one second later: unchanged
        await post(pilot, app, dataclasses.replace(app.snapshot, time=t + 2, host=busy))
        assert "CPU  99%" in lines(app.header)[1]
        await post(pilot, app, dataclasses.replace(app.snapshot, time=t - 3600, host=HOST))
        assert "CPU  23%" in lines(app.header)[1]  # the clock stepped back: shown at once
