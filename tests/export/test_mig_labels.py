"""MIG in the scrape, as dcgm-exporter writes it: a MIG instance has its own FB_USED / FB_FREE series with
GPU_I_PROFILE and GPU_I_ID beside its GPU's, and a process on an instance carries its GPU_I_ID."""

from __future__ import annotations

from dataclasses import replace

from gputui.export.exporter import Exporter
from gputui.model import GpuSample, MigInstance, Owner
from tests.export.test_metrics import (
    GPU_LABEL_NAMES,
    MIB,
    FakeSampler,
    gpu0,
    gpu1,
    proc,
    scrape,
    scrape_snapshot,
    snapshot,
)

GIB = 1024 * MIB
INSTANCES = (
    MigInstance(3, 0, "3g.40gb", "MIG-aaaa", mem_total=40 * GIB, mem_used=10 * GIB + 5, util=None),
    MigInstance(5, 0, "1g.10gb", "MIG-bbbb", mem_total=10 * GIB, mem_used=GIB, util=37),
)


def mig_gpu() -> GpuSample:
    return gpu0(mig_mode=True, mig=INSTANCES)


def test_each_instance_has_memory_series_with_dcgm_exporters_labels() -> None:
    s = scrape_snapshot(snapshot(gpus=(mig_gpu(), gpu1())))
    used = {lb.get("GPU_I_ID", ""): v for lb, v in s.series("DCGM_FI_DEV_FB_USED", gpu="0")}
    free = {lb.get("GPU_I_ID", ""): v for lb, v in s.series("DCGM_FI_DEV_FB_FREE", gpu="0")}
    assert used == {"": 40000, "3": 10 * 1024, "5": 1024}  # MiB, whole MiB; the GPU's own series stays
    assert free == {"": (81559 - 40000 - 515) - 1, "3": 30 * 1024 - 1, "5": 9 * 1024}
    labels = s.series("DCGM_FI_DEV_FB_USED", GPU_I_ID="3")[0][0]
    assert labels.keys() == GPU_LABEL_NAMES | {"GPU_I_ID", "GPU_I_PROFILE", "DCGM_FI_DRIVER_VERSION"}
    assert labels["GPU_I_PROFILE"] == "3g.40gb" and labels["device"] == "nvidia0"
    # Only memory: utilization and the rest stay the GPU's, one series each.
    assert [lb.get("GPU_I_ID") for lb, _ in s.series("DCGM_FI_DEV_GPU_UTIL", gpu="0")] == [None]
    assert s.series("DCGM_FI_DEV_FB_USED", gpu="1")[0][0].keys() == GPU_LABEL_NAMES | {  # MIG off
        "DCGM_FI_DRIVER_VERSION"
    }


def test_instance_utilization_only_where_the_driver_reports_it() -> None:
    s = scrape_snapshot(snapshot(gpus=(mig_gpu(),)))
    assert s.by("gputui_mig_utilization_percent", "GPU_I_ID") == {"5": 37}
    assert s.series("gputui_mig_utilization_percent", GPU_I_ID="5")[0][0]["GPU_I_PROFILE"] == "1g.10gb"


def test_a_gpu_instance_listed_twice_has_one_series() -> None:
    # Two compute instances of one GPU instance share its memory: two series of the same labels would
    # have Prometheus reject the whole scrape (the scrape helper fails on duplicates).
    twice = (*INSTANCES, MigInstance(5, 1, "1g.10gb", mem_total=10 * GIB, mem_used=2 * GIB, util=90))
    s = scrape_snapshot(snapshot(gpus=(gpu0(mig_mode=True, mig=twice),)))
    used = {lb.get("GPU_I_ID", ""): v for lb, v in s.series("DCGM_FI_DEV_FB_USED")}
    assert used == {"": 40000, "3": 10 * 1024, "5": 1024}  # the first listed of instance 5
    assert s.by("gputui_mig_utilization_percent", "GPU_I_ID") == {"5": 37}


def test_a_lost_gpu_has_no_instance_series() -> None:
    s = scrape_snapshot(snapshot(gpus=(gpu0(lost=True, mig_mode=True, mig=INSTANCES),)))
    assert s.series("DCGM_FI_DEV_FB_USED") == [] and s.series("gputui_mig_utilization_percent") == []


def test_a_process_on_an_instance_carries_it_and_its_job_is_per_instance() -> None:
    job = Owner("slurm", "4711")
    procs = [
        replace(proc(1, used=2 * GIB), gpu_instance=3, compute_instance=0, owner=job),
        replace(proc(2, used=GIB), gpu_instance=5, compute_instance=0, owner=job),
        replace(proc(3, used=GIB), gpu_instance=9, compute_instance=0),  # an instance NVML did not list
        proc(4, gpu=1, used=GIB, user="bob"),  # a GPU without MIG
    ]
    s = scrape_snapshot(snapshot(gpus=(mig_gpu(), gpu1()), processes=procs))
    got = {
        lb["pid"]: (lb["GPU_I_ID"], lb["GPU_I_PROFILE"])
        for lb, _ in s.series("gputui_process_gpu_memory_bytes")
    }
    assert got == {"1": ("3", "3g.40gb"), "2": ("5", "1g.10gb"), "3": ("9", ""), "4": ("", "")}
    assert s.by("gputui_job_gpu_memory_bytes", "GPU_I_ID", hpc_job="4711") == {"3": 2 * GIB, "5": GIB}


def test_a_hostile_profile_name_is_bounded_and_printable() -> None:
    evil = MigInstance(1, 0, "1g\x1b[2J\x07" + "z" * 5000, mem_total=GIB, mem_used=0, util=5)
    exporter = Exporter(FakeSampler([snapshot(gpus=(gpu0(mig_mode=True, mig=(evil,)),))]))  # type: ignore[arg-type]
    exporter.tick()
    s = scrape(exporter)
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "gputui_mig_utilization_percent"):
        (labels, _), *_ = s.series(name, GPU_I_ID="1")
        assert labels["GPU_I_PROFILE"].startswith("1g?[2J?z") and len(labels["GPU_I_PROFILE"]) <= 32
    assert "\x1b" not in s.text
