"""The bench's box (bench/box_world.py, bench/box.py): the fake NVML both monitors read, and the budgets."""

from __future__ import annotations

import ctypes
import os
import time

import pynvml
import pytest

from bench import box, box_world
from bench.run import budgets
from bench.shared import PtyRun


def test_every_process_changes_its_sm_percent_every_step_and_two_runs_agree() -> None:
    trainer = [box_world.sm_percent(0, 0, n) for n in range(20)]
    worker = [box_world.sm_percent(0, 1, n) for n in range(20)]
    assert all(55 <= v <= 99 for v in trainer) and all(0 <= v <= 12 for v in worker)
    assert len(set(trainer)) > 10  # it changes
    assert trainer == [box_world.sm_percent(0, 0, n) for n in range(20)]  # deterministic


def test_the_box_reports_every_rank_process_with_its_latest_utilization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ranks = [[os.getpid(), 11, 12, 13], [21, 22, 23, 24]]
    fake = box_world.build(ranks, monkeypatch)
    before = fake.now
    time.sleep(0.05)
    assert 0.04 < fake.now - before < 1.0  # the fake's clock runs as the real one
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert [p.pid for p in procs] == ranks[1]
    box_world.step(fake, ranks, 12345)
    samples = pynvml.nvmlDeviceGetProcessUtilization(handle, time.time_ns() // 1000 - 10**6)
    latest = {s.pid: s.smUtil for s in samples}
    assert latest == {pid: box_world.sm_percent(1, slot, 12345) for slot, pid in enumerate(ranks[1])}
    assert fake.gpus[1].util_gpu == min(100, sum(latest.values()))


def test_the_c_calls_nvitop_makes_answer_as_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = box_world.build([[1, 2]], monkeypatch)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    memory = pynvml.c_nvmlMemory_t()
    assert pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo")(handle, ctypes.byref(memory)) == 0
    assert memory.total == fake.gpus[0].mem_total and memory.used == fake.gpus[0].mem_used
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSomethingNew")
    assert fake.violations == []


def _run(cpu: float, bytes_s: int) -> PtyRun:
    return PtyRun(10.0, bytes_s * 10, cpu, 30 * 1024, 0.1, 0.2, b"")


def test_with_nvitop_the_box_budgets_are_relative_to_it() -> None:
    limits = box._relative_limits(_run(0.9, 700), _run(2.0, 500))
    assert limits["cpu_limit"] == 1.2 and limits["bytes_limit"] == 1000
    assert limits["cpu_vs_nvitop"] == 0.45 and limits["bytes_vs_nvitop"] == 1.4
    results: dict[str, object] = {
        "box": {**_run(0.9, 700).summary(), **limits},
    }
    judged = {b["budget"]: b for b in budgets(results) if b["value"] is not None}
    cpu = next(b for name, b in judged.items() if str(name).startswith("box CPU"))
    assert cpu["limit"] == 1.2 and cpu["pass"] is True
    assert judged["box bytes/s"]["limit"] == 1000 and judged["box bytes/s"]["pass"] is True
    assert judged["box peak RSS MiB"]["pass"] is True  # 30 MiB <= 40
