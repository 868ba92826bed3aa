"""Host stats (CPU, memory, swap, load, uptime): read cheaply every tick, recorded as an optional field
that old recordings lack and hostile recordings cannot abuse."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import psutil
import pytest

from gputui.collect.host import HostSampler
from gputui.collect.sampler import Sampler
from gputui.model import HostStats, Snapshot
from gputui.output import jsonout, schema_check
from tests.collect.test_sampler import RecordingSource


def test_the_first_reading_has_no_cpu_percent_and_the_next_one_does() -> None:
    host = HostSampler()
    first = host.read()
    assert first.cpu_percent is None  # unknown, not 0 %
    time.sleep(0.05)  # the kernel counts CPU time in ticks of 10 ms: two readings within one say nothing new
    second = host.read()
    assert second.cpu_percent is not None and 0.0 <= second.cpu_percent <= 100.0


def test_memory_swap_load_and_uptime_agree_with_the_system() -> None:
    stats = HostSampler(clock=time.time).read()
    vm = psutil.virtual_memory()
    assert stats.mem_total == vm.total
    assert stats.mem_used is not None and 0 <= stats.mem_used <= vm.total
    assert stats.swap_total == psutil.swap_memory().total
    assert stats.cpu_count == psutil.cpu_count()
    assert stats.load is not None and len(stats.load) == 3
    assert abs(stats.load[0] - os.getloadavg()[0]) < 5
    assert stats.uptime is not None and abs(stats.uptime - (time.time() - psutil.boot_time())) < 5


def test_a_failing_reading_is_none_not_a_crash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(*_: object, **__: object) -> object:
        raise OSError("no /proc here")

    monkeypatch.setattr(psutil, "boot_time", broken)
    monkeypatch.setattr(os, "getloadavg", broken)
    host = HostSampler(proc=str(tmp_path))  # no stat, no meminfo
    host.read()
    stats = host.read()
    assert (stats.cpu_percent, stats.mem_total, stats.swap_total, stats.load, stats.uptime) == (None,) * 5


STAT = "cpu  {user} 0 {system} {idle} {iowait} 0 0 0 {guest} 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2 3\n"
MEMINFO = """MemTotal:       16000000 kB
MemFree:         1000000 kB
MemAvailable:    6000000 kB
Buffers:          200000 kB
Cached:          3000000 kB
SwapCached:            0 kB
SwapTotal:       2000000 kB
SwapFree:        1500000 kB
HugePages_Total:       0
"""


def _proc(tmp_path: Path, meminfo: str = MEMINFO, **ticks: int) -> str:
    values = {"user": 0, "system": 0, "idle": 0, "iowait": 0, "guest": 0, **ticks}
    (tmp_path / "stat").write_text(STAT.format(**values))
    (tmp_path / "meminfo").write_text(meminfo)
    return str(tmp_path)


def test_cpu_is_busy_time_over_all_time_since_the_last_reading(tmp_path: Path) -> None:
    host = HostSampler(proc=_proc(tmp_path, user=100, system=50, idle=800, iowait=50))
    assert host.read().cpu_percent is None
    # +300 user (60 of them a guest's, already in user), +100 system, +500 idle, +100 I/O wait
    _proc(tmp_path, user=400, system=150, idle=1300, iowait=150, guest=60)
    assert host.read().cpu_percent == pytest.approx(100 * 400 / 1000)
    # Read again within one kernel tick: nothing new, so the last figure stands (not 0 %, not unknown) ...
    assert host.read().cpu_percent == pytest.approx(100 * 400 / 1000)
    # ... and the next figure is measured from the same start: +100 busy of +200 since the second reading
    _proc(tmp_path, user=500, system=150, idle=1400, iowait=150, guest=60)
    assert host.read().cpu_percent == pytest.approx(100 * 100 / 200)
    # Counters that go back (a garbled file, a restored container) say nothing true: unknown
    _proc(tmp_path, user=1, system=1, idle=1, iowait=1)
    assert host.read().cpu_percent is None


def test_memory_in_use_is_what_is_not_available_and_swap_what_is_not_free(tmp_path: Path) -> None:
    stats = HostSampler(proc=_proc(tmp_path)).read()
    assert (stats.mem_total, stats.mem_used) == (16_000_000 << 10, 10_000_000 << 10)
    assert (stats.swap_total, stats.swap_used) == (2_000_000 << 10, 500_000 << 10)
    # A kernel without MemAvailable (< 3.14): free, buffers and page cache are what can be had
    old = "\n".join(line for line in MEMINFO.splitlines() if not line.startswith("MemAvailable"))
    stats = HostSampler(proc=_proc(tmp_path, meminfo=old)).read()
    assert stats.mem_used == (16_000_000 - 4_200_000) << 10


@pytest.mark.parametrize(
    ("stat", "meminfo"),
    [
        ("", ""),
        ("cpu  a b c d\n", "MemTotal: lots kB\nMemAvailable:\n"),
        ("intr 1 2 3\n", "SwapTotal: 10 kB\n"),
        ("cpu  1 2\n", "MemTotal: 10 kB\n"),
        ("\x00\xff" * 100, "\x00" * 100),
    ],
)
def test_a_garbled_proc_gives_unknowns(tmp_path: Path, stat: str, meminfo: str) -> None:
    (tmp_path / "stat").write_text(stat)
    (tmp_path / "meminfo").write_text(meminfo)
    host = HostSampler(proc=str(tmp_path))
    host.read()
    stats = host.read()
    assert (stats.cpu_percent, stats.mem_total, stats.mem_used, stats.swap_total, stats.swap_used) == (
        None,
    ) * 5


def test_a_reading_is_cheap_enough_for_every_tick() -> None:
    host = HostSampler()
    host.read()
    start = time.thread_time()  # CPU time, not wall: what a tick pays, whatever else the box runs
    for _ in range(100):
        host.read()
    per_read = (time.thread_time() - start) / 100
    assert per_read < 0.002, f"{per_read * 1e3:.2f} ms per reading"


def test_every_snapshot_carries_host_stats() -> None:
    with Sampler(RecordingSource(), scan_holders=False) as sampler:
        first = sampler.tick()
        time.sleep(0.05)  # the kernel counts CPU time in ticks of 10 ms: two readings within one are unknown
        second = sampler.tick()
    assert first.host is not None and first.host.cpu_percent is None
    assert second.host is not None and second.host.cpu_percent is not None
    assert second.host.mem_total is not None and second.host.mem_total > 0


# -- recorded ---------------------------------------------------------------------------------------


def _snapshot(host: HostStats | None) -> Snapshot:
    with Sampler(RecordingSource(), scan_holders=False) as sampler:
        snap = sampler.tick()
    return dataclasses.replace(snap, host=host)


HOST = HostStats(
    cpu_percent=12.5,
    cpu_count=64,
    mem_total=512 << 30,
    mem_used=100 << 30,
    swap_total=0,
    swap_used=0,
    load=(1.0, 2.0, 3.5),
    uptime=12345.5,
)


def test_host_stats_round_trip_and_match_the_schema() -> None:
    doc = json.loads(jsonout.dumps(_snapshot(HOST)))
    assert doc["host"]["load"] == [1.0, 2.0, 3.5]
    schema_check.check(doc, jsonout.schema())
    assert jsonout.snapshot_from_dict(doc).host == HOST


def test_a_recording_made_before_host_stats_still_loads() -> None:
    doc = json.loads(jsonout.dumps(_snapshot(None)))
    assert "host" not in doc  # absent, as in old recordings
    schema_check.check(doc, jsonout.schema())
    assert jsonout.snapshot_from_dict(doc).host is None
    for gpu in doc["gpus"]:  # nor did old recordings have the newer GPU fields
        for key in ("ecc_errors", "nvlink_rx", "nvlink_tx"):
            gpu.pop(key, None)
    schema_check.check(doc, jsonout.schema())
    assert jsonout.snapshot_from_dict(doc).gpus[0].ecc_errors is None


@pytest.mark.parametrize(
    "host",
    [
        "a string",
        {"cpu_percent": -1},
        {"cpu_percent": 101},
        {"cpu_percent": float("nan")},
        {"mem_total": 1.5},
        {"mem_total": True},
        {"load": [1, 2]},
        {"load": [1, 2, "x"]},
        {"load": "1 2 3"},
        {"evil": 1},
    ],
)
def test_hostile_host_stats_are_refused(host: object) -> None:
    doc = json.loads(jsonout.dumps(_snapshot(None)))
    doc["host"] = host
    with pytest.raises(ValueError):
        jsonout.snapshot_from_dict(doc)
