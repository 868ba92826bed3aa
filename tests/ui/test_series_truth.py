"""Every series shows its extremes honestly (issue 26): a memory cell shows its bucket's peak, a util cell
its bucket's mean (dips are marked apart), the process detail's max is the true max over its window, and
a time scale says what the sparklines cover at every zoom."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.analyze.history import PROCESS_WINDOW_S, History
from gputui.model import ProcessRow, Snapshot
from gputui.ui.app import ZOOMS
from gputui.ui.screens.detail import memory_spark
from gputui.ui.widgets.gpu_panes import GpuPanes
from gputui.ui.widgets.layout import LINE_SCALE, LINE_TITLE
from gputui.ui.widgets.spark import GLYPHS, MISSING, BucketSeries, Keep, axis, glyph, span_label, view_start
from tests.builders import process_row
from tests.ui import everyday, world
from tests.ui.conftest import first_frame
from tests.ui.drawn import lines

GIB = 1 << 30
T0 = 1_795_000_000.0


def spiky(seconds: int, base: float = 56.0, spike: float = 96.0) -> list[tuple[float, float | None]]:
    """1 Hz samples at `base` with 3 s at `spike` every 30 s (the issue's GPU 4)."""
    return [(T0 + k, spike if k % 30 in (10, 11, 12) else base) for k in range(seconds)]


def stalling(seconds: int) -> list[tuple[float, float | None]]:
    """A busy GPU that stalls 1 s in 5 (a data loader): 100 % and 0 %, 80 % on average."""
    return [(T0 + k, 0.0 if k % 5 == 4 else 100.0) for k in range(seconds)]


# -- what a bucket keeps --------------------------------------------------------------------------


@pytest.mark.parametrize("bucket", [6.0, 18.0, 36.0, 72.0])  # 5 min … 1 h on ~50 cells
def test_a_memory_cell_shows_its_buckets_peak_at_every_zoom(bucket: float) -> None:
    series = BucketSeries(bucket, 1000, Keep.PEAK)
    samples = spiky(3600)
    series.extend(samples)
    spikes = {int(t // bucket) for t, v in samples if v == 96.0}
    for n, v in series.buckets:
        assert v == (96.0 if n in spikes else 56.0), (n, v)
    assert {glyph(v) for _, v in series.buckets} >= {"█"}  # the spike reads at its height


@pytest.mark.parametrize("bucket", [18.0, 36.0, 72.0])
def test_a_util_cell_reads_at_its_mean_level_when_zoomed_out(bucket: float) -> None:
    series = BucketSeries(bucket, 1000, Keep.MEAN)
    series.extend(stalling(3600))
    full = [v for n, v in series.buckets if (n + 1) * bucket <= T0 + 3600 and n * bucket >= T0]
    assert full and all(v is not None and abs(v - 80.0) <= 100.0 / bucket + 0.01 for v in full), full
    assert {glyph(v) for v in full} <= {"▆", "▇"}  # 80 %: not the ▁ of its lowest sample
    low = BucketSeries(bucket, 1000, Keep.LOW)
    low.extend(stalling(3600))
    assert {glyph(v) for _, v in low.buckets} == {GLYPHS[1]}  # what it used to draw


def test_unknown_samples_count_for_nothing_and_a_bucket_of_only_unknown_is_missing() -> None:
    series = BucketSeries(10.0, 100, Keep.MEAN)
    series.extend([(0.0, None), (1.0, 40.0), (2.0, None), (3.0, 60.0), (10.0, None), (11.0, None)])
    assert list(series.buckets) == [(0, 50.0), (1, None)]  # never a 0 for "unknown"
    assert glyph(None) == MISSING
    peak = BucketSeries(10.0, 100, Keep.PEAK)
    peak.extend([(0.0, None), (1.0, 30.0), (2.0, 20.0)])
    assert list(peak.buckets) == [(0, 30.0)]


def test_the_mean_of_a_new_bucket_starts_afresh() -> None:
    series = BucketSeries(5.0, 100, Keep.MEAN)
    series.extend([(0.0, 100.0), (1.0, 0.0), (5.0, 20.0), (6.0, 40.0)])
    assert list(series.buckets) == [(0, 50.0), (1, 30.0)]


# -- in the app: the everyday box -----------------------------------------------------------------


def _mem_row(app: object, gpu: int) -> str:
    """GPU `gpu`'s memory sparkline in two columns of panes (the everyday box at 120x40)."""
    panes = app.panes  # type: ignore[attr-defined]
    lay = panes.gpu_layout
    assert lay.kind == "columns" and lay.spark_rows == 1
    half = (len(panes.snapshot.gpus) + 1) // 2
    col, slot = divmod(gpu, half)
    row = lines(panes)[slot * 3 + 2]
    left = lay.column_widths[0]
    part = row[:left] if col == 0 else row[left:]
    assert part.lstrip().startswith("mem"), part
    return part.split("mem", 1)[1].strip()


@pytest.mark.parametrize("zoom", ZOOMS)
async def test_the_memory_spike_is_on_its_sparkline_at_every_zoom(zoom: float) -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        app.window = zoom
        await pilot.pause()
        spark = _mem_row(app, everyday.SPIKE_GPU)
        # 96 % for 3 s in 30 s on a GPU at 56 %: every cell whose bucket held one shows it, at any zoom.
        b = app.panes._bucket_s
        track = app.panes._tracks[everyday.SPIKE_GPU]
        start = view_start(track.mem.latest, len(spark))
        h = app.history.gpus[everyday.SPIKE_GPU]
        peaks = {int(t // b) for t, m in zip(h.times, h.mem, strict=True) if m is not None and m >= 90}
        assert peaks
        for x, ch in enumerate(spark):
            if start + x in peaks:
                assert ch == "█", (x, spark)
            elif ch.strip():
                assert ch == "▅", (x, spark)  # 56 %: the rest of the time


async def test_a_busy_gpu_reads_busy_zoomed_out() -> None:
    """GPU 7 of the everyday box is busy (~90 %) with short data-loader stalls: zoomed out to an hour
    its cells read at its mean, not at its stalls' lows."""
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        app.window = ZOOMS[-1]
        await pilot.pause()
        g = 7
        h = app.history.gpus[g]
        known = [u for u in h.util if u is not None]
        mean = sum(known) / len(known)
        assert mean >= 60
        values = [v for _, v in app.panes._tracks[g].util.buckets if v is not None]
        assert min(values) >= mean - 25, (mean, values)


# -- the time scale -------------------------------------------------------------------------------


def test_the_axis_says_how_far_back_the_cells_reach_and_puts_ticks_where_they_are() -> None:
    assert axis(52, 6.0).split() == ["-5m", "-4m", "-3m", "-2m", "-1m", "now"]
    row = axis(52, 6.0)
    assert len(row) == 52 and row.endswith("now") and row.startswith("-5m")
    x = 51 - round(120 / 6.0)  # the cell whose bucket is two minutes old
    assert row[x - 1 : x + 2] == "-2m"
    assert axis(52, 72.0).split()[0] == "-1h" and axis(52, 18.0).split()[0] == "-16m"
    assert span_label(6.0, 52) == "-5m" and span_label(70.0, 52) == "-1h" and span_label(1.0, 40) == "-40s"
    assert axis(2, 6.0) == "  " and axis(5, 6.0).strip() == "-30s"  # too narrow for the rest


async def test_the_panes_scale_follows_the_zoom() -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        seen = []
        for zoom in ZOOMS:
            app.window = zoom
            await pilot.pause()
            scale = lines(app.panes)[-1]
            b, w = app.panes._bucket_s, app.panes.gpu_layout.spark_width
            assert scale.split()[0] == span_label(b, w) and scale.split()[-1] == "now"
            assert w * b >= zoom  # it says at least the window asked for
            seen.append(scale.split()[0])
        assert seen == ["-5m", "-16m", "-30m", "-1h"], seen


async def test_one_line_per_gpu_says_its_span_on_the_first_line() -> None:
    app = everyday.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.compact
        for zoom, want in zip(ZOOMS, ("-5m", "-15m", "-30m", "-1h"), strict=True):
            app.window = zoom
            await pilot.pause()
            drawn = lines(panes)
            at = LINE_TITLE + panes.gpu_layout.name_width
            assert drawn[0][at : at + LINE_SCALE].strip() == want, drawn[0]
            assert all(not row[at : at + LINE_SCALE].strip() for row in drawn[1:])


# -- the process detail's max ---------------------------------------------------------------------


def _row(used: int) -> ProcessRow:
    return process_row(4, 4141, used_memory=used, create_time=T0 - 3600)


_BASE = world.snapshots(1, 1, weird=False)[0]


def _bare(t: float, rows: tuple[ProcessRow, ...]) -> Snapshot:
    return dataclasses.replace(_BASE, time=t, gpus=(), processes=rows)


def test_the_detail_max_is_the_true_max_over_its_window() -> None:
    """61.7 GiB, with 3 s at 76.4 GiB every 30 s: the detail says max 76.4 GiB, and its sparkline shows
    each spike (the sampler's series keeps only each stretch's low: its trend wants the floor)."""
    history = History()
    base, spike = int(61.7 * GIB), int(76.4 * GIB)
    for k in range(900):  # 15 min at 1 Hz: the detail shows the last 10
        used = spike if k % 30 in (10, 11, 12) else base
        history.add(_bare(T0 + k, (_row(used),)))
    points = history.memory_points(4141, T0 - 3600, 4)
    assert points[0][0] >= T0 + 899 - PROCESS_WINDOW_S
    said = memory_spark(points)
    assert said is not None
    assert said.endswith("min 61.7 GiB, max 76.4 GiB over 10 min"), said
    cells = said.split("  ")[0]
    assert cells.count("█") >= 18 and set(cells) <= {"▁", "█"}, cells  # 20 spikes in 10 min, 40 cells
    assert history.memory_points(4141, T0 - 3600, 3) == []  # another GPU's row is another series


def test_process_memory_keeps_lows_and_highs_where_they_were_and_forgets_old_and_gone() -> None:
    history = History()
    for k, used in enumerate([5, 9, 1, 5, 5, 5, 7]):
        history.add(_bare(T0 + k, (_row(used * GIB),)))
    pts = history.memory_points(4141, T0 - 3600, 4)
    assert pts == [(T0 + 1, 9.0 * GIB), (T0 + 2, 1.0 * GIB), (T0 + 5, 5.0 * GIB), (T0 + 6, 7.0 * GIB)]
    history.add(_bare(T0 + 7 + PROCESS_WINDOW_S, ()))
    assert history.processes == {}  # gone and old: nothing kept
    history.add(_bare(T0 + 10_000, (_row(GIB),)))
    history.add(_bare(T0 + 100, (_row(2 * GIB),)))  # the wall clock stepped back: start again
    assert history.memory_points(4141, T0 - 3600, 4) == [(T0 + 100, 2.0 * GIB)]


def test_a_gpu_panes_track_keeps_means_for_util_and_peaks_for_memory() -> None:
    panes = GpuPanes(History())
    track = panes._new_track(0)
    assert track.util.keep is Keep.MEAN and track.mem.keep is Keep.PEAK
