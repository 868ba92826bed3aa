"""The allocator panel's profile verdict on a GPU with GPM: what the counters said of the process's GPU (or
its MIG instance) while the profile recorded: SM activity, occupancy, tensor activity, and the verdicts
("tensor cores idle: fp32 matmuls?", "SM occupancy 12%: small kernels or batch"); nothing on a GPU without
GPM. The Events pane gets them with the profile's verdict."""

from __future__ import annotations

import dataclasses
import functools
import threading

from rich.console import Console

from gputui.analyze.dip_causes import ProfileNote
from gputui.collect.agents.client import AgentHistory
from gputui.collect.agents.profile_reply import ProfileStatus, parse_status
from gputui.model import GpmMetrics, GpuSample, MigInstance, ProcessRow, Snapshot
from gputui.ui.app import SnapshotReady
from gputui.ui.screens.allocator import AllocatorScreen
from tests.builders import process_row, snapshot
from tests.helpers import until
from tests.ui.conftest import first_frame
from tests.ui.test_allocator import PID, REPLY
from tests.ui.test_allocator_profile import DONE, ProfilingPoller, _app, fast_polls  # noqa: F401

GPU_BOUND = {**DONE, "summary": {**DONE["summary"], "verdict": "gpu-bound", "explanation": "kernels fill it"}}  # type: ignore[dict-item]
RECORDING = {"state": "recording", "steps": 20, "steps_done": 7, "elapsed_s": 0.7}


def gpm(sm: float, **kw: float) -> GpmMetrics:
    return GpmMetrics(interval=1.0, sm_active=sm, **kw)


def proc(gpu: int, gpu_instance: int | None = None) -> ProcessRow:
    return process_row(gpu, PID, used_memory=1 << 30, gpu_instance=gpu_instance)


def world(t: float, *gpus: GpuSample, row: ProcessRow | None = None) -> Snapshot:
    """The process (PID, its agent answering) on GPU 1 unless `row` says otherwise."""
    return snapshot(time=t, source="nvml", gpus=gpus, processes=(row or proc(1),), agents={PID: REPLY})


def gpu1(reading: GpmMetrics | None, util: int = 99) -> tuple[GpuSample, GpuSample]:
    """GPU 0 with another job's busy tensor cores (never the process's), GPU 1 the process's."""
    return (
        GpuSample(index=0, util_gpu=100, gpm=gpm(95.0, tensor=80.0, sm_occupancy=30.0)),
        GpuSample(index=1, util_gpu=util, gpm=reading),
    )


def kept(screen: AllocatorScreen, n: int) -> bool:
    return len(screen.profile_gpm) == n


def panel(snap: Snapshot) -> AllocatorScreen:
    return AllocatorScreen(PID, None, snap, AgentHistory())


def text(screen: AllocatorScreen) -> str:
    console = Console(width=200, record=True)
    console.print(screen.render_panel(screen.snapshot.agents.get(PID)))
    return console.export_text()


def gpm_rows(screen: AllocatorScreen) -> str:
    """The GPM rows of the panel, their wrapped lines joined with single spaces ("" when there are none)."""
    lines = text(screen).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("GPM")), None)
    if start is None:
        return ""
    out = [lines[start]]
    for line in lines[start + 1 :]:
        if line.strip().startswith("over "):  # the verdict's window: the row after GPM's
            break
        out.append(line)
    return " ".join(" ".join(out).split())


def test_the_readings_while_profiled_make_the_verdict_not_the_ones_around_it() -> None:
    before = world(0.0, *gpu1(gpm(90.0, tensor=60.0, sm_occupancy=35.0)))
    screen = panel(before)
    screen.watch_gpm(before)  # no profile yet: not kept
    screen.profile = parse_status(RECORDING)
    during = [
        world(1.0, *gpu1(gpm(80.0, tensor=0.0, sm_occupancy=10.0, dram=20.0))),
        world(2.0, *gpu1(gpm(90.0, tensor=0.0, sm_occupancy=14.0, dram=30.0))),
    ]
    for s in during:
        screen.snapshot = s
        screen.watch_gpm(s)
        screen.watch_gpm(s)  # the panel redrawn on the same snapshot: counted once
    screen.profile = parse_status(GPU_BOUND)
    after = world(3.0, *gpu1(gpm(95.0, tensor=70.0, sm_occupancy=30.0)))
    screen.snapshot = after
    screen.watch_gpm(after)  # done: no longer kept
    assert len(screen.profile_gpm) == 2
    assert gpm_rows(screen) == " ".join(
        [
            "GPM SM 85% · occupancy 12% · tensor 0% · DRAM 25% (2 readings while profiled)",
            "tensor cores idle: fp32 matmuls? (SM 85% active, tensor 0%) — let matmuls use the tensor cores: "
            "TF32 (torch.set_float32_matmul_precision('high')) or bf16 autocast (torch.autocast('cuda', "
            "dtype=torch.bfloat16)); work that is not matmuls cannot use them",
            "SM occupancy 12%: small kernels or batch (SM 85% active) — a larger batch, or fewer, "
            "bigger kernels (torch.compile fuses small ops)",
        ]
    )
    assert "gpu-bound: kernels fill it" in text(screen)


def test_a_profile_shorter_than_a_tick_is_judged_on_the_latest_reading() -> None:
    screen = panel(world(0.0, *gpu1(gpm(7.0, tensor=0.0, sm_occupancy=2.0), util=98)))
    screen.profile = parse_status(GPU_BOUND)
    assert gpm_rows(screen) == " ".join(
        [
            "GPM SM 7% · occupancy 2% · tensor 0% (now)",
            "busy but starved: SM 7% while util 98% — the GPU waits on the host (data loading, kernel "
            "launches) or on another rank: more DataLoader workers and pin_memory=True for data; "
            "CUDA graphs or torch.compile for a launch-bound loop",
        ]
    )


def test_a_healthy_reading_is_its_numbers_alone() -> None:
    screen = panel(world(0.0, *gpu1(gpm(88.0, tensor=61.0, sm_occupancy=35.0, dram=40.0))))
    screen.profile = parse_status(GPU_BOUND)
    assert gpm_rows(screen) == "GPM SM 88% · occupancy 35% · tensor 61% · DRAM 40% (now)"


def test_no_gpm_on_the_process_gpu_no_gpm_row() -> None:
    """Before Hopper, or DCGM holding the counters: absent, never 0 % (another GPU's reading is not its)."""
    screen = panel(world(0.0, *gpu1(None)))
    screen.profile = parse_status(GPU_BOUND)
    assert gpm_rows(screen) == "" and "GPM" not in text(screen)
    assert "gpu-bound: kernels fill it" in text(screen)


def test_a_process_in_a_mig_instance_gets_its_instances_reading() -> None:
    instances = (
        MigInstance(1, 0, "3g.40gb", util=97, gpm=gpm(5.0, tensor=0.0)),
        MigInstance(2, 0, "3g.40gb", util=99, gpm=gpm(90.0, tensor=60.0)),
    )
    mig_gpu = GpuSample(index=1, mig=instances, gpm=gpm(47.0, tensor=30.0))
    screen = panel(world(0.0, mig_gpu, row=proc(1, gpu_instance=1)))
    screen.profile = parse_status(GPU_BOUND)
    assert gpm_rows(screen).startswith("GPM SM 5% · tensor 0% (now) busy but starved: SM 5% while util 97%")
    # An instance without a reading of its own: none, not the whole GPU's.
    bare = GpuSample(index=1, mig=(MigInstance(1, 0, "3g.40gb"),), gpm=gpm(47.0))
    screen = panel(world(0.0, bare, row=proc(1, gpu_instance=1)))
    screen.profile = parse_status(GPU_BOUND)
    assert gpm_rows(screen) == ""


def test_the_profile_note_carries_the_gpm_verdict() -> None:
    notes: list[ProfileNote] = []
    screen = AllocatorScreen(
        PID, None, world(0.0, *gpu1(gpm(80.0, tensor=0.0))), AgentHistory(), notes.append
    )
    status = parse_status(GPU_BOUND)
    screen._note_profile(status)
    (note,) = notes
    assert (note.gpu, note.verdict) == (1, "gpu-bound")
    assert note.gpm == "tensor cores idle: fp32 matmuls? (SM 80% active, tensor 0%)"
    notes.clear()
    AllocatorScreen(PID, None, world(0.0, *gpu1(None)), AgentHistory(), notes.append)._note_profile(status)
    assert notes[0].gpm == ""


async def test_p_profiles_with_the_readings_of_its_recording() -> None:
    """Through the app: the snapshot on screen when the recording began is not the profile's; the two that
    came while it recorded are, and the app keeps the verdict with them for the Events pane."""
    sent = threading.Event()
    poller = ProfilingPoller(
        [RECORDING, GPU_BOUND], hold=lambda status: status is RECORDING and not sent.is_set()
    )
    app = _app(poller)
    async with app.run_test(size=(120, 50)) as pilot:
        await first_frame(pilot, app)
        assert app.snapshot is not None
        gpu = next(r.gpu for r in app.snapshot.processes if r.pid == PID and r.gpu is not None)

        def with_gpm(t: float, reading: GpmMetrics) -> Snapshot:
            snap = app.snapshot
            assert snap is not None
            gpus = tuple(
                dataclasses.replace(g, util_gpu=99, gpm=reading) if g.index == gpu else g for g in snap.gpus
            )
            return dataclasses.replace(snap, time=snap.time + t, gpus=gpus)

        app.post_message(SnapshotReady(with_gpm(1, gpm(92.0, tensor=65.0))))  # healthy, before the profile
        await pilot.pause()
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AllocatorScreen))
        screen = app.screen
        assert isinstance(screen, AllocatorScreen)
        await pilot.press("P", "P")
        await until(pilot, lambda: screen.profile is not None and screen.profile.state == "recording")
        for k, sm in enumerate((75.0, 85.0)):
            app.post_message(SnapshotReady(with_gpm(2 + k, gpm(sm, tensor=0.0))))
            await until(pilot, functools.partial(kept, screen, k + 1))
        sent.set()
        await until(
            pilot, lambda: isinstance(screen.profile, ProfileStatus) and screen.profile.state == "done"
        )
        assert gpm_rows(screen).startswith(
            "GPM SM 80% · tensor 0% (2 readings while profiled) tensor cores idle"
        )
        (note,) = app.profiles
        assert note.verdict == "gpu-bound"
        assert note.gpm == "tensor cores idle: fp32 matmuls? (SM 80% active, tensor 0%)"
