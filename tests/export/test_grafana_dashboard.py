"""deploy/grafana/gputui-dashboard.json against a real Prometheus scraping `gputui export --demo`: every
PromQL expression in it (panels' targets and the variables' queries, the variables substituted as
Grafana would with "All" selected) must parse and return data, in the units its panel claims.

The few that cannot return data on a demo that has run for seconds say why below (EMPTY_ON_THE_DEMO), and
that reason is checked: the exporter declares each such metric (so its name is right) and has no sample
of it yet. When the demo grows one, the test asks for the exemption to go."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.analyze import dip_causes
from tests.export.servers import NO_PROMETHEUS, PROMETHEUS, Exporter, PrometheusServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS),
]

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gputui-dashboard.json"
GPUS = 4
# What Grafana puts in place of each variable, with "All" selected ($__rate_interval: 4 scrape intervals).
VARIABLES = {"instance": ".*", "gpu": ".*", "__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
# Metric -> why an expression on it has no data on a demo that started seconds ago.
EMPTY_ON_THE_DEMO = {
    "gputui_process_hung": "no demo process hangs: the rules need two minutes of a quiet, spinning process",
    "gputui_agent_data_wait_ratio": "the demo's trainers run without the gputui agent (gputui run / attach)",
    "gputui_gpu_seconds_until_full": "a memory trend needs 4 minutes of a process's life (forecast.py: "
    "WARMUP_S + MIN_DATA_S); the demo's leaky trainer gets one after that",
    "gputui_process_memory_growth_bytes_per_second": "the same trend: none in a process's first 4 minutes",
}
REQUIRED = {  # what the dashboard is for: each must be in some expression
    "gputui_zombie_processes",
    "gputui_unaccounted_memory_bytes",
    "gputui_gpu_seconds_until_full",
    "gputui_process_memory_growth_bytes_per_second",
    "gputui_process_hung",
    "gputui_agent_data_wait_ratio",
    "gputui_dips_total",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_GPU_UTIL",
}
_METRIC = re.compile(r"\b((?:DCGM_FI|gputui)_[A-Za-z0-9_]+)\b")
_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$")


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))  # a collapsed row keeps its panels inside


def substituted(expr: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        assert name in VARIABLES, f"unknown variable ${name} in {expr}"
        return VARIABLES[name]

    # $name, ${name} and ${name:format}, [[name]]
    done = re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", value, expr)
    assert "$" not in done, done
    return done


def expressions() -> list[tuple[str, dict[str, Any], str]]:
    """(where, panel or variable, PromQL) for every query in the dashboard."""
    found = []
    for panel in all_panels(dashboard()["panels"]):
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r} {target['refId']}", panel, substituted(target["expr"])))
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = _LABEL_VALUES.match(query)
        assert match, f"variable {variable['name']}: {query}"
        selector, label = match.groups()
        found.append(
            (f"variable ${variable['name']}", variable, f"group by ({label}) ({substituted(selector)})")
        )
    return found


def test_the_dashboard_covers_what_only_gputui_exports_and_is_well_formed() -> None:
    board = dashboard()
    names = {m for _, _, expr in expressions() for m in _METRIC.findall(expr)}
    assert names >= REQUIRED, REQUIRED - names
    panels = list(all_panels(board["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]  # any Prometheus it is given
            assert panel["description"], panel["title"]
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "instance", "gpu"}


def test_busy_but_starved_is_the_monitors_own_rule() -> None:
    (expr,) = [e for where, _, e in expressions() if "busy but starved now" in where]
    util = re.search(r"DCGM_FI_DEV_GPU_UTIL\{[^}]*\} >= ([0-9.]+)", expr)
    sm = re.search(r"DCGM_FI_PROF_SM_ACTIVE\{[^}]*\} <= ([0-9.]+)", expr)
    assert util and sm, expr
    assert float(util.group(1)) == dip_causes.UTIL_BUSY
    assert float(sm.group(1)) * 100 == pytest.approx(dip_causes.SM_STARVED)  # a ratio, as dcgm-exporter's


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, Exporter]]:
    exporter = Exporter("dash-node", gpus=GPUS)
    prom = None
    try:
        prom = PrometheusServer(tmp_path_factory.mktemp("prom"), [exporter.port])
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", count=GPUS)
        time.sleep(4)  # a few scrapes: rate() and increase() need two samples in their window
        yield prom, exporter
    finally:
        if prom is not None:
            prom.stop()
        exporter.stop()


def test_every_expression_parses_and_returns_data(prometheus: tuple[PrometheusServer, Exporter]) -> None:
    prom, exporter = prometheus
    scrape = exporter.scrape()
    problems = []
    for where, panel, expr in expressions():
        try:
            result = prom.query(expr)
        except urllib.error.HTTPError as err:  # 400: Prometheus could not parse or run it
            problems.append(f"{where}: {err.code} {err.read().decode()[:300]} in {expr}")
            continue
        exempt = {m for m in _METRIC.findall(expr) if m in EMPTY_ON_THE_DEMO}
        if exempt:
            for metric in exempt:  # the reason holds: declared by the exporter, and no sample of it yet
                assert f"# TYPE {metric} " in scrape, f"{metric}: not a metric gputui exports"
                if re.search(rf"^{metric}[{{ ]", scrape, re.MULTILINE):
                    problems.append(f"{where}: {metric} now has data on the demo: drop its exemption")
            continue
        if not result:
            problems.append(f"{where}: no data from {expr}")
            continue
        problems.extend(f"{where}: {p}" for p in out_of_range(panel, expr, result))
    assert problems == [], "\n".join(problems)


def out_of_range(panel: dict[str, Any], expr: str, result: list[dict[str, Any]]) -> list[str]:
    """Values outside what the panel's unit allows: a ratio served as a percentage (or the other way
    round) shows here. Only single-metric expressions: a difference may fall below 0."""
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    bounds = {"percent": (0.0, 100.0), "percentunit": (0.0, 1.0)}.get(unit or "")
    if bounds is None or expr.count("{") != 1:
        return []
    low, high = bounds
    values = [float(s["value"][1]) for s in result]
    return [f"{v} outside {low}..{high} ({unit}) in {expr}" for v in values if not low <= v <= high]


def test_the_variables_list_the_demos_host_and_gpus(prometheus: tuple[PrometheusServer, Exporter]) -> None:
    prom, exporter = prometheus
    queries = {where: expr for where, _, expr in expressions() if where.startswith("variable")}
    hosts = {s["metric"]["instance"] for s in prom.query(queries["variable $instance"])}
    assert hosts == {f"127.0.0.1:{exporter.port}"}
    gpus = {s["metric"]["gpu"] for s in prom.query(queries["variable $gpu"])}
    assert gpus == {str(i) for i in range(GPUS)}


def test_a_broken_expression_would_be_caught(prometheus: tuple[PrometheusServer, Exporter]) -> None:
    prom, _ = prometheus
    with pytest.raises(urllib.error.HTTPError):
        prom.query("sum by (gpu (DCGM_FI_DEV_GPU_UTIL)")
    assert prom.query("DCGM_FI_PROF_NO_SUCH_METRIC") == []
