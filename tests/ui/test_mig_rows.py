"""A process on a MIG instance: the table's GPU column says `GPU:instance`, the detail names the instance
with its profile and MIG UUID."""

from __future__ import annotations

from gputui.ui.screens.detail import _gpu_line
from gputui.ui.widgets.process_rows import View, build_rows
from tests.ui import world


def test_the_gpu_column_and_the_detail_name_the_instance() -> None:
    snap = world.snapshots(gpus=2, seconds=1, mig=True)[-1]
    trainer = next(p for p in snap.processes if p.pid == world.trainer_pid(0))
    assert (trainer.gpu, trainer.gpu_instance, trainer.compute_instance) == (0, 1, 0)
    rows = {r.pid: r for r in build_rows(snap, View())}
    assert rows[world.trainer_pid(0)].cells[0].plain == "0:1"
    assert rows[world.trainer_pid(1)].cells[0].plain == "1"  # GPU 1 is not split
    instance = next(m for m in snap.gpus[0].mig if m.gpu_instance == 1)
    line = _gpu_line(trainer, snap.gpus)
    assert line is not None and line.endswith(f"MIG instance 1/0 ({instance.profile}, {instance.uuid})")
    assert _gpu_line(trainer) is not None and _gpu_line(trainer).endswith("MIG instance 1/0")  # type: ignore[union-attr]
