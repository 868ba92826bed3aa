"""Pictures of trouble on the fixed world: a pending row remap (GPU 1), a PCIe link at half width and an
Xid (GPU 2), a leaking trainer (GPU 3) and one that looks hung (GPU 0): the panes' health marks, the
rows' badges, then Events with each of them."""

from __future__ import annotations

from dataclasses import replace

from gputui.analyze import classify
from gputui.analyze.forecast import MIB
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import GpuHealth, ProcessRow, Snapshot, XidEvent
from gputui.ui.app import GpuTuiApp
from tests.ui import world
from tests.ui.conftest import make_app
from tests.ui.test_snapshots import _snap, utc  # noqa: F401  (the fixture: the header's clock in UTC)

HUNG = "possibly hung (collective wait): GPU 100% busy at idle power, 0% CPU for 2 min"


def _row(p: ProcessRow) -> ProcessRow:
    if p.pid == world.trainer_pid(3):
        return replace(p, memory_growth=120 * MIB / 60, full_in=14 * 60.0)
    if p.pid == world.trainer_pid(0):
        return replace(p, hung=HUNG, category=classify.HUNG, reason=HUNG)  # as the sampler does
    return p


def _trouble(s: Snapshot, first: bool) -> Snapshot:
    gpus = list(s.gpus)
    gpus[1] = replace(gpus[1], health=GpuHealth(remap_pending=True, remapped_rows_uncorrectable=1))
    gpus[2] = replace(gpus[2], health=GpuHealth(pcie_gen=5, pcie_gen_max=5, pcie_width=8, pcie_width_max=16))
    xids = (XidEvent(gpu=2, xid=94, time=s.time - 30),) if first else ()
    return replace(s, gpus=tuple(gpus), processes=tuple(_row(p) for p in s.processes), xids=xids)


def app_in_trouble() -> GpuTuiApp:
    app = make_app(gpus=4, unaccounted=True)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    replay.snapshots = [_trouble(s, k == 0) for k, s in enumerate(replay.snapshots)]
    return app


def test_health_marks_and_badges_at_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), app=app_in_trouble())


def test_events_with_health_and_alerts(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert _snap(snap_compare, (120, 40), "e", app=app_in_trouble())
