"""Events (`e`) lists the GPUs' health first, each Xid with what it means and what to do, then the processes
whose memory fills their GPU soon or that look hung, then the dips."""

from __future__ import annotations

import dataclasses
import time

from gputui.analyze.xid import describe
from gputui.model import GpuHealth, XidEvent
from gputui.ui.app import GpuTuiApp, SnapshotReady
from tests.helpers import until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app
from tests.ui.test_dips_ui import events_text


async def test_events_lists_xids_health_and_what_breaks_next() -> None:
    app: GpuTuiApp = make_app(gpus=4)
    async with app.run_test(size=(200, 60)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")
        last = app.snapshot
        assert last is not None
        gpus = list(last.gpus)
        gpus[2] = dataclasses.replace(gpus[2], health=GpuHealth(remap_pending=True))
        rows = tuple(
            dataclasses.replace(r, memory_growth=2.0e6, full_in=840.0) if r.pid == world.trainer_pid(1) else r
            for r in last.processes
        )
        sick = dataclasses.replace(
            last, time=last.time + 1, gpus=tuple(gpus), processes=rows, xids=(XidEvent(3, 79, last.time + 1),)
        )
        app.post_message(SnapshotReady(sick))
        await until(pilot, lambda: app.snapshot is sick)
        await pilot.press("e")
        await pilot.pause()
        text = " ".join(events_text(app).split())
        info = describe(79)
        assert "GPU health" in text and "GPU 2: a memory row remap waits for a reset" in text
        assert info.name in text and "GPU 3 reported Xid 79" in text and info.fix.split(";")[0][:14] in text
        since = time.strftime("%H:%M:%S", time.localtime(sick.time))
        heading = "Before it breaks since until GPU pid command what"
        assert f"{heading} {since} now 1 {world.trainer_pid(1)} python train.py" in text
        assert "growing 114 MiB/min — this GPU is full in ~14 min" in text
        assert text.index("GPU health") < text.index("Utilization dips")
