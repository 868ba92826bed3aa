"""A GPU's health problems, worst first, from what NVML said: one list for the panes, doctor, exporter."""

from __future__ import annotations

from gputui.analyze.health import ERROR, WARNING, problems
from gputui.analyze.xid import describe
from gputui.model import GpuHealth, GpuSample, XidEvent


def test_a_healthy_gpu_has_no_problems() -> None:
    health = GpuHealth(ecc_uncorrected_volatile=0, remap_pending=False, pcie_width=16, pcie_width_max=16)
    assert problems(GpuSample(index=0, health=health)) == []
    assert problems(GpuSample(index=0)) == []


def test_problems_come_worst_first_with_their_fix() -> None:
    health = GpuHealth(remap_pending=True, ecc_uncorrected_volatile=2, pcie_width=8, pcie_width_max=16)
    found = problems(GpuSample(index=3, health=health), [XidEvent(3, 79, 1.0), XidEvent(1, 13, 1.0)])
    assert [p.short for p in found] == ["Xid 79", "ECC 2 errors", "REMAP PENDING", "PCIe x8"]
    assert [p.severity for p in found] == [ERROR, ERROR, WARNING, WARNING]
    assert "reset the GPU when no process uses it" in found[2].fix
    assert found[3].text == "GPU 3: PCIe link x8, the slot and GPU do x16"


def test_an_idle_link_may_drop_its_generation_a_busy_one_may_not() -> None:
    health = GpuHealth(pcie_gen=1, pcie_gen_max=5)
    assert problems(GpuSample(index=0, util_gpu=0, health=health)) == []  # power saving, not a fault
    (busy,) = problems(GpuSample(index=0, util_gpu=97, health=health))
    assert busy.short == "PCIe gen1" and busy.severity == WARNING


def test_without_health_the_ecc_count_still_counts() -> None:
    (ecc,) = problems(GpuSample(index=0, ecc_errors=4))
    assert ecc.severity == ERROR and "4 uncorrected ECC errors" in ecc.text


def test_an_xid_says_what_happened_and_what_to_do_from_the_table() -> None:
    (x,) = problems(GpuSample(index=0), [XidEvent(0, 48, 5.0), XidEvent(1, 79, 5.0)])
    info = describe(48)
    assert x.text == f"GPU 0 reported Xid 48: {info.name}" and x.fix == info.fix and x.severity == ERROR
