"""The expressions of dashboards made for dcgm-exporter (its own Grafana dashboard, the GPU Operator's
recording rules, DeepOps' GPU dashboard, the OpenShift console's GPU plugin) that came back empty against
gputui before issue 27, run unchanged against a real Prometheus scraping `gputui export --demo`: each
returns a series per GPU, in dcgm-exporter's units. The demo's GPUs are H100s, so they serve GPM."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.export.servers import NO_PROMETHEUS, PROMETHEUS, Exporter, PrometheusServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS),
]

GPUS = 2
# (expression, lowest, highest): what each must return for every GPU of the demo.
EXPRESSIONS = [
    # the console plugin's GPU picker and its utilization card
    ("count by (gpu, UUID, modelName) (DCGM_FI_PROF_GR_ENGINE_ACTIVE)", 1, 1),
    ("avg by (gpu) (DCGM_FI_PROF_GR_ENGINE_ACTIVE) * 100", 0, 100),
    # dcgm-exporter's dashboard: tensor core utilization
    ('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~".*", gpu=~".*"}', 0, 1),
    # the GPU Operator's recording rules and DeepOps: PCIe and NVLink
    ("sum by (gpu) (DCGM_FI_PROF_PCIE_TX_BYTES)", 0, 64e9),
    ("sum by (gpu) (DCGM_FI_PROF_PCIE_RX_BYTES)", 0, 64e9),
    ("sum by (gpu) (rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[1m]))", float("-inf"), float("inf")),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 0, 1e7),  # DCGM's MiB/s-ish rate
    # the console plugin's power card and clocks
    ("DCGM_FI_DEV_POWER_USAGE / DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", 0, 1),
    ("DCGM_FI_DEV_SM_CLOCK / DCGM_FI_DEV_MAX_SM_CLOCK", 0, 1),
    ("DCGM_FI_DEV_MEM_CLOCK / DCGM_FI_DEV_MAX_MEM_CLOCK", 0, 1),
    # SM activity against NVML's utilization, the question GPM answers
    ("DCGM_FI_PROF_SM_ACTIVE", 0, 1),
    ("DCGM_FI_PROF_SM_OCCUPANCY", 0, 1),
    ("DCGM_FI_PROF_DRAM_ACTIVE", 0, 1),
]


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    exporter = Exporter("dash-host", gpus=GPUS, interval=0.5)
    server = None
    try:
        server = PrometheusServer(tmp_path_factory.mktemp("prom"), [exporter.port])
        server.wait_for("DCGM_FI_PROF_SM_ACTIVE", count=GPUS, timeout=60)
        yield server
    finally:
        if server is not None:
            server.stop()
        exporter.stop()


@pytest.mark.parametrize(("expr", "low", "high"), EXPRESSIONS, ids=[e for e, *_ in EXPRESSIONS])
def test_dashboard_expression_returns_every_gpu(
    prom: PrometheusServer, expr: str, low: float, high: float
) -> None:
    result = prom.wait_for(expr, count=GPUS, timeout=30)
    gpus = sorted(r["metric"].get("gpu", "") for r in result)
    assert gpus == [str(i) for i in range(GPUS)], (expr, result)
    for r in result:
        value = float(r["value"][1])
        assert low <= value <= high, (expr, r)


def test_the_xid_series_carries_dcgm_exporters_labels(prom: PrometheusServer) -> None:
    result = prom.wait_for('DCGM_FI_DEV_XID_ERRORS{err_code!=""}', count=GPUS)
    for r in result:
        labels = r["metric"]
        assert labels["err_msg"] and labels["DCGM_FI_DRIVER_VERSION"]
        assert labels["device"] == f"nvidia{labels['gpu']}"
