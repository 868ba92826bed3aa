"""GPU health under dcgm-exporter's names (ECC, retired pages, row remapping, PCIe link, the last Xid), and
the memory forecast and hung processes as gputui's own metrics."""

from __future__ import annotations

from dataclasses import replace

from gputui.export.exporter import Exporter
from gputui.model import GpuHealth, XidEvent
from tests.export.test_metrics import FakeSampler, gpu0, gpu1, proc, scrape, scrape_snapshot, snapshot


def test_health_fields_have_dcgm_exporters_names_and_absent_ones_no_sample() -> None:
    health = GpuHealth(ecc_uncorrected_volatile=2, remap_pending=True, pcie_width=8, pcie_width_max=16)
    s = scrape_snapshot(snapshot(gpus=[gpu0(health=health), gpu1()]))
    assert s.value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu="0") == 2
    assert s.value("DCGM_FI_DEV_ROW_REMAP_PENDING", gpu="0") == 1
    assert s.value("DCGM_FI_DEV_PCIE_LINK_WIDTH", gpu="0") == 8
    assert s.value("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", gpu="0") == 16
    assert s.series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL") == []  # not reported: no sample, as dcgm-exporter does
    assert s.series("DCGM_FI_DEV_ROW_REMAP_PENDING", gpu="1") == []  # no health read for GPU 1


def test_the_last_xid_and_their_count_survive_between_samples() -> None:
    first = snapshot(xids=(XidEvent(1, 79, 999.0), XidEvent(1, 13, 999.5)))
    second = snapshot(time=1001.0)  # no new event
    exporter = Exporter(FakeSampler([first, second]))  # type: ignore[arg-type]
    exporter.tick()
    exporter.tick()
    s = scrape(exporter)
    assert s.value("DCGM_FI_DEV_XID_ERRORS", gpu="1") == 13
    assert s.value("DCGM_FI_DEV_XID_ERRORS", gpu="0") == 0
    assert s.value("gputui_xid_errors_total", gpu="1") == 2


def test_memory_growth_time_to_full_and_hung_processes() -> None:
    leaking = replace(proc(10, gpu=0), memory_growth=2.0e6, full_in=900.0)
    faster = replace(proc(11, gpu=0), memory_growth=4.0e6, full_in=450.0)
    stuck = replace(proc(12, gpu=1), hung="possibly hung (collective wait)")
    s = scrape_snapshot(snapshot(processes=[leaking, faster, stuck, proc(13, gpu=1)]))
    assert s.value("gputui_process_memory_growth_bytes_per_second", pid="10") == 2.0e6
    assert s.value("gputui_gpu_seconds_until_full", gpu="0") == 450.0  # the soonest
    assert s.series("gputui_gpu_seconds_until_full", gpu="1") == []
    assert s.value("gputui_process_hung", pid="12") == 1
    assert s.series("gputui_process_hung", pid="13") == []
