"""The NVML tape (gputui/collect/sources/nvml_tape.py): NvmlSource recorded against the fake NVML, then
played back with the fake gone; what NvmlSource reads from the tape must be what it read from the "driver".

Regenerate tests/fixtures/nvml_tape_fake.json with ``python -m tests.collect.test_nvml_tape``.
"""

from __future__ import annotations

import ctypes
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

import gputui.collect.sources.nvml as nvml_module
from gputui.collect.sampler import Sampler
from gputui.collect.sources import nvml_tape
from gputui.collect.sources.base import Reading
from gputui.collect.sources.nvml import NvmlSource
from gputui.collect.sources.nvml_tape import PID_BASE, Player, Recorder, write_tape
from tests.collect.fake_nvml import SUCCESS, FakeNvml, FakeProcess, proc_symbol
from tests.collect.test_nvml_mig import three_instances

GiB = 2**30
MiB = 2**20
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "nvml_tape_fake.json"
E_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
E_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
# Slow and fast reads; the 7th slow read reads the settings tier again (SETTINGS_EVERY = 6).
SLOWS = (True, False, False, True, False, True, True, True, True, True)
LOST_FROM = 4  # GPU 2 is lost from this read on
FIXTURE_SLOWS = (True, False, True)


# -- worlds, recording, replaying -------------------------------------------------------------------------


def rich_world() -> FakeNvml:
    """Three GPUs: a MIG GPU with processes in two instances; one with ECC, NVLink, PCIe health, a field
    that answers NotSupported and a process list that grows between NVML's two calls; one whose fan call
    is missing, whose temperature is denied, and which is lost mid-way. The driver has no _v3 process
    lists (v2 is used)."""
    fake = FakeNvml(n_gpus=3)
    g0, g1, g2 = fake.gpus
    g0.mig, g0.mig_devices = (1, 1), three_instances()
    g0.processes["C"] += [
        FakeProcess(pid=31_000, memory=11 * GiB, gpu_instance=1, compute_instance=0),
        FakeProcess(pid=31_001, memory=None, gpu_instance=5, compute_instance=0),
    ]
    g1.name, g1.mem_used, g1.util_gpu = "NVIDIA A100-SXM4-80GB", 41 * GiB, 93
    g1.ecc_mode, g1.ecc_corrected, g1.ecc_corrected_aggregate = (1, 1), 4, 17
    g1.remapped_rows = (2, 0, 1, 0)
    g1.pcie_gen, g1.pcie_gen_max, g1.pcie_width, g1.pcie_width_max = 4, 4, 8, 16
    g1.nvlink_tx_kib, g1.nvlink_rx_kib = [1_000_000] * 12, [2_000_000] * 12
    g1.nvlink_tx_rate, g1.nvlink_rx_rate = 25_000_000_000, 12_000_000_000
    g1.field_returns[pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES] = E_NOT_SUPPORTED  # the slow PCIe call instead
    g1.processes["C"] = [FakeProcess(pid=41_000, memory=40 * GiB)]
    g1.processes["G"] = [FakeProcess(pid=41_000, memory=40 * GiB), FakeProcess(pid=41_001, memory=GiB)]
    fake.grow_between_calls(1, "C", 10)  # more than the buffer's headroom: a third call
    g2.name = "NVIDIA L4"
    g2.processes["C"] = [FakeProcess(pid=51_000, memory=3 * GiB)]
    fake.fail(2, "nvmlDeviceGetFanSpeed", E_FUNCTION_NOT_FOUND)
    fake.fail(2, "nvmlDeviceGetTemperature", pynvml.NVML_ERROR_NO_PERMISSION)
    fake.old_driver(2)
    return fake


def rich_script(fake: FakeNvml, i: int) -> None:
    """What changes before read `i`: utilization samples, a process ending, GPU 2 lost."""
    fake.add_util_sample(1, 41_000, 50 + i, 20 + i)
    fake.add_util_sample(1, 99_999, 10, 10)  # a process not in the list: dropped
    fake.gpus[1].util_gpu = 90 + i % 7
    if i == 3:
        fake.gpus[0].processes["C"].pop()
    if i == LOST_FROM:
        fake.fail(2, "nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_GPU_IS_LOST)


def record(
    fake: FakeNvml,
    slows: tuple[bool, ...] = SLOWS,
    script: Callable[[FakeNvml, int], None] | None = None,
    xid: bool = False,
) -> tuple[dict[str, Any], list[Reading], Recorder]:
    """Install `fake`, open an NvmlSource under a Recorder, read once per `slows`; the fake is gone after."""
    readings = []
    with pytest.MonkeyPatch.context() as mp:
        fake.install(mp)
        with Recorder() as rec:
            src = NvmlSource(xid_events=xid)
            src.open()
            try:
                for i, slow in enumerate(slows):
                    if script is not None:
                        script(fake, i)
                    fake.advance(1.0)
                    rec.mark(f"read {i}")
                    readings.append(src.read(slow))
            finally:
                src.close()
                deadline = time.monotonic() + 2
                while fake.initialized and time.monotonic() < deadline:  # the Xid thread's own reference
                    time.sleep(0.005)
    assert fake.violations == []
    assert fake.initialized == 0
    return rec.tape(), readings, rec


class Clock:
    """Stands in for the `time` module inside gputui.collect.sources.nvml, stepped as the fake's clock
    was: PCIe rates are byte counts (from the tape) over monotonic time (not NVML's)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def replay(
    tape: dict[str, Any] | Path, monkeypatch: pytest.MonkeyPatch, slows: tuple[bool, ...] = SLOWS, **kw: Any
) -> tuple[list[Reading], Player]:
    assert not hasattr(pynvml.nvmlDeviceGetCount, "__self__"), "the fake is still installed"
    clock = Clock()
    monkeypatch.setattr(nvml_module, "time", clock)
    xid = kw.pop("xid", False)
    player = Player(tape, **kw).install(monkeypatch)
    src = NvmlSource(xid_events=xid)
    src.open()
    try:
        out = []
        for slow in slows:
            clock.now += 1.0
            out.append(src.read(slow))
        return out, player
    finally:
        src.close()
        for thread in threading.enumerate():  # its last calls must not reach the next test's NVML
            if thread.name == "gputui-xid-events":
                thread.join(1.0)


def assert_same(recorded: list[Reading], replayed: list[Reading], pid_map: dict[int, int]) -> None:
    assert len(replayed) == len(recorded)
    for i, (a, b) in enumerate(zip(recorded, replayed, strict=True)):
        assert b.gpus == a.gpus, f"read {i}"
        assert b.processes == tuple(replace(p, pid=pid_map[p.pid]) for p in a.processes), f"read {i}"
        assert b.errors == a.errors, f"read {i}"
        assert b.processes_unknown == a.processes_unknown, f"read {i}"


@pytest.fixture(scope="module")
def rich() -> tuple[dict[str, Any], list[Reading]]:
    tape, readings, _ = record(rich_world(), script=rich_script)
    return tape, readings


@pytest.fixture
def keep_signals() -> Iterator[None]:
    """cli.main() installs its own signal handlers: put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


# -- the round trip ---------------------------------------------------------------------------------------


def test_replay_reads_what_was_recorded(
    rich: tuple[dict[str, Any], list[Reading]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tape, recorded = rich
    # The recording did meet what it is meant to: MIG, health, NVLink, errors, a lost GPU, processes.
    first, last = recorded[0], recorded[-1]
    assert [m.profile for m in first.gpus[0].mig] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert {p.gpu_instance for p in first.processes if p.gpu == 0} == {1, 5}
    assert first.gpus[1].health is not None and first.gpus[1].health.remapped_rows_correctable == 2
    assert recorded[1].gpus[1].nvlink_tx is not None and recorded[1].gpus[1].pcie_rx is not None
    assert first.gpus[2].fan is None and first.gpus[2].temperature is None and first.gpus[2].sm_clock == 1755
    assert len([p for p in first.processes if p.gpu == 1]) == 12  # ten started between the calls
    assert any(p.sm_util == 50 for p in first.processes)
    assert last.gpus[2].lost and "GPU 2 is lost (it needs a reset or a reboot)" in recorded[LOST_FROM].errors

    path = tmp_path / "tape.json"
    write_tape(tape, path)
    replayed, player = replay(path, monkeypatch)
    assert_same(recorded, replayed, player.pid_map)


def test_pids_are_mapped_above_pid_max(
    rich: tuple[dict[str, Any], list[Reading]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tape, recorded = rich
    replayed, player = replay(tape, monkeypatch)
    # Every PID of the tape, processes' and utilization samples' (99,999 ran on no list), numbered in
    # order of first appearance from 4,200,000 up: GPU 0's compute list comes first.
    assert {p.pid for r in recorded for p in r.processes} | {99_999} == set(player.pid_map)
    assert sorted(player.pid_map.values()) == list(range(PID_BASE, PID_BASE + len(player.pid_map)))
    assert (player.pid_map[31_000], player.pid_map[31_001]) == (PID_BASE, PID_BASE + 1)
    assert all(p.pid >= PID_BASE > 4_194_304 for r in replayed for p in r.processes)
    # Per-process utilization came through the mapped samples too.
    assert next(p.sm_util for p in replayed[0].processes if p.gpu == 1) == 50


def test_keep_pids(rich: tuple[dict[str, Any], list[Reading]], monkeypatch: pytest.MonkeyPatch) -> None:
    tape, recorded = rich
    replayed, player = replay(tape, monkeypatch, keep_pids=True)
    assert all(k == v for k, v in player.pid_map.items())
    assert_same(recorded, replayed, player.pid_map)


def test_a_sampler_longer_than_the_recording_repeats_the_last_answers(
    rich: tuple[dict[str, Any], list[Reading]], monkeypatch: pytest.MonkeyPatch
) -> None:
    tape, recorded = rich
    replayed, _ = replay(tape, monkeypatch, slows=(*SLOWS, True, False, True))
    assert [g.util_gpu for g in replayed[-1].gpus] == [g.util_gpu for g in recorded[-1].gpus]
    assert replayed[-1].gpus[2].lost


def test_the_tape_as_written(rich: tuple[dict[str, Any], list[Reading]]) -> None:
    tape, _ = rich
    assert tape["format"] == "gputui-nvml-tape" and tape["version"] == 1
    assert tape["handles"] == {
        "gpu 0": {"gpu": 0},
        "gpu 1": {"gpu": 1},
        "gpu 2": {"gpu": 2},
        "mig 0/0": {"mig": [0, 0]},
        "mig 0/1": {"mig": [0, 1]},
        "mig 0/3": {"mig": [0, 3]},
    }
    calls = tape["calls"]
    assert calls[0] == {"fn": "nvmlInit", "args": [], "result": None, "us": calls[0]["us"]}
    assert {"mark": "read 0"} in calls
    by_fn: dict[str, list[dict[str, Any]]] = {}
    for c in calls:
        by_fn.setdefault(c.get("fn", "mark"), []).append(c)
    # A handle argument is its key; a struct carries its bytes and a readable decode.
    mem = by_fn["nvmlDeviceGetMemoryInfo"][0]
    assert mem["args"] == [{"gpu": 0}, pynvml.nvmlMemory_v2]
    assert mem["result"]["struct"] == "c_nvmlMemory_v2_t"
    assert mem["result"]["fields"]["total"] == 80 * GiB
    assert len(mem["result"]["hex"]) == 2 * ctypes.sizeof(pynvml.c_nvmlMemory_v2_t)
    mig_mem = [c for c in by_fn["nvmlDeviceGetMemoryInfo"] if c["args"][0] == {"mig": [0, 3]}]
    assert mig_mem[0]["result"]["fields"]["used"] == 3 * GiB
    fields = by_fn["nvmlDeviceGetFieldValues"][0]["result"]
    assert fields["array"] == "c_nvmlFieldValue_t" and fields["n"] == 5
    # Errors by their code; the driver lacks the v3 process lists: their lookups failed.
    assert {"fn": "nvmlDeviceGetFanSpeed", "args": [{"gpu": 2}], "error": E_FUNCTION_NOT_FOUND} in [
        {k: v for k, v in c.items() if k != "us"} for c in by_fn["nvmlDeviceGetFanSpeed"]
    ]
    lookups = {c["args"][0]: c.get("error", c.get("result")) for c in by_fn["_nvmlGetFunctionPointer"]}
    assert lookups[proc_symbol("C", 3)] == E_FUNCTION_NOT_FOUND
    assert lookups[proc_symbol("C", 2)] == {"cfunc": proc_symbol("C", 2)}
    # One entry per sizing sequence: GPU 1's list grew between the calls, the final answer has 11.
    procs = [c for c in by_fn[proc_symbol("C", 2)] if c["args"] == [{"gpu": 1}]]
    assert all(c["c"] is True for c in procs)
    assert procs[0]["result"]["procs"]["size"] == ctypes.sizeof(pynvml.c_nvmlProcessInfo_v2_t)
    assert procs[0]["result"]["procs"]["fields"][0]["pid"] == 41_000
    assert len(procs[0]["result"]["procs"]["hex"]) == 11
    assert len(procs) == len(SLOWS)  # GPU 1 is never lost: one sequence per read
    # No Xid event call was recorded, and no call pynvml made of itself.
    assert not any(c.get("fn", "").startswith("nvmlEventSet") for c in calls)
    assert "nvmlErrorString" not in by_fn


def test_latency_summary() -> None:
    _, _, rec = record(FakeNvml(n_gpus=2), slows=(True, False))
    summary = rec.latency()
    assert summary["nvmlDeviceGetUtilizationRates"]["calls"] == 4
    assert set(summary["nvmlInit"]) == {"calls", "mean_us", "p50_us", "max_us", "total_ms"}
    assert summary[proc_symbol("C", 3)]["calls"] == 4  # per sizing sequence
    totals = [s["total_ms"] for s in summary.values()]
    assert totals == sorted(totals, reverse=True)
    for s in summary.values():
        assert 0 <= s["p50_us"] <= s["max_us"] and s["mean_us"] <= s["max_us"]


# -- recording ---------------------------------------------------------------------------------------------


def test_the_recorder_restores_pynvml_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml(n_gpus=1).install(monkeypatch)
    before = dict(vars(pynvml))
    with Recorder():
        assert pynvml.nvmlDeviceGetName is not before["nvmlDeviceGetName"]
        assert pynvml.nvmlEventSetWait_v2 is before["nvmlEventSetWait_v2"]  # passed through
    after = dict(vars(pynvml))
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


def test_only_top_level_calls_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml's own nvmlDeviceGetCount looks up its C function; NVMLError.__str__ asks nvmlErrorString;
    a function that calls another through pynvml: none of those inner calls is recorded."""

    def lookup(name: str) -> Any:
        if name != "nvmlDeviceGetCount_v2":
            raise pynvml.NVMLError(E_FUNCTION_NOT_FOUND)

        def count(ref: Any) -> int:
            ref._obj.value = 3
            return SUCCESS

        return count

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMinorNumber", lambda h: pynvml.nvmlDeviceGetCount() + 4)
    with Recorder() as rec:
        assert pynvml.nvmlDeviceGetCount() == 3  # the real binding's function
        assert pynvml.nvmlDeviceGetMinorNumber(None) == 7
        assert str(pynvml.NVMLError(4711)) == "NVML Error with code 4711"
    assert [(c["fn"], c["result"]) for c in rec.tape()["calls"]] == [
        ("nvmlDeviceGetCount", 3),
        ("nvmlDeviceGetMinorNumber", 7),
    ]


def test_calls_from_threads_are_all_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thread has its own depth: a call on one thread never hides another thread's call."""

    def slow_count() -> int:
        time.sleep(0.0002)
        return 8

    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", slow_count)
    with Recorder() as rec:
        threads = [
            threading.Thread(target=lambda: [pynvml.nvmlDeviceGetCount() for _ in range(100)])
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert rec.latency()["nvmlDeviceGetCount"]["calls"] == 800


def test_xid_events_pass_through_and_replay_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(n_gpus=2)

    def send(f: FakeNvml, i: int) -> None:
        if i == 1:
            assert f.send_xid(1, 79) == 1
            deadline = time.monotonic() + 1
            while any(e.pending for e in f.event_sets) and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.02)  # from the driver's queue into the watcher's

    tape, recorded, _ = record(fake, slows=(True, False, False), script=send, xid=True)
    assert [(x.gpu, x.xid) for r in recorded for x in r.xids] == [(1, 79)]
    assert not any(
        c.get("fn", "").startswith(("nvmlEventSet", "nvmlDeviceRegisterEvents")) for c in tape["calls"]
    )
    start = time.monotonic()
    replayed, _ = replay(tape, monkeypatch, slows=(True, False, False), xid=True)
    assert all(r.xids == () and r.errors == () for r in replayed)
    assert [r.gpus for r in replayed] == [r.gpus for r in recorded]
    assert time.monotonic() - start < 1.5


# -- playing -----------------------------------------------------------------------------------------------


def small_tape(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A few answers recorded from plain stand-ins (not hand-written): the fan speed answers 30 then 31,
    the clock answers for SM only, the memory with and without `version=`."""
    with pytest.MonkeyPatch.context() as mp:
        fake = FakeNvml(n_gpus=1).install(mp)
        fans = iter((30, 31))
        mp.setattr(pynvml, "nvmlDeviceGetFanSpeed", lambda h: next(fans))
        with Recorder() as rec:
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            pynvml.nvmlDeviceGetFanSpeed(h)
            pynvml.nvmlDeviceGetFanSpeed(h)
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            pynvml.nvmlDeviceGetMemoryInfo(h)
            pynvml.nvmlShutdown()
        assert fake.violations == []
    return rec.tape()


def test_replay_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    tape = small_tape(monkeypatch)
    Player(tape).install(monkeypatch)
    pynvml.nvmlInit()
    pynvml.nvmlInit()  # always succeeds, however often
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    # In order per key; the last answer repeats.
    assert [pynvml.nvmlDeviceGetFanSpeed(h) for _ in range(4)] == [30, 31, 31, 31]
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1755
    # The function was recorded, with other arguments: it exists, this question is not supported.
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
    # Never recorded: as if the driver lacked it.
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetPowerUsage(h)
    # Keyword arguments are part of the key.
    assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).reserved == 512 * MiB
    assert isinstance(pynvml.nvmlDeviceGetMemoryInfo(h), pynvml.c_nvmlMemory_t)
    # An unknown handle (not one the player handed out) has no answers.
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetFanSpeed(pynvml.c_nvmlDevice_t())
    pynvml.nvmlShutdown()
    pynvml.nvmlShutdown()


def test_other_exceptions_replay_as_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(handle: Any) -> int:
        raise TypeError("the binding choked")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pynvml, "nvmlDeviceGetFanSpeed", broken)
        with Recorder() as rec, pytest.raises(TypeError):
            pynvml.nvmlDeviceGetFanSpeed(None)
    Player(rec.tape()).install(monkeypatch)
    with pytest.raises(TypeError, match="the binding choked"):
        pynvml.nvmlDeviceGetFanSpeed(None)


def test_install_and_uninstall_without_monkeypatch(monkeypatch: pytest.MonkeyPatch) -> None:
    tape = small_tape(monkeypatch)
    before = dict(vars(pynvml))
    with Player(tape):
        assert pynvml.nvmlDeviceGetFanSpeed(pynvml.nvmlDeviceGetHandleByIndex(0)) == 30
        assert pynvml.nvmlDeviceGetCount is not before["nvmlDeviceGetCount"]
    after = dict(vars(pynvml))
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


def test_replayed_events_say_no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    Player(small_tape(monkeypatch)).install(monkeypatch)
    es = pynvml.nvmlEventSetCreate()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    start = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 10_000)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 0)
    assert 0.09 <= time.monotonic() - start < 3.0  # not the 10 s asked for (slack for load)
    pynvml.nvmlEventSetFree(es)


def process_tape(monkeypatch: pytest.MonkeyPatch, pids: list[int]) -> dict[str, Any]:
    fake = FakeNvml(n_gpus=1)
    fake.gpus[0].processes["C"] = [FakeProcess(pid=p, memory=GiB) for p in pids]
    tape, _, _ = record(fake, slows=(True,))
    return tape


def test_played_process_lists_follow_the_c_convention(monkeypatch: pytest.MonkeyPatch) -> None:
    Player(process_tape(monkeypatch, [777, 778, 779])).install(monkeypatch)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fn = pynvml._nvmlGetFunctionPointer(proc_symbol("C", 3))
    struct = pynvml.c_nvmlProcessInfo_v3_t
    count = ctypes.c_uint(0)
    assert fn(h, ctypes.byref(count), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 3
    small = (struct * 2)()
    count.value = 2
    assert fn(h, ctypes.byref(count), small) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 3
    buf = (struct * 5)()
    count.value = 5
    assert fn(h, ctypes.byref(count), buf) == pynvml.NVML_SUCCESS and count.value == 3
    assert [(p.pid, p.usedGpuMemory) for p in buf[:3]] == [(PID_BASE + i, GiB) for i in range(3)]
    # A buffer of another struct version would be read wrongly: refused.
    fn(h, ctypes.byref(count), None)
    count.value = 5
    with pytest.raises(ValueError, match="16 bytes, the tape's 24"):
        fn(h, ctypes.byref(count), (nvml_module._ProcessInfoV1 * 5)())
    # A symbol never looked up: as if the driver lacked it.
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSomethingElse")


def test_an_empty_process_list(monkeypatch: pytest.MonkeyPatch) -> None:
    Player(process_tape(monkeypatch, [])).install(monkeypatch)
    fn = pynvml._nvmlGetFunctionPointer(proc_symbol("C", 3))
    count = ctypes.c_uint(9)
    assert fn(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(count), None) == pynvml.NVML_SUCCESS
    assert count.value == 0


# -- through the rest of gputui ----------------------------------------------------------------------------


@pytest.fixture
def sampled(rich: tuple[dict[str, Any], list[Reading]], monkeypatch: pytest.MonkeyPatch) -> Any:
    tape, recorded = rich
    player = Player(tape).install(monkeypatch)
    with Sampler(NvmlSource(), scan_holders=False) as sampler:
        snaps = [sampler.tick() for _ in range(3)]
    return snaps, recorded, player


def test_a_sampler_over_a_player(sampled: Any) -> None:
    snaps, recorded, player = sampled
    snap = snaps[-1]
    assert snap.source == "nvml" and snap.driver_version == "550.54.15" and snap.cuda_driver_version == "12.4"
    assert [(g.name, g.uuid, g.mem_total) for g in snap.gpus] == [
        (g.name, g.uuid, g.mem_total) for g in recorded[0].gpus
    ]
    assert {r.pid for r in snap.processes} == {player.pid_map[p.pid] for p in recorded[2].processes}
    assert all(not r.visible for r in snap.processes)  # no process of this machine has such a PID


def test_the_exporter_carries_the_replayed_values(sampled: Any) -> None:
    pytest.importorskip("prometheus_client")
    from tests.export.test_metrics import scrape_snapshot

    snaps, recorded, _ = sampled
    scrape = scrape_snapshot(snaps[-1])
    whole_gpu = {
        labels["UUID"]: value
        for labels, value in scrape.series("DCGM_FI_DEV_FB_USED")
        if not labels.get("GPU_I_ID")
    }
    assert whole_gpu == {g.uuid: g.mem_used // MiB for g in recorded[2].gpus}
    assert whole_gpu[recorded[0].gpus[1].uuid] == 41 * 1024
    assert scrape.value("DCGM_FI_DEV_POWER_USAGE", UUID=recorded[0].gpus[1].uuid) == pytest.approx(350.25)


def test_cli_json_and_once(
    rich: tuple[dict[str, Any], list[Reading]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keep_signals: None,
) -> None:
    from gputui import cli

    tape, recorded = rich
    Player(tape).install(monkeypatch)
    assert cli.main(["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    want = [(g.name, g.uuid, g.mem_total, g.mem_used) for g in recorded[1].gpus]
    assert [(g["name"], g["uuid"], g["mem_total"], g["mem_used"]) for g in doc["gpus"]] == want
    assert doc["driver_version"] == "550.54.15"

    Player(tape).install(monkeypatch)  # from the start again
    assert cli.main(["--once"]) == 0
    out = capsys.readouterr().out
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"):
        assert name in out


# -- hostile tapes -----------------------------------------------------------------------------------------


def _struct_entry(tape: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in tape["calls"] if isinstance(c.get("result"), dict) and "struct" in c["result"])


def _outcome(call: dict[str, Any], **outcome: Any) -> None:
    call.pop("result", None)
    call.update(outcome)


HOSTILE: dict[str, Callable[[dict[str, Any]], object]] = {
    "truncated hex": lambda t: _struct_entry(t)["result"].update(hex=_struct_entry(t)["result"]["hex"][:-2]),
    "not hex": lambda t: _struct_entry(t)["result"].update(
        hex="zz" * ctypes.sizeof(pynvml.c_nvmlMemory_v2_t)
    ),
    "unknown struct": lambda t: _struct_entry(t)["result"].update(struct="c_nvmlNoSuchThing_t"),
    "a struct with pointers": lambda t: _struct_entry(t)["result"].update(struct="c_nvmlEventData_t"),
    "not a struct": lambda t: _struct_entry(t)["result"].update(struct="NVMLError"),
    "calls not a list": lambda t: t.update(calls={"a": 1}),
    "a call not an object": lambda t: t["calls"].append(7),
    "args not a list": lambda t: t["calls"][1].update(args="x"),
    "error not a code": lambda t: _outcome(t["calls"][2], error="Not Supported"),
    "error zero": lambda t: _outcome(t["calls"][2], error=0),
    "arguments not JSON": lambda t: t["calls"][2].update(args=[{1, 2}]),
    "exception without a message": lambda t: _outcome(t["calls"][2], exception={"type": "OSError"}),
    "two outcomes": lambda t: t["calls"][2].update(error=3),
    "no outcome": lambda t: t["calls"][2].pop("result"),
    "a bad function name": lambda t: t["calls"][2].update(fn="os.system"),
    "unknown key": lambda t: t["calls"][2].update(extra=1),
    "a bad handle key": lambda t: t["calls"][1].update(result={"gpu": "0"}),
    "an unknown value": lambda t: t["calls"][2].update(result={"eval": "x"}),
    "format": lambda t: t.update(format="something-else"),
    "version": lambda t: t.update(version=2),
    "a tape as a list": lambda t: t.clear(),
    "deep nesting": lambda t: t["calls"][2].update(result=json.loads("[" * 50 + "]" * 50)),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_tapes_are_refused_in_one_line(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tape = json.loads(json.dumps(small_tape(monkeypatch)))
    Player(json.loads(json.dumps(tape)))  # as recorded: fine
    HOSTILE[name](tape)
    bad: Any = [] if name == "a tape as a list" else tape
    with pytest.raises(ValueError) as err:
        Player(bad)
    assert "\n" not in str(err.value) and str(err.value).startswith("tape")


def test_process_list_hex_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    tape = process_tape(monkeypatch, [5])
    entry = next(c for c in tape["calls"] if c.get("c"))
    entry["result"]["procs"]["hex"][0] += "00"
    with pytest.raises(ValueError, match=r"calls\[\d+\] \(nvmlDeviceGetComputeRunningProcesses_v3\): hex"):
        Player(tape)


@pytest.mark.parametrize(
    "content", [b"{not json", b"\xff\xfe", b"[" * 100_000, b'{"format": 1' + b"9" * 5000 + b"}"]
)
def test_bad_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "tape.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        Player(path)
    assert "\n" not in str(err.value)


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(nvml_tape.MAX_TAPE_BYTES + 1)  # sparse: costs nothing
    with pytest.raises(ValueError, match="larger than 64 MiB"):
        Player(path)


# -- the fixture ---------------------------------------------------------------------------------------------


def h100_node() -> FakeNvml:
    """An 8-GPU H100 SXM node in a torchrun job: one rank per GPU, ECC and NVLink on, PCIe gen 5 x16."""
    fake = FakeNvml(n_gpus=8)
    for g in fake.gpus:
        g.mem_used, g.util_gpu, g.util_mem = 71 * GiB + g.index * MiB, 97 - g.index, 40
        g.ecc_mode = (1, 1)
        g.pcie_gen = g.pcie_gen_max = 5
        g.pcie_width = g.pcie_width_max = 16
        g.nvlink_tx_kib, g.nvlink_rx_kib = [10**9] * 18, [10**9] * 18
        g.nvlink_tx_rate = g.nvlink_rx_rate = 100_000_000_000
        g.processes["C"] = [FakeProcess(pid=60_000 + g.index, memory=70 * GiB)]
        fake.add_util_sample(g.index, 60_000 + g.index, 95, 38)
    return fake


def write_fixture(path: Path = FIXTURE) -> dict[str, Any]:
    """The 8-GPU tape (without timings, so that it is the same each time it is written)."""
    tape, _, _ = record(h100_node(), slows=FIXTURE_SLOWS)
    for call in tape["calls"]:
        call.pop("us", None)
    tape["pynvml_version"] = None
    write_tape(tape, path)
    return tape


def test_the_fixture_tape_replays_as_the_world_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The saved tape, played to today's NvmlSource, reads what that NvmlSource reads from the world the
    tape was made of (regenerate it after NvmlSource asks NVML for something new)."""
    assert FIXTURE.stat().st_size < 300_000
    _, live, _ = record(h100_node(), slows=FIXTURE_SLOWS)
    replayed, player = replay(FIXTURE, monkeypatch, slows=FIXTURE_SLOWS)
    assert_same(live, replayed, player.pid_map)
    assert len(replayed[-1].gpus) == 8 and not replayed[-1].errors
    assert [p.pid for p in replayed[-1].processes] == [player.pid_map[60_000 + i] for i in range(8)]
    assert all(g.nvlink_tx is not None and g.health is not None for g in replayed[-1].gpus)


if __name__ == "__main__":
    write_fixture()
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
