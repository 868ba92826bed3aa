"""GPM on screen (issue 27): a GPU with GPM shows its SM and tensor activity beside NVML's utilization,
its pane's sparkline is SM activity's (labelled), a GPU busy by NVML with its SMs nearly empty is called
out in the warning colour and keeps the callout at every size, a GPU without GPM shows none of it, and
the GPU detail lists every GPM metric (n/a where one failed) or says why there is none."""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import pytest
from textual.widgets import OptionList

from gputui import cells
from gputui.analyze.dips import SIGNAL_GRACE
from gputui.analyze.history import History
from gputui.model import GPM_RATES, GPM_RATIOS, GpmMetrics, GpuSample, MigInstance, ProcessDetail
from gputui.output.oneshot import GPM_LABELS
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.detail import GpuChooser, GpuDetailScreen, render_detail, render_gpu_detail
from gputui.ui.widgets.gpu_panes import SM_LABEL, GpuPanes
from gputui.ui.widgets.layout import LABEL, fit_fields
from gputui.ui.widgets.spark import DIP_GLYPH, GLYPHS
from tests.builders import h100, process_row, sample_of, snapshot
from tests.helpers import until
from tests.ui import everyday
from tests.ui.conftest import first_frame, post
from tests.ui.test_detail_fields import text_of
from tests.ui.test_gpu_line_drop import CASES, gpu_summary

GIB = 1 << 30
NOTE = "GPM not armed: DCGM is running (nv-hostengine (pid 812)) and reads the same counters"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def gpm(sm: float | None = 88.0, tensor: float | None = 61.0, **kw: float | None) -> GpmMetrics:
    return GpmMetrics(interval=1.0, graphics=95.0, sm_active=sm, sm_occupancy=50.0, tensor=tensor, **kw)


# GPU 2 at work, GPM armed: its tests vary what they are about.
SAMPLE = h100(
    index=2,
    util_gpu=95,
    mem_used=int(40.3 * GIB),
    temperature=66,
    power=631.0,
    power_limit=700.0,
    sm_clock=1980,
    pstate=0,
    gpm=gpm(),
)


def gpu(**kw: Any) -> GpuSample:
    return sample_of(SAMPLE, **kw)


def summary(g: GpuSample, width: int) -> str:
    return "".join(text for text, _ in fit_fields(GpuPanes(History()).fields(g), width))


def extras(g: GpuSample, width: int) -> str:
    return "".join(text for text, _ in fit_fields(GpuPanes(History()).line_extras(g), width))


# -- the summary line -----------------------------------------------------------------------------


def test_sm_and_tc_sit_beside_util() -> None:
    line = summary(gpu(), 500)
    assert re.search(r"^UTIL  95%  SM 88% TC 61%  MEM ", line), line
    assert extras(gpu(), 500).startswith(" SM 88% TC 61% ")


def test_a_gpu_without_gpm_shows_none_of_it() -> None:
    old = gpu(gpm=None)
    for line in (summary(old, 500), extras(old, 500)):
        assert "TC" not in line and "n/a" not in line and "starved" not in line
        assert not re.search(r"SM +\d+%", line), line
    # One metric n/a: that one is left out, the other stays (never shown as 0).
    half = gpu(gpm=gpm(tensor=None))
    assert "SM 88%" in summary(half, 500) and "TC" not in summary(half, 500)


def test_the_drop_order_keeps_sm_longer_than_tc_and_power_and_the_temperature_longer_still() -> None:
    g = gpu()
    gone: list[str] = []
    for width in range(cells.width(summary(g, 500)), 20, -1):
        line = summary(g, width)
        for name, pattern in (("power", r"\d+W"), ("TC", r"TC \d+%"), ("SM", r"SM +\d+%"), ("temp", "°C")):
            if name not in gone and not re.search(pattern, line):
                gone.append(name)
    assert gone == ["power", "TC", "SM", "temp"]


STARVED = dict(util_gpu=98, gpm=gpm(sm=6.0, tensor=0.0))


def test_busy_but_starved_is_called_out_and_outlives_everything_but_utilization_and_memory() -> None:
    g = gpu(**STARVED)
    assert summary(g, 500).endswith("⚠ busy but starved: SM 6%")
    for width in range(cells.width(summary(g, 500)), 25, -1):
        line = summary(g, width)
        assert "UTIL  98%" in line and "MEM" in line
        if width >= 50:  # a two-column pane's summary (at 120 columns, 60 cells) keeps the number
            assert "starved SM 6%" in line or "busy but starved: SM 6%" in line, (width, line)
        assert "⚠" in line, (width, line)
    # A one-line GPU at 80 columns has 18 cells for it all: the callout with its number.
    assert extras(g, 18) == " ⚠ starved SM 6% …"
    # Not starved: the SMs have work (a dip, or a light job), or NVML does not call it busy.
    assert "starved" not in summary(gpu(util_gpu=98, gpm=gpm(sm=45.0)), 500)
    assert "starved" not in summary(gpu(util_gpu=30, gpm=gpm(sm=6.0)), 500)
    assert "starved" not in summary(gpu(util_gpu=None, gpm=gpm(sm=6.0)), 500)  # a MIG GPU: no util


def test_the_callout_and_a_starved_sm_number_wear_the_warning_colour() -> None:
    panes = GpuPanes(History())
    segments = fit_fields(panes.fields(gpu(**STARVED)), 500)
    warning = panes.palette.warning
    assert [s for t, s in segments if "starved" in t] == [warning]
    (sm_style,) = [s for t, s in segments if t.strip() == "6%"]
    assert sm_style == warning


# -- the everyday screen -----------------------------------------------------------------------------


async def drawn(size: tuple[int, int], kind: str | None = None) -> tuple[GpuTuiApp, list[str]]:
    app = everyday.app()
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        if kind is not None:
            app.panes.set_layout(kind)
            await pilot.pause()
        return app, [gpu_summary(app, g) for g in range(everyday.GPUS)]


@pytest.mark.parametrize(("size", "kind"), CASES, ids=[f"{w}x{h}-{k}" for (w, h), k in CASES])
async def test_the_starved_rank_is_called_out_at_every_size(size: tuple[int, int], kind: str) -> None:
    app, lines = await drawn(size, kind)
    assert app.snapshot is not None
    starved = app.snapshot.gpus[everyday.STARVED_GPU]
    assert starved.gpm is not None and starved.gpm.sm_active is not None and starved.util_gpu is not None
    assert starved.util_gpu >= 90 and starved.gpm.sm_active <= 10  # the scene: NVML busy, SMs empty
    line = lines[everyday.STARVED_GPU]
    assert re.search(r"⚠ (busy but )?starved", line), (size, kind, line)
    assert f"SM {starved.gpm.sm_active:.0f}%" in line, (size, kind, line)  # the number it explains
    assert sum("starved" in ln for ln in lines) == 1  # healthy ranks are not
    assert re.search(r"⚠ (HW )?thermal", lines[everyday.HOT_GPU])  # and the thermal reason still stands


async def test_at_120x40_every_busy_rank_shows_its_sm_and_tc() -> None:
    app, lines = await drawn((120, 40))
    assert app.snapshot is not None and app.panes.gpu_layout.kind == "columns"
    shown = 0
    for g in app.snapshot.gpus:
        if g.index in (everyday.STARVED_GPU, everyday.HOT_GPU):
            continue
        assert g.gpm is not None and g.gpm.sm_active is not None and g.gpm.tensor is not None
        want = f"UTIL {g.util_gpu:>3}%  SM{g.gpm.sm_active:>3.0f}% TC{g.gpm.tensor:>3.0f}%"
        assert want in lines[g.index], lines[g.index]
        shown += 1
    assert shown == everyday.GPUS - 2


async def test_the_pane_sparkline_is_sm_activity_s_and_says_so() -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        rows = ["".join(ch for ch, _ in line) for line in app.panes._lines]
        lay = app.panes.gpu_layout
        labelled = [
            r for r in rows if r.startswith(SM_LABEL) or r[lay.column_widths[0] :].startswith(SM_LABEL)
        ]
        assert len(labelled) == everyday.GPUS // 2 and not any("    util" in r for r in rows)
        # The starved rank: NVML's utilization ~95 %, its SM activity's sparkline at the bottom.
        track = app.panes._tracks[everyday.STARVED_GPU]
        assert track.shows_sm
        half = everyday.STARVED_GPU // (everyday.GPUS // 2)  # its column
        slot = everyday.STARVED_GPU % (everyday.GPUS // 2)
        row = rows[slot * lay.rows_per_gpu + 1]
        start = 0 if half == 0 else lay.column_widths[0]
        spark = row[start + LABEL : start + lay.column_widths[half]].strip()
        assert len(spark) > 40
        # Its loader lags now: the newest cells are at the bottom, where NVML's number is near the top.
        assert set(spark[-2:]) <= {GLYPHS[1], GLYPHS[2]}, spark
        assert all(v is not None and v > 80 for _, v in list(track.util.buckets)[-2:])
        # And earlier stretches of it are dips on the sparkline (a glyph, then low cells).
        assert re.search(f"{DIP_GLYPH}[{GLYPHS[1]}{GLYPHS[2]}]{{3,}}", spark), spark


async def test_the_sparkline_goes_back_to_utilization_when_gpm_stays_away() -> None:
    """One tick without GPM (a reading too soon) is a hole; SIGNAL_GRACE in a row (DCGM took the counters)
    and the pane draws NVML's utilization again, labelled so; GPM back, SM activity again."""
    app = everyday.app(interval=30.0)  # the sampler sleeps: the test's snapshots stay shown
    async with app.run_test(size=(200, 60)) as pilot:
        await first_frame(pilot, app)
        app.paused = True
        app.panes.set_layout("panes")
        await pilot.pause()
        assert app.snapshot is not None
        last = app.snapshot
        per = app.panes.gpu_layout.rows_per_gpu

        def label() -> str:
            return "".join(ch for ch, _ in app.panes._lines[1])[:LABEL]

        assert label() == SM_LABEL
        no_gpm = dataclasses.replace(last, gpus=tuple(dataclasses.replace(g, gpm=None) for g in last.gpus))
        for k in range(SIGNAL_GRACE):
            assert label() == SM_LABEL, k
            await post(pilot, app, dataclasses.replace(no_gpm, time=last.time + 1 + k))
        assert label() == "    util"
        assert "".join(ch for ch, _ in app.panes._lines[per + 1])[:LABEL] == "    util"
        await post(pilot, app, dataclasses.replace(last, time=last.time + 10))
        assert label() == SM_LABEL


# -- history -------------------------------------------------------------------------------------------


def test_history_keeps_sm_activity_none_where_unknown() -> None:
    h = History()
    lost = GpuSample(index=0, lost=True, gpm=gpm())
    for t, g in (
        (1.0, gpu(index=0)),
        (2.0, gpu(index=0, gpm=None)),
        (3.0, gpu(index=0, gpm=gpm(sm=None))),
        (4.0, lost),
    ):
        h.add(snapshot(time=t, gpus=(g,), hostname="h"))
    assert list(h.gpus[0].sm) == [88, None, None, None]
    assert list(h.gpus[0].util) == [95, 95, 95, None]


# -- the GPU detail --------------------------------------------------------------------------------------


def detail_text(g: GpuSample, note: str | None = None) -> str:
    return text_of(render_gpu_detail(g, note), width=200)


def row(text: str, label: str) -> str:
    (found,) = [ln for ln in text.splitlines() if ln.startswith(label + "  ")]
    return found[len(label) :].strip()


def test_the_gpu_detail_lists_every_metric_and_n_a_for_one_that_failed() -> None:
    m = gpm(imma=None, dram=48.0, hmma=60.0, dfma=0.0, fp16=5.0, fp32=12.0, fp64=0.0, integer=9.0)
    m = dataclasses.replace(m, pcie_rx=450e6, pcie_tx=None, nvlink_rx=75e9, nvlink_tx=74e9)
    text = detail_text(gpu(gpm=m))
    for name in (*GPM_RATIOS, *GPM_RATES):
        value = getattr(m, name)
        said = row(text, GPM_LABELS[name][1])
        if value is None:
            assert said.startswith("n/a"), (name, said)
        elif name in GPM_RATES:
            assert re.match(r"\d+\.\d (MiB|GiB)/s", said), (name, said)
        else:
            assert said.startswith(f"{value:.0f}%"), (name, said)
    assert row(text, "GPM").startswith("over 1 s")
    assert row(text, "utilization").startswith("95%")
    assert "verdict" not in text  # a healthy reading


def test_the_gpu_detail_gives_the_verdict() -> None:
    text = detail_text(gpu(**STARVED))
    assert "busy but starved: SM 6% while util 98%" in row(text, "verdict")
    assert "DataLoader" in text  # and what to do


def test_the_gpu_detail_says_why_there_is_no_gpm() -> None:
    text = detail_text(gpu(gpm=None), NOTE + "\x1b[2J")
    assert row(text, "GPM") == f"n/a: {NOTE}?[2J"  # the note's own words, printable
    assert not any(row_ for row_ in text.splitlines() if row_.startswith("SM active"))
    plain = detail_text(gpu(gpm=None))
    assert "Hopper" in row(plain, "GPM") and row(plain, "GPM").startswith("n/a")
    assert row(detail_text(gpu(lost=True), NOTE), "GPM") == "n/a: the GPU is lost"


def test_the_gpu_detail_lists_each_mig_instance() -> None:
    inst = (
        MigInstance(1, 0, "3g.40gb", gpm=gpm(sm=86.0)),
        MigInstance(5, 0, "2g.20gb", gpm=None),
    )
    text = detail_text(gpu(util_gpu=None, mig_mode=True, mig=inst))
    assert re.search(r"MIG 1/0 3g\.40gb +GR 95%  SM 86%  OCC 50%  TENS 61%", text), text
    assert row(text, "MIG 5/0 2g.20gb") == "GPM n/a"


def test_the_process_detail_says_what_its_gpu_is_doing() -> None:

    proc = process_row(2, 4121, used_memory=GIB, sm_util=95, mem_util=40, command="python t.py")
    blank = ProcessDetail(4121, None, None, None, False, None, ())
    text = text_of(render_detail(proc, blank, gpus=(gpu(**STARVED),)), width=200)
    activity = [ln for ln in text.splitlines() if "SM 6% · occupancy" in ln]
    assert activity and activity[0].startswith("GPU activity")
    assert "busy but starved: SM 6% while util 98%" in text
    off = text_of(render_detail(proc, blank, gpus=(gpu(gpm=None),), gpm_note=NOTE), width=200)
    assert f"GPM n/a: {NOTE}" in off
    # An old GPU, no note: its detail is as it was.
    assert "GPU activity" not in text_of(render_detail(proc, blank, gpus=(gpu(gpm=None),)), width=200)


async def test_i_in_the_gpu_chooser_opens_the_gpu_detail() -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        assert app.snapshot is not None
        app.push_screen(GpuChooser(app.snapshot.gpus, gpm_note=None))
        await until(
            pilot,
            lambda: isinstance(app.screen, GpuChooser) and bool(app.screen.query(OptionList)),
            what="the chooser",
        )
        assert "i: GPU detail" in str(app.screen.query_one(OptionList).border_subtitle)  # how it is found
        for _ in range(1 + everyday.STARVED_GPU):  # past "all GPUs"
            await pilot.press("down")
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, GpuDetailScreen), what="the GPU detail")
        screen = app.screen
        assert isinstance(screen, GpuDetailScreen) and screen.gpu.index == everyday.STARVED_GPU
        said = text_of(render_gpu_detail(screen.gpu, screen.gpm_note), width=200)
        assert "busy but starved" in said
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, GpuChooser), what="back to the chooser")
