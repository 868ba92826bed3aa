"""Dips in the TUI: markers on the utilization sparklines, the Events pane (e), zoom ([ ]), and replay with
seeking (, . < >), on the fixed world (tests/ui/world.py), whose six minutes hold the demo's data-loader
stalls and evaluation dips."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterator

import pytest
from rich.style import Style
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Static

from gputui.analyze.dips import DipDetector
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import AgentReport, Snapshot, TrainingProgress
from gputui.ui.app import ZOOMS, GpuTuiApp
from gputui.ui.screens.events import EventsScreen
from gputui.ui.widgets.canvas import Cell
from gputui.ui.widgets.dip_groups import DipGroup, compact_gpus
from gputui.ui.widgets.layout import LINE_SCALE, LINE_TITLE
from gputui.ui.widgets.spark import DIP_GLYPH, BucketSeries, glyph, view_start
from gputui.units import NA
from tests.helpers import static_text
from tests.ui import world
from tests.ui.conftest import first_frame, make_app

SIZE = (120, 40)
LABEL = 8  # "    util" (or "  SM act": GPM's SM activity) before the sparkline cells
HIGH = set("▅▆▇█")  # a bucket whose mean is over 50 %


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")  # the header's clock and the Events pane's times
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# -- reading what is drawn ------------------------------------------------------------------------


def text(widget: Widget) -> list[str]:
    return ["".join(ch for ch, _ in line).rstrip() for line in widget._lines]  # type: ignore[attr-defined]


def header(app: GpuTuiApp) -> str:
    return text(app.header)[0]


def status(app: GpuTuiApp) -> str:
    return text(app.status)[0].strip()


def is_dip(style: Style | None, app: GpuTuiApp) -> bool:
    """Drawn in the dip colour (a foreground: never a background, which hid the glyph on it)."""
    dip = app.panes.palette.dip
    return style is not None and style.bgcolor is None and style.color == dip.color


def title_line(app: GpuTuiApp, gpu: int) -> list[Cell]:
    """One GPU's summary line: panes in one column, each a summary line then its sparklines."""
    lay = app.panes.gpu_layout
    assert (lay.kind, lay.columns) == ("panes", 1), lay
    return app.panes._lines[gpu * lay.rows_per_gpu]


def busy_series(app: GpuTuiApp, gpu: int) -> BucketSeries:
    """The series a GPU's busy sparkline draws: SM activity's where GPM has it (the demo's H100s), else
    NVML's utilization; the dips are measured on the same one."""
    track = app.panes._tracks[gpu]
    return track.sm if track.shows_sm else track.util


def spark(app: GpuTuiApp, gpu: int, which: str) -> list[Cell]:
    """The cells of the top row of one GPU's util (SM activity's, labelled so, where GPM has it) or mem
    sparkline (the row with the label and the dip glyphs)."""
    lay = app.panes.gpu_layout
    title_line(app, gpu)  # checks the layout
    row = {"util": 1, "mem": 1 + lay.spark_rows}[which]
    line = app.panes._lines[gpu * lay.rows_per_gpu + row]
    label = "SM act" if which == "util" and app.panes._tracks[gpu].shows_sm else which
    assert "".join(ch for ch, _ in line[:LABEL]).strip() == label
    return line[LABEL:]


def marked_cells(app: GpuTuiApp, gpu: int, which: str = "util") -> list[int]:
    """The cells of the drawn buckets a dip touches, each checked to be drawn in the dip colour (the dip
    colour is also low utilization's: which cells are marked comes from the dips, not the colour). A
    memory sparkline has no dips: its cells with a dip glyph."""
    cells = spark(app, gpu, which)
    if which == "mem":
        return [x for x, (ch, _) in enumerate(cells) if ch == DIP_GLYPH]
    series = busy_series(app, gpu)
    start = view_start(series.latest, len(cells))
    drawn = {n for n, _ in series.buckets}
    touched = app.panes.marked_buckets(gpu)
    marks = [x for x in range(len(cells)) if start + x in touched and start + x in drawn]
    assert all(is_dip(cells[x][1], app) for x in marks), [cells[x] for x in marks]
    return marks


def bucket_means(app: GpuTuiApp, gpu: int) -> dict[int, float]:
    """Each bucket's mean utilization (SM activity, where the sparkline draws it), straight from the
    history: what a util cell must show."""
    b = app.panes._bucket_s
    h = app.history.gpus[gpu]
    sums: dict[int, list[int]] = {}
    for t, u in zip(h.times, h.sm if app.panes._tracks[gpu].shows_sm else h.util, strict=True):
        if u is not None:
            sums.setdefault(int(t // b), []).append(u)
    return {n: sum(v) / len(v) for n, v in sums.items()}


def events_text(app: GpuTuiApp) -> str:
    assert isinstance(app.screen, EventsScreen)
    return static_text(app.screen.query_one("#events", Static))


async def press(pilot: Pilot[int], *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await pilot.pause()


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def recent_dips(app: GpuTuiApp) -> list:  # type: ignore[type-arg]
    assert app.snapshot is not None
    return [*app.dips.dips, *app.dips.ongoing(app.snapshot.time)]


# -- markers --------------------------------------------------------------------------------------


async def test_util_sparklines_carry_dip_markers_and_mem_sparklines_never() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert {d.kind for d in app.dips.dips} == {"stall", "long"}
        assert {d.gpu for d in app.dips.dips} == {0, 1, 2, 3}
        for g in range(4):
            marks = marked_cells(app, g)
            assert len(marks) >= 5, (g, marks)
            assert marked_cells(app, g, "mem") == []
            assert DIP_GLYPH not in "".join(ch for ch, _ in title_line(app, g))
            # Every cell shows its bucket's mean level, except each dip's first cell, which holds the dip
            # glyph (seen without colour too): a GPU busy but for its stalls reads busy.
            cells = spark(app, g, "util")
            start = view_start(busy_series(app, g).latest, len(cells))
            means = bucket_means(app, g)
            # (the leftmost cell may be a dip that started off screen: no first cell to check there)
            glyphs = [x for x in marks if x > 0 and cells[x][0] == DIP_GLYPH]
            assert glyphs == [x for x in marks if x > 0 and x - 1 not in marks], "".join(c for c, _ in cells)
            for x, (ch, _) in enumerate(cells):
                if ch != DIP_GLYPH and start + x in means:
                    assert ch == glyph(means[start + x]), (g, x, ch, means[start + x])
            unmarked = [ch for x, (ch, _) in enumerate(cells) if ch.strip() and x not in marks]
            assert sum(ch in HIGH for ch in unmarked) >= 0.8 * len(unmarked)  # busy


async def test_markers_are_the_buckets_the_dips_touch() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.dips  # every GPU's recent dips were handed to the panes
        for g in range(4):
            assert sorted(panes.dips[g]) == sorted((d.start, d.last) for d in recent_dips(app) if d.gpu == g)
            marks = set(marked_cells(app, g))  # (each checked to be in the dip colour)
            busy = app.panes.palette.util_style(True)
            cells = spark(app, g, "util")
            start = view_start(busy_series(app, g).latest, len(cells))
            values = dict(busy_series(app, g).buckets)
            for x, (_, style) in enumerate(cells):  # the others keep their level's own colour
                if x not in marks and start + x in values:
                    assert style == busy(values[start + x]), (g, x)


async def test_compact_panes_mark_dips_on_their_inline_sparkline() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.compact
        lay = panes.gpu_layout
        left = LINE_TITLE + lay.name_width + LINE_SCALE  # where the util sparkline starts
        for g, line in enumerate(panes._lines):
            util = line[left : left + lay.spark_width]
            track = panes._tracks[g]
            start = view_start(track.util.latest, lay.spark_width)
            drawn = {n for n, _ in track.util.buckets}
            marked = [util[x] for x in range(len(util)) if start + x in panes.marked_buckets(g) & drawn]
            assert marked, (g, "".join(ch for ch, _ in line))
            assert all(ch in "▁▂▃▄▅▆▇█" + DIP_GLYPH and is_dip(style, app) for ch, style in marked)
            outside = line[:left] + line[left + lay.spark_width :]
            assert DIP_GLYPH not in "".join(ch for ch, _ in outside)  # only on the util sparkline


async def test_only_buckets_holding_a_dip_sample_are_marked() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        b = app.panes._bucket_s
        for g in range(4):
            cells = spark(app, g, "util")
            start = view_start(busy_series(app, g).latest, len(cells))
            h = app.history.gpus[g]
            spans = app.panes.dips[g]
            in_dip = {int(t // b) for t in h.times if any(s <= t <= last for s, last in spans)}
            shown = {start + x for x, (ch, _) in enumerate(cells) if ch.strip()}
            assert {start + x for x in marked_cells(app, g)} == in_dip & shown, g
            assert [x for x in marked_cells(app, g) if cells[x][0] == DIP_GLYPH], g


# -- the Events pane ------------------------------------------------------------------------------

ROW = re.compile(
    r"^\s*(\d\d:\d\d:\d\d)\s+([\d,\N{EN DASH}]+)\s+(?:(\S.*?)\s{2,})?(\d+) s\s+"
    r"-(\d+) pts \((?:SM )?(\d+)→(\d+)%\)\s+"
    r"(stall|long)( \(now\))?(?:\s+(.*))?$"
)


def dip_rows(body: str) -> list[tuple[str, str, int, str, bool, str]]:
    """(time, GPUs, seconds, kind, ongoing, why) of each row of the dips table (GPUs as shown: "2", or
    "0,1,3" for a job's dips that happened together); a "why" wrapped onto the next lines is joined."""
    rows: list[tuple[str, str, int, str, bool, str]] = []
    for line in body.splitlines():
        m = ROW.match(line)
        if m:
            rows.append((m[1], m[2], int(m[4]), m[8], bool(m[9]), (m[10] or "").strip()))
        elif rows and line.startswith(" " * 40) and line.strip():
            rows[-1] = (*rows[-1][:5], f"{rows[-1][5]} {line.strip()}")
    return rows


def shown_rows(app: GpuTuiApp) -> list[DipGroup]:
    assert isinstance(app.screen, EventsScreen)
    return app.screen.groups()


def summary_rows(body: str) -> dict[int, list[str]]:
    lines = body.splitlines()
    top = next(i for i, line in enumerate(lines) if line.split()[:2] == ["GPU", "mean"])
    out = {}
    for line in lines[top + 1 :]:
        if not line.strip():
            break
        cells = line.split()
        out[int(cells[0])] = cells[1:]
    return out


async def test_e_opens_the_events_pane_with_every_dip_and_a_summary_per_gpu() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "e")
        assert isinstance(app.screen, EventsScreen)
        body = events_text(app)
        assert body.startswith("Utilization dips")
        assert "last 5 min" in body
        dips = recent_dips(app)
        assert len(dips) >= 40
        # Every dip in one row; the world's four ranks share torchrun, so dips they have together share one.
        groups = shown_rows(app)
        assert sorted((d for g in groups for d in g.dips), key=repr) == sorted(dips, key=repr)
        assert any(len(g.gpus) > 1 for g in groups) and "torchrun pid 4000" in body
        want = [
            (clock(g.start), compact_gpus(g.gpus), round(g.duration), g.kind, g.ongoing, "") for g in groups
        ]
        assert dip_rows(body) == want
        assert {r[3] for r in dip_rows(body)} == {"stall", "long"}
        # Newest first.
        ends = [d.end for d in reversed(app.dips.dips)]
        assert ends == sorted(ends, reverse=True)
        newest = [max(d.end for d in g.dips) for g in groups if not g.ongoing]
        assert newest == sorted(newest, reverse=True)
        # Per GPU over the visible window: mean utilization, dips, dips per minute, mean dip length.
        assert app.snapshot is not None
        now = app.snapshot.time
        summary = summary_rows(body)
        assert sorted(summary) == [0, 1, 2, 3]
        for g, cells in summary.items():
            s = app.dips.summary(g, now - 300, now, 0.0)
            assert cells[1:] == [str(s["dips"]), f"{s['dips_per_min']:.2f}", f"{s['mean_dip_s']:.1f}", "s"]
            mine = [d for d in dips if d.gpu == g and d.end >= now - 300]
            assert s["dips"] == len(mine) > 0
            utils = [
                u
                for t, u in zip(app.history.gpus[g].times, app.history.gpus[g].util, strict=True)
                if t >= now - 300 and u is not None
            ]
            assert cells[0] == f"{sum(utils) / len(utils):.0f}%"
            assert 50 <= int(cells[0][:-1]) <= 90  # busy, with dips
        await press(pilot, "e")
        assert not isinstance(app.screen, EventsScreen)


async def test_events_pane_says_why_when_an_agent_reports_its_data_wait() -> None:
    replay, past = world.sampler(gpus=2, weird=False)
    agents = {
        pid: AgentReport(pid, progress=TrainingProgress(data_wait_share=share))
        for pid, share in ((world.trainer_pid(0), 0.71), (world.trainer_pid(1), 0.12))
    }
    app = GpuTuiApp(replay, interval=3600.0, readonly=True)
    for snap in past:
        app.ingest(dataclasses.replace(snap, agents=agents))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "e")
        rows = dip_rows(events_text(app))
        assert rows and {r[1] for r in rows} == {"0", "1", "0,1"}  # both ranks of one torchrun job
        for _, gpus, _, _, ongoing, why in rows:
            if not ongoing:
                assert (
                    why
                    == {
                        "0": "input-bound: 71% of step time waiting for data",
                        "1": "not input-bound: 12% of step time waiting for data",
                        "0,1": "input-bound: 71% of step time waiting for data on GPU 0 (12% on GPU 1)",
                    }[gpus]
                )


async def test_events_pane_without_dips() -> None:
    snaps = world.snapshots(gpus=2, seconds=8, weird=False)  # too short for a verdict
    app = GpuTuiApp(ReplaySampler(snaps[-1:]), interval=3600.0, readonly=True)
    for snap in snaps[:-1]:
        app.ingest(snap)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "e")
        body = events_text(app)
        assert "no dip so far" in body and dip_rows(body) == []
        assert [cells[1:4] for cells in summary_rows(body).values()] == [["0", "0.00", NA]] * 2
        await press(pilot, "escape")
        assert not isinstance(app.screen, EventsScreen)


# -- zoom -----------------------------------------------------------------------------------------


async def test_zoom_out_and_back_in() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        panes = app.panes
        assert panes.window == ZOOMS[0] == 300.0
        bucket = panes._bucket_s
        cells = len([ch for ch, _ in spark(app, 0, "util") if ch.strip()])
        await press(pilot, "right_square_bracket")
        assert panes.window == 900.0
        assert status(app) == "sparklines: at least the last 15 min"
        assert panes._bucket_s > bucket
        assert len([ch for ch, _ in spark(app, 0, "util") if ch.strip()]) < cells  # six minutes: fewer cells
        assert marked_cells(app, 0) and marked_cells(app, 0, "mem") == []
        await press(pilot, "e")
        assert "last 15 min" in events_text(app)
        await press(pilot, "escape")
        await press(pilot, "right_square_bracket", "right_square_bracket")
        assert panes.window == 3600.0 and status(app) == "sparklines: at least the last 60 min"
        await press(pilot, "right_square_bracket")
        assert panes.window == 3600.0
        await press(pilot, "left_square_bracket", "left_square_bracket")
        assert panes.window == 900.0
        await press(pilot, "left_square_bracket")
        assert panes.window == 300.0 and status(app) == "sparklines: at least the last 5 min"
        assert panes._bucket_s == bucket
        assert len([ch for ch, _ in spark(app, 0, "util") if ch.strip()]) == cells
        await press(pilot, "left_square_bracket")
        assert panes.window == 300.0


async def test_history_covers_the_last_hour_at_one_second() -> None:
    snaps = world.snapshots(gpus=1, seconds=1800, weird=False)
    app = GpuTuiApp(ReplaySampler(snaps[-1:]), interval=1.0, readonly=True)
    for snap in snaps[:-1]:
        app.ingest(snap)
    assert len(app.history.gpus[0]) == 1800


# -- replay ---------------------------------------------------------------------------------------


def replay_app(snaps: list[Snapshot] | None = None) -> tuple[GpuTuiApp, list[Snapshot]]:
    """The app on a recording, as `gputui replay` builds it; interval=3600: one tick, then only seeks."""
    snaps = snaps or world.snapshots()
    return GpuTuiApp(ReplaySampler(snaps), replay=True, readonly=True, interval=3600), snaps


async def start_replay(pilot: Pilot[int], app: GpuTuiApp) -> None:
    """The first frame; then sparklines and header as for a recording made every second (what `gputui
    replay` gives the app: the recording's spacing), while the sampler thread sleeps its hour."""
    await first_frame(pilot, app)
    app.panes.interval = app.header.interval = 1.0
    app.panes.rebuild()
    app.header.redraw()
    await pilot.pause()


def assert_at(app: GpuTuiApp, snaps: list[Snapshot], n: int) -> None:
    total = len(snaps)
    badge = f"REPLAY {n}/{total}" + (" (end)" if n == total else "")
    assert f" {badge} " in header(app), header(app)
    assert clock(snaps[n - 1].time) in header(app)
    assert app.snapshot is snaps[n - 1]
    assert isinstance(app.sampler, ReplaySampler) and app.sampler.position == n
    assert {g: len(h) for g, h in app.history.gpus.items()} == dict.fromkeys(range(4), n)
    assert list(app.history.gpus[0].times) == [s.time for s in snaps[:n]]
    fresh = DipDetector()
    for s in snaps[:n]:
        fresh.add(s)
    assert list(app.dips.dips) == list(fresh.dips)


async def test_replay_seeks_by_10_and_60_and_stops_at_both_ends() -> None:
    app, snaps = replay_app()
    n = len(snaps)
    async with app.run_test(size=SIZE) as pilot:
        await start_replay(pilot, app)
        assert_at(app, snaps, 1)
        first_clock = clock(snaps[0].time)
        await press(pilot, "full_stop")
        assert_at(app, snaps, 11)
        assert first_clock not in header(app)  # the clock moved on ten seconds
        await press(pilot, "comma")
        assert_at(app, snaps, 1)
        await press(pilot, "comma")
        assert_at(app, snaps, 1)
        await press(pilot, "greater_than_sign")
        assert_at(app, snaps, 61)
        await press(pilot, "full_stop", "greater_than_sign")
        assert_at(app, snaps, 131)
        await press(pilot, "less_than_sign")
        assert_at(app, snaps, 71)
        for _ in range(6):
            await press(pilot, "greater_than_sign")
        assert_at(app, snaps, n)
        assert app.dips.dips
        await press(pilot, "full_stop")
        assert_at(app, snaps, n)
        await press(pilot, "less_than_sign")
        assert_at(app, snaps, n - 60)


async def test_replay_seek_back_forgets_the_later_dips() -> None:
    app, snaps = replay_app()
    async with app.run_test(size=SIZE) as pilot:
        await start_replay(pilot, app)
        await press(pilot, *["greater_than_sign"] * 4)
        later = len(app.dips.dips)
        assert later >= 20 and any(marked_cells(app, g) for g in range(4))
        await press(pilot, "less_than_sign", "less_than_sign", "less_than_sign")
        assert_at(app, snaps, 61)
        assert 0 < len(app.dips.dips) < later
        assert all(d.end <= snaps[60].time for d in app.dips.dips)
        assert all(e <= snaps[60].time for spans in app.panes.dips.values() for _, e in spans)
        b = app.panes._bucket_s
        width = len(spark(app, 0, "util"))
        assert b == max(1.0, math.ceil(300 / width))  # 1 s samples, five minutes on the sparkline's cells
        for g in range(4):  # the sparklines were drawn again from the first 61 samples
            filled = [ch for ch, _ in spark(app, g, "util") if ch.strip()]
            assert len(filled) == len({int(s.time // b) for s in snaps[:61]})
            assert marked_cells(app, g) or not any(d.gpu == g for d in recent_dips(app))
        await press(pilot, "e")
        rows = dip_rows(events_text(app))
        assert len(rows) == len(shown_rows(app))
        assert sum(len(g.dips) for g in shown_rows(app)) == len(recent_dips(app))


async def test_replay_pause_and_seek_while_paused() -> None:
    app, snaps = replay_app()
    async with app.run_test(size=SIZE) as pilot:
        await start_replay(pilot, app)
        await press(pilot, "p")
        assert app.paused and "PAUSED" in header(app)
        await press(pilot, "full_stop")
        assert_at(app, snaps, 11)
        assert "PAUSED" in header(app)
        await press(pilot, "p")
        assert not app.paused and "PAUSED" not in header(app)


async def test_replay_plays_on_at_its_interval() -> None:
    snaps = world.snapshots(seconds=30)
    app = GpuTuiApp(ReplaySampler(snaps), replay=True, readonly=True, interval=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app, frames=len(snaps) + 2)
        assert f"REPLAY {len(snaps)}/{len(snaps)} (end)" in header(app)
        assert app.snapshot is snaps[-1]
        assert app.frames >= len(snaps) + 2  # the last snapshot repeats: the app stays up


async def test_seek_keys_do_nothing_outside_replay() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        replay = app.sampler
        assert isinstance(replay, ReplaySampler)  # the world's, read without --replay
        before = (header(app), app.snapshot, len(app.history.gpus[0]), replay.position)
        await press(pilot, "full_stop", "greater_than_sign", "comma", "less_than_sign")
        assert (header(app), app.snapshot, len(app.history.gpus[0]), replay.position) == before
        assert "REPLAY" not in header(app)


def test_replay_in_the_middle(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app, snaps = replay_app()

    async def run_before(pilot: Pilot[int]) -> None:
        await start_replay(pilot, app)
        await press(pilot, "greater_than_sign", "greater_than_sign", "greater_than_sign")
        assert f"REPLAY 181/{len(snaps)}" in header(app)
        for _ in range(3):
            await pilot.pause(0.05)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
