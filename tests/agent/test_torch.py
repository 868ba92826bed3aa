"""What the agent reads from torch: the allocator (never initializing CUDA) and DataLoader progress."""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

from gputui.agent import protocol, torchstats  # noqa: E402
from gputui.agent.progress import Progress  # noqa: E402
from gputui.agent.server import Agent  # noqa: E402
from gputui.agent.torchstats import SNAPSHOT_EVERY_S, TorchStats, segments_summary  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- real torch, CUDA untouched -------------------------------------------------------------------


def test_real_torch_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not torch.cuda.is_initialized()
    touched: list[str] = []

    def spy(name: str) -> Callable[..., Any]:
        def fail(*args: Any, **kwargs: Any) -> Any:
            touched.append(name)
            raise AssertionError(f"the agent called torch.cuda.{name}")

        return fail

    for name in (
        "init",
        "_lazy_init",
        "device_count",
        "memory_stats",
        "memory_snapshot",
        "get_allocator_backend",
        "synchronize",
        "empty_cache",
        "current_device",
    ):
        monkeypatch.setattr(torch.cuda, name, spy(name))
    out = TorchStats().collect()
    assert touched == []
    assert not torch.cuda.is_initialized()
    assert out["torch"] == torch.__version__
    assert out["cuda"] == torch.version.cuda
    assert out["cuda_initialized"] is False
    assert out["devices"] == []
    assert "allocator_backend" not in out


def test_real_torch_through_the_agent(tmp_path: Any) -> None:
    agent = Agent(directory=tmp_path / "run")
    reply = agent.answer(protocol.encode({"op": "stats"}))
    assert reply["ok"] and reply["allocator"]["torch"] == torch.__version__
    assert reply["allocator"]["cuda_initialized"] is False
    for op in ("record_history", "dump_snapshot", "empty_cache"):
        reply = agent.answer(protocol.encode({"op": op, "enabled": True}))
        assert reply["ok"] is False and "not initialized" in reply["error"]
    assert not torch.cuda.is_initialized()


def test_alloc_conf_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert TorchStats().collect()["alloc_conf"] == "expandable_segments:True"


def test_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert TorchStats().collect() == {"torch": None, "alloc_conf": None, "devices": []}
    assert "torch" not in sys.modules  # and it did not import it


# -- a fake torch with CUDA initialized -----------------------------------------------------------


def full_stats(allocated: int = 6 * GIB, reserved: int = 10 * GIB) -> dict[str, int]:
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": 8 * GIB,
        "reserved_bytes.all.current": reserved,
        "reserved_bytes.all.peak": 12 * GIB,
        "active_bytes.all.current": allocated + 64 * MIB,
        "active_bytes.all.peak": 8 * GIB + 64 * MIB,
        "inactive_split_bytes.all.current": 300 * MIB,
        "inactive_split_bytes.all.peak": 900 * MIB,
        "num_alloc_retries": 3,
        "num_ooms": 1,
        "num_device_alloc": 40,
        "num_device_free": 7,
        "num_sync_all_streams": 2,
        "some.other.key": 99,
    }


def segment(device: int, blocks: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "device": device,
        "total_size": sum(size for _, size in blocks),
        "allocated_size": sum(size for state, size in blocks if state == "active_allocated"),
        "blocks": [{"state": state, "size": size} for state, size in blocks],
    }


# Device 0: 10 GiB reserved in two segments, 6 GiB allocated, 4 GiB free in pieces of 1, 2 and 1 GiB.
SNAPSHOT = [
    segment(0, [("active_allocated", 3 * GIB), ("inactive", GIB)]),
    segment(0, [("inactive", 2 * GIB), ("active_allocated", 3 * GIB), ("inactive", GIB)]),
    segment(1, [("inactive", 5 * GIB)]),  # another device's: not counted for device 0
]


class FakeTorch:
    """Just enough of `torch` for TorchStats, with every call counted."""

    def __init__(
        self,
        stats: dict[int, dict[str, int]] | None = None,
        snapshot: Any = SNAPSHOT,
        initialized: bool = True,
    ) -> None:
        self.stats = {0: full_stats()} if stats is None else stats
        self.snapshot = snapshot
        self.initialized = initialized
        self.calls: dict[str, int] = {}
        self.observer: Callable[..., None] | None = None

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def module(self) -> types.SimpleNamespace:
        def is_initialized() -> bool:
            self._count("is_initialized")
            return self.initialized

        def device_count() -> int:
            self._count("device_count")
            return len(self.stats)

        def memory_stats(device: int) -> dict[str, int]:
            self._count("memory_stats")
            value = self.stats[device]
            if isinstance(value, Exception):
                raise value
            return dict(value)

        def memory_snapshot() -> Any:
            self._count("memory_snapshot")
            if isinstance(self.snapshot, Exception):
                raise self.snapshot
            return self.snapshot

        def get_allocator_backend() -> str:
            self._count("get_allocator_backend")
            return "native"

        def attach(observer: Callable[..., None]) -> None:
            self.observer = observer

        cuda = types.SimpleNamespace(
            is_initialized=is_initialized,
            device_count=device_count,
            memory_stats=memory_stats,
            memory_snapshot=memory_snapshot,
            get_allocator_backend=get_allocator_backend,
        )
        return types.SimpleNamespace(
            __version__="9.9.9+fake",
            version=types.SimpleNamespace(cuda="12.8"),
            cuda=cuda,
            _C=types.SimpleNamespace(_cuda_attach_out_of_memory_observer=attach),
        )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTorch:
    f = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", f.module())
    return f


def test_fake_torch_device(fake: FakeTorch) -> None:
    out = TorchStats(clock=FakeClock()).collect()
    assert out["torch"] == "9.9.9+fake" and out["cuda"] == "12.8"
    assert out["cuda_initialized"] is True and out["allocator_backend"] == "native"
    assert out["oom_events"] == []
    [d] = out["devices"]
    assert d["index"] == 0
    assert d["allocated"] == 6 * GIB and d["allocated_peak"] == 8 * GIB
    assert d["reserved"] == 10 * GIB and d["reserved_peak"] == 12 * GIB
    assert d["active"] == 6 * GIB + 64 * MIB and d["active_peak"] == 8 * GIB + 64 * MIB
    assert d["inactive_split"] == 300 * MIB and d["inactive_split_peak"] == 900 * MIB
    assert d["num_alloc_retries"] == 3 and d["num_ooms"] == 1
    assert d["num_device_alloc"] == 40 and d["num_device_free"] == 7 and d["num_sync_all_streams"] == 2
    assert d["reserved_unallocated"] == 4 * GIB
    assert d["segments"] == 2
    assert d["largest_free_block"] == 2 * GIB
    assert d["free_in_segments"] == 4 * GIB
    assert d["fragmentation"] == 50.0  # the largest free block is half of the free memory
    assert d["segment_fill"] == [0.75, 0.5]
    assert "some.other.key" not in d and "other" not in str(sorted(d))


def test_fake_torch_two_devices(fake: FakeTorch) -> None:
    fake.stats = {0: full_stats(), 1: full_stats(allocated=GIB, reserved=6 * GIB), 2: {}}
    out = TorchStats(clock=FakeClock()).collect()
    assert [d["index"] for d in out["devices"]] == [0, 1]  # device 2 was never allocated on
    one = out["devices"][1]
    assert one["segments"] == 1 and one["largest_free_block"] == 5 * GIB
    assert one["reserved_unallocated"] == 5 * GIB and one["fragmentation"] == 0.0
    assert one["segment_fill"] == [0.0]


def test_device_never_allocated_on_is_left_out(fake: FakeTorch) -> None:
    fake.stats = {0: {**full_stats(), "reserved_bytes.all.peak": 0}}
    assert TorchStats().collect()["devices"] == []


def test_snapshot_at_most_once_per_period(fake: FakeTorch) -> None:
    clock = FakeClock()
    stats = TorchStats(clock=clock)
    stats.collect()
    assert fake.calls["memory_snapshot"] == 1
    for dt in (0.5, 1.0, 2.5, SNAPSHOT_EVERY_S - 0.01):
        clock.t = 1000.0 + dt
        d = stats.collect()["devices"][0]
        assert d["largest_free_block"] == 2 * GIB  # from the cached snapshot
    assert fake.calls["memory_snapshot"] == 1
    assert fake.calls["memory_stats"] == 5  # the cheap counters are fresh every time
    # A new snapshot once the period has passed, and its numbers are used.
    fake.snapshot = [segment(0, [("active_allocated", 6 * GIB), ("inactive", 4 * GIB)])]
    clock.t = 1000.0 + SNAPSHOT_EVERY_S
    d = stats.collect()["devices"][0]
    assert fake.calls["memory_snapshot"] == 2
    assert d["segments"] == 1 and d["largest_free_block"] == 4 * GIB and d["fragmentation"] == 0.0
    clock.t += SNAPSHOT_EVERY_S - 0.01
    stats.collect()
    assert fake.calls["memory_snapshot"] == 2


def test_snapshot_once_per_period_with_several_devices(fake: FakeTorch) -> None:
    fake.stats = {i: full_stats() for i in range(4)}
    TorchStats(clock=FakeClock()).collect()
    assert fake.calls["memory_snapshot"] == 1


def test_fragmentation_stays_a_percentage_between_snapshots(fake: FakeTorch) -> None:
    clock = FakeClock()
    stats = TorchStats(clock=clock)
    assert stats.collect()["devices"][0]["fragmentation"] == 50.0
    # A second later the job allocated 3.5 GiB more (the 2 GiB block among them); no new snapshot yet.
    fake.stats = {0: full_stats(allocated=9 * GIB + 512 * MIB)}
    clock.t += 1.0
    d = stats.collect()["devices"][0]
    assert d["reserved_unallocated"] == 512 * MIB
    assert 0.0 <= d["fragmentation"] <= 100.0
    assert d["largest_free_block"] <= d["reserved_unallocated"]


def test_missing_keys_are_absent(fake: FakeTorch) -> None:
    # e.g. the cudaMallocAsync backend or an older torch: only a few counters.
    fake.stats = {0: {"reserved_bytes.all.current": 4 * GIB, "reserved_bytes.all.peak": 5 * GIB}}
    d = TorchStats().collect()["devices"][0]
    assert d["reserved"] == 4 * GIB and d["reserved_peak"] == 5 * GIB
    for key in (
        "allocated",
        "allocated_peak",
        "active",
        "inactive_split",
        "num_alloc_retries",
        "num_ooms",
        "num_device_alloc",
        "reserved_unallocated",
        "fragmentation",
    ):
        assert key not in d, key
    assert d["segments"] == 2  # the snapshot is still read


def test_no_free_memory_means_no_fragmentation_figure(fake: FakeTorch) -> None:
    fake.stats = {0: full_stats(allocated=10 * GIB)}
    fake.snapshot = [segment(0, [("active_allocated", 10 * GIB)])]
    d = TorchStats().collect()["devices"][0]
    assert d["reserved_unallocated"] == 0 and d["largest_free_block"] == 0
    assert "fragmentation" not in d


def test_memory_stats_that_raises(fake: FakeTorch) -> None:
    fake.stats = {0: RuntimeError("CUDA error: an illegal memory access"), 1: full_stats()}  # type: ignore[dict-item]
    out = TorchStats().collect()
    assert [d["index"] for d in out["devices"]] == [1]


def test_memory_snapshot_that_raises(fake: FakeTorch) -> None:
    fake.snapshot = RuntimeError("snapshot failed")
    d = TorchStats().collect()["devices"][0]
    assert d["allocated"] == 6 * GIB and d["reserved_unallocated"] == 4 * GIB
    assert "segments" not in d and "fragmentation" not in d


@pytest.mark.parametrize("broken", ["is_initialized", "device_count", "get_allocator_backend"])
def test_other_calls_that_raise(monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    f = FakeTorch()
    module = f.module()

    def boom(*args: Any) -> Any:
        raise RuntimeError(broken)

    setattr(module.cuda, broken, boom)
    monkeypatch.setitem(sys.modules, "torch", module)
    out = TorchStats().collect()  # no exception
    assert out["torch"] == "9.9.9+fake"
    if broken == "is_initialized":
        assert out["cuda_initialized"] is False and out["devices"] == []
    elif broken == "device_count":
        assert out["devices"] == []
    else:
        assert out["allocator_backend"] is None and len(out["devices"]) == 1


@pytest.mark.parametrize(
    "missing", ["is_initialized", "device_count", "get_allocator_backend", "memory_stats"]
)
def test_calls_an_older_torch_lacks(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """torch < 2.0 has no get_allocator_backend: a missing call is a None, never an AttributeError."""
    module = FakeTorch().module()
    delattr(module.cuda, missing)
    monkeypatch.setitem(sys.modules, "torch", module)
    out = TorchStats().collect()
    assert out["torch"] == "9.9.9+fake"
    if missing == "get_allocator_backend":
        assert out["allocator_backend"] is None and len(out["devices"]) == 1
    else:
        assert out["devices"] == []


def test_torch_without_cuda_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="1.0"))
    out = TorchStats().collect()
    assert out["torch"] == "1.0" and out["cuda_initialized"] is False and out["cuda"] is None


def test_oom_events(fake: FakeTorch) -> None:
    stats = TorchStats()
    assert stats.collect()["oom_events"] == []
    assert fake.observer is not None
    for i in range(torchstats.MAX_OOM_EVENTS + 5):
        fake.observer(0, i, 8 * GIB, 10 * MIB)
    events = stats.collect()["oom_events"]
    assert len(events) == torchstats.MAX_OOM_EVENTS
    assert events[-1]["requested"] == torchstats.MAX_OOM_EVENTS + 4 and events[0]["requested"] == 5
    assert events[-1]["device"] == 0 and events[-1]["free"] == 10 * MIB


def test_fake_stats_through_the_agent(fake: FakeTorch, tmp_path: Any) -> None:
    reply = Agent(directory=tmp_path / "run").answer(protocol.encode({"op": "stats"}))
    assert reply["ok"] and reply["allocator"]["devices"][0]["fragmentation"] == 50.0
    # The reply survives the wire.
    assert protocol.decode(protocol.encode(reply)) == {"v": protocol.VERSION, **reply}


def test_segments_summary_edge_cases() -> None:
    assert segments_summary(None, 0) == {
        "segments": 0,
        "largest_free_block": 0,
        "free_in_segments": 0,
        "segment_fill": [],
    }
    odd = [
        {"device": 0, "total_size": 0, "allocated_size": 0, "blocks": None},
        {"total_size": None, "blocks": [{"state": "inactive", "size": None}]},
    ]
    out = segments_summary(odd, 0)
    assert out["segments"] == 2 and out["segment_fill"] == [0.0, 0.0] and out["largest_free_block"] == 0
    many = [segment(0, [("active_allocated", 1), ("inactive", 1)]) for _ in range(600)]
    assert len(segments_summary(many, 0)["segment_fill"]) == 512


# -- DataLoader progress --------------------------------------------------------------------------


class Items(Dataset[int]):
    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if self.delay:
            time.sleep(self.delay)
        return i


@pytest.fixture
def progress() -> Any:
    original = _BaseDataLoaderIter.__next__
    p = Progress()
    try:
        yield p
    finally:
        p.uninstall()
        _BaseDataLoaderIter.__next__ = original  # type: ignore[method-assign]


def test_waiting_for_data(progress: Progress) -> None:
    assert progress.install()
    seen = [int(batch) for batch in DataLoader(Items(15, 0.02), batch_size=1, num_workers=0)]
    assert seen == list(range(15))  # the wrapper hands the batches through unchanged
    summary = progress.summary()
    assert summary["batches"] >= 15  # (16: see test_end_of_epoch_is_not_a_batch)
    assert summary["data_wait_share"] > 0.6, summary
    assert 10 < summary["steps_per_s"] < 60, summary


def test_waiting_for_compute(progress: Progress) -> None:
    assert progress.install()
    for _ in DataLoader(Items(15, 0.0), batch_size=1, num_workers=0):
        time.sleep(0.02)  # the "compute"
    summary = progress.summary()
    assert summary["batches"] >= 15
    assert summary["data_wait_share"] < 0.3, summary
    assert 10 < summary["steps_per_s"] < 60, summary


def test_install_is_idempotent_and_uninstall_restores(progress: Progress) -> None:
    original = _BaseDataLoaderIter.__next__
    assert progress.install() and progress.install()
    wrapped = _BaseDataLoaderIter.__next__
    assert wrapped is not original
    it = iter(DataLoader(Items(3, 0.0), batch_size=1))
    for _ in range(3):
        next(it)
    assert progress.summary()["batches"] == 3  # once each: not wrapped twice
    progress.uninstall()
    assert _BaseDataLoaderIter.__next__ is original
    list(DataLoader(Items(3, 0.0), batch_size=1))
    assert progress.summary()["batches"] == 3  # no longer counting
    progress.uninstall()  # twice is fine


def test_install_before_torch_utils_data(progress: Progress, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch.utils.data.dataloader")
    assert progress.install() is False
    monkeypatch.undo()
    assert progress.install() is True


def test_an_exception_in_the_loader_is_timed_and_passed_on(progress: Progress) -> None:
    class Broken(Items):
        def __getitem__(self, i: int) -> int:
            raise KeyError("bad sample")

    progress.install()
    with pytest.raises(KeyError, match="bad sample"):
        next(iter(DataLoader(Broken(3, 0.0), batch_size=1)))
    progress.uninstall()


def test_end_of_epoch_is_not_a_batch(progress: Progress) -> None:
    progress.install()
    for _ in range(2):  # two epochs of 5
        list(DataLoader(Items(5, 0.0), batch_size=1))
    assert progress.summary()["batches"] == 10


def test_summary_with_an_injected_clock() -> None:
    p = Progress(clock=FakeClock())
    assert p.summary() == {"batches": 0}
    p.record(0.0, 0.5)
    assert p.summary() == {"batches": 1}
    for t in range(1, 11):
        p.record(float(t), 0.25)  # a batch a second, a quarter of it spent waiting
    summary = p.summary()
    assert {
        k: summary.pop(k) for k in ("steps", "usual_step_s", "last_step_age_s")
    }.keys()  # test_stalled_job
    assert summary == {"batches": 11, "steps_per_s": 1.0, "data_wait_share": 0.25, "window_s": 10.0}
    p.record(100.0, 0.1)  # only the last WINDOW_S are kept
    assert p.summary()["batches"] == 1
