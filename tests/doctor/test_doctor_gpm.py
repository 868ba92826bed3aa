"""The doctor's GPM checks: how busy a GPU with a job really is (busy but starved, tensor cores idle, low
SM occupancy), each with its fix, from made-up facts; where there is no GPM reading, one line says why
(before Hopper, DCGM holding the counters), as information and never as a problem. And the reading itself:
facts.gather through the fake NVML's real GPM structures, measured over DOCTOR_GPM_S."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gputui.analyze import dip_causes
from gputui.analyze.dip_causes import gpm_findings
from gputui.collect.sources import gpm as gpm_mod
from gputui.doctor import checks_gpm, facts, report, run, torch_probe
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.report import OK, WARNING
from gputui.model import GpmMetrics, GpuProcess, GpuSample, MigInstance
from tests.collect.fake_nvml import FakeNvml, FakeProcess
from tests.doctor.test_system import machine
from tests.doctor.test_system import maps as maps  # the fixture

H100 = "NVIDIA H100 80GB HBM3"
DCGM_NOTE = (
    "GPM not armed: DCGM is running (nv-hostengine (pid 812)) and reads the same counters; "
    "--gpm on shares them"
)


def gpm(sm: float | None, **kw: float | None) -> GpmMetrics:
    return GpmMetrics(interval=1.0, sm_active=sm, **kw)


def machine_with(
    *samples: GpuSample,
    on: dict[int, list[int]] | None = None,
    capability: tuple[int, int] = (9, 0),
    note: str | None = None,
) -> SystemFacts:
    """GPUs as sampled; `on`: GPU index -> the pids NVML lists on it (default: pid 4242 on every GPU)."""
    on = {g.index: [4242] for g in samples} if on is None else on
    procs = tuple(GpuProcess(gpu, pid, "C", 1 << 30) for gpu, pids in on.items() for pid in pids)
    gpus = tuple(GpuFact(g.index, g.name, capability=capability) for g in samples)
    return SystemFacts(gpus=gpus, processes=procs, samples=samples, gpm_note=note)


def lines(checks: list[report.Check]) -> list[tuple[str, str, str]]:
    return [(c.status, c.area, c.found) for c in checks]


# -- the verdicts (shared with the allocator panel) --------------------------------------------------------


def test_busy_but_starved_when_utilization_is_full_and_the_sms_are_not() -> None:
    (f,) = gpm_findings(gpm(6.0, sm_occupancy=3.0, tensor=0.0), util=98.0)
    assert f.text == "busy but starved: SM 6% while util 98%"
    assert "DataLoader" in f.fix and "CUDA graphs" in f.fix
    # Starved says it all: no second verdict on the same near-empty SMs.
    assert gpm_findings(gpm(dip_causes.SM_STARVED + 1, tensor=0.0), util=98.0) == []
    assert gpm_findings(gpm(6.0), util=dip_causes.UTIL_BUSY - 1) == []  # an idle GPU is not starved
    assert gpm_findings(gpm(6.0), util=None) == []  # utilization unknown: no claim


def test_tensor_cores_idle_under_busy_sms_asks_about_fp32_matmuls() -> None:
    (f,) = gpm_findings(gpm(85.0, sm_occupancy=40.0, tensor=0.2, hmma=0.0), util=99.0)
    assert f.text == "tensor cores idle: fp32 matmuls? (SM 85% active, tensor 0%)"
    assert "set_float32_matmul_precision('high')" in f.fix and "torch.bfloat16" in f.fix
    # Only HMMA known (any-tensor failed alone): judged on it.
    (f,) = gpm_findings(gpm(85.0, hmma=0.0), util=99.0)
    assert f.key == "tensor idle"
    # Either pipe busy: the tensor cores are used.
    assert gpm_findings(gpm(85.0, tensor=0.5, hmma=30.0), util=99.0) == []
    assert gpm_findings(gpm(85.0, tensor=35.0), util=99.0) == []
    # Tensor activity unknown: nothing said of it (n/a is not 0).
    assert gpm_findings(gpm(85.0, sm_occupancy=40.0), util=99.0) == []
    # SMs not busy enough to expect the tensor cores to be.
    assert gpm_findings(gpm(dip_causes.SM_BUSY - 1, sm_occupancy=40.0, tensor=0.0), util=99.0) == []


def test_low_occupancy_with_busy_sms_is_small_kernels_unless_the_tensor_cores_are_busy() -> None:
    (f,) = gpm_findings(gpm(45.0, sm_occupancy=12.0, tensor=5.0), util=99.0)
    assert f.text == "SM occupancy 12%: small kernels or batch (SM 45% active)"
    assert "larger batch" in f.fix
    # A big GEMM runs one large block per SM: low occupancy by design, with busy tensor cores.
    assert gpm_findings(gpm(90.0, sm_occupancy=12.0, tensor=70.0), util=99.0) == []
    assert gpm_findings(gpm(dip_causes.SM_OCCUPIED - 1, sm_occupancy=12.0, tensor=5.0), util=99.0) == []
    # Both at once: fp32 matmuls in small kernels.
    both = gpm_findings(gpm(80.0, sm_occupancy=10.0, tensor=0.0), util=99.0)
    assert [f.key for f in both] == ["tensor idle", "occupancy"]


def test_no_sm_activity_no_verdict() -> None:
    assert gpm_findings(gpm(None, sm_occupancy=5.0, tensor=0.0), util=99.0) == []


# -- the checks ---------------------------------------------------------------------------------------------


def test_each_gpu_with_a_job_is_judged_and_one_without_is_not() -> None:
    f = machine_with(
        GpuSample(index=0, name=H100, util_gpu=98, gpm=gpm(6.0, tensor=0.0)),
        GpuSample(index=1, name=H100, util_gpu=99, gpm=gpm(80.0, sm_occupancy=10.0, tensor=0.0)),
        GpuSample(index=2, name=H100, util_gpu=97, gpm=gpm(88.0, sm_occupancy=35.0, tensor=61.0, dram=40.0)),
        GpuSample(index=3, name=H100, util_gpu=99, gpm=gpm(6.0, tensor=0.0)),
        on={0: [4242], 1: [4243, 4244, 4245, 4246], 2: [4247]},
    )
    checks = checks_gpm.checks(f)
    assert lines(checks) == [
        (WARNING, "gpm", "GPU 0 (pid 4242): busy but starved: SM 6% while util 98% (GPM over 1.0 s)"),
        (
            WARNING,
            "gpm",
            "GPU 1 (pids 4243, 4244, 4245 +1): tensor cores idle: fp32 matmuls? (SM 80% active, tensor 0%) "
            "(GPM over 1.0 s)",
        ),
        (
            WARNING,
            "gpm",
            "GPU 1 (pids 4243, 4244, 4245 +1): SM occupancy 10%: small kernels or batch (SM 80% active) "
            "(GPM over 1.0 s)",
        ),
        (OK, "gpm", "GPU 2 (pid 4247): SM 88% · occupancy 35% · tensor 61% · DRAM 40% (GPM over 1.0 s)"),
    ]  # GPU 3 looks starved, but nothing runs there: not the doctor's business
    assert all(c.fix for c in checks if c.status == WARNING)
    assert report.exit_code(checks) == report.EXIT_OK  # advice, not a broken machine


def test_a_mig_instance_is_judged_on_its_own_reading() -> None:
    instances = (
        MigInstance(1, 0, "3g.40gb", util=97, gpm=gpm(5.0, tensor=0.0)),
        MigInstance(2, 0, "3g.40gb", util=99, gpm=gpm(90.0, tensor=60.0)),
    )
    sample = GpuSample(index=0, name=H100, mig=instances, gpm=gpm(47.0, tensor=30.0))
    f = SystemFacts(
        gpus=(GpuFact(0, H100, capability=(9, 0)),),
        processes=(GpuProcess(0, 500, "C", 1 << 30, gpu_instance=1),),
        samples=(sample,),
    )
    assert lines(checks_gpm.checks(f)) == [
        (
            WARNING,
            "gpm",
            "GPU 0 MIG instance 1 (3g.40gb) (pid 500): busy but starved: SM 5% while util 97% "
            "(GPM over 1.0 s)",
        )
    ]


def test_no_gpm_before_hopper_is_one_line_of_information() -> None:
    f = machine_with(
        GpuSample(index=0, name="NVIDIA A100-SXM4-80GB", util_gpu=100),
        GpuSample(index=1, name="NVIDIA A100-SXM4-80GB", util_gpu=0),
        capability=(8, 0),
    )
    checks = checks_gpm.checks(f)
    assert lines(checks) == [
        (
            OK,
            "gpm",
            "GPUs 0, 1 (NVIDIA A100-SXM4-80GB): SM and tensor activity n/a: GPM needs Hopper or newer "
            "(NVML's utilization only says that a kernel ran)",
        )
    ]
    assert checks[0].fix == ""


def test_dcgm_holding_the_counters_is_said_as_information() -> None:
    f = machine_with(GpuSample(index=0, name=H100, util_gpu=100), note=DCGM_NOTE)
    assert lines(checks_gpm.checks(f)) == [(OK, "gpm", f"GPU 0: SM and tensor activity n/a: {DCGM_NOTE}")]
    # A Hopper GPU with no reading and no note: the driver gave none.
    (line,) = checks_gpm.checks(machine_with(GpuSample(index=0, name=H100, util_gpu=100)))
    assert line.status == OK and "the driver served no GPM reading" in line.found


def test_a_lost_gpu_and_a_machine_without_nvml_say_nothing_of_gpm() -> None:
    assert checks_gpm.checks(machine_with(GpuSample(index=0, lost=True))) == []
    assert checks_gpm.checks(SystemFacts(nvml_error="driver")) == []


def test_hostile_process_text_never_reaches_a_gpm_line() -> None:
    """GPM lines quote only numbers and pids; a MIG profile is the driver's, still made printable."""
    inst = MigInstance(1, 0, "3g.40gb\x1b[2J", util=97, gpm=gpm(5.0))
    f = SystemFacts(
        gpus=(GpuFact(0, H100, capability=(9, 0)),),
        processes=(GpuProcess(0, 500, "C", 1, gpu_instance=1),),
        samples=(GpuSample(index=0, mig=(inst,)),),
    )
    (line,) = checks_gpm.checks(f)
    assert "\x1b" not in line.found and "3g.40gb?[2J" in line.found


# -- in the whole examination, and as JSON -------------------------------------------------------------------


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        torch_probe, "probe", lambda python, env=None: torch_probe.TorchFacts(python=python, error="skipped")
    )


def test_the_doctor_runs_the_gpm_checks_with_their_fix_in_json(no_torch: None) -> None:
    f = machine_with(GpuSample(index=0, name=H100, util_gpu=98, gpm=gpm(6.0, tensor=0.0)))
    checks = run.diagnose(system=f, env={})
    (starved,) = [c for c in checks if c.area == "gpm"]
    out = json.loads(report.as_json(checks))
    (entry,) = [c for c in out["checks"] if c["area"] == "gpm"]
    assert entry == {
        "area": "gpm",
        "status": "warning",
        "found": starved.found,
        "fix": dip_causes.STARVED_FIX,
    }
    assert "busy but starved: SM 6% while util 98%" in entry["found"]


def test_in_the_tui_the_monitors_reading_is_judged_with_the_machines_note(
    no_torch: None, tmp_path: Path
) -> None:
    """The D screen passes the monitor's view (its GPM over a whole tick); the doctor's own reading gives
    the compute capabilities and the note on DCGM."""
    mine = machine_with(GpuSample(index=0, name=H100, util_gpu=98), note=DCGM_NOTE)
    view = machine_with(
        GpuSample(index=0, name=H100, util_gpu=99, gpm=gpm(82.0, tensor=0.0)),
        GpuSample(index=1, name=H100, util_gpu=99),
    )
    view = SystemFacts(gpus=(), processes=view.processes, samples=view.samples)  # as the TUI builds it
    checks = run.diagnose(system=mine, env={}, seen=(view, tmp_path))
    assert [c.found for c in checks if c.area == "gpm"] == [
        "GPU 0 (pid 4242): tensor cores idle: fp32 matmuls? (SM 82% active, tensor 0%) (GPM over 1.0 s)",
        f"GPU 1: SM and tensor activity n/a: {DCGM_NOTE}",
    ]


# -- the reading: facts.gather through a fake NVML ----------------------------------------------------------

SM_ID = pynvml.NVML_GPM_METRIC_SM_UTIL
TENSOR_ID = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL


@pytest.fixture
def hopper(monkeypatch: pytest.MonkeyPatch) -> Any:
    """GPU 0 an H100 with GPM and a job (SM 7 %, tensor 0 %, utilization 98 %); GPU 1 an A100 without."""
    f = FakeNvml(n_gpus=2)
    f.gpus[0].gpm = {SM_ID: 7.0, TENSOR_ID: 0.0}
    f.gpus[0].processes["C"] = [FakeProcess(4242, memory=1 << 30)]
    f.gpus[0].util_gpu = 98
    f.gpus[1].capability = (8, 0)
    f.install(monkeypatch)
    monkeypatch.setattr(gpm_mod, "dcgm_running", lambda: None)
    yield f
    assert f.violations == []
    assert f.initialized == 0 and f.live_gpm_samples() == 0  # NVML shut, every GPM sample freed


def test_gather_measures_gpm_over_the_doctors_interval(hopper: FakeNvml, tmp_path: Path, maps: Path) -> None:
    f = facts.gather(machine(tmp_path), maps)
    assert hopper.slept == [pytest.approx(facts.DOCTOR_GPM_S)]
    g0, g1 = f.samples
    assert (
        g0.gpm is not None
        and g0.gpm.sm_active == 7.0
        and g0.gpm.interval == pytest.approx(facts.DOCTOR_GPM_S)
    )
    assert g1.gpm is None and f.gpm_note is None
    assert [c.found for c in checks_gpm.checks(f)] == [
        "GPU 0 (pid 4242): busy but starved: SM 7% while util 98% (GPM over 1.0 s)",
        f"GPU 1 ({f.samples[1].name}): SM and tensor activity n/a: GPM needs Hopper or newer "
        "(NVML's utilization only says that a kernel ran)",
    ]


def test_gather_does_not_arm_gpm_behind_dcgm(
    hopper: FakeNvml,
    tmp_path: Path,
    maps: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpm_mod, "dcgm_running", lambda: "nv-hostengine (pid 812)")
    f = facts.gather(machine(tmp_path), maps)
    assert hopper.slept == [] and all(g.gpm is None for g in f.samples)
    assert f.gpm_note is not None and "DCGM is running (nv-hostengine (pid 812))" in f.gpm_note
    assert any(f.gpm_note in c.found and c.status == OK for c in checks_gpm.checks(f))
    # Asked for (doctor --gpm on, once wired): read anyway.
    f = facts.gather(machine(tmp_path / "on"), maps, gpm="on")
    assert f.samples[0].gpm is not None and f.gpm_note is None
