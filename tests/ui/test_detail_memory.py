"""The detail's GPU memory history: a sparkline of the last ten minutes, scaled from its lowest to its
highest point, and with an agent whether allocated (tensors leak) or only reserved (the allocator's
cache: fragmentation) grows."""

from __future__ import annotations

import math

import pytest

from gputui.analyze.forecast import MemorySeries, Split, forecast
from gputui.model import ProcessDetail, ProcessRow
from gputui.ui.screens.detail import SPARK_CELLS, DetailScreen, render_detail
from gputui.ui.widgets import spark
from gputui.units import fmt_bytes
from tests.builders import process_row
from tests.helpers import screen_text
from tests.ui import world
from tests.ui.conftest import first_frame, make_app
from tests.ui.test_detail_fields import line, text_of
from tests.ui.test_keys import SIZE, _open_detail_with_enter, press

MIB = 1 << 20
GIB = 1 << 30
MODAL_WIDTH = 104  # the detail's inside at 120 columns: 90% of it, less its border and padding
T0 = 1_795_000_000.0
KEY = (4242, T0 - 3600.0)  # a process an hour old: its warm-up long past


def row_of_fixture() -> ProcessRow:
    return process_row(0, KEY[0], used_memory=2 * GIB, create_time=KEY[1])


def blank(pid: int = 4242) -> ProcessDetail:
    return ProcessDetail(pid, None, None, None, False, None, ())


def rising(
    minutes: float = 10.0, start: float = 2 * GIB, per_min: float = 100 * MIB
) -> list[tuple[float, float]]:
    """One point per 5 s, as the sampler keeps them."""
    n = int(minutes * 12) + 1
    return [(T0 + 5.0 * i, start + per_min * i / 12) for i in range(n)]


def spark_of(text: str) -> str:
    """The sparkline: the glyphs of the GPU memory row, up to the labels."""
    return line(text, "GPU memory").split("  ")[0]


def test_a_rising_series_is_a_rising_sparkline_with_its_lowest_and_highest_point() -> None:
    text = text_of(render_detail(row_of_fixture(), blank(), memory=rising()), width=MODAL_WIDTH)
    glyphs = spark_of(text)
    levels = [spark.GLYPHS.index(ch) for ch in glyphs]
    assert 2 <= len(glyphs) <= SPARK_CELLS
    assert levels == sorted(levels) and levels[0] == 1 and levels[-1] == 8  # ▁ … █
    assert line(text, "GPU memory").endswith("min 2.0 GiB, max 3.0 GiB over 10 min")


def test_only_the_last_ten_minutes_are_drawn_and_a_falling_series_falls() -> None:
    # Eleven minutes kept (the trend's envelope needs one more): the first one is not drawn.
    falling = [(t, 6 * GIB - (v - 2 * GIB)) for t, v in rising(minutes=11.0)]
    text = text_of(render_detail(row_of_fixture(), blank(), memory=falling), width=MODAL_WIDTH)
    levels = [spark.GLYPHS.index(ch) for ch in spark_of(text)]
    assert levels == sorted(levels, reverse=True) and levels[0] == 8 and levels[-1] == 1
    # 6.0 GiB falling 100 MiB a minute: after its first minute, 5.9 GiB (6.0 would be the dropped minute's).
    assert line(text, "GPU memory").endswith("min 4.9 GiB, max 5.9 GiB over 10 min")


def test_a_flat_series_says_steady_and_a_gap_shows_as_missing() -> None:
    flat = [(T0 + 5.0 * i, 3 * GIB) for i in range(13)]
    said = line(text_of(render_detail(row_of_fixture(), blank(), memory=flat)), "GPU memory")
    assert said == "▁" * 13 + "  3.0 GiB, steady over 1 min"
    gap = [p for p in rising(minutes=1.0) if not T0 + 20 <= p[0] <= T0 + 40]
    assert spark.MISSING in spark_of(text_of(render_detail(row_of_fixture(), blank(), memory=gap)))


def test_no_sparkline_from_none_or_one_point_nor_from_nonsense() -> None:
    row = row_of_fixture()
    assert "GPU memory" not in text_of(render_detail(row, blank(), memory=[]))
    for points in (
        [(T0, 2.0 * GIB)],
        [(T0, 2.0 * GIB), (T0 + 1.0, 2.1 * GIB)],  # one cell's worth
        [(T0, math.nan), (math.inf, 2.0 * GIB), (T0 + 60, -1.0)],  # nothing a sampler should hand over
    ):
        assert line(text_of(render_detail(row, blank(), memory=points)), "GPU memory") == "collecting …"


def agent_split(allocated_per_min: float, reserved_per_min: float) -> Split | None:
    """The agent's numbers over ten minutes, through the sampler's store."""
    store = MemorySeries()
    for t, base in rising(per_min=0.0):
        i = (t - T0) / 60.0
        store.add_agent(KEY, t, int(base + allocated_per_min * i), int(base + 1 * GIB + reserved_per_min * i))
    return store.split(KEY, T0 + 600.0, KEY[1])


def test_allocated_growing_reads_as_a_leak() -> None:
    split = agent_split(allocated_per_min=60 * MIB, reserved_per_min=60 * MIB)
    assert split is not None and split.verdict == "allocated"
    said = line(
        text_of(render_detail(row_of_fixture(), blank(), split=split), width=200), "allocated vs reserved"
    )
    assert said == "allocated grows 60 MiB/min: tensors leak (kept references)"


def test_only_reserved_growing_reads_as_fragmentation() -> None:
    split = agent_split(allocated_per_min=0.0, reserved_per_min=60 * MIB)
    assert split is not None and split.verdict == "reserved"
    said = line(
        text_of(render_detail(row_of_fixture(), blank(), split=split), width=200), "allocated vs reserved"
    )
    assert said.startswith("only reserved grows 60 MiB/min: the allocator's cache grows (fragmentation)")


def test_an_agent_whose_numbers_hold_still_says_so_and_one_just_started_is_collecting() -> None:
    steady = agent_split(allocated_per_min=0.0, reserved_per_min=0.0)
    assert steady is not None and steady.verdict is None
    text = text_of(render_detail(row_of_fixture(), blank(), split=steady))
    assert line(text, "allocated vs reserved") == "allocated and reserved steady"
    young = forecast([(T0, GIB), (T0 + 5, GIB)], T0 + 5)
    text = text_of(render_detail(row_of_fixture(), blank(), split=Split(young, young)))
    assert line(text, "allocated vs reserved") == "collecting the agent's numbers …"
    assert "allocated vs reserved" not in text_of(render_detail(row_of_fixture(), blank(), split=None))


async def test_enter_shows_the_memory_history_of_that_row_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detail's memory is the app's history of that very (pid, start, GPU): each 5 s stretch's low and
    high, so its min and max are the true ones; the agent's split is asked for that row only."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert app.snapshot is not None
        trainer = next(r for r in app.snapshot.processes if r.pid == world.trainer_pid(0))
        key = (trainer.pid, trainer.create_time)
        leak = agent_split(allocated_per_min=60 * MIB, reserved_per_min=60 * MIB)
        asked: list[tuple[int, float | None]] = []

        def memory_split(pid: int, born: float | None) -> Split | None:
            asked.append((pid, born))
            return leak if (pid, born) == key else None  # only that one runs an agent

        monkeypatch.setattr(app.sampler, "memory_split", memory_split)
        screen = await _open_detail_with_enter(pilot, app, trainer.pid)
        mine = app.history.memory_points(trainer.pid, trainer.create_time, trainer.gpu)
        assert screen.memory == mine and len(mine) > 10 and asked == [key]
        shown = screen_text(app)
        (row,) = [ln for ln in shown.splitlines() if "GPU memory" in ln]
        assert fmt_bytes(max(v for _, v in mine)) in row, row  # (steady here: one value)
        assert "allocated grows 60 MiB/min: tensors leak" in shown
        await press(pilot, "escape")
        assert not isinstance(app.screen, DetailScreen)
        other_row = next(r for r in app.snapshot.processes if r.pid == world.trainer_pid(1))
        other = await _open_detail_with_enter(pilot, app, other_row.pid)
        assert other.memory == app.history.memory_points(other_row.pid, other_row.create_time, other_row.gpu)
        assert other.memory != mine and other.split is None
        assert "allocated vs reserved" not in screen_text(app)
