"""A GPU pane carries a health mark: the worst problem (an Xid, ECC, a pending row remap, a narrow PCIe link)
and how many more, in colour and with a glyph (it shows with NO_COLOR too)."""

from __future__ import annotations

import dataclasses

from gputui.model import GpuHealth, Snapshot, XidEvent
from gputui.ui.app import GpuTuiApp, SnapshotReady
from tests.helpers import until
from tests.ui.conftest import first_frame, make_app
from tests.ui.test_app_state import drawn


def sick(snap: Snapshot, xid: bool) -> Snapshot:
    gpus = list(snap.gpus)
    gpus[1] = dataclasses.replace(
        gpus[1], health=GpuHealth(remap_pending=True, pcie_width=8, pcie_width_max=16)
    )
    return dataclasses.replace(snap, gpus=tuple(gpus), xids=(XidEvent(1, 79, snap.time),) if xid else ())


async def test_a_pane_shows_its_gpus_worst_problem() -> None:
    app: GpuTuiApp = make_app(gpus=4)
    async with app.run_test(size=(200, 60)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p")
        last = app.snapshot
        assert last is not None
        app.post_message(SnapshotReady(sick(last, xid=False)))
        await until(pilot, lambda: "REMAP PENDING +1" in drawn(app.panes))
        assert drawn(app.panes).count("⚠ REMAP PENDING") == 1  # GPU 1 only
        app.post_message(SnapshotReady(sick(dataclasses.replace(last, time=last.time + 1), xid=True)))
        await until(pilot, lambda: "✖ Xid 79 +2" in drawn(app.panes))
        # The Xid is kept (an hour): the next snapshot, which brings no new event, still shows it.
        app.post_message(SnapshotReady(sick(dataclasses.replace(last, time=last.time + 2), xid=False)))
        await pilot.pause(0.1)
        assert "✖ Xid 79 +2" in drawn(app.panes)
