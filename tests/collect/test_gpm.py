"""GPM (SM, tensor and DRAM activity, Hopper+) through NvmlSource, against the fake NVML's real pynvml
structures (c_nvmlGpmSupport_t, c_nvmlGpmMetricsGet_t, c_nvmlGpmSample_t) and error classes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gputui.collect.sources import gpm as gpm_mod
from gputui.collect.sources.base import Reading
from gputui.collect.sources.nvml import SETTINGS_EVERY, NvmlSource
from gputui.model import GpmMetrics, GpuSample, Snapshot
from gputui.output import jsonout
from tests.builders import snapshot
from tests.collect.fake_nvml import FakeMigDevice, FakeNvml
from tests.helpers import known

MIB = 2**20
SM = pynvml.NVML_GPM_METRIC_SM_UTIL
OCC = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
DRAM = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
PCIE_RX = pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC
NVLINK_TX = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
GPM_CALLS = ("nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlGpmMigSampleGet")
HOPPER = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 97.0,
    SM: 88.5,
    OCC: 41.0,
    TENSOR: 63.25,
    pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 63.0,
    pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: 0.0,
    pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: 0.0,
    DRAM: 52.0,
    pynvml.NVML_GPM_METRIC_FP16_UTIL: 3.0,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: 11.0,
    pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.0,
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 7.5,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 120.0,
    PCIE_RX: 2048.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 30_000.0,
    NVLINK_TX: 31_000.0,
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    f = FakeNvml(n_gpus=2)
    f.gpus[0].gpm = dict(HOPPER)  # GPU 1 is an A100 in all but name: no GPM
    f.install(monkeypatch)
    yield f
    assert f.violations == []


def open_source(monkeypatch: pytest.MonkeyPatch, mode: str = "auto", dcgm: str | None = None) -> NvmlSource:
    src = NvmlSource(gpm=mode)
    monkeypatch.setattr(src, "dcgm_running", lambda: dcgm)
    src.open()
    return src


@pytest.fixture
def source(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> Any:
    src = open_source(monkeypatch)
    yield src
    src.close()
    assert fake.live_gpm_samples() == 0  # every sample freed at close
    assert fake.initialized == 0


def tick(src: NvmlSource, fake: FakeNvml, slow: bool = False, seconds: float = 1.0) -> Reading:
    fake.advance(seconds)
    return src.read(slow)


def test_metrics_come_from_two_samples_in_gputui_units(fake: FakeNvml, source: NvmlSource) -> None:
    # open() took the first sample: the first read measures already
    r = tick(source, fake, seconds=0.5)
    m = r.gpus[0].gpm
    assert m is not None
    assert m.interval == pytest.approx(0.5)
    assert (m.graphics, m.sm_active, m.sm_occupancy, m.tensor, m.dram) == (97.0, 88.5, 41.0, 63.25, 52.0)
    assert (m.hmma, m.imma, m.dfma, m.fp16, m.fp32, m.fp64, m.integer) == (
        63.0,
        0.0,
        0.0,
        3.0,
        11.0,
        0.0,
        7.5,
    )
    assert m.pcie_rx == 2048 * MIB and m.pcie_tx == 120 * MIB  # NVML's MiB/s as bytes/s
    assert m.nvlink_tx == 31_000 * MIB and m.nvlink_rx == 30_000 * MIB
    assert r.gpm_note is None
    assert tick(source, fake, seconds=2.0).gpus[0].gpm.interval == pytest.approx(2.0)  # type: ignore[union-attr]
    assert fake.slept == []  # a monitor never waits for GPM


def test_a_one_shot_reading_waits_for_its_interval(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    src = NvmlSource(gpm_wait=0.1)
    monkeypatch.setattr(src, "dcgm_running", lambda: None)
    src.open()
    try:
        fake.advance(0.02)  # the rest of start-up
        m = src.read(True).gpus[0].gpm
        assert fake.slept == [pytest.approx(0.08)]
        assert m is not None and m.interval == pytest.approx(0.1) and m.sm_active == 88.5
        src.read(False)
        assert len(fake.slept) == 1  # once
    finally:
        src.close()


def test_samples_closer_than_the_shortest_interval_measure_nothing(
    fake: FakeNvml, source: NvmlSource
) -> None:
    tick(source, fake)
    assert tick(source, fake, seconds=0.01).gpus[0].gpm is None  # noise: not shown
    m = tick(source, fake, seconds=0.5).gpus[0].gpm
    assert m is not None and m.interval == pytest.approx(0.51)  # measured from the kept sample


def test_a_gpu_without_gpm_has_none_and_is_never_sampled(fake: FakeNvml, source: NvmlSource) -> None:
    for _ in range(3):
        r = tick(source, fake)
    assert r.gpus[1].gpm is None
    assert not any(fake.calls[1][name] for name in GPM_CALLS)
    assert fake.calls[1]["nvmlGpmQueryDeviceSupport"] == 1  # asked once, at open


def test_two_gpm_calls_per_gpu_per_tick(fake: FakeNvml, source: NvmlSource) -> None:
    tick(source, fake)
    fake.reset_counts()
    for _ in range(10):
        tick(source, fake)
    assert fake.calls[0]["nvmlGpmSampleGet"] == 10 and fake.calls[0]["nvmlGpmMetricsGet"] == 10
    assert fake.system_calls["nvmlGpmSampleAlloc"] == 0  # the two samples are kept, not remade
    assert fake.live_gpm_samples() == 2


def test_one_failing_metric_hides_no_other(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].gpm_returns = {OCC: pynvml.NVML_ERROR_UNKNOWN, TENSOR: pynvml.NVML_ERROR_NOT_SUPPORTED}
    tick(source, fake)
    m = tick(source, fake).gpus[0].gpm
    assert m is not None and m.sm_occupancy is None and m.tensor is None
    assert m.sm_active == 88.5 and m.dram == 52.0
    # An Unknown is asked again and answers next time; a NotSupported metric is not asked again.
    fake.gpus[0].gpm_returns = {}
    m = tick(source, fake).gpus[0].gpm
    assert m is not None and m.sm_occupancy == 41.0 and m.tensor is None


def test_a_metric_the_binding_does_not_name_is_none_not_zero(fake: FakeNvml, source: NvmlSource) -> None:
    del known(fake.gpus[0].gpm)[DRAM]  # this GPU answers NotSupported for it
    tick(source, fake)
    m = tick(source, fake).gpus[0].gpm
    assert m is not None and m.dram is None and m.sm_active == 88.5


@pytest.mark.parametrize(
    ("value", "shown"), [(float("nan"), None), (-1.0, None), (100.4, 100.0), (180.0, None), (0.0, 0.0)]
)
def test_impossible_values_are_unknown(fake: FakeNvml, source: NvmlSource, value: float, shown: Any) -> None:
    known(fake.gpus[0].gpm)[SM] = value
    tick(source, fake)
    m = tick(source, fake).gpus[0].gpm
    assert m is not None and m.sm_active == shown


def test_the_whole_call_failing_gives_none_and_the_next_tick_recovers(
    fake: FakeNvml, source: NvmlSource
) -> None:
    tick(source, fake)
    fake.fail(0, "nvmlGpmMetricsGet", pynvml.NVML_ERROR_UNKNOWN, times=1)
    assert tick(source, fake).gpus[0].gpm is None
    assert tick(source, fake).gpus[0].gpm is not None


def test_a_failed_sample_starts_the_pair_again(fake: FakeNvml, source: NvmlSource) -> None:
    tick(source, fake)
    fake.fail(0, "nvmlGpmSampleGet", pynvml.NVML_ERROR_UNKNOWN, times=1)
    assert tick(source, fake).gpus[0].gpm is None
    assert tick(source, fake).gpus[0].gpm is None  # a fresh first sample
    assert tick(source, fake).gpus[0].gpm is not None


def test_a_gpu_lost_between_samples_frees_its_samples_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml(n_gpus=2)
    for g in fake.gpus:
        g.gpm = dict(HOPPER)
    fake.install(monkeypatch)
    src = open_source(monkeypatch)
    try:
        tick(src, fake)
        fake.fail(0, "nvmlGpmSampleGet", pynvml.NVML_ERROR_GPU_IS_LOST)
        r = tick(src, fake)
        assert r.gpus[0].lost and r.gpus[0].gpm is None
        assert r.gpus[1].gpm is not None and r.gpus[1].gpm.sm_active == 88.5
        assert fake.live_gpm_samples() == 2  # GPU 1's pair; GPU 0's were freed
        assert any("GPU 0 is lost" in e for e in r.errors)
    finally:
        src.close()
    assert fake.live_gpm_samples() == 0 and fake.violations == []


def test_mig_instances_get_their_own_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(n_gpus=1)
    g = fake.gpus[0]
    g.gpm = dict(HOPPER)
    g.mig = (1, 1)
    g.mig_devices = [
        FakeMigDevice(slot=0, gpu_instance=1, compute_instance=0, profile="3g.40gb"),
        FakeMigDevice(slot=1, gpu_instance=5, compute_instance=0, profile="2g.20gb"),
    ]
    g.gpm_mig = {1: {SM: 70.0, TENSOR: 40.0}, 5: {SM: 6.0}}
    fake.install(monkeypatch)
    src = open_source(monkeypatch)
    try:
        tick(src, fake, slow=True)
        r = tick(src, fake, slow=True)
        by_gi = {m.gpu_instance: m.gpm for m in r.gpus[0].mig}
        assert by_gi[1] is not None and (by_gi[1].sm_active, by_gi[1].tensor) == (70.0, 40.0)
        assert by_gi[5] is not None and by_gi[5].sm_active == 6.0 and by_gi[5].tensor is None
        assert fake.calls[0]["nvmlGpmMigSampleGet"] == 4
        assert fake.live_gpm_samples() == 6  # the GPU's pair and one per instance
        # An admin destroys instance 5: its samples are freed with it.
        g.mig_devices = g.mig_devices[:1]
        for _ in range(SETTINGS_EVERY + 1):
            r = tick(src, fake, slow=True)
        assert [m.gpu_instance for m in r.gpus[0].mig] == [1]
        assert fake.live_gpm_samples() == 4
    finally:
        src.close()
    assert fake.live_gpm_samples() == 0 and fake.violations == []


def test_no_mig_gpm_in_the_driver_keeps_the_gpu_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(n_gpus=1)
    g = fake.gpus[0]
    g.gpm, g.mig = dict(HOPPER), (1, 1)
    g.mig_devices = [FakeMigDevice(slot=0, gpu_instance=1, compute_instance=0)]
    fake.missing_symbols.add("nvmlGpmMigSampleGet")
    fake.install(monkeypatch)
    src = open_source(monkeypatch)
    try:
        tick(src, fake, slow=True)
        r = tick(src, fake, slow=True)
        assert r.gpus[0].gpm is not None and r.gpus[0].mig[0].gpm is None
        tick(src, fake, slow=True)
        assert fake.failed_lookups["nvmlGpmMigSampleGet"] == 1  # not asked again
    finally:
        src.close()


def test_a_driver_without_gpm_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(n_gpus=1)
    fake.gpus[0].gpm = dict(HOPPER)
    fake.missing_symbols.add("nvmlGpmQueryDeviceSupport")
    fake.install(monkeypatch)
    src = open_source(monkeypatch)
    try:
        for _ in range(3):
            r = tick(src, fake)
        assert r.gpus[0].gpm is None and r.gpm_note is None
        assert fake.failed_lookups["nvmlGpmQueryDeviceSupport"] == 1
    finally:
        src.close()


# -- DCGM ---------------------------------------------------------------------------------------------


def test_dcgm_running_keeps_gpm_unarmed_and_says_why(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    src = open_source(monkeypatch, dcgm="nv-hostengine (pid 812)")
    try:
        for _ in range(3):
            r = tick(src, fake)
        assert r.gpus[0].gpm is None
        assert r.gpm_note is not None and "nv-hostengine (pid 812)" in r.gpm_note and "--gpm on" in r.gpm_note
        assert "\n" not in r.gpm_note
        assert not any(fake.calls[0][name] for name in GPM_CALLS)  # the counters are left alone
    finally:
        src.close()


def test_gpm_on_shares_the_counters_with_dcgm(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    src = open_source(monkeypatch, mode="on", dcgm="nv-hostengine (pid 812)")
    try:
        tick(src, fake)
        r = tick(src, fake)
        assert r.gpus[0].gpm is not None and r.gpm_note is None
    finally:
        src.close()


def test_gpm_off_is_said(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    src = open_source(monkeypatch, mode="off")
    try:
        tick(src, fake)
        r = tick(src, fake)
        assert r.gpus[0].gpm is None and r.gpm_note is not None and "off" in r.gpm_note
        assert not any(fake.calls[0][name] for name in GPM_CALLS)
    finally:
        src.close()


def test_no_note_where_no_gpu_could_serve_gpm(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(n_gpus=1).install(monkeypatch)
    src = open_source(monkeypatch, dcgm="nv-hostengine (pid 812)")
    try:
        assert tick(src, fake).gpm_note is None  # no GPM GPU: DCGM takes nothing from us
    finally:
        src.close()
    assert fake.violations == []


def test_dcgm_starting_later_gets_the_counters_back(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    found: list[str | None] = [None]
    src = NvmlSource()
    monkeypatch.setattr(src, "dcgm_running", lambda: found[0])
    src.open()
    try:
        tick(src, fake, slow=True)
        assert tick(src, fake, slow=True).gpus[0].gpm is not None
        found[0] = "dcgm-exporter (pid 99)"
        for _ in range(SETTINGS_EVERY):
            r = tick(src, fake, slow=True)
        assert r.gpus[0].gpm is None and r.gpm_note is not None and "dcgm-exporter" in r.gpm_note
        assert fake.live_gpm_samples() == 0  # given back
        found[0] = None
        for _ in range(SETTINGS_EVERY + 2):
            r = tick(src, fake, slow=True)
        assert r.gpus[0].gpm is not None and r.gpm_note is None
    finally:
        src.close()


def test_dcgm_running_finds_a_real_hostengine(tmp_path: Path) -> None:
    """A real process named nv-hostengine (a copy of sleep) is found by its comm."""
    sleeper = tmp_path / "nv-hostengine"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", sleeper)
    proc = subprocess.Popen([str(sleeper), "30"])
    try:
        deadline = time.monotonic() + 5
        found = gpm_mod.dcgm_running()
        while found is None and time.monotonic() < deadline:  # until its exec is done
            time.sleep(0.01)
            found = gpm_mod.dcgm_running()
        assert found == f"nv-hostengine (pid {proc.pid})"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert f"pid {proc.pid})" not in (gpm_mod.dcgm_running() or "")  # gone with its process


def test_dcgm_running_survives_a_hostile_proc(tmp_path: Path) -> None:
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "comm").write_bytes(b"\xff\x1b[2Jnv-host\n")
    (tmp_path / "34").mkdir()  # gone between the listing and the read: no comm
    (tmp_path / "self").mkdir()
    assert gpm_mod.dcgm_running(str(tmp_path)) is None
    assert gpm_mod.dcgm_running(str(tmp_path / "missing")) is None
    (tmp_path / "56").mkdir()
    (tmp_path / "56" / "comm").write_text("nv-hostengine\n")
    assert gpm_mod.dcgm_running(str(tmp_path)) == "nv-hostengine (pid 56)"


# -- recordings ---------------------------------------------------------------------------------------


def _snapshot(gpm: Any) -> Snapshot:
    return snapshot(
        time=1.0,
        hostname="h",
        source="nvml",
        gpus=(GpuSample(index=0, gpm=gpm),),
        processes=(),
        gpm_note="GPM not armed: DCGM is running (nv-hostengine (pid 812))",
    )


def test_gpm_round_trips_through_a_recording() -> None:
    snap = _snapshot(GpmMetrics(interval=1.0, sm_active=88.5, tensor=None, pcie_rx=2e9))
    back = jsonout.snapshot_from_dict(jsonout.snapshot_to_dict(snap))
    assert back.gpus[0].gpm == snap.gpus[0].gpm and back.gpm_note == snap.gpm_note


@pytest.mark.parametrize(
    "bad", [{"sm_active": 250}, {"sm_active": -1}, {"dram": "x"}, {"pcie_rx": float("inf")}, {"evil": 1}, [1]]
)
def test_a_hostile_recording_gpm_is_refused(bad: Any) -> None:
    data = jsonout.snapshot_to_dict(_snapshot(None))
    data["gpus"][0]["gpm"] = bad
    with pytest.raises(ValueError):
        jsonout.snapshot_from_dict(data)


def test_a_recorded_note_is_made_printable() -> None:
    data = jsonout.snapshot_to_dict(_snapshot(None))
    data["gpm_note"] = "\x1b]52;c;evil\x07 note"
    note = jsonout.snapshot_from_dict(data).gpm_note
    assert note is not None and "\x1b" not in note and "\x07" not in note


def test_the_cli_refuses_an_unknown_mode() -> None:
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", "--gpm", "maybe", "--once"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "invalid choice: 'maybe'" in proc.stderr


def test_samples_the_driver_cannot_allocate_mean_no_gpm_without_an_error_each_tick(
    fake: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.fail(None, "nvmlGpmSampleAlloc", pynvml.NVML_ERROR_NOT_SUPPORTED)
    src = open_source(monkeypatch)
    try:
        for _ in range(3):
            r = tick(src, fake)
            assert r.gpus[0].gpm is None and r.errors == ()
        assert fake.system_calls["nvmlGpmSampleAlloc"] == 1
    finally:
        src.close()
