"""The Events pane answers "why is my GPU idle?" in one line per dip, and lists the processes that were
about to break something, with when, even after they are gone."""

from __future__ import annotations

import time
from dataclasses import replace

from gputui.analyze.dip_causes import ProfileNote
from gputui.analyze.forecast import MIB
from gputui.model import GpmMetrics, GpuSample, HostStats, ProcessRow, Snapshot, XidEvent
from gputui.ui.screens.events import EventsScreen
from tests.builders import snapshot
from tests.ui.conftest import first_frame
from tests.ui.test_dips_ui import events_text, press
from tests.ui.test_events_groups import T0, app_on, row, utc  # noqa: F401  (the fixture: clocks in UTC)

SIZE = (160, 50)
EVIL = "python leak.py\x1b[2J\x1b]0;owned\x07"


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(T0 + t))


def snapshots() -> list[Snapshot]:
    """GPU 0 busy, then down to 5 % from 60 s to 64 s while the host's CPUs are saturated and an Xid
    arrives for it; GPU 1's process leaks from 10 s to 40 s, then is gone (its OOM came)."""
    out = []
    for t in range(91):
        low = 60 <= t < 64
        procs: list[ProcessRow] = [row(0, 5000, 1)]
        if t <= 40:
            leak = replace(row(1, 6000, 1), command=EVIL)
            if t >= 10:
                leak = replace(leak, memory_growth=120 * MIB / 60, full_in=600.0 - 10 * (t - 10))
            procs.append(leak)
        out.append(
            snapshot(
                time=T0 + t,
                gpus=(GpuSample(index=0, util_gpu=5 if low else 95), GpuSample(index=1, util_gpu=95)),
                processes=tuple(procs),
                host=HostStats(cpu_percent=98.0 if low else 40.0),
                xids=(XidEvent(gpu=0, xid=13, time=T0 + t),) if t == 61 else (),
            )
        )
    return out


async def test_a_dips_reason_and_the_alerts_of_a_process_that_is_gone() -> None:
    app = app_on(snapshots())
    app.profiles.append(ProfileNote(pid=5000, gpu=0, start=T0 + 20, end=T0 + 22, verdict="input-bound"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "e")
        assert isinstance(app.screen, EventsScreen)
        body = events_text(app)
        flat = " ".join(body.split())  # the modal wraps the long columns
        assert (
            f"{clock(60)} 0 4 s -90 pts (95→5%) stall GPU 0 Xid 13: graphics engine exception; "
            "host CPUs 98% busy; profile of pid 5000: input-bound"
        ) in flat
        assert (
            f"Before it breaks since until GPU pid command what {clock(10)} {clock(40)} 1 6000 "
            "python leak.py?[2J?]0;owned? growing 120 MiB/min — this GPU is full in ~5 min"
        ) in flat
        assert "\x1b" not in body and "\x07" not in body


async def test_a_dip_measured_on_sm_activity_says_so_with_what_the_counters_saw() -> None:
    """On a GPU with GPM a starved loop keeps NVML's utilization at 98 % while SM activity falls 88 → 6 %:
    the row says it was measured on SM, and why (PCIe copies from the host, the profile's GPM verdict)."""
    snaps = []
    for s in snapshots():
        low = 60 <= s.time - T0 < 64
        gpm = GpmMetrics(interval=1.0, sm_active=6.0 if low else 88.0, pcie_rx=4 * 1024**3 if low else 0.0)
        gpus = (replace(s.gpus[0], util_gpu=98, gpm=gpm), s.gpus[1])
        snaps.append(replace(s, gpus=gpus, host=HostStats(cpu_percent=40.0), xids=()))
    app = app_on(snaps)
    idle = "tensor cores idle: fp32 matmuls? (SM 85% active, tensor 0%)"
    app.profiles.append(ProfileNote(5000, 0, T0 + 20, T0 + 22, "gpu-bound", gpm=idle))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "e")
        flat = " ".join(events_text(app).split())
        assert (
            f"{clock(60)} 0 4 s -82 pts (SM 88→6%) stall GPU 0 PCIe host→device 4.0 GiB/s: the step waits "
            "on copies from the host (pin_memory=True with non_blocking=True overlaps them); "
            f"profile of pid 5000: gpu-bound, {idle}"
        ) in flat
        assert "SM: measured on SM activity (GPM, Hopper and newer)" in flat
