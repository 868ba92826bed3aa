"""Every GPU field gputui shows against nvidia-smi, and every compute process, at the same moment: gputui
reads, nvidia-smi answers, gputui reads again; a field that moves (utilization, power, clocks) passes when
nvidia-smi's value lies between gputui's two readings, widened by its tolerance. Idle, then under a bf16
matmul load holding 4 GiB. Every NVML answer gputui received is saved as a tape (nvml_tape.json)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.gpucheck.common import MIB, Result, out_dir, running, smi_csv, until, work_dir, workload
from gputui.collect.sampler import Sampler
from gputui.collect.sources.nvml import _REASONS, NvmlSource
from gputui.model import GpuProcess, GpuSample, ProcessRow, Snapshot

Get = Callable[[GpuSample, str | None], Any]  # a GPU and the driver version


def _mib(v: int | None) -> float | None:
    return None if v is None else v / MIB


def _health(name: str) -> Get:
    return lambda g, s: getattr(g.health, name) if g.health is not None else None


def _reasons(g: GpuSample, s: str | None) -> int | None:
    if g.throttle_reasons is None:
        return None
    return sum(bit for bit, name in _REASONS if name in g.throttle_reasons)


# nvidia-smi field, gputui's value, how to compare: "same" (equal once parsed), a number (absolute
# tolerance, in nvidia-smi's unit), "moves:N" (nvidia-smi between gputui's two readings, +-N), "%N" (relative)
FIELDS: tuple[tuple[str, Get, str], ...] = (
    ("name", lambda g, s: g.name, "same"),
    ("uuid", lambda g, s: g.uuid, "same"),
    ("pci.bus_id", lambda g, s: g.pci_bus_id, "same"),
    ("driver_version", lambda g, s: s, "same"),
    ("memory.total", lambda g, s: _mib(g.mem_total), "1"),
    ("memory.reserved", lambda g, s: _mib(g.mem_reserved), "1"),
    ("memory.used", lambda g, s: _mib(g.mem_used), "moves:2"),
    ("utilization.gpu", lambda g, s: g.util_gpu, "moves:10"),
    ("utilization.memory", lambda g, s: g.util_mem, "moves:10"),
    ("temperature.gpu", lambda g, s: g.temperature, "moves:2"),
    ("power.draw.instant", lambda g, s: g.power, "moves:30"),
    ("enforced.power.limit", lambda g, s: g.power_limit, "1"),
    ("clocks.sm", lambda g, s: g.sm_clock, "moves:60"),
    ("clocks.mem", lambda g, s: g.mem_clock, "moves:60"),
    ("clocks.max.sm", lambda g, s: g.sm_clock_max, "1"),
    ("clocks.max.mem", lambda g, s: g.mem_clock_max, "1"),
    ("pstate", lambda g, s: g.pstate, "moves:0"),
    ("fan.speed", lambda g, s: g.fan, "moves:2"),
    ("utilization.encoder", lambda g, s: g.enc_util, "moves:5"),
    ("utilization.decoder", lambda g, s: g.dec_util, "moves:5"),
    ("persistence_mode", lambda g, s: g.persistence_mode, "same"),
    ("compute_mode", lambda g, s: g.compute_mode, "same"),
    ("mig.mode.current", lambda g, s: g.mig_mode, "same"),
    ("ecc.errors.uncorrected.volatile.total", lambda g, s: g.ecc_errors, "0"),
    ("pcie.link.gen.current", _health("pcie_gen"), "moves:0"),
    ("pcie.link.width.current", _health("pcie_width"), "moves:0"),
    ("pcie.link.gen.max", _health("pcie_gen_max"), "0"),
    ("pcie.link.width.max", _health("pcie_width_max"), "0"),
    ("clocks_event_reasons.active", _reasons, "bits"),
)
_UNKNOWN = re.compile(r"^\[(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]$|^N/A$")


def parse(field: str, text: str) -> Any:
    """nvidia-smi's text as gputui would hold it: None for the unknowns."""
    if _UNKNOWN.match(text):
        return None
    if field == "pstate":
        return int(text[1:]) if text.startswith("P") and text[1:].isdigit() else None
    if field in ("persistence_mode", "mig.mode.current"):
        return {"Enabled": True, "Disabled": False}.get(text)
    if field == "clocks_event_reasons.active":
        return int(text, 16)
    if field in ("name", "uuid", "pci.bus_id", "driver_version", "compute_mode"):
        return text
    try:
        return float(text)
    except ValueError:
        return text


def compare(rule: str, smi: Any, mine: tuple[Any, Any]) -> bool:
    a, b = mine
    if smi is None or a is None:  # unknown must stay unknown: never 0 for "n/a", never n/a for a value
        return smi is None and a is None
    if rule == "same":
        return str(smi).lower() == str(a).lower() or (isinstance(smi, float) and smi == a)
    if rule == "bits":
        # Reasons come and go within a second: nvidia-smi's set lies within the union of ours.
        return bool((smi & ~((a or 0) | (b or 0))) == 0 or (smi == 0 and (a == 0 or b == 0)))  # smi: Any
    if rule.startswith("moves:"):
        tol = float(rule.split(":")[1])
        values = [float(v) for v in (a, b) if v is not None]
        return min(values) - tol <= float(smi) <= max(values) + tol
    return abs(float(smi) - float(a)) <= float(rule)


def supported_fields() -> list[str]:
    """The fields of FIELDS this nvidia-smi knows (names differ between driver releases)."""
    from bench.gpucheck.common import smi

    text = smi("--help-query-gpu")
    known = set(re.findall(r'^"([a-z0-9_.]+)"', text, re.M))
    return [f for f, _, _ in FIELDS if f in known or not known]


def gpu_mismatches(
    rows: list[dict[str, str]],
    first: Sequence[GpuSample],
    second: Sequence[GpuSample],
    driver: str | None,
    tol_mem: float,
) -> tuple[int, list[dict[str, Any]]]:
    """(fields compared, the ones that differ) between nvidia-smi's rows and gputui's two readings."""
    by_index = {g.index: g for g in second}
    mismatches = []
    compared = 0
    for g0, row in zip(first, rows, strict=False):
        g1 = by_index.get(g0.index, g0)
        for field, get, rule in FIELDS:
            if field not in row:
                continue
            if field == "memory.used":
                rule = f"moves:{tol_mem}"
            mine = (get(g0, driver), get(g1, driver))
            compared += 1
            if not compare(rule, parse(field, row[field]), mine):
                mismatches.append({"gpu": g0.index, "field": field, "nvidia_smi": row[field], "gputui": mine})
    return compared, mismatches


def process_mismatches(
    apps: list[dict[str, str]], processes: Sequence[GpuProcess | ProcessRow]
) -> tuple[list[int], list[int], dict[int, tuple[float, float | None]]]:
    """nvidia-smi's compute apps against gputui's: (their pids, ours, memory off by over 1 MiB)."""
    theirs = {int(a["pid"]): float(a["used_memory"]) for a in apps if a["pid"].isdigit()}
    ours = {p.pid: _mib(p.used_memory) for p in processes if "C" in p.kinds}
    off = {
        pid: (theirs[pid], used)
        for pid, used in ours.items()
        if pid in theirs and (used is None or abs(used - theirs[pid]) > 1)
    }
    return sorted(theirs), sorted(ours), off


def compare_gpus(
    r: Result,
    sampler: Sampler,
    phase: str,
    fields: list[str],
    tol_mem: float,
    mark: Callable[[str, Any], None],
) -> Snapshot:
    first = sampler.tick()
    rows = smi_csv("gpu", fields)
    apps = smi_csv("compute-apps", ["pid", "gpu_uuid", "used_memory", "process_name"])
    second = sampler.tick()
    # The oracle travels in the tape: a replay's last reading is `second`, comparable on any machine.
    mark("nvidia-smi", {"phase": phase, "fields": fields, "tol_mem": tol_mem, "gpus": rows, "apps": apps})
    compared, mismatches = gpu_mismatches(rows, first.gpus, second.gpus, second.driver_version, tol_mem)
    r.number(f"{phase}_fields_compared", compared)
    r.check(f"{phase}: every GPU field equals nvidia-smi's", not mismatches, mismatches, "no mismatch")
    # Processes: nvidia-smi's compute apps, each with its memory, and no more.
    theirs, ours, off = process_mismatches(apps, second.processes)
    r.check(f"{phase}: the same compute processes", theirs == ours, ours, str(theirs))
    r.check(f"{phase}: each process's memory (MiB, +-1)", not off, off, "within 1 MiB")
    return second


def run(r: Result) -> None:
    from gputui.collect.sources.nvml_tape import Recorder

    fields = supported_fields()
    r.number("fields", fields)
    tick_ms: list[float] = []
    with Recorder() as rec:
        sampler = Sampler(NvmlSource(xid_events=True), slow_interval=1.0)
        sampler.open()
        try:
            rec.mark("idle")
            for _ in range(6):  # a few fast and slow ticks, as the TUI makes them
                t0 = time.perf_counter()
                sampler.tick()
                tick_ms.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.5)
            snap = compare_gpus(r, sampler, "idle", fields, 2, rec.mark)
            r.number("errors_idle", list(snap.errors))
            ready = work_dir() / "oracle-load.ready"
            with running(workload("matmul", 60, ready, "4")) as load:
                if not until(ready.exists, 40):
                    r.check("load started", False, "no ready file in 40 s", "matmul running")
                    return
                rec.mark("load")
                for _ in range(6):
                    t0 = time.perf_counter()
                    snap = sampler.tick()
                    tick_ms.append((time.perf_counter() - t0) * 1000)
                    time.sleep(0.5)
                snap = compare_gpus(r, sampler, "load", fields, 64, rec.mark)
                row = next((p for p in snap.processes if p.pid == load.pid), None)
                if row is None:  # the load is python -m ...: its pid is the one Popen started
                    row = next((p for p in snap.processes if p.command and "workloads" in p.command), None)
                r.check(
                    "load: its row has user, command and class",
                    row is not None and row.visible and bool(row.user) and row.category == "ok",
                    None if row is None else (row.user, (row.command or "")[:60], row.category, row.reason),
                    "visible, a user, category ok",
                )
                busy = [g.util_gpu for g in snap.gpus]
                r.check(
                    "load: utilization high", all(u is not None and u >= 50 for u in busy), busy, ">= 50 %"
                )
                r.number("errors_load", list(snap.errors))
        finally:
            sampler.close()
            rec.save(out_dir() / "nvml_tape.json")  # also when a check above broke off
        latency = rec.latency()
    cli(r, [g.uuid for g in snap.gpus if g.uuid])
    ticks = len(tick_ms) + 4  # the comparisons' own ticks
    total_ms = sum(v["total_ms"] for v in latency.values())
    r.number("sampler_tick_ms_median", sorted(tick_ms)[len(tick_ms) // 2])
    r.number("nvml_ms_per_tick", round(total_ms / ticks, 2))
    top = sorted(latency.items(), key=lambda kv: -kv[1]["total_ms"])[:12]
    r.number("nvml_latency_top", {k: v for k, v in top})


def cli(r: Result, uuids: list[str]) -> None:
    """`gputui --json`, `--once` and `doctor --json` on the real driver: each answers, and how fast."""
    import subprocess

    from bench.gpucheck.common import REPO, python

    timings = {}
    for args in (("--json",), ("--once",), ("doctor", "--json")):
        t0 = time.perf_counter()
        done = subprocess.run(
            [python(), "-m", "gputui", *args], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        timings[" ".join(args)] = round(time.perf_counter() - t0, 3)
        if args == ("--json",):
            try:
                got = [g["uuid"] for g in json.loads(done.stdout)["gpus"]]
            except (ValueError, KeyError, TypeError):
                got = None
            r.check("gputui --json: every GPU by uuid", got == uuids, got, str(uuids))
        elif args == ("--once",):
            ok = done.returncode == 0 and len(done.stdout.splitlines()) > 2
            r.check("gputui --once: exit 0, a table", ok, done.stdout[-400:], "a table")
        else:
            try:
                checks = json.loads(done.stdout)["checks"]
            except (ValueError, KeyError, TypeError):
                checks = []
            problems = [c for c in checks if c.get("status") == "problem"]
            r.check(
                "gputui doctor: no problem on a working GPU box",
                bool(checks) and not problems,
                problems or done.stdout[-300:],
                "no problem",
            )
            r.number("doctor_checks", [(c.get("area"), c.get("status"), c.get("found")) for c in checks])
    r.number("cli_seconds", timings)
