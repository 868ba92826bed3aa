"""MIG through NvmlSource: a MIG-enabled GPU's instances (ids, profile, UUID, memory) and the instance
each process runs in, against the fake NVML's real pynvml structures and error classes."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from gputui.collect.sources.base import Reading
from gputui.collect.sources.nvml import SETTINGS_EVERY, NvmlSource, mig_profile
from gputui.model import MigInstance
from tests.collect.fake_nvml import FakeMigDevice, FakeNvml, FakeProcess

GiB = 2**30
MiB = 2**20
NAME_CALLS = ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex")


def three_instances() -> list[FakeMigDevice]:
    """An H100 split 3g.40gb + 2g.20gb + 1g.10gb; slot 2 is empty (an instance was destroyed there), and
    the slots are not in id order."""
    return [
        FakeMigDevice(slot=0, gpu_instance=1, compute_instance=0, profile="3g.40gb", mem_used=12 * GiB),
        FakeMigDevice(
            slot=1,
            gpu_instance=13,
            compute_instance=0,
            profile="1g.10gb",
            mem_total=10 * GiB,
            mem_used=0,
            gi_slices=1,
            ci_slices=1,
            memory_mb=9856,
        ),
        FakeMigDevice(
            slot=3,
            gpu_instance=5,
            compute_instance=0,
            profile="2g.20gb",
            mem_total=20 * GiB,
            mem_used=3 * GiB,
            mem_reserved=64 * MiB,
            gi_slices=2,
            ci_slices=2,
            memory_mb=19968,
        ),
    ]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    f = FakeNvml(n_gpus=2)
    f.gpus[0].mig = (1, 1)
    f.gpus[0].mig_devices = three_instances()
    f.install(monkeypatch)
    yield f
    assert f.violations == []


@pytest.fixture
def source(fake: FakeNvml) -> Any:
    src = NvmlSource()
    src.open()
    yield src
    src.close()
    assert fake.initialized == 0


def tick(src: NvmlSource, fake: FakeNvml, slow: bool = True) -> Reading:
    fake.advance(1.0)
    return src.read(slow)


def expected(fake: FakeNvml) -> tuple[MigInstance, ...]:
    devs = sorted(fake.gpus[0].mig_devices, key=lambda d: (d.gpu_instance, d.compute_instance))
    return tuple(
        MigInstance(
            gpu_instance=d.gpu_instance,
            compute_instance=d.compute_instance,
            profile=d.profile,
            uuid=d.uuid,
            mem_total=d.mem_total,
            mem_used=d.mem_used,
            util=None,
        )
        for d in devs
    )


def test_a_mig_gpu_lists_its_instances_in_id_order(fake: FakeNvml, source: NvmlSource) -> None:
    r = tick(source, fake)
    g0, g1 = r.gpus
    assert r.errors == ()
    assert g0.mig_mode is True and g1.mig_mode is False
    assert g0.mig == expected(fake)
    assert [(m.gpu_instance, m.profile) for m in g0.mig] == [(1, "3g.40gb"), (5, "2g.20gb"), (13, "1g.10gb")]
    assert g0.mig[0].uuid is not None and g0.mig[0].uuid.startswith("MIG-")
    assert g1.mig == ()
    # The GPU's own reading stays the GPU's: the instances do not replace its memory.
    assert (g0.mem_total, g0.mem_used) == (80 * GiB, 30 * GiB)
    # Every slot up to the maximum is asked once (empty ones answer NotFound); nothing on GPU 1.
    assert fake.calls[0]["nvmlDeviceGetMigDeviceHandleByIndex"] == 7
    assert fake.calls[1]["nvmlDeviceGetMaxMigDeviceCount"] == 0


def test_processes_are_placed_on_their_instance(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].processes["C"] += [
        FakeProcess(100, 11 * GiB, gpu_instance=1, compute_instance=0),
        FakeProcess(101, 2 * GiB, gpu_instance=5, compute_instance=0),
    ]
    fake.gpus[0].processes["G"].append(FakeProcess(100, 11 * GiB, gpu_instance=1, compute_instance=0))
    fake.gpus[1].processes["C"].append(FakeProcess(200, GiB))  # 0xFFFFFFFF: not MIG
    procs = {p.pid: p for p in tick(source, fake).processes}
    assert (procs[100].kinds, procs[100].gpu_instance, procs[100].compute_instance) == ("CG", 1, 0)
    assert (procs[101].gpu_instance, procs[101].compute_instance) == (5, 0)
    assert (procs[200].gpu_instance, procs[200].compute_instance) == (None, None)


def test_instance_ids_are_ignored_on_a_gpu_without_mig(fake: FakeNvml, source: NvmlSource) -> None:
    """Some drivers write 0, not 0xFFFFFFFF, when MIG is off: "instance 0/0" would be a lie."""
    fake.gpus[1].processes["C"].append(FakeProcess(200, GiB, gpu_instance=0, compute_instance=0))
    (p,) = tick(source, fake).processes
    assert (p.gpu, p.gpu_instance, p.compute_instance) == (1, None, None)


def test_a_v1_driver_has_no_instance_ids(fake: FakeNvml, source: NvmlSource) -> None:
    fake.old_driver(1)
    fake.gpus[0].processes["C"].append(FakeProcess(100, GiB, gpu_instance=1, compute_instance=0))
    (p,) = tick(source, fake).processes
    assert (p.used_memory, p.gpu_instance, p.compute_instance) == (GiB, None, None)


def test_cost_enumeration_on_settings_ticks_memory_every_tick(fake: FakeNvml, source: NvmlSource) -> None:
    slows = [True] + [False] * 4 + [True] * SETTINGS_EVERY  # a second settings tick at the end
    readings = [tick(source, fake, slow) for slow in slows]
    assert all(r.gpus[0].mig == expected(fake) for r in readings)
    assert fake.calls[0]["nvmlDeviceGetMaxMigDeviceCount"] == 2
    assert fake.calls[0]["nvmlDeviceGetGpuInstanceId"] == 2 * 3
    assert fake.calls[0]["nvmlDeviceGetName"] == 1 + 2 * 3  # the GPU's, at open; each instance's
    assert fake.calls[0]["nvmlDeviceGetAttributes"] == 0  # the names carry the profiles
    # Memory: the GPU's and one per instance, every tick.
    assert fake.calls[0]["nvmlDeviceGetMemoryInfo"] == len(slows) * (1 + 3)
    # Per-instance utilization: NotSupported once, never asked again.
    assert fake.arg_calls[0][("nvmlDeviceGetUtilizationRates", "mig")] == 1


def test_utilization_where_the_driver_reports_it(fake: FakeNvml, source: NvmlSource) -> None:
    for d in fake.gpus[0].mig_devices:
        d.util = 40 + d.gpu_instance
    mig = tick(source, fake).gpus[0].mig
    assert [m.util for m in mig] == [41, 45, 53]


def test_profile_from_attributes_when_the_name_has_none(fake: FakeNvml, source: NvmlSource) -> None:
    devs = fake.gpus[0].mig_devices
    for d in devs:
        d.name = "NVIDIA H100 80GB HBM3"
    devs[0].ci_slices = 1  # a one-slice compute instance in a three-slice GPU instance
    mig = tick(source, fake).gpus[0].mig
    assert [m.profile for m in mig] == ["1c.3g.40gb", "2g.20gb", "1g.10gb"]
    assert fake.calls[0]["nvmlDeviceGetAttributes"] == 3


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "3g.40gb"),
        (b"NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "1c.3g.20gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
        ("A100-SXM4-40GB MIG 7g.40gb ", "7g.40gb"),
        ("NVIDIA H100 80GB HBM3", None),
        ("NVIDIA H100 MIG 3g.40gb\x1b[31m", None),  # not the driver's form: nothing of it shown
        ("MIG " + "9" * 500 + "g.1gb", None),
    ],
)
def test_mig_profile_from_name(name: Any, profile: str | None) -> None:
    assert mig_profile(name) == profile


def test_mig_profile_from_attributes_refuses_nonsense() -> None:
    attrs = pynvml.c_nvmlDeviceAttributes()
    attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount, attrs.memorySizeMB = 3, 3, 40192
    assert mig_profile(None, attrs) == "3g.40gb"
    attrs.computeInstanceSliceCount = 4  # more compute slices than the GPU instance has
    assert mig_profile(None, attrs) is None
    attrs.computeInstanceSliceCount, attrs.memorySizeMB = 3, 0
    assert mig_profile(None, attrs) is None


def test_a_destroyed_instance_is_dropped_at_the_next_slow_tick(fake: FakeNvml, source: NvmlSource) -> None:
    tick(source, fake)
    gone = fake.gpus[0].mig_devices.pop(0)  # the admin destroys GI 1; its handle is now invalid
    fast = tick(source, fake, slow=False).gpus[0].mig
    assert [(m.gpu_instance, m.mem_used) for m in fast] == [(1, None), (5, 3 * GiB), (13, 0)]
    slow = tick(source, fake, slow=True).gpus[0].mig  # not a settings tick: the failure asked for it
    assert [m.gpu_instance for m in slow] == [5, 13]
    fake.gpus[0].mig_devices.append(gone)  # created again: found on the next settings tick
    for _ in range(SETTINGS_EVERY):
        last = tick(source, fake, slow=True)
    assert [m.gpu_instance for m in last.gpus[0].mig] == [1, 5, 13]


def test_mig_turned_off_empties_the_list(fake: FakeNvml, source: NvmlSource) -> None:
    assert len(tick(source, fake).gpus[0].mig) == 3
    fake.gpus[0].mig = (0, 0)
    fake.gpus[0].mig_devices = []
    for _ in range(SETTINGS_EVERY):
        last = tick(source, fake, slow=True)
    assert (last.gpus[0].mig_mode, last.gpus[0].mig) == (False, ())


@pytest.mark.parametrize(
    "name",
    ["nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetGpuInstanceId"],
)
@pytest.mark.parametrize(
    "error",
    [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_UNKNOWN],
)
def test_a_failing_mig_call_leaves_the_rest(
    fake: FakeNvml, source: NvmlSource, name: str, error: int
) -> None:
    fake.fail(0, name, error)
    r = tick(source, fake)
    assert r.errors == ()
    assert r.gpus[0].mig == () and r.gpus[0].util_gpu == 57 and r.gpus[1].mig == ()


def test_a_lost_gpu_while_walking_its_instances(fake: FakeNvml, source: NvmlSource) -> None:
    fake.fail(0, "nvmlDeviceGetComputeInstanceId", pynvml.NVML_ERROR_GPU_IS_LOST)
    r = tick(source, fake)
    assert r.gpus[0].lost and not r.gpus[1].lost
    assert any("GPU 0 is lost" in e for e in r.errors)


def test_hostile_uuid_is_printable(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].mig_devices[0].uuid = "MIG-\x1b]0;pwned\x07" + "x" * 500
    (first, *_) = tick(source, fake).gpus[0].mig
    assert first.uuid is not None and first.uuid.isprintable() and len(first.uuid) <= 200


def test_calls_per_tick_of_a_mig_gpu(fake: FakeNvml, source: NvmlSource) -> None:
    """The Sampler's cadence (1 s ticks, slow every 5th): a MIG GPU with 3 instances costs its memory
    reads (3 a tick) and the walk (1 + 7 + 4 x 3 calls every SETTINGS_EVERY slow ticks) more."""
    ticks = 60
    for t in range(ticks):
        tick(source, fake, slow=t % 5 == 0)
    mig, plain = fake.total_calls(0) / ticks, fake.total_calls(1) / ticks
    print(f"\nNVML calls per tick: MIG GPU with 3 instances {mig:.2f}, the same GPU without MIG {plain:.2f}")
    walks = ticks // 5 // SETTINGS_EVERY
    assert fake.calls[0]["nvmlDeviceGetMaxMigDeviceCount"] == walks
    assert mig - plain == pytest.approx(3 + (walks * (1 + 7 + 4 * 3) + 1) / ticks)
