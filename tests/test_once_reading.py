"""`gputui --once` / `--json` from one reading: what needs a second one is null and said so, never 0; an
explicit --interval measures it. And `--once` lists a MIG GPU's instances, each with its processes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import MIG_LAYOUT, DemoSource
from gputui.model import GpuSample, HostStats, MigInstance
from gputui.output.jsonout import one_reading_to_dict, unmeasured
from gputui.output.oneshot import ONE_READING_LEGEND, render

TIMEOUT = 60


def _gputui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_one_reading_nulls_the_rates_and_names_them() -> None:
    with Sampler(DemoSource(gpus=2, start_at=120.0)) as sampler:
        first = sampler.tick()
        second = sampler.tick()
    assert all(p.cpu_percent is None for p in first.processes)  # unknown, not 0 %
    said = unmeasured(first)
    assert "processes[].cpu_percent" in said and "host.cpu_percent" in said
    assert "gpus[].pcie_rx" not in said  # the demo, like NVML's own 20 ms sample, gives it at once
    doc = one_reading_to_dict(first)
    assert doc["one_reading"]["unmeasured"] == list(said)
    assert "--interval" in doc["one_reading"]["note"]
    # A second reading measures %CPU: it is no longer listed.
    assert "processes[].cpu_percent" not in unmeasured(second)
    # Counters read once (NVML's PCIe and NVLink byte counters) are listed where null.
    gpus = tuple(dataclasses.replace(g, pcie_rx=None, nvlink_tx=None) for g in second.gpus)
    host = HostStats(cpu_percent=None)
    said = unmeasured(dataclasses.replace(second, gpus=gpus, host=host))
    assert {"gpus[].pcie_rx", "gpus[].nvlink_tx", "host.cpu_percent"} <= set(said)


def test_once_legend_only_when_the_cpu_column_is_unmeasured() -> None:
    with Sampler(DemoSource(gpus=1, start_at=120.0)) as sampler:
        first = sampler.tick()
        second = sampler.tick()
    assert render(first, one_reading=True).splitlines()[-1] == ONE_READING_LEGEND
    assert ONE_READING_LEGEND not in render(first)
    assert ONE_READING_LEGEND not in render(second, one_reading=True)


def test_json_without_interval_is_one_reading_and_with_it_measures_cpu() -> None:
    one = _gputui("--demo", "--demo-gpus", "1", "--json")
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert all(p["cpu_percent"] is None for p in data["processes"])
    assert "processes[].cpu_percent" in data["one_reading"]["unmeasured"]
    two = _gputui("--demo", "--demo-gpus", "1", "--json", "--interval", "0.3")
    assert two.returncode == 0, two.stderr
    data = json.loads(two.stdout)
    assert "one_reading" not in data
    visible = [p for p in data["processes"] if p["visible"]]
    assert visible and all(isinstance(p["cpu_percent"], (int, float)) for p in visible)


def test_once_lists_each_mig_instance_under_its_gpu_with_its_processes() -> None:
    with Sampler(DemoSource(gpus=2, start_at=120.0, mig=True)) as sampler:
        snap = sampler.tick()
    lines = render(snap).splitlines()
    gpu0 = next(i for i, line in enumerate(lines) if line.startswith("0   "))
    gpu1 = next(i for i, line in enumerate(lines) if line.startswith("1   "))
    mig = [i for i, line in enumerate(lines) if line.lstrip().startswith("MIG ")]
    assert len(mig) == len(MIG_LAYOUT) and all(gpu0 < i < gpu1 for i in mig)
    for i, (gi, ci, profile, _total) in zip(mig, MIG_LAYOUT, strict=True):
        assert lines[i].split()[1:3] == [f"{gi}/{ci}", profile]
    trainer = next(p for p in snap.processes if p.gpu == 0 and p.kinds)
    assert trainer.gpu_instance == MIG_LAYOUT[0][0]
    # The trainer right under its instance, which counts it; the instance's memory as NVML gives it.
    assert lines[mig[0] + 1].split()[0] == str(trainer.pid) and "1 process " in lines[mig[0]] + " "
    first = snap.gpus[0].mig[0]
    assert f"mem {first.mem_used / 2**30:.1f}/{first.mem_total / 2**30:.1f} GiB" in lines[mig[0]]  # type: ignore[operator]
    assert "util n/a" in lines[mig[0]]  # NVML has none per instance: not 0 %
    # Device holders (DataLoader workers) are on the GPU, in no instance known: listed after them.
    workers = [p.pid for p in snap.processes if p.gpu == 0 and not p.kinds]
    after = "\n".join(lines[mig[-1] : gpu1])
    assert workers and all(f" {pid} " in after for pid in workers)


def test_a_mig_gpu_without_instances_says_so() -> None:
    with Sampler(DemoSource(gpus=1, start_at=120.0)) as sampler:
        snap = sampler.tick()
    gpu = dataclasses.replace(snap.gpus[0], mig_mode=True, mig=())
    assert "MIG on: no instances" in render(dataclasses.replace(snap, gpus=(gpu,)))
    odd = MigInstance(gpu_instance=7, compute_instance=0, profile="\x1b[2J7g.80gb")
    text = render(dataclasses.replace(snap, gpus=(dataclasses.replace(gpu, mig=(odd,)),)))
    assert "\x1b" not in text and "MIG 7/0" in text
    assert isinstance(gpu, GpuSample)
