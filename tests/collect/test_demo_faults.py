"""The demo's injected health problems (issue 19): data for the UI, the doctor and the exporter to show."""

from __future__ import annotations

from gputui.analyze.xid import XIDS
from gputui.collect.sources.demo import FAULT_AT_S, FAULT_XIDS, FAULTY_GPU, NARROW_GPU, DemoSource
from gputui.model import GpuHealth

PIDS = [4101, 4111, 4121, 4131]


def test_without_faults_every_gpu_is_a_healthy_h100() -> None:
    src = DemoSource(gpus=4, clock=lambda: 1000.0)
    for t in (0.0, FAULT_AT_S + 1, 600.0):
        r = src.reading_at(t, True, PIDS)
        assert r.xids == ()
        for g in r.gpus:
            h = g.health
            assert isinstance(h, GpuHealth)
            assert not h.remap_pending and not h.remap_failed and h.ecc_uncorrected_volatile == 0
            assert (h.pcie_gen, h.pcie_width) == (h.pcie_gen_max, h.pcie_width_max) == (5, 16)


def test_faults_bring_a_pending_remap_and_its_xids_once() -> None:
    src = DemoSource(gpus=4, clock=lambda: 1000.0, faults=True)
    src._t0 = 500.0  # as open() sets it: the wall clock at simulated second 0
    before = src.reading_at(FAULT_AT_S - 1, True, PIDS)
    assert before.xids == () and not before.gpus[FAULTY_GPU].health.remap_pending  # type: ignore[union-attr]
    at = src.reading_at(FAULT_AT_S + 0.5, True, PIDS)
    assert [(x.gpu, x.xid, x.time) for x in at.xids] == [
        (FAULTY_GPU, x, 500.0 + FAULT_AT_S + 0.5) for x in FAULT_XIDS
    ]
    assert all(x in XIDS for x in FAULT_XIDS)
    h = at.gpus[FAULTY_GPU].health
    assert (
        h is not None
        and h.remap_pending
        and h.remapped_rows_uncorrectable == 1
        and h.ecc_uncorrected_volatile == 1
    )
    assert src.reading_at(FAULT_AT_S + 1.5, True, PIDS).xids == ()  # delivered once
    later = src.reading_at(FAULT_AT_S + 60, False, PIDS)
    assert later.gpus[FAULTY_GPU].health.remap_pending  # type: ignore[union-attr]  # until a reset
    narrow = later.gpus[NARROW_GPU].health
    assert narrow is not None and (narrow.pcie_width, narrow.pcie_width_max) == (8, 16)
    others = [g.health for g in later.gpus if g.index not in (FAULTY_GPU, NARROW_GPU)]
    assert all(o is not None and not o.remap_pending and o.pcie_width == 16 for o in others)


def test_faults_on_a_single_gpu_demo_send_nothing_for_a_gpu_it_lacks() -> None:
    src = DemoSource(gpus=1, clock=lambda: 1000.0, faults=True)
    assert src.reading_at(FAULT_AT_S + 1, True, [4101]).xids == ()
