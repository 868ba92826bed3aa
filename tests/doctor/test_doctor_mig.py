"""MIG ids in CUDA_VISIBLE_DEVICES: `MIG-<uuid>` and the older `MIG-GPU-<gpu uuid>/<gi>/<ci>` are never
called invalid, and name their GPU and instance when NVML listed the instances (GpuSample.mig)."""

from __future__ import annotations

from dataclasses import replace

from gputui.doctor.checks_cuda import parse_visible, visible_devices
from gputui.doctor.facts import GpuFact
from gputui.doctor.report import OK, PROBLEM, Check
from gputui.model import MigInstance

GPU0_UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
GPU1_UUID = "GPU-89a1b2c3-0d4e-5f60-7182-93a4b5c6d7e8"
MIG_A = "MIG-4d1e7f0a-2b3c-5d6e-8f90-a1b2c3d4e5f6"
MIG_B = "MIG-4d1e9999-2b3c-5d6e-8f90-a1b2c3d4e5f6"  # shares its first 8 characters with A
MIG_C = "MIG-77aa0000-1111-2222-3333-444455556666"

INSTANCES = (
    MigInstance(gpu_instance=1, compute_instance=0, profile="3g.40gb", uuid=MIG_A),
    MigInstance(gpu_instance=2, compute_instance=0, profile="2g.20gb", uuid=MIG_B),
)


def gpu(index: int, uuid: str, mig: bool, instances: tuple[MigInstance, ...] = ()) -> GpuFact:
    return GpuFact(
        index,
        "NVIDIA A100-SXM4-80GB",
        uuid,
        f"00000000:{0x07 + 8 * index:02X}:00.0",
        minor=index,
        mig=mig,
        capability=(8, 0),
        sm_clock_max=1410,
        mig_instances=instances,
    )


# GPU 0 in MIG mode with two instances; GPU 1 whole, with one instance of its own listed nowhere.
GPUS = (
    gpu(0, GPU0_UUID, True, INSTANCES),
    gpu(1, GPU1_UUID, False),
)
NAME_A = "MIG 3g.40gb (GPU instance 1, compute instance 0) on NVML GPU 0"
NAME_B = "MIG 2g.20gb (GPU instance 2, compute instance 0) on NVML GPU 0"


def check(value: str, gpus: tuple[GpuFact, ...] = GPUS) -> Check:
    return visible_devices({"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, gpus)


def test_a_mig_uuid_names_its_gpu_and_instance() -> None:
    c = check(MIG_A)
    assert c.status == OK
    assert c.found == f"CUDA_VISIBLE_DEVICES={MIG_A}: {MIG_A} = {NAME_A}"


def test_the_old_form_names_its_gpu_and_instance() -> None:
    old = f"MIG-{GPU0_UUID}/2/0"
    c = check(old)
    assert c.status == OK
    assert c.found == f"CUDA_VISIBLE_DEVICES={old}: {old} = {NAME_B}"


def test_a_unique_prefix_of_a_mig_uuid_names_its_instance() -> None:
    assert check("MIG-4d1e7").found.endswith(f"MIG-4d1e7 = {NAME_A}")
    ambiguous = check("MIG-4d1e")  # A and B both start so: it names no one instance
    assert ambiguous.status == PROBLEM
    assert "'MIG-4d1e' matches no GPU" in ambiguous.found


def test_gpus_and_mig_instances_together() -> None:
    c = check(f"1,{MIG_A}")
    assert c.status == OK
    assert c.found == f"CUDA_VISIBLE_DEVICES=1,{MIG_A}: cuda:0 = NVML GPU 1; {MIG_A} = {NAME_A}"


def test_a_mig_id_that_names_no_known_instance_ends_the_list() -> None:
    for bad in (MIG_C, f"MIG-{GPU0_UUID}/7/0", f"MIG-{GPU1_UUID}/1/0", f"MIG-{GPU0_UUID}/x/0"):
        c = check(f"{bad},1")
        assert c.status == PROBLEM, bad
        assert f"{bad!r} matches no GPU" in c.found
    v = parse_visible(f"{MIG_A},{MIG_C},1", list(GPUS))
    assert (v.mig, v.stopped_at, v.ignored) == ((MIG_A,), MIG_C, ("1",))
    assert v.mig_named == (NAME_A,)


def test_unknown_instances_pass_unchecked_and_are_not_invalid() -> None:
    # No instances listed (an older recording, NVML could not enumerate them): nothing to judge by.
    blind = tuple(replace(g, mig_instances=()) for g in GPUS)
    for value in (MIG_C, f"MIG-{GPU0_UUID}/1/0"):
        c = check(value, blind)
        assert c.status == OK
        assert c.found == f"CUDA_VISIBLE_DEVICES={value}: MIG instances {value} (not checked)"
    # A MIG GPU whose instances are unknown, beside one whose are: an unmatched id may be its.
    partly = (GPUS[0], gpu(1, GPU1_UUID, True))
    c = check(f"{MIG_A},{MIG_C}", partly)
    assert c.status == OK
    assert (
        c.found
        == f"CUDA_VISIBLE_DEVICES={MIG_A},{MIG_C}: {MIG_A} = {NAME_A}; MIG instances {MIG_C} (not checked)"
    )


def test_a_process_with_a_mig_id_is_told_its_instance() -> None:
    c = visible_devices({"CUDA_VISIBLE_DEVICES": MIG_B}, GPUS, whose="pid 42: its ")
    assert c.found == f"pid 42: its CUDA_VISIBLE_DEVICES={MIG_B}: {MIG_B} = {NAME_B}"
