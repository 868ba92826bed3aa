"""The oracle on a tape: `make gpu-check` records, beside every NVML answer gputui received, what
nvidia-smi said at that moment (a mark "nvidia-smi" after the two readings it is compared with). Played
back here, the last reading of each tape must still agree with nvidia-smi: a change to NvmlSource that
misreads a real driver's answer (a unit, a struct field, a version) fails on any machine.

Tapes recorded on real GPUs live in tests/fixtures/gpu/ (none yet: no GPU machine has run the check). The
same test runs on a tape recorded from the fake NVML with an nvidia-smi written from the fake's state, so
the machinery is proven until then."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gputui.collect.sources.nvml as nvml_module
from bench.gpucheck.step_oracle import FIELDS, gpu_mismatches, process_mismatches
from gputui.collect.sources.base import Reading
from gputui.collect.sources.nvml import NvmlSource
from gputui.collect.sources.nvml_tape import Player, Recorder
from tests.collect.fake_nvml import FakeNvml
from tests.collect.test_nvml_tape import Clock, h100_node

MiB = 1 << 20
GPU_TAPES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "gpu").glob("nvml_tape*.json"))


def smi_rows(fake: FakeNvml) -> list[dict[str, str]]:
    """What nvidia-smi --query-gpu would print for the fake's GPUs (its units and words)."""
    rows = []
    for g in fake.gpus:
        rows.append(
            {
                "name": str(g.name),
                "uuid": str(g.uuid),
                "pci.bus_id": str(g.pci_bus_id),
                "driver_version": fake.driver_version,
                "memory.total": str(g.mem_total // MiB),
                "memory.reserved": str(g.mem_reserved // MiB),
                "memory.used": str(g.mem_used // MiB),
                "utilization.gpu": str(g.util_gpu),
                "utilization.memory": str(g.util_mem),
                "temperature.gpu": str(g.temperature),
                "power.draw.instant": f"{(g.power_mw or 0) / 1000:.2f}",
                "enforced.power.limit": f"{(g.power_limit_mw or 0) / 1000:.2f}",
                "clocks.sm": str(g.sm_clock),
                "clocks.mem": str(g.mem_clock),
                "clocks.max.sm": str(g.sm_clock_max),
                "clocks.max.mem": str(g.mem_clock_max),
                "pstate": f"P{g.pstate}",
                "fan.speed": "[N/A]" if g.fan is None else str(g.fan),
                "persistence_mode": "Enabled" if g.persistence else "Disabled",
                "compute_mode": "Default",
                "mig.mode.current": "Enabled" if g.mig and g.mig[0] else "Disabled",
                "clocks_event_reasons.active": f"0x{g.clock_reasons or 0:016x}",
            }
        )
    return rows


def fake_tape() -> dict[str, Any]:
    fake = h100_node()
    fake.gpus[3].fan = None  # unknown on nvidia-smi's side must stay unknown on ours
    with pytest.MonkeyPatch.context() as mp:
        fake.install(mp)
        with Recorder() as rec:
            src = NvmlSource()
            src.open()
            try:
                for slow in (True, False, True):
                    fake.advance(1.0)
                    src.read(slow)
                apps = [
                    {"pid": str(p.pid), "used_memory": str((p.memory or 0) // MiB)}
                    for g in fake.gpus
                    for p in g.processes["C"]
                ]
                rec.mark("nvidia-smi", {"phase": "load", "tol_mem": 64, "gpus": smi_rows(fake), "apps": apps})
            finally:
                src.close()
    return rec.tape()


def last_reading(tape: dict[str, Any] | Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Reading, str | None]:
    """Play every answer: each function's last one is what it said when nvidia-smi was asked."""
    clock = Clock()
    monkeypatch.setattr(nvml_module, "time", clock)
    Player(tape, keep_pids=True).install(monkeypatch)
    src = NvmlSource()
    info = src.open()
    try:
        reading = src.read(True)
        for _ in range(40):
            clock.now += 1.0
            reading = src.read(True)
    finally:
        src.close()
    return reading, info.driver_version


def oracle_marks(tape: dict[str, Any]) -> list[dict[str, Any]]:
    return [c["data"] for c in tape["calls"] if c.get("mark") == "nvidia-smi" and "data" in c]


@pytest.mark.parametrize("path", [None, *GPU_TAPES], ids=["fake", *(p.stem for p in GPU_TAPES)])
def test_the_last_reading_of_a_tape_agrees_with_nvidia_smi(
    path: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tape = fake_tape() if path is None else json.loads(path.read_text())
    oracle = oracle_marks(tape)[-1]
    reading, driver = last_reading(tape, monkeypatch)
    compared, mismatches = gpu_mismatches(
        oracle["gpus"], reading.gpus, reading.gpus, driver, oracle["tol_mem"]
    )
    assert mismatches == []
    assert compared >= len(oracle["gpus"]) * 10
    theirs, ours, off = process_mismatches(oracle["apps"], reading.processes)
    assert theirs == ours and off == {}


def test_a_misread_unit_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same comparison fails when gputui's value is off: watts as milliwatts, MiB as MB."""
    tape = fake_tape()
    oracle = oracle_marks(tape)[-1]
    reading, driver = last_reading(tape, monkeypatch)
    from dataclasses import replace

    wrong = [
        replace(g, power=(g.power or 0) * 1000, mem_total=(g.mem_total or 0) // MiB * 1_000_000)
        for g in reading.gpus
    ]
    _, mismatches = gpu_mismatches(oracle["gpus"], wrong, wrong, driver, oracle["tol_mem"])
    assert {m["field"] for m in mismatches} == {"power.draw.instant", "memory.total"}
    assert len(mismatches) == 2 * len(reading.gpus)
    assert {f for f, _, _ in FIELDS} >= set(oracle["gpus"][0])
