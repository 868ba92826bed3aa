"""The doctor reports what NVML says of a GPU's health, each finding with its fix; nothing when NVML said
nothing of it."""

from __future__ import annotations

from gputui.doctor import checks_system
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.report import OK, PROBLEM, WARNING
from gputui.model import GpuHealth, GpuSample


def facts(*samples: GpuSample) -> SystemFacts:
    return SystemFacts(gpus=tuple(GpuFact(g.index) for g in samples), samples=samples)


def test_each_problem_with_its_fix() -> None:
    bad = GpuSample(index=1, health=GpuHealth(remap_failed=True, pcie_width=8, pcie_width_max=16))
    checks = checks_system.health(
        facts(GpuSample(index=0, health=GpuHealth(ecc_uncorrected_volatile=0)), bad)
    )
    assert [(c.status, c.found) for c in checks] == [
        (PROBLEM, "GPU 1: a memory row remap failed"),
        (WARNING, "GPU 1: PCIe link x8, the slot and GPU do x16"),
    ]
    assert "RMA" in checks[0].fix and "reseat" in checks[1].fix


def test_a_healthy_gpu_is_one_ok_line_and_no_health_read_is_silence() -> None:
    (line,) = checks_system.health(
        facts(GpuSample(index=0, health=GpuHealth(pcie_width=16, pcie_width_max=16)))
    )
    assert line.status == OK and "no ECC errors" in line.found
    assert checks_system.health(facts(GpuSample(index=0))) == []
