"""A MIG GPU in the UI: the fixed world with GPU 0 MIG-enabled (the demo's MIG_LAYOUT, its trainer in
instance 1/0). A picture at 120x40, and the instance rows of a pane and of a one-line GPU as text."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gputui.collect.sources.demo import MIG_LAYOUT
from gputui.model import GpuSample, MigInstance
from gputui.ui.app import GpuTuiApp
from gputui.ui.widgets.canvas import Line
from gputui.ui.widgets.gpu_panes import GpuPanes
from gputui.ui.widgets.layout import fit_fields
from gputui.ui.widgets.palette import Palette
from tests.builders import h100
from tests.ui import world
from tests.ui.conftest import first_frame
from tests.ui.drawn import lines

GIB = 1 << 30


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the header's clock
    time.tzset()


def mig_app(gpus: int = 4) -> GpuTuiApp:
    """As tests/ui/conftest.make_app, with GPU 0 MIG-enabled."""
    replay, past = world.sampler(gpus=gpus, unaccounted=True, mig=True)
    app = GpuTuiApp(replay, interval=1.0, devices_dir=Path("/nonexistent"))
    for snap in past:
        app.ingest(snap)
    return app


def test_mig_gpu_at_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app = mig_app()

    async def run_before(pilot: Pilot[int]) -> None:
        await first_frame(pilot, app)
        for _ in range(3):
            await pilot.pause(0.05)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


async def test_a_tall_pane_lists_every_instance_beside_its_sparklines() -> None:
    app = mig_app(gpus=2)  # two GPUs at 120x40: sparklines of two rows or more, a row per instance
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        drawn = lines(app.panes)
        rows = app.panes.gpu_layout.rows_per_gpu
        assert rows >= 5
        gpu0, gpu1 = drawn[:rows], drawn[rows : 2 * rows]
        assert "MIG 3 instances" in gpu0[0] and "UTIL  n/a" in gpu0[0]
        for (gi, ci, profile, _), row in zip(MIG_LAYOUT, gpu0[1:], strict=False):
            text = row[row.index(f"MIG {gi}/{ci}") :]
            assert text.split()[:3] == ["MIG", f"{gi}/{ci}", profile]
            # no driver reports utilization per instance; GPM's SM activity per instance stands in
            assert re.search(r"SM +\d+%$", text.rstrip()), text
            assert len(row) <= 120
        assert not any("MIG" in row for row in gpu1)
        # The trainer's memory is in 1/0; the idle 1g.10gb has only its few MiB.
        assert "mem  0.0/9.8G" in gpu0[3] and "mem  0.0" not in gpu0[1]


async def test_a_short_pane_puts_several_instances_on_a_row() -> None:
    app = mig_app(gpus=4)  # one-row sparklines: two rows for three instances
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        util, mem = lines(app.panes)[1:3]
        assert "1/0 3g.40gb " in util and "5/0 2g.20gb " in util and "13/0 1g.10gb 0/10G" in mem
        assert util.index("1/0 3g.40gb") > 8 + 60  # the sparkline keeps most of the row


def _gpu(n: int) -> GpuSample:
    instances = tuple(
        MigInstance(
            gpu_instance=i, compute_instance=0, profile="1g.10gb", mem_total=10 * GIB, mem_used=i * GIB
        )
        for i in range(1, n + 1)
    )
    return h100(mig_mode=True, mig=instances)


def test_more_instances_than_rows_end_with_a_count() -> None:
    panes = GpuPanes(history=None)  # type: ignore[arg-type]
    rows = panes._mig_rows(_gpu(7), 4, 27)  # a narrow column: one a row
    assert len(rows) == 4
    texts = ["".join(t for t, _ in r) for r in rows]
    assert [t.split()[0] for t in texts[:3]] == ["1/0", "2/0", "3/0"]
    assert texts[3].startswith("+4 more MIG instances")
    assert all(len(t) == 27 for t in texts)
    packed = ["".join(t for t, _ in r) for r in panes._mig_rows(_gpu(7), 2, 43)]  # two a row
    assert len(packed) == 2 and all(len(t) == 43 for t in packed)
    assert [t.split()[0] for t in packed] == ["1/0", "3/0"] and packed[0].split()[3] == "2/0"
    assert packed[1].rstrip().endswith("+4 more")  # 3 shown, the count in the fourth place


def test_a_mig_gpu_without_instances_says_so() -> None:
    panes = GpuPanes(history=None)  # type: ignore[arg-type]
    g = dataclasses.replace(_gpu(0), mig=())
    assert "".join(t for t, _ in panes._mig_rows(g, 2, 27)[0][:1]).strip() == "MIG on: no instances"


def test_a_one_line_mig_gpu_shows_the_count_and_the_busiest() -> None:
    panes = GpuPanes(history=None)  # type: ignore[arg-type]
    panes.palette = Palette.default()
    g = _gpu(3)  # 3/0 has the most memory used; no utilization to go by
    wide = "".join(t for t, _ in fit_fields(panes.line_extras(g), 40))
    assert wide.startswith(" 3 MIG (3/0 1g.10gb 3G)")
    summary = panes.line_extras(g)[0]  # first: kept before fan, PCIe, ENC/DEC
    short = "".join(t for t, _ in fit_fields([summary], 12))
    assert short.startswith(" 3 MIG") and "(" not in short
    busy = dataclasses.replace(g, mig=(dataclasses.replace(g.mig[0], util=90), *g.mig[1:]))
    assert "(1/0 " in "".join(t for t, _ in fit_fields(panes.line_extras(busy), 40))


def test_hostile_profile_text_is_made_printable() -> None:
    panes = GpuPanes(history=None)  # type: ignore[arg-type]
    g = _gpu(1)
    g = dataclasses.replace(g, mig=(dataclasses.replace(g.mig[0], profile="\x1b[2J3g"),))
    (row,) = panes._mig_rows(g, 2, 43)
    line = Line()
    for text, style in row:
        line.add(text, style)
    assert all(ch.isprintable() for ch, _ in line.cells) and len(line.cells) == 43


def test_the_demo_with_mig_splits_gpu_0_and_places_its_trainer() -> None:
    from gputui.collect.sources.demo import DemoSource

    reading = DemoSource(gpus=2, seed=0, mig=True).reading_at(600.0, True, [4101, 4111])
    g0, g1 = reading.gpus
    assert g0.mig_mode and [(m.gpu_instance, m.profile) for m in g0.mig] == [
        (1, "3g.40gb"),
        (5, "2g.20gb"),
        (13, "1g.10gb"),
    ]
    assert g0.util_gpu is None and all(m.util is None for m in g0.mig)  # as NVML on a MIG GPU
    assert all(
        m.mem_used is not None and m.mem_total is not None and m.mem_used <= m.mem_total for m in g0.mig
    )
    trainer = next(p for p in reading.processes if p.pid == 4101)
    assert (trainer.gpu_instance, trainer.compute_instance, trainer.sm_util) == (1, 0, None)
    assert trainer.used_memory is not None and trainer.used_memory <= MIG_LAYOUT[0][3]
    assert (g1.mig_mode, g1.mig) == (False, ()) and g1.util_gpu is not None
    plain = DemoSource(gpus=2, seed=0).reading_at(600.0, True, [4101, 4111])
    assert plain.gpus[0].mig == () and plain.gpus[0].mig_mode is False
    assert all(p.gpu_instance is None for p in plain.processes)
