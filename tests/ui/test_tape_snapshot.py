"""The TUI on an NVML tape: what NvmlSource read from a recorded driver, through the real Sampler, drawn at
120x40. The tape is tests/fixtures/nvml_tape_fake.json (an 8-GPU node recorded from the fake NVML) until a
GPU machine records one (tests/fixtures/gpu/, `make gpu-check`): each tape there gets its own picture."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from textual.pilot import Pilot

import gputui.collect.sources.nvml as nvml_module
from gputui.collect.sampler import Sampler
from gputui.collect.sources.nvml import NvmlSource
from gputui.collect.sources.nvml_tape import Player
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Snapshot
from gputui.ui.app import GpuTuiApp
from tests.collect.test_nvml_tape import FIXTURE, Clock
from tests.ui.conftest import first_frame
from tests.ui.drawn import lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TAPES = [FIXTURE, *sorted((FIXTURES / "gpu").glob("nvml_tape*.json"))]
T0 = 1_790_000_000.0


class _NoAgents:
    def poll(self) -> dict[int, object]:
        return {}


def tape_snapshots(tape: Path, monkeypatch: pytest.MonkeyPatch, ticks: int = 90) -> list[Snapshot]:
    """`ticks` snapshots a second apart, as the sampler makes them from the tape (its last answers repeat),
    with the host's own parts (its name, CPU and memory) fixed."""
    clock = Clock()
    monkeypatch.setattr(nvml_module, "time", clock)
    with Player(tape):
        now = [T0]
        sampler = Sampler(
            NvmlSource(),
            clock=lambda: now[0],
            monotonic=lambda: now[0],
            scan_holders=False,
            agents=_NoAgents(),  # type: ignore[arg-type]
        )
        with sampler:
            out = []
            for _ in range(ticks):
                snap = sampler.tick()
                out.append(replace(snap, hostname="gpu-node-1", host=None))
                now[0] += 1.0
                clock.now += 1.0
    return out


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the header's clock
    time.tzset()


def tape_app(tape: Path, monkeypatch: pytest.MonkeyPatch) -> GpuTuiApp:
    snaps = tape_snapshots(tape, monkeypatch)
    app = GpuTuiApp(ReplaySampler(snaps[60:]), interval=1.0, devices_dir=Path("/nonexistent"))
    for snap in snaps[:60]:
        app.ingest(snap)
    return app


@pytest.mark.parametrize("tape", TAPES, ids=[p.stem for p in TAPES])
def test_a_tape_at_120x40(tape: Path, monkeypatch: pytest.MonkeyPatch, snap_compare) -> None:  # type: ignore[no-untyped-def]
    app = tape_app(tape, monkeypatch)

    async def run_before(pilot: Pilot[int]) -> None:
        await first_frame(pilot, app)
        await pilot.pause(0.05)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


async def test_the_fake_tape_draws_what_its_driver_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each GPU of the recorded node, its memory and its process, as text: the picture's facts."""
    app = tape_app(FIXTURE, monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        text = "\n".join(lines(app.panes))
        for i in range(8):
            assert f"{i} H100" in text
        assert app.snapshot is not None
        assert [g.mem_used for g in app.snapshot.gpus] == [71 * 2**30 + i * 2**20 for i in range(8)]
        assert len([p for p in app.snapshot.processes if p.kinds == "C"]) == 8
