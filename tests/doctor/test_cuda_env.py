"""CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER judged against the GPUs NVML sees (gputui.doctor.checks_cuda),
with CUDA's rules: ids in CUDA's order (fastest first unless PCI_BUS_ID), the first id that matches no GPU
ends the list, UUIDs and unique UUID prefixes select GPUs, MIG ids pass through."""

from __future__ import annotations

import pytest

from gputui.doctor.checks_cuda import cuda_order, device_order, fastest_first, parse_visible, visible_devices
from gputui.doctor.facts import GpuFact
from gputui.doctor.report import OK, PROBLEM, WARNING, Check

H100 = ("NVIDIA H100 80GB HBM3", (9, 0), 1980)
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0), 1410)
UUIDS = (
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-89a1b2c3-0d4e-5f60-7182-93a4b5c6d7e8",
    "GPU-5b0e6c2a-11f3-47aa-9d2e-6f1c0b7a3e55",
)
MIG = "MIG-4d1e7f0a-2b3c-5d6e-8f90-a1b2c3d4e5f6"


def gpu(index: int, model: tuple[str, tuple[int, int], int] = H100, lost: bool = False) -> GpuFact:
    name, capability, clock = model
    return GpuFact(
        index,
        name,
        UUIDS[index],
        f"00000000:{0x1B + 0x10 * index:02X}:00.0",
        minor=index,
        lost=lost,
        mig=False,
        capability=capability,
        sm_clock_max=clock,
    )


TWO = (gpu(0), gpu(1))  # identical GPUs: CUDA's order is the PCI order
MIXED = (gpu(0, A100), gpu(1, H100))  # the faster GPU is second on the bus
PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def visible(value: str | None, gpus: tuple[GpuFact, ...] = TWO, **env: str) -> Check:
    e = dict(env)
    if value is not None:
        e["CUDA_VISIBLE_DEVICES"] = value
    return visible_devices(e, gpus)


# -- CUDA_VISIBLE_DEVICES ---------------------------------------------------------------------------------


def test_unset_sees_all_gpus() -> None:
    c = visible(None)
    assert (c.area, c.status) == ("cuda", OK)
    assert c.found == "CUDA_VISIBLE_DEVICES is unset: CUDA sees all 2 GPUs"


def test_empty_sees_no_gpu() -> None:
    for value in ("", "  "):
        c = visible(value)
        assert c.status == PROBLEM
        assert c.found == "CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU"
        assert "unset CUDA_VISIBLE_DEVICES" in c.fix


def test_minus_one_hides_every_gpu() -> None:
    c = visible("-1")
    assert c.status == PROBLEM
    assert c.found == "CUDA_VISIBLE_DEVICES=-1: -1 hides every GPU, so CUDA sees no GPU"
    assert "0..1" in c.fix and "nvidia-smi -L" in c.fix


def test_two_ids_in_order() -> None:
    c = visible("0,1")
    assert c.status == OK
    assert c.found == "CUDA_VISIBLE_DEVICES=0,1: cuda:0 = NVML GPU 0, cuda:1 = NVML GPU 1"
    assert c.fix == ""


def test_reversed_ids() -> None:
    c = visible("1,0")
    assert c.status == OK
    assert c.found == "CUDA_VISIBLE_DEVICES=1,0: cuda:0 = NVML GPU 1, cuda:1 = NVML GPU 0"


def test_spaces_around_ids() -> None:
    assert parse_visible(" 1 , 0", list(TWO)).selected == (TWO[1], TWO[0])


def test_id_beyond_the_gpus_is_a_problem() -> None:
    c = visible("5")
    assert c.status == PROBLEM
    assert c.found == "CUDA_VISIBLE_DEVICES=5: '5' matches no GPU, so CUDA sees no GPU"
    assert "use ids 0..1" in c.fix


def test_an_invalid_id_ends_the_list() -> None:
    c = visible("0,7,1")
    assert c.status == PROBLEM
    assert "'7' matches no GPU, so CUDA ignores it and the ids after it (1)" in c.found
    assert c.found.endswith("CUDA sees only cuda:0 = NVML GPU 0")
    assert "use ids 0..1" in c.fix
    seen = parse_visible("0,7,1", list(TWO))
    assert seen.selected == (TWO[0],)
    assert (seen.stopped_at, seen.ignored) == ("7", ("1",))


def test_an_invalid_last_id_ignores_nothing_else() -> None:
    c = visible("1,2")
    assert c.status == PROBLEM
    assert "'2' matches no GPU, so CUDA ignores it;" in c.found and "ids after it" not in c.found
    assert c.found.endswith("CUDA sees only cuda:0 = NVML GPU 1")


def test_full_uuid() -> None:
    c = visible(UUIDS[1])
    assert c.status == OK
    assert c.found == f"CUDA_VISIBLE_DEVICES={UUIDS[1]}: cuda:0 = NVML GPU 1"


def test_unique_uuid_prefix() -> None:
    c = visible("GPU-8932,1")
    assert c.status == OK
    assert c.found.endswith("cuda:0 = NVML GPU 0, cuda:1 = NVML GPU 1")


def test_ambiguous_uuid_prefix_is_invalid() -> None:
    c = visible("GPU-89")  # both GPU-8932... and GPU-89a1...
    assert c.status == PROBLEM
    assert "'GPU-89' matches no GPU" in c.found and "CUDA sees no GPU" in c.found
    assert parse_visible("1,GPU-89", list(TWO)).selected == (TWO[1],)


def test_unknown_uuid_is_invalid() -> None:
    c = visible("GPU-ffffffff-0000-0000-0000-000000000000")
    assert c.status == PROBLEM and "matches no GPU" in c.found


def test_mig_id_passes_unchecked() -> None:
    c = visible(MIG)
    assert c.status == OK
    assert c.found == f"CUDA_VISIBLE_DEVICES={MIG}: MIG instances {MIG} (not checked)"
    c = visible(f"0,{MIG}")
    assert c.status == OK
    assert c.found == f"CUDA_VISIBLE_DEVICES=0,{MIG}: cuda:0 = NVML GPU 0; MIG instances {MIG} (not checked)"


def test_repeated_id_is_a_warning() -> None:
    c = visible("0,0")
    assert c.status == WARNING
    assert c.found == "CUDA_VISIBLE_DEVICES=0,0 names the same GPU twice (0)"
    assert c.fix == "list each GPU once"


def test_repeated_by_uuid_is_a_warning() -> None:
    c = visible(f"1,{UUIDS[1]}")
    assert c.status == WARNING and UUIDS[1] in c.found


def test_whose_names_the_process() -> None:
    c = visible_devices({"CUDA_VISIBLE_DEVICES": "5"}, TWO, whose="pid 4242's ")
    assert c.found.startswith("pid 4242's CUDA_VISIBLE_DEVICES=5:")


# -- ids are CUDA's, not nvidia-smi's ---------------------------------------------------------------------


def test_ids_in_cuda_order_fastest_first() -> None:
    # NVML GPU 0 is the A100, GPU 1 the H100: CUDA's id 0 is the H100.
    c = visible("0", MIXED)
    assert c.status == OK
    assert c.found == "CUDA_VISIBLE_DEVICES=0: cuda:0 = NVML GPU 1"


def test_ids_in_pci_order_with_pci_bus_id() -> None:
    c = visible("0", MIXED, **PCI)
    assert c.found == "CUDA_VISIBLE_DEVICES=0: cuda:0 = NVML GPU 0"


def test_uuid_selects_the_same_gpu_in_either_order() -> None:
    for env in ({}, PCI):
        assert visible(UUIDS[0], MIXED, **env).found.endswith("cuda:0 = NVML GPU 0")


def test_fastest_first_by_architecture_then_clock_then_bus() -> None:
    slow_h100 = GpuFact(
        0, "NVIDIA H100 PCIe", "GPU-a", "00000000:1B:00.0", capability=(9, 0), sm_clock_max=1755
    )
    a100 = GpuFact(1, "NVIDIA A100", "GPU-b", "00000000:2B:00.0", capability=(8, 0), sm_clock_max=1410)
    fast_h100 = GpuFact(
        2, "NVIDIA H100 SXM", "GPU-c", "00000000:3B:00.0", capability=(9, 0), sm_clock_max=1980
    )
    twin = GpuFact(3, "NVIDIA H100 SXM", "GPU-d", "00000000:4B:00.0", capability=(9, 0), sm_clock_max=1980)
    a6000 = GpuFact(
        4, "NVIDIA RTX A6000", "GPU-e", "00000000:5B:00.0", capability=(8, 6), sm_clock_max=2100
    )  # a higher clock, an older architecture
    order = fastest_first((slow_h100, a100, a6000, twin, fast_h100))
    assert [g.index for g in order] == [2, 3, 0, 4, 1]


def test_cuda_order_excludes_lost_gpus() -> None:
    gpus = (gpu(0), gpu(1, lost=True), gpu(2))
    assert [g.index for g in cuda_order(gpus, {})] == [0, 2]
    assert [g.index for g in cuda_order(gpus, PCI)] == [0, 2]


def test_lost_gpus_are_not_counted_or_selectable() -> None:
    gpus = (gpu(0), gpu(1, lost=True), gpu(2))
    assert visible(None, gpus).found == "CUDA_VISIBLE_DEVICES is unset: CUDA sees all 2 GPUs"
    # With GPU 1 gone, CUDA's id 1 is NVML GPU 2 and there is no id 2.
    assert visible("1", gpus).found == "CUDA_VISIBLE_DEVICES=1: cuda:0 = NVML GPU 2"
    c = visible("2", gpus)
    assert c.status == PROBLEM and "'2' matches no GPU" in c.found and "0..1" in c.fix
    c = visible(UUIDS[1], gpus)
    assert c.status == PROBLEM and "matches no GPU" in c.found


# -- CUDA_DEVICE_ORDER ------------------------------------------------------------------------------------


def test_device_order_pci_bus_id_is_ok() -> None:
    c = device_order(PCI, MIXED)
    assert (c.area, c.status) == ("cuda", OK)
    assert c.found == "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA numbers GPUs as nvidia-smi does"


def test_device_order_identical_gpus_is_ok() -> None:
    c = device_order({}, TWO)
    assert c.status == OK
    assert c.found == "CUDA's default order (fastest first) is nvidia-smi's PCI order on this machine"


def test_device_order_fastest_first_on_the_bus_is_ok() -> None:
    assert device_order({}, (gpu(0, H100), gpu(1, A100))).status == OK


@pytest.mark.parametrize("env", [{}, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}], ids=["unset", "FASTEST_FIRST"])
def test_device_order_mixed_gpus_mismatch(env: dict[str, str]) -> None:
    c = device_order(env, MIXED)
    assert c.status == WARNING
    assert c.found == (
        "CUDA's default order (fastest first) is not nvidia-smi's here: "
        "cuda:0 = NVML GPU 1 (NVIDIA H100 80GB HBM3), "
        "cuda:1 = NVML GPU 0 (NVIDIA A100-SXM4-80GB)"
    )
    assert c.fix.startswith("export CUDA_DEVICE_ORDER=PCI_BUS_ID")


def test_device_order_names_only_the_gpus_that_move() -> None:
    gpus = (gpu(0, H100), gpu(1, A100), gpu(2, H100))  # fastest first: 0, 2, 1
    c = device_order({}, gpus)
    assert c.status == WARNING
    assert "cuda:1 = NVML GPU 2" in c.found and "cuda:2 = NVML GPU 1" in c.found
    assert "cuda:0" not in c.found


def test_device_order_unknown_value() -> None:
    c = device_order({"CUDA_DEVICE_ORDER": "BUS_ORDER"}, TWO)
    assert c.status == WARNING
    assert c.found == "CUDA_DEVICE_ORDER=BUS_ORDER is not a value CUDA knows: it uses FASTEST_FIRST"
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID" in c.fix


def test_device_order_ignores_lost_gpus() -> None:
    # The fast H100 that would come first is lost: the two A100s are in PCI order.
    gpus = (gpu(0, A100), gpu(1, H100, lost=True), gpu(2, A100))
    assert device_order({}, gpus).status == OK
    gpus = (gpu(0, A100, lost=True), gpu(1, A100), gpu(2, H100))
    c = device_order({}, gpus)
    assert c.status == WARNING and "GPU 0" not in c.found
