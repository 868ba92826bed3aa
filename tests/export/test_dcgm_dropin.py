"""gputui export as a drop-in for dcgm-exporter (issue 27): the DCGM_FI_PROF_* set from NVML GPM, the
DCGM_FI_DEV_* fields dashboards ask for beyond its default counters, its labels (driver version, Xid
code and message, `device`, a pod's or a SLURM job's on the GPU series) and its types (counters without
`_total`), in both exposition formats. Names, units and types are those of dcgm-exporter's
etc/default-counters.csv and etc/dcp-metrics-included.csv."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from gputui.export.metrics import DCGM_COUNTERS, XidCounters, families, retype_counters
from gputui.model import GpmMetrics, MigInstance, Owner, ProcessRow
from tests.export.servers import Exporter
from tests.export.test_metrics import DRIVER, MIB, Scrape, _Families, gpu0, gpu1, proc, scrape, snapshot

HOPPER = GpmMetrics(
    interval=1.0,
    graphics=97.0,
    sm_active=88.5,
    sm_occupancy=41.0,
    tensor=63.0,
    hmma=62.5,
    imma=0.0,
    dfma=0.0,
    dram=52.0,
    fp16=3.0,
    fp32=11.0,
    fp64=0.0,
    integer=7.5,
    pcie_tx=120 * MIB,
    pcie_rx=2048 * MIB,
    nvlink_tx=31_000 * MIB,
    nvlink_rx=30_000 * MIB,
)
PROF = {  # dcgm-exporter's name -> the value it must serve for HOPPER (ratios 0..1, bytes/s)
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.97,
    "DCGM_FI_PROF_SM_ACTIVE": 0.885,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.41,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.63,
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": 0.625,
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": 0.0,
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": 0.0,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.52,
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.03,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.11,
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0,
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": 0.075,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 120 * MIB,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 2048 * MIB,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 31_000 * MIB,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 30_000 * MIB,
}


def scrape_of(*gpus: Any, processes: Any = (), xids: XidCounters | None = None, **changes: Any) -> Scrape:
    snap = replace(snapshot(gpus, processes), **changes)

    class Collector(_Families):
        def collect(self) -> Any:
            return families(self.snap, None, xids)

    return scrape(Collector(snap))


# -- GPM as DCGM_FI_PROF_* --------------------------------------------------------------------------------


def test_prof_fields_in_dcgm_exporters_units_for_a_gpm_gpu_only() -> None:
    s = scrape_of(gpu0(gpm=HOPPER), gpu1())  # GPU 1: an A100, no GPM
    for name, value in PROF.items():
        assert s.by(name, "gpu") == {"0": pytest.approx(value)}, name
        assert s.types[name] == "gauge", name
        labels = s.series(name)[0][0]
        assert labels["device"] == "nvidia0" and labels["DCGM_FI_DRIVER_VERSION"] == DRIVER


def test_one_unknown_metric_has_no_sample_and_hides_no_other() -> None:
    s = scrape_of(gpu0(gpm=replace(HOPPER, tensor=None, sm_occupancy=0.0)))
    assert s.series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == []  # unknown: no sample, never 0
    assert s.value("DCGM_FI_PROF_SM_OCCUPANCY", gpu="0") == 0.0  # a measured 0 is a 0
    assert s.value("DCGM_FI_PROF_SM_ACTIVE", gpu="0") == pytest.approx(0.885)


def test_mig_instances_have_prof_series_with_dcgm_exporters_instance_labels() -> None:
    mig = (
        MigInstance(1, 0, profile="3g.40gb", gpm=replace(HOPPER, sm_active=70.0)),
        MigInstance(1, 1, profile="3g.40gb", gpm=replace(HOPPER, sm_active=70.0)),  # same GI: one series
        MigInstance(5, 0, profile="2g.20gb", gpm=None),
    )
    s = scrape_of(gpu0(mig_mode=True, mig=mig, gpm=HOPPER))
    got = {lb.get("GPU_I_ID", ""): v for lb, v in s.series("DCGM_FI_PROF_SM_ACTIVE")}
    assert got == {"": pytest.approx(0.885), "1": pytest.approx(0.70)}
    labels = s.series("DCGM_FI_PROF_SM_ACTIVE", GPU_I_ID="1")[0][0]
    assert labels["GPU_I_PROFILE"] == "3g.40gb" and labels["gpu"] == "0"


# -- the DEV fields dashboards ask for --------------------------------------------------------------------


def test_limits_clocks_and_nvlink_bandwidth() -> None:
    g = gpu0(power_limit=700.0, power_limit_max=750.0, sm_clock_max=1980, mem_clock_max=2619)
    g = replace(g, nvlink_rx=300e9, nvlink_tx=200e9)
    s = scrape_of(g, gpu1(power_limit_max=None, sm_clock_max=None, mem_clock_max=None))
    assert s.by("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "gpu") == {"0": 750.0}
    assert s.by("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gpu") == {"0": 700.0}
    assert s.by("DCGM_FI_DEV_MAX_SM_CLOCK", "gpu") == {"0": 1980}
    assert s.by("DCGM_FI_DEV_MAX_MEM_CLOCK", "gpu") == {"0": 2619}
    # DCGM's arithmetic: (rx + tx) KiB/s / 1000; none for a GPU without NVLink
    assert s.by("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gpu") == {"0": pytest.approx(500e9 / 1024 / 1000)}
    assert s.types["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"


# -- labels --------------------------------------------------------------------------------------------


def test_the_driver_label_is_on_dcgm_series_only_and_only_when_known() -> None:
    s = scrape_of(gpu0())
    assert s.series("DCGM_FI_DEV_GPU_UTIL")[0][0]["DCGM_FI_DRIVER_VERSION"] == DRIVER
    assert "DCGM_FI_DRIVER_VERSION" not in s.series("gputui_gpu_lost")[0][0]
    s = scrape_of(gpu0(), driver_version=None)
    assert "DCGM_FI_DRIVER_VERSION" not in s.series("DCGM_FI_DEV_GPU_UTIL")[0][0]


def owned(pid: int, owner: Owner | None, gpu: int = 0, gi: int | None = None) -> ProcessRow:
    return replace(proc(pid, gpu=gpu), owner=owner, gpu_instance=gi)


POD_UID = "0f6c1c9e-9b1a-4d8e-8f2b-6f1a2d3c4b5a"


def pod(name: str = "trainer-0", container: str = "c" * 64) -> Owner:
    return Owner(
        "kubernetes",
        POD_UID if name == "trainer-0" else POD_UID[::-1],
        name=name,
        namespace="ml",
        container=container,
    )


def test_a_gpu_used_by_one_pod_carries_its_pod_on_every_dcgm_series() -> None:
    procs = [owned(1, pod()), owned(2, pod())]
    s = scrape_of(gpu0(gpm=HOPPER), gpu1(), processes=procs)
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED"):
        labels = s.series(name, gpu="0")[0][0]
        assert (labels["pod"], labels["namespace"], labels["container"], labels["pod_uid"]) == (
            "trainer-0",
            "ml",
            "c" * 12,
            POD_UID,
        ), name
    assert "pod" not in s.series("DCGM_FI_DEV_GPU_UTIL", gpu="1")[0][0]  # GPU 1: no process, no pod


@pytest.mark.parametrize(
    "procs",
    [
        [owned(1, pod()), owned(2, pod("trainer-1"))],  # two pods share it
        [owned(1, pod()), owned(2, None)],  # a pod and a plain process
        [owned(1, pod()), owned(2, Owner("slurm", "81234"))],
    ],
    ids=["two-pods", "pod-and-plain", "pod-and-slurm"],
)
def test_a_shared_gpu_names_no_job(procs: list[ProcessRow]) -> None:
    labels = scrape_of(gpu0(), processes=procs).series("DCGM_FI_DEV_GPU_UTIL")[0][0]
    assert not {"pod", "namespace", "container", "pod_uid", "hpc_job"} & labels.keys()


def test_a_gpu_of_one_slurm_job_carries_hpc_job() -> None:
    procs = [owned(1, Owner("slurm", "81234", step="0")), owned(2, Owner("slurm", "81234", step="1"))]
    labels = scrape_of(gpu0(), processes=procs).series("DCGM_FI_DEV_GPU_UTIL")[0][0]
    assert labels["hpc_job"] == "81234" and "pod" not in labels


def test_a_mig_instance_names_the_pod_on_it_alone() -> None:
    mig = (
        MigInstance(1, 0, profile="3g.40gb", mem_used=MIB, mem_total=2 * MIB),
        MigInstance(5, 0, profile="2g.20gb", mem_used=MIB, mem_total=2 * MIB),
    )
    procs = [owned(1, pod(), gi=1), owned(2, pod("trainer-1"), gi=5)]
    s = scrape_of(gpu0(mig_mode=True, mig=mig), processes=procs)
    assert s.series("DCGM_FI_DEV_FB_USED", GPU_I_ID="1")[0][0]["pod"] == "trainer-0"
    assert s.series("DCGM_FI_DEV_FB_USED", GPU_I_ID="5")[0][0]["pod"] == "trainer-1"
    whole = [lb for lb, _ in s.series("DCGM_FI_DEV_FB_USED") if "GPU_I_ID" not in lb]
    assert "pod" not in whole[0]  # the whole GPU is shared by two pods


def test_xid_errors_carry_err_code_and_err_msg() -> None:
    xids = XidCounters(last={0: 79, 1: 999}, count={0: 1, 1: 1})
    s = scrape_of(gpu0(), gpu1(), gpu1(index=2, uuid="GPU-2"), xids=xids)
    by_gpu = {lb["gpu"]: (lb["err_code"], lb["err_msg"], v) for lb, v in s.series("DCGM_FI_DEV_XID_ERRORS")}
    assert by_gpu["0"] == ("79", "GPU fallen off the bus", 79)
    assert by_gpu["1"] == ("999", "Unknown Error", 999)
    assert by_gpu["2"] == ("0", "No Error", 0)  # none seen, as dcgm-exporter writes it


# -- types, in both exposition formats ----------------------------------------------------------------------


def test_counters_keep_dcgm_exporters_names_in_the_text_format() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(_Families(snapshot([gpu0(nvlink_rx=1.0, nvlink_tx=1.0)])))
    text = retype_counters(generate_latest(registry), openmetrics=False).decode()
    for name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"):
        assert f"# TYPE {name} counter\n" in text and f"# HELP {name} " in text
        assert f"{name}_total" not in text
        assert f"\n{name}{{" in text


def scrape_http(exporter: Exporter, accept: str) -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{exporter.port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers["Content-Type"], answer.read().decode()


@pytest.fixture(scope="module")
def demo() -> Any:
    exporter = Exporter("dropin-host", gpus=1, interval=0.2)
    try:
        yield exporter
    finally:
        exporter.stop()


def test_both_formats_parse_and_type_the_counters_as_dcgm_exporter_does(demo: Exporter) -> None:
    kind, text = scrape_http(demo, "text/plain;version=0.0.4")
    assert kind.startswith("text/plain")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    kind, om = scrape_http(demo, "application/openmetrics-text;version=1.0.0")
    assert kind.startswith("application/openmetrics-text")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n" in om
    types = {fam.name: fam.type for fam in parse_openmetrics(om)}  # the strict OpenMetrics parser
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "unknown"
    assert not [n for n in DCGM_COUNTERS if types.get(n) == "counter"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool (Debian's prometheus package)")
def test_promtool_reads_the_text_format_with_only_dcgm_exporters_own_lint(demo: Exporter) -> None:
    _, text = scrape_http(demo, "text/plain;version=0.0.4")
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    # promtool lints what dcgm-exporter's own names and labels have too (counters without `_total`, the
    # labels modelName, UUID, Hostname, GPU_I_ID ...): that and nothing else
    dcgm_exporters = ('counter metrics should have "_total" suffix', "should be written in 'snake_case'")
    others = [p for p in problems if not any(lint in p for lint in dcgm_exporters)]
    assert others == [], others
