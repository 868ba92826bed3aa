"""GPU health from NVML (issue 19): ECC counts, retired pages, row remapping and the PCIe link, against the
fake NVML (tests/collect/fake_nvml.py), which answers with the binding's real structs and NVMLError classes.

The memory-error counts ride in the slow tick's batched nvmlDeviceGetFieldValues call (no call of their
own); the PCIe link takes two calls per slow tick, its maximum two on the settings tier until known."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from gputui.collect.sources.nvml import SETTINGS_EVERY, NvmlSource
from gputui.model import GpuHealth
from tests.collect.fake_nvml import FakeGpu, FakeNvml

# The fixtures of test_nvml.py, re-exported here so that pytest finds them.
from tests.collect.test_nvml import fake as fake
from tests.collect.test_nvml import make_source as make_source
from tests.collect.test_nvml import source as source
from tests.collect.test_nvml import tick

ECC_ON = (1, 1)
SBE, DBE = (
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
)
HEALTH_CALLS = (
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
)


def h100(g: FakeGpu) -> None:
    """A data-centre H100: ECC on, row remapping (no page retirement), PCIe gen 5 x16."""
    g.ecc_mode = ECC_ON
    g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max = 5, 5, 16, 16


def test_ecc_counts_and_a_pending_remap(fake: FakeNvml, make_source: Any) -> None:
    g = fake.gpus[0]
    h100(g)
    g.ecc_corrected, g.ecc_uncorrected = 12, 1
    g.ecc_corrected_aggregate, g.ecc_uncorrected_aggregate = 40, 2
    g.remapped_rows = (3, 1, 1, 0)
    src = make_source()
    health = tick(src, fake).gpus[0].health
    assert health == GpuHealth(
        ecc_corrected_volatile=12,
        ecc_uncorrected_volatile=1,
        ecc_corrected_aggregate=40,
        ecc_uncorrected_aggregate=2,
        retired_pages_sbe=None,  # an H100 remaps rows; page retirement is NotSupported
        retired_pages_dbe=None,
        retired_pages_pending=None,
        remapped_rows_correctable=3,
        remapped_rows_uncorrectable=1,
        remap_pending=True,
        remap_failed=False,
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
    )
    # No call of their own: the memory errors come from the batched read
    assert all(fake.calls[0][name] == 0 for name in HEALTH_CALLS)
    assert tick(src, fake).errors == ()


def test_health_is_read_on_slow_ticks_and_repeated_between(fake: FakeNvml, make_source: Any) -> None:
    h100(fake.gpus[0])
    src = make_source()
    assert tick(src, fake).gpus[0].health.remap_pending is False  # type: ignore[union-attr]
    fake.gpus[0].remapped_rows = (0, 1, 1, 0)
    fake.gpus[0].pcie_width = 8
    fast = tick(src, fake, slow=False).gpus[0].health
    assert fast is not None and fast.remap_pending is False and fast.pcie_width == 16  # last slow reading
    slow = tick(src, fake).gpus[0].health
    assert slow is not None and slow.remap_pending is True and slow.remapped_rows_uncorrectable == 1
    assert slow.pcie_width == 8 and slow.pcie_width_max == 16  # a link that trained narrow


def test_a_remap_failure(fake: FakeNvml, source: NvmlSource) -> None:
    h100(fake.gpus[0])
    fake.gpus[0].remapped_rows = (0, 5, 0, 1)
    health = tick(source, fake).gpus[0].health
    assert health is not None and health.remap_failed is True and health.remap_pending is False


def test_pre_ampere_retired_pages_from_the_fields(fake: FakeNvml, source: NvmlSource) -> None:
    g = fake.gpus[0]
    h100(g)
    g.remapped_rows = None  # a V100: page retirement, no row remapping
    g.retired_pages = {SBE: [0x1000, 0x2000], DBE: [0x3000]}
    g.retired_pending = 1
    health = tick(source, fake).gpus[0].health
    assert health is not None
    assert (health.retired_pages_sbe, health.retired_pages_dbe, health.retired_pages_pending) == (2, 1, True)
    assert health.remapped_rows_correctable is None and health.remap_pending is None


def test_ecc_off_reads_no_memory_errors(fake: FakeNvml, source: NvmlSource) -> None:
    """ECC off (or a GPU without it): only the PCIe link; no memory-error fields are asked for."""
    g = fake.gpus[0]
    g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max = 1, 4, 16, 16
    g.ecc_corrected = 99  # not counted while ECC is off
    health = tick(source, fake).gpus[0].health
    assert health == GpuHealth(pcie_gen=1, pcie_gen_max=4, pcie_width=16, pcie_width_max=16)
    assert fake.gpus[1].ecc_mode is None and tick(source, fake).gpus[1].health is None  # nothing known


def test_fields_not_supported_are_not_asked_again(
    fake: FakeNvml, source: NvmlSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    h100(fake.gpus[0])
    asked: list[list[int]] = []
    inner = fake.nvmlDeviceGetFieldValues

    def wrapped(handle: Any, ids: list[Any]) -> Any:
        if handle.index == 0:
            asked.append([i[0] if isinstance(i, tuple) else i for i in ids])
        return inner(handle, ids)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", wrapped)
    tick(source, fake)
    assert pynvml.NVML_FI_DEV_RETIRED_SBE in asked[-1] and pynvml.NVML_FI_DEV_REMAPPED_PENDING in asked[-1]
    tick(source, fake, slow=False)
    assert pynvml.NVML_FI_DEV_REMAPPED_PENDING not in asked[-1]  # health only on slow ticks
    tick(source, fake)
    assert pynvml.NVML_FI_DEV_RETIRED_SBE not in asked[-1]  # NotSupported on an H100: dropped
    assert pynvml.NVML_FI_DEV_REMAPPED_PENDING in asked[-1]


def test_without_the_batched_read_the_single_calls_stand_in(fake: FakeNvml, make_source: Any) -> None:
    g = fake.gpus[0]
    h100(g)
    g.ecc_corrected, g.ecc_uncorrected_aggregate = 7, 4
    g.remapped_rows = (2, 0, 1, 0)
    fake.missing_symbols.add("nvmlDeviceGetFieldValues")
    src = make_source()
    health = tick(src, fake).gpus[0].health
    assert health is not None
    assert (health.ecc_corrected_volatile, health.ecc_uncorrected_aggregate) == (7, 4)
    assert (health.remapped_rows_correctable, health.remap_pending) == (2, True)
    assert health.retired_pages_sbe is None  # NotSupported on an H100
    assert fake.calls[0]["nvmlDeviceGetTotalEccErrors"] == 4
    before = fake.calls[0]["nvmlDeviceGetRetiredPages"]
    tick(src, fake)
    assert fake.calls[0]["nvmlDeviceGetRetiredPages"] == before  # NotSupported: not asked again


def test_retired_pages_by_their_own_calls(fake: FakeNvml, make_source: Any) -> None:
    g = fake.gpus[0]
    h100(g)
    g.remapped_rows = None
    g.retired_pages = {SBE: [0x10], DBE: [0x20, 0x30, 0x40]}
    fake.missing_symbols.add("nvmlDeviceGetFieldValues")
    health = tick(make_source(), fake).gpus[0].health
    assert health is not None
    assert (health.retired_pages_sbe, health.retired_pages_dbe, health.retired_pages_pending) == (1, 3, False)


def test_a_failing_call_is_none_for_that_tick_only(fake: FakeNvml, source: NvmlSource) -> None:
    h100(fake.gpus[0])
    fake.fail(0, "nvmlDeviceGetCurrPcieLinkWidth", pynvml.NVML_ERROR_UNKNOWN, times=1)
    first = tick(source, fake).gpus[0].health
    assert first is not None and first.pcie_width is None and first.pcie_gen == 5
    second = tick(source, fake).gpus[0].health
    assert second is not None and second.pcie_width == 16


def test_gpu_lost_in_a_health_call(fake: FakeNvml, source: NvmlSource) -> None:
    h100(fake.gpus[0])
    fake.fail(0, "nvmlDeviceGetCurrPcieLinkGeneration", pynvml.NVMLError_GpuIsLost)
    r = tick(source, fake)
    assert r.gpus[0].lost and not r.gpus[1].lost


def test_added_calls_per_tick(fake: FakeNvml, make_source: Any) -> None:
    """What health costs: 0 calls on a fast tick, 2 on a slow tick (the PCIe link), 2 once for its maximum."""
    for g in fake.gpus:
        h100(g)
    src = make_source()
    tick(src, fake)
    fake.reset_counts()
    tick(src, fake, slow=False)
    link = [n for n in fake.calls[0] if "Pcie" in n]
    assert link == []
    for _ in range(SETTINGS_EVERY + 1):
        tick(src, fake)
    per_slow = {n: c for n, c in fake.calls[0].items() if "PcieLink" in n}
    assert per_slow == {
        "nvmlDeviceGetCurrPcieLinkGeneration": SETTINGS_EVERY + 1,
        "nvmlDeviceGetCurrPcieLinkWidth": SETTINGS_EVERY + 1,
    }  # the maximum was read once, at open's first settings tick
