"""Fault injection at the sampler level: NVML errors that come and go, a lost GPU, NVML shut down
underneath, processes that vanish mid-join, /proc that says no, 5,000 processes, hostile command lines,
user ids without a name, and a wall clock that jumps back an hour.

Every case runs the real Sampler over NvmlSource (NVML replaced by tests/collect/fake_nvml.py) and the
host's real /proc, and every snapshot it produces must serialize to schema-valid JSON, round-trip, and
render as `gputui --once` text with no control character in it: a failure shows as n/a or a badge,
never as a traceback.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import pwd
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pynvml
import pytest
from jsonschema import Draft202012Validator
from psutil import _pslinux  # psutil._psplatform on Linux: the per-platform Process the tests deny

import gputui.collect.procs.join as procs_module
from gputui.analyze.classify import NO_PERMISSION, NVML_ONLY, OK, UNSEEN, WORKER
from gputui.analyze.dips import DipDetector
from gputui.analyze.history import History
from gputui.collect.agents.client import AgentPoller
from gputui.collect.procs.holders import HolderScanner
from gputui.collect.procs.join import MAX_COMMAND, describe
from gputui.collect.sampler import Sampler
from gputui.collect.sources.nvml import NvmlSource
from gputui.model import GpuSample, ProcessRow, Snapshot
from gputui.output.jsonout import dumps, schema, snapshot_from_dict
from gputui.output.oneshot import render
from gputui.units import printable
from tests.collect.fake_nvml import FakeGpu, FakeNvml, FakeProcess
from tests.helpers import known, wait_until

GiB = 2**30
N_GPUS = 8
E_UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
E_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
TRANSIENT = pytest.mark.parametrize("error", [E_UNKNOWN, E_TIMEOUT], ids=["Unknown", "Timeout"])
SLOW_INTERVAL = 5.0  # the Sampler's default; ticks here are 1 s apart, so every 5th tick is slow
PID_BEYOND_ANY_PID_MAX = 4_194_304 + 1  # PID_MAX_LIMIT + 1: a PID no Linux process can have
VALIDATOR = Draft202012Validator(schema())

# What the fake reports, as NvmlSource converts it: the fields compared to tell "intact" from "n/a".
STABLE = (
    "name",
    "uuid",
    "minor",
    "lost",
    "util_gpu",
    "util_mem",
    "mem_total",
    "mem_used",
    "mem_reserved",
    "temperature",
    "power",
    "power_limit",
    "sm_clock",
    "mem_clock",
    "pstate",
    "fan",
    "enc_util",
    "dec_util",
)
DISPLAYED = {"util_gpu", "mem_total", "mem_used", "temperature", "power", "sm_clock"}  # in --once
MEASURED = tuple(k for k in STABLE if k not in ("name", "uuid", "minor", "lost"))

# Every per-device binding NvmlSource calls while reading (not the ones of open()).
DEVICE_READS = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)

# A child that opens the files named in GPUTUI_TEST_OPEN (os.pathsep-separated), optionally renames its
# thread (comm) to the bytes in GPUTUI_TEST_COMM_HEX, says "ready" and waits for its stdin to close.
# Extra argv items are ignored: they are there to be read back from /proc/PID/cmdline.
HOLDER = r"""
import ctypes, os, sys
for path in filter(None, os.environ.get("GPUTUI_TEST_OPEN", "").split(os.pathsep)):
    os.open(path, os.O_RDONLY)
comm = os.environ.get("GPUTUI_TEST_COMM_HEX")
if comm:
    ctypes.CDLL(None).prctl(15, bytes.fromhex(comm), 0, 0, 0)  # PR_SET_NAME
print("ready", flush=True)
sys.stdin.buffer.read()
"""


# -- the world: a Sampler over a fake NVML with 8 GPUs and stand-in device files ------------------------


class WallClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def check_snapshot(snap: Snapshot) -> None:
    """What every snapshot of a fault must survive: JSON (schema-valid, ASCII, round-tripping) and the
    --once rendering, with no control character, escape sequence or lone surrogate reaching the text."""
    text = dumps(snap)
    assert text.isascii()
    data = json.loads(text)
    VALIDATOR.validate(data)
    back = snapshot_from_dict(data)
    assert back.gpus == snap.gpus
    assert back.processes == snap.processes
    assert back.errors == snap.errors
    for width in (None, 100):
        out = render(snap, width)
        out.encode("utf-8")  # strict: a lone surrogate from an undecodable argv would raise here
        bad = [ch for line in out.split("\n") for ch in line if not ch.isprintable()]
        assert bad == [], f"unprintable characters in the --once text: {bad[:10]!r}"


class World:
    """A Sampler over NvmlSource over FakeNvml(8 GPUs), scanning real /proc for holders of stand-in
    device files; History and DipDetector fed from every tick as the UI does."""

    def __init__(self, fake: FakeNvml, devices: Path) -> None:
        self.fake = fake
        self.devices = devices
        self.wall = WallClock(1_750_000_000.0)
        self.source = NvmlSource(devices_dir=devices)
        self.history = History()
        self.dips = DipDetector()
        self.sampler = Sampler(
            self.source,
            slow_interval=SLOW_INTERVAL,
            history=self.history,
            clock=self.wall,
            monotonic=lambda: fake.now,
            devices_dir=devices,
            agents=AgentPoller(devices / "no-agents-here"),
        )
        self.snaps: list[Snapshot] = []
        self.expect_violations = False  # set by the tests that shut NVML down underneath

    def tick(self, seconds: float = 1.0) -> Snapshot:
        self.fake.advance(seconds)
        self.wall.t += seconds
        snap = self.sampler.tick()
        self.dips.add(snap)
        check_snapshot(snap)
        self.snaps.append(snap)
        return snap

    def ticks(self, n: int) -> Snapshot:
        for _ in range(n):
            snap = self.tick()
        return snap

    def device(self, gpu: int) -> Path:
        """The stand-in /dev/nvidiaN of NVML GPU `gpu` (the fake's minor numbers run backwards)."""
        minor = self.fake.gpus[gpu].minor
        assert minor is not None
        return self.devices / f"nvidia{minor}"


def make_distinct(fake: FakeNvml) -> None:
    """Every GPU with its own values, so that a mix-up between GPUs shows."""
    for g in fake.gpus:
        i = g.index
        g.util_gpu, g.util_mem = 10 + 10 * i, 3 + i
        g.mem_used = (i + 1) * GiB + i
        g.temperature, g.fan = 50 + i, 20 + i
        g.power_mw, g.power_limit_mw = 100_000 + 1_000 * i, 400_000 + 1_000 * i
        g.sm_clock, g.mem_clock, g.pstate = 1000 + i, 2000 + i, i % 3
        g.enc, g.dec = i, 2 * i


def expected(g: FakeGpu) -> dict[str, Any]:
    assert g.power_mw is not None and g.power_limit_mw is not None
    return {
        "name": g.name,
        "uuid": g.uuid,
        "minor": g.minor,
        "lost": False,
        "util_gpu": g.util_gpu,
        "util_mem": g.util_mem,
        "mem_total": g.mem_total,
        "mem_used": g.mem_used,
        "mem_reserved": g.mem_reserved,
        "temperature": g.temperature,
        "power": g.power_mw / 1000,
        "power_limit": g.power_limit_mw / 1000,
        "sm_clock": g.sm_clock,
        "mem_clock": g.mem_clock,
        "pstate": g.pstate,
        "fan": g.fan,
        "enc_util": g.enc,
        "dec_util": g.dec,
    }


def observed(s: GpuSample) -> dict[str, Any]:
    return {k: getattr(s, k) for k in STABLE}


def assert_intact(snap: Snapshot, fake: FakeNvml, skip: frozenset[int] | set[int] = frozenset()) -> None:
    """Every GPU not in `skip` shows exactly what the fake reports, counters included."""
    assert [g.index for g in snap.gpus] == list(range(len(fake.gpus)))
    for g in snap.gpus:
        if g.index in skip:
            continue
        assert observed(g) == expected(fake.gpus[g.index]), f"GPU {g.index}"
        assert g.energy is not None and g.pcie_tx is not None and g.pcie_rx is not None, f"GPU {g.index}"


def gpu_text(text: str, gpu: int) -> str:
    """GPU `gpu`'s line of the --once text."""
    (line,) = [x for x in text.splitlines() if re.match(rf"{gpu} +\S", x)]
    return line


def rows(snap: Snapshot, pid: int) -> list[ProcessRow]:
    return [p for p in snap.processes if p.pid == pid]


def row(snap: Snapshot, pid: int, gpu: int | None = None) -> ProcessRow:
    found = [p for p in rows(snap, pid) if gpu is None or p.gpu == gpu]
    assert len(found) == 1, f"rows of pid {pid} on GPU {gpu}: {found}"
    return found[0]


@pytest.fixture
def devices() -> Iterator[Path]:
    """A world-readable stand-in for /dev (a child running as another user must open its files)."""
    path = Path(tempfile.mkdtemp(prefix="gputui-faults-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        path.chmod(0o755)
        for name in [f"nvidia{m}" for m in range(N_GPUS)] + ["nvidiactl", "nvidia-uvm"]:
            (path / name).touch()
            (path / name).chmod(0o666)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, devices: Path) -> Iterator[World]:
    fake = FakeNvml(n_gpus=N_GPUS)
    make_distinct(fake)
    fake.install(monkeypatch)
    w = World(fake, devices)
    w.sampler.open()
    try:
        yield w
    finally:
        w.sampler.close()
    if not w.expect_violations:
        assert fake.violations == []
        assert fake.initialized == 0, "nvmlInit without nvmlShutdown"


class Children:
    """Real child processes; every one is killed and reaped at the end of the test."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[bytes]] = []

    def start(
        self, *argv: str | bytes, holds: tuple[Path, ...] = (), comm: bytes | None = None
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, "GPUTUI_TEST_OPEN": os.pathsep.join(str(p) for p in holds)}
        if comm is not None:
            env["GPUTUI_TEST_COMM_HEX"] = comm.hex()
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        return self._ready(p)

    def start_argv(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Any command that prints "ready" once it holds what it should."""
        return self._ready(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kwargs))

    def _ready(self, p: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.popens.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == b"ready", f"child {p.pid} did not start: {line!r}"
        return p

    @staticmethod
    def end(p: subprocess.Popen[bytes]) -> None:
        """Kill and reap: afterwards the PID is free (no zombie left to see)."""
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
        for stream in (p.stdin, p.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()

    def end_all(self) -> None:
        for p in self.popens:
            self.end(p)


@pytest.fixture
def children() -> Iterator[Children]:
    kids = Children()
    try:
        yield kids
    finally:
        kids.end_all()
    assert all(p.returncode is not None for p in kids.popens)


# -- 1. per-field NVML errors that appear mid-run and clear again -----------------------------------------


def _fail_fields(fid: int) -> Callable[[FakeNvml, int, int], None]:
    def inject(fake: FakeNvml, gpu: int, error: int) -> None:
        fake.gpus[gpu].field_returns[fid] = error

    return inject


def _fail(*names: str) -> Callable[[FakeNvml, int, int], None]:
    def inject(fake: FakeNvml, gpu: int, error: int) -> None:
        for name in names:
            fake.fail(gpu, name, error)

    return inject


# name -> (how to inject on one GPU, the GpuSample fields that become n/a)
FIELD_FAULTS: dict[str, tuple[Callable[[FakeNvml, int, int], None], tuple[str, ...]]] = {
    "utilization": (_fail("nvmlDeviceGetUtilizationRates"), ("util_gpu", "util_mem")),
    "memory": (_fail("nvmlDeviceGetMemoryInfo"), ("mem_total", "mem_used", "mem_reserved")),
    # The batched field read failing falls back to nvmlDeviceGetPowerUsage and
    # nvmlDeviceGetTotalEnergyConsumption; all failing: no power, no energy.
    "power": (
        _fail("nvmlDeviceGetFieldValues", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption"),
        ("power", "power_limit", "energy", "pcie_tx", "pcie_rx"),
    ),
    "energy field": (_fail_fields(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION), ("energy",)),
    "temperature (slow)": (_fail("nvmlDeviceGetTemperature"), ("temperature",)),
    "clocks (slow)": (_fail("nvmlDeviceGetClockInfo"), ("sm_clock", "mem_clock")),
    "fan (slow)": (_fail("nvmlDeviceGetFanSpeed"), ("fan",)),
}


@TRANSIENT
@pytest.mark.parametrize("fault", list(FIELD_FAULTS))
def test_a_transient_field_error_on_one_gpu_gives_na_there_only_and_clears(
    world: World, fault: str, error: int
) -> None:
    fake = world.fake
    inject, fields = FIELD_FAULTS[fault]
    assert_intact(world.ticks(2), fake)

    inject(fake, 5, error)
    for _ in range(int(SLOW_INTERVAL) + 1):  # long enough for a slow tick to have read the slow fields
        snap = world.tick()
        assert_intact(snap, fake, skip={5})  # the other seven GPUs are untouched on every tick
        assert snap.errors == ()  # one field's error is an n/a, not an error line
    bad = snap.gpus[5]
    assert {f: getattr(bad, f) for f in fields} == dict.fromkeys(fields)
    assert not bad.lost
    others = {k: v for k, v in observed(bad).items() if k not in fields}
    assert others == {k: v for k, v in expected(fake.gpus[5]).items() if k not in fields}
    if set(fields) & DISPLAYED:
        assert "n/a" in gpu_text(render(snap), 5)

    fake.clear_failures()
    fake.gpus[5].field_returns.clear()
    # A transient error is not "not supported": the field is asked for again and comes back.
    for _ in range(int(SLOW_INTERVAL) + 1):
        snap = world.tick()
    assert_intact(snap, fake)
    assert world.history.gpus[5].util[-1] == fake.gpus[5].util_gpu


@TRANSIENT
def test_a_transient_process_list_error_on_one_gpu_then_the_list_returns(world: World, error: int) -> None:
    fake, me = world.fake, os.getpid()
    for g in fake.gpus:
        g.processes["C"].append(FakeProcess(pid=me, memory=GiB))
    snap = world.ticks(2)
    assert sorted(known(p.gpu) for p in rows(snap, me)) == list(range(N_GPUS))

    fake.fail(5, "nvmlDeviceGetComputeRunningProcesses", error)
    snap = world.ticks(3)
    assert_intact(snap, fake)  # the GPU's own fields are not affected
    assert sorted(known(p.gpu) for p in rows(snap, me)) == [0, 1, 2, 3, 4, 6, 7]
    assert all(p.visible and p.category == OK and p.used_memory == GiB for p in rows(snap, me))

    fake.clear_failures()
    snap = world.tick()
    assert sorted(known(p.gpu) for p in rows(snap, me)) == list(range(N_GPUS))
    assert row(snap, me, 5).used_memory == GiB
    assert snap.unaccounted_memory[5] == fake.gpus[5].mem_used - GiB


def test_unaccounted_memory_is_unknown_while_the_process_list_fails(world: World) -> None:
    fake = world.fake
    for g in fake.gpus:
        g.processes["C"].append(FakeProcess(pid=os.getpid(), memory=GiB))
    snap = world.ticks(2)
    assert snap.unaccounted_memory[5] == fake.gpus[5].mem_used - GiB
    fake.fail(5, "nvmlDeviceGetComputeRunningProcesses", E_UNKNOWN)
    snap = world.tick()
    assert snap.unaccounted_memory[4] == fake.gpus[4].mem_used - GiB  # the others: still known
    assert snap.unaccounted_memory[5] is None  # fails: it is fake.gpus[5].mem_used, the whole memory


def test_every_call_failing_on_one_gpu_leaves_it_present_and_the_others_intact(world: World) -> None:
    fake = world.fake
    assert_intact(world.ticks(2), fake)
    for name in DEVICE_READS:
        fake.fail(6, name, E_UNKNOWN)
    for _ in range(int(SLOW_INTERVAL) + 1):
        snap = world.tick()
        assert_intact(snap, fake, skip={6})
    six = snap.gpus[6]
    assert not six.lost
    assert (six.name, six.uuid, six.minor) == (fake.gpus[6].name, fake.gpus[6].uuid, fake.gpus[6].minor)
    assert {k: getattr(six, k) for k in MEASURED if k != "power_limit"} == dict.fromkeys(
        k for k in MEASURED if k != "power_limit"
    )
    assert world.history.gpus[6].util[-1] is None and world.history.gpus[6].mem[-1] is None

    fake.clear_failures()
    for _ in range(int(SLOW_INTERVAL) + 1):
        snap = world.tick()
    assert_intact(snap, fake)


def test_a_binding_bug_on_one_gpu_mid_run_is_an_error_line_and_clears(world: World) -> None:
    fake = world.fake
    world.ticks(2)
    fake.fail(2, "nvmlDeviceGetUtilizationRates", RuntimeError("binding bug"), times=2)
    for _ in range(2):
        snap = world.tick()
        assert snap.errors == ("GPU 2: RuntimeError: binding bug",)
        assert snap.gpus[2].name == fake.gpus[2].name and snap.gpus[2].util_gpu is None
        assert not snap.gpus[2].lost
        assert_intact(snap, fake, skip={2})
        assert "! GPU 2: RuntimeError: binding bug" in render(snap)
    snap = world.tick()
    assert snap.errors == ()
    assert_intact(snap, fake)


# -- 2. GpuIsLost on GPU 3 of 8, mid-run ------------------------------------------------------------------


LOST_FAULTS = {
    "utilization raises": lambda fake: fake.fail(
        3, "nvmlDeviceGetUtilizationRates", pynvml.NVMLError_GpuIsLost
    ),
    "a field value": lambda fake: fake.gpus[3].field_returns.__setitem__(
        pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_ERROR_GPU_IS_LOST
    ),
    "the process list": lambda fake: fake.fail(
        3, "nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_GPU_IS_LOST
    ),
    "temperature (slow)": lambda fake: fake.fail(3, "nvmlDeviceGetTemperature", pynvml.NVMLError_GpuIsLost),
}


@pytest.mark.parametrize("how", list(LOST_FAULTS))
def test_gpu_3_of_8_lost_mid_run(world: World, children: Children, how: str) -> None:
    fake, me = world.fake, os.getpid()
    for g in fake.gpus:
        g.processes["C"].append(FakeProcess(pid=me, memory=GiB))
    holder = children.start(holds=(world.device(3),))  # a process holding the lost GPU's device file
    snap = world.ticks(2)
    assert_intact(snap, fake)
    assert row(snap, holder.pid).gpu == 3

    LOST_FAULTS[how](fake)
    lost_at = None
    for i in range(int(SLOW_INTERVAL) + 1):
        snap = world.tick()
        if snap.gpus[3].lost:
            lost_at = i if lost_at is None else lost_at
            if i == lost_at:
                assert snap.errors == ("GPU 3 is lost (it needs a reset or a reboot)",)
                calls_when_lost = fake.total_calls(3)
    assert lost_at is not None, "GPU 3 was never marked lost"
    three = snap.gpus[3]
    assert three.lost
    # What is known of it stays (to tell which card it is); every measurement is n/a.
    assert (three.name, three.uuid, three.pci_bus_id, three.minor) == (
        fake.gpus[3].name,
        fake.gpus[3].uuid,
        fake.gpus[3].pci_bus_id,
        fake.gpus[3].minor,
    )
    assert {k: getattr(three, k) for k in MEASURED} == dict.fromkeys(MEASURED)
    assert fake.total_calls(3) == calls_when_lost  # a lost GPU is not asked again
    assert_intact(snap, fake, skip={3})  # the seven others keep every value
    assert sorted(known(p.gpu) for p in rows(snap, me)) == [0, 1, 2, 4, 5, 6, 7]
    assert row(snap, holder.pid).gpu == 3  # its device file's holder is still shown on it
    assert snap.unaccounted_memory[3] is None
    assert "LOST" in gpu_text(render(snap), 3)
    assert world.history.gpus[3].util[-1] is None and world.history.gpus[2].util[-1] == 30

    fake.clear_failures()
    fake.gpus[3].field_returns.clear()
    snap = world.ticks(int(SLOW_INTERVAL) + 1)
    assert snap.gpus[3].lost  # lost stays lost (it needs a reset): no flapping between ticks
    assert_intact(snap, fake, skip={3})
    assert world.sampler.ticks == len(world.snaps)


# -- 3. NVML shut down underneath -------------------------------------------------------------------------


def _uninitialized_everywhere(fake: FakeNvml) -> None:
    for name in DEVICE_READS:
        fake.fail(
            None,
            name,
            pynvml.NVML_ERROR_UNINITIALIZED if "Running" in name else pynvml.NVMLError_Uninitialized,
        )


def test_every_call_uninitialized_for_a_few_ticks_gives_na_then_values_return(world: World) -> None:
    fake = world.fake
    for g in fake.gpus:
        g.processes["C"].append(FakeProcess(pid=os.getpid(), memory=GiB))
    assert_intact(world.ticks(2), fake)
    _uninitialized_everywhere(fake)
    for _ in range(int(SLOW_INTERVAL) + 1):
        snap = world.tick()
        assert [g.lost for g in snap.gpus] == [False] * N_GPUS
    for sample in snap.gpus:
        assert {k: getattr(sample, k) for k in MEASURED if k != "power_limit"} == dict.fromkeys(
            k for k in MEASURED if k != "power_limit"
        ), f"GPU {sample.index}"
        assert sample.name == fake.gpus[sample.index].name  # static identity stays
    assert rows(snap, os.getpid()) == []
    fake.clear_failures()
    snap = world.ticks(int(SLOW_INTERVAL) + 1)
    assert_intact(snap, fake)
    assert len(rows(snap, os.getpid())) == N_GPUS


def test_nvml_shut_down_underneath_does_not_stop_the_ticks(world: World) -> None:
    fake = world.fake
    world.expect_violations = True  # the fake notes every call made while NVML is down
    assert_intact(world.ticks(2), fake)
    pynvml.nvmlShutdown()  # someone else's shutdown: the library's reference count drops to 0
    assert fake.initialized == 0
    snap = world.tick()  # never raises: the tick that meets the shutdown reads nothing new
    for g in snap.gpus:
        assert not g.lost
        assert (g.util_gpu, g.util_mem, g.mem_used, g.power) == (None, None, None, None), f"GPU {g.index}"
    assert "n/a" in render(snap)
    snap = world.tick()  # the next one starts NVML again and says so
    assert any("initialized again" in e for e in snap.errors)
    assert world.sampler.ticks == len(world.snaps)


def test_nvml_shut_down_underneath_is_initialized_again(world: World) -> None:
    fake = world.fake
    world.expect_violations = True
    assert_intact(world.ticks(2), fake)
    pynvml.nvmlShutdown()
    inits = fake.system_calls["nvmlInit"]
    world.ticks(int(SLOW_INTERVAL) + 1)
    assert fake.system_calls["nvmlInit"] > inits, "nvmlInit was not called again"
    assert fake.initialized == 1
    snap = world.ticks(int(SLOW_INTERVAL) + 1)
    assert_intact(snap, fake)


# -- 4. processes vanishing between NVML's list and psutil ----------------------------------------------


def _assert_gone_row(r: ProcessRow) -> None:
    assert not r.visible
    assert r.category == NVML_ONLY
    assert (r.user, r.name, r.command, r.cpu_percent, r.rss, r.create_time, r.state, r.ppid) == (None,) * 8


def test_a_pid_that_never_existed_is_a_not_visible_row(world: World) -> None:
    ghost = PID_BEYOND_ANY_PID_MAX
    world.fake.gpus[4].processes["C"].append(FakeProcess(pid=ghost, memory=3 * GiB))
    snap = world.ticks(2)
    r = row(snap, ghost)
    _assert_gone_row(r)
    assert (r.gpu, r.kinds, r.used_memory) == (4, "C", 3 * GiB)
    text = render(snap)
    assert "(not visible here: another PID namespace, or gone)" in text
    assert re.search(rf"! +{ghost} nvml-only", text)


def test_a_process_that_exits_between_the_nvml_list_and_the_join(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = children.start("--marker-exits-after-nvml")
    world.fake.gpus[1].processes["C"].append(FakeProcess(pid=child.pid, memory=GiB))
    snap = world.ticks(2)
    before = row(snap, child.pid)
    assert before.visible and "--marker-exits-after-nvml" in (before.command or "")

    read = world.source.read

    def read_then_exit(slow: bool) -> Any:
        reading = read(slow)  # NVML listed it ...
        Children.end(child)  # ... and it is gone (reaped: no /proc entry) before psutil looks
        return reading

    with monkeypatch.context() as m:
        m.setattr(world.source, "read", read_then_exit)
        snap = world.tick()
    r = row(snap, child.pid)
    _assert_gone_row(r)
    assert (r.gpu, r.kinds, r.used_memory) == (1, "C", GiB)
    world.fake.gpus[1].processes["C"].clear()
    snap = world.tick()
    assert rows(snap, child.pid) == []


def test_a_process_that_exits_between_its_stat_and_psutil(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrowest window: /proc/PID/stat was read, then psutil finds no process."""
    child = children.start("--marker-exits-after-stat")
    world.fake.gpus[0].processes["C"].append(FakeProcess(pid=child.pid, memory=GiB))
    read_stat = procs_module._read_stat

    def stat_then_exit(pid: int) -> Any:
        stat = read_stat(pid)
        if pid == child.pid:
            Children.end(child)
        return stat

    with monkeypatch.context() as m:
        m.setattr(procs_module, "_read_stat", stat_then_exit)
        snap = world.tick()  # first sight: psutil.Process(pid) raises NoSuchProcess
    assert child.returncode is not None
    _assert_gone_row(row(snap, child.pid))
    _assert_gone_row(row(world.tick(), child.pid))  # NVML still lists it: still a row, still gone


def test_a_holder_that_exits_between_the_scan_and_the_join_is_dropped(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    stays = children.start(holds=(world.device(0),))
    leaves = children.start(holds=(world.device(0), world.devices / "nvidiactl"))
    snap = world.tick()
    assert {r.pid for r in snap.processes} == {stays.pid, leaves.pid}
    scan = HolderScanner.scan

    def scan_then_exit(self: HolderScanner) -> Any:
        result = scan(self)
        if leaves.pid in result.holders:
            Children.end(leaves)
        return result

    with monkeypatch.context() as m:
        m.setattr(HolderScanner, "scan", scan_then_exit)
        snap = world.tick()
    assert leaves.returncode is not None
    assert [(r.pid, r.gpu, r.category) for r in snap.processes] == [(stays.pid, 0, UNSEEN)]


def _spawn_at_pid(pid: int, kids: Children, *argv: str) -> subprocess.Popen[bytes] | None:
    """A child with PID `pid` (root only: /proc/sys/kernel/ns_last_pid); None when another process of
    the machine took that PID first every time."""
    for _ in range(20):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError:
            return None
        p = kids.start(*argv)
        if p.pid == pid:
            return p
        Children.end(p)
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a PID is reused through ns_last_pid")
def test_a_reused_pid_is_a_new_process_not_the_old_one(world: World, children: Children) -> None:
    first = children.start("--marker-first-owner")
    pid = first.pid
    world.fake.gpus[2].processes["C"].append(FakeProcess(pid=pid, memory=GiB))
    world.tick()
    snap = world.tick()
    old = row(snap, pid)
    assert old.command is not None and "--marker-first-owner" in old.command
    assert old.cpu_percent is not None  # known since the previous tick
    Children.end(first)
    time.sleep(0.03)  # a later start time, in clock ticks (10 ms), for the next owner of the PID
    second = _spawn_at_pid(pid, children, "--marker-second-owner")
    if second is None:
        pytest.skip(f"could not start a process with PID {pid} again")
    snap = world.tick()
    new = row(snap, pid)
    assert new.visible and new.command is not None
    assert "--marker-second-owner" in new.command and "--marker-first-owner" not in new.command
    assert new.create_time == pytest.approx(psutil.Process(pid).create_time(), abs=0.01)
    assert old.create_time is not None and new.create_time is not None and new.create_time > old.create_time
    assert new.cpu_percent is None  # a first sighting: nothing to compare with, not the old one's ticks


# -- 5. AccessDenied on every /proc read --------------------------------------------------------------------

# psutil's Linux layer, under every public psutil.Process method (username() is uids() plus pwd).
PSUTIL_READS = (
    "cmdline",
    "name",
    "exe",
    "create_time",
    "cpu_times",
    "memory_info",
    "memory_full_info",
    "status",
    "environ",
    "ppid",
    "open_files",
    "cwd",
    "uids",
    "gids",
    "num_fds",
    "num_threads",
    "nice_get",
    "terminal",
    "io_counters",
    "threads",
    "num_ctx_switches",
)
_FD_DIR = re.compile(r"^/proc/\d+/fd$")
_FD_LINK = re.compile(r"^/proc/\d+/fd/")
_PID_FILE = re.compile(r"^/proc/(\d+|self|thread-self)/")


def _deny_psutil_and_fds(m: pytest.MonkeyPatch) -> None:
    def denied(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise psutil.AccessDenied(self.pid)

    for name in PSUTIL_READS:
        m.setattr(_pslinux.Process, name, denied)
    listdir, readlink = os.listdir, os.readlink

    def no_listdir(path: Any = ".") -> list[str]:
        if _FD_DIR.match(os.fsdecode(path)):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return listdir(path)

    def no_readlink(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _FD_LINK.match(os.fsdecode(path)):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return readlink(path, *args, **kwargs)

    m.setattr(os, "listdir", no_listdir)
    m.setattr(os, "readlink", no_readlink)


def test_access_denied_on_every_psutil_and_fd_read(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = os.getpid()
    listed = children.start("--marker-listed", holds=(world.device(1),))
    hidden = children.start("--marker-hidden", holds=(world.device(2),))
    world.fake.gpus[0].processes["C"].append(FakeProcess(pid=me, memory=GiB))
    world.fake.gpus[1].processes["C"].append(FakeProcess(pid=listed.pid, memory=2 * GiB))
    world.sampler.want_relatives = True  # the tree view's walk over /proc too
    with monkeypatch.context() as m:
        _deny_psutil_and_fds(m)
        for _ in range(3):
            snap = world.tick()
            n_pids = len(psutil.pids())
            for pid, gpu in ((me, 0), (listed.pid, 1)):
                r = row(snap, pid, gpu)
                assert r.visible and r.kinds == "C"
                assert (r.user, r.name, r.command, r.create_time) == (None, None, None, None)
                assert r.state is not None and r.ppid is not None and r.rss  # /proc/PID/stat still read
                assert r.devices is None
                assert r.category == NO_PERMISSION
                assert "run as root" in r.reason
            assert rows(snap, hidden.pid) == []  # holders cannot be seen: counted instead
            # Every process of the machine, give or take the ones that came and went since the scan.
            assert 0.8 * n_pids <= snap.unreadable_fds <= n_pids + 50, (snap.unreadable_fds, n_pids)
            text = render(snap)
            assert f"! {snap.unreadable_fds} processes not readable" in text
            assert re.search(rf"{listed.pid} \? +C .* no-permission +n/a$", text, re.M)
    # Readable again: the next full rescan (every 5 s) finds the holders.
    snap = world.tick(SLOW_INTERVAL)
    if os.geteuid() == 0:
        assert snap.unreadable_fds == 0
    assert row(snap, listed.pid).devices == (str(world.device(1)),)
    assert row(snap, listed.pid).category == OK
    assert row(snap, hidden.pid).devices == (str(world.device(2)),)
    # Its parent (this process, on NVML's list) was first seen while its name was unreadable: still its
    # parent, alive; so it is a worker of a GPU process, not an orphan.
    assert row(snap, hidden.pid).category == WORKER


def test_a_visible_parent_whose_name_is_unreadable_is_not_gone(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = os.getpid()
    holder = children.start(holds=(world.device(2),))
    name = _pslinux.Process.name

    def name_denied_for_me(self: Any) -> Any:
        if self.pid == me:
            raise psutil.AccessDenied(self.pid)
        return name(self)

    monkeypatch.setattr(_pslinux.Process, "name", name_denied_for_me)
    snap = world.tick()
    r = row(snap, holder.pid)
    assert r.ppid == me and r.devices == (str(world.device(2)),)
    assert procs_module._read_stat(me) is not None  # the parent is there, and visible
    assert r.category == UNSEEN, r.reason  # fails: orphan, "parent gone (now <this pid>)"


def _deny_every_proc_read(m: pytest.MonkeyPatch) -> None:
    """As with /proc mounted hidepid=1 for another user's processes: /proc lists every PID, but nothing
    under /proc/PID can be opened, listed or followed."""
    _deny_psutil_and_fds(m)
    real_open = builtins.open

    def no_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, bytes, os.PathLike)) and _PID_FILE.match(os.fsdecode(file)):
            raise PermissionError(13, "Permission denied", os.fsdecode(file))
        return real_open(file, *args, **kwargs)

    real_os_open = os.open

    def no_os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if _PID_FILE.match(os.fsdecode(path)):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_os_open(path, *args, **kwargs)

    m.setattr(builtins, "open", no_open)
    m.setattr(os, "open", no_os_open)  # gputui.collect.procs.procfs reads /proc/PID/stat with os.open


def test_every_proc_read_denied_still_ticks(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = children.start("--marker-listed", holds=(world.device(1),))
    world.fake.gpus[1].processes["C"].append(FakeProcess(pid=listed.pid, memory=2 * GiB))
    world.sampler.want_relatives = True
    world.tick()
    with monkeypatch.context() as m:
        _deny_every_proc_read(m)
        for step in (SLOW_INTERVAL, 1.0, 1.0):  # a full rescan first: it meets the unreadable fds
            snap = world.tick(step)
            r = row(snap, listed.pid)
            assert (r.gpu, r.kinds, r.used_memory) == (1, "C", 2 * GiB)
            assert r.visible and r.user is None and r.command is None  # there, but nothing readable
            assert snap.unreadable_fds >= 3
            assert_intact(snap, world.fake)
    snap = world.tick(SLOW_INTERVAL)
    assert row(snap, listed.pid).visible and row(snap, listed.pid).category == OK


def test_every_proc_read_denied_is_no_permission_not_gone(
    world: World, children: Children, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = children.start("--marker-listed", holds=(world.device(1),))
    world.fake.gpus[1].processes["C"].append(FakeProcess(pid=listed.pid, memory=2 * GiB))
    with monkeypatch.context() as m:
        _deny_every_proc_read(m)
        snap = world.tick()
    assert row(snap, listed.pid).category == NO_PERMISSION


# -- 6. 5,000 real processes, 50 of them holding a device ---------------------------------------------------

MANY = 5_000
MANY_HOLDERS = 50
MANY_PARENTS = 10

# A parent that forks `n` children, the first `holders` of which open `device`; every child then blocks
# on the release pipe until the test closes its write end, and the parent reaps them all.
MANY_PARENT = r"""
import gc, os, sys
gc.disable()
n, holders, device, release = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ready_r, ready_w = os.pipe()
started = 0
for i in range(n):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.close(ready_r)
            if i < holders:
                os.open(device, os.O_RDONLY)
            os.write(ready_w, b".")
            os.close(ready_w)
            os.read(release, 1)
        finally:
            os._exit(0)
    started += 1
os.close(ready_w)
got = 0
while got < started:
    chunk = os.read(ready_r, 65536)
    if not chunk:
        break
    got += len(chunk)
print(got, flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def _room_for(n: int) -> str | None:
    """Why this machine cannot take `n` more processes, or None."""
    running = len(psutil.pids())
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
    except (OSError, ValueError):
        return "cannot read pid_max"
    if pid_max - running < n + 1000:
        return f"pid_max {pid_max} with {running} processes running"
    if threads_max - running < n + 1000:
        return f"threads-max {threads_max}"
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if os.geteuid() != 0 and soft != resource.RLIM_INFINITY:
        mine = sum(
            1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == os.getuid()
        )
        if soft - mine < n + 200:
            return f"RLIMIT_NPROC {soft} with {mine} processes of this user"
    for pids_dir in ("/sys/fs/cgroup", "/sys/fs/cgroup/pids"):
        with contextlib.suppress(OSError, ValueError):
            limit = Path(pids_dir, "pids.max").read_text().strip()
            current = int(Path(pids_dir, "pids.current").read_text())
            if limit != "max" and int(limit) - current < n + 200:
                return f"cgroup pids.max {limit} with {current} in use"
    if psutil.virtual_memory().available < 3 * GiB:
        return "less than 3 GiB of memory available"
    return None


@pytest.mark.slow
def test_5000_processes_with_50_holders(world: World) -> None:
    why = _room_for(MANY)
    if why is not None:
        pytest.skip(f"no room for {MANY} processes: {why}")
    fake = world.fake
    per_parent = MANY // MANY_PARENTS
    release_r, release_w = os.pipe()
    parents: list[subprocess.Popen[str]] = []
    kids: list[psutil.Process] = []
    t0 = time.monotonic()
    try:
        for k in range(MANY_PARENTS):
            gpu = k % N_GPUS
            parents.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-S",
                        "-c",
                        MANY_PARENT,
                        str(per_parent),
                        str(MANY_HOLDERS // MANY_PARENTS),
                        str(world.device(gpu)),
                        str(release_r),
                    ],
                    pass_fds=(release_r,),
                    stdout=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            )
        os.close(release_r)
        release_r = -1
        for p in parents:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == str(per_parent), "a parent could not fork every child"
        spawn_s = time.monotonic() - t0
        parent_pids = {p.pid for p in parents}
        kids = [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] in parent_pids]
        assert len(kids) == MANY
        for k, p in enumerate(parents):  # the parents are GPU processes: the holders are their workers
            fake.gpus[k % N_GPUS].processes["C"].append(FakeProcess(pid=p.pid, memory=GiB))

        timings = []
        for step in (1.0, 1.0, 1.0, SLOW_INTERVAL, 1.0):  # first (deep) scan, incremental, full rescan
            t = time.monotonic()
            snap = world.tick(step)
            timings.append(time.monotonic() - t)
            holders = [r for r in snap.processes if not r.kinds]
            assert len(holders) == MANY_HOLDERS
            assert all(r.category == WORKER and r.ppid in parent_pids for r in holders)
            for r in holders:
                k = [p.pid for p in parents].index(r.ppid)  # type: ignore[arg-type]
                assert r.gpu == k % N_GPUS and r.devices == (str(world.device(k % N_GPUS)),)
            assert sorted(r.pid for r in snap.processes if r.kinds) == sorted(parent_pids)
            assert snap.unreadable_fds == 0 or os.geteuid() != 0
        print(
            f"\n{MANY} processes spawned in {spawn_s:.2f} s; tick times: "
            + ", ".join(f"{t * 1000:.0f} ms" for t in timings)
        )
        assert max(timings) < 2.0, f"a tick over 5,000 processes took {max(timings):.2f} s"
    finally:
        if release_r >= 0:
            os.close(release_r)
        os.close(release_w)  # every child reads EOF and exits; each parent reaps its own, then exits
        for p in parents:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
            if p.stdout is not None:
                p.stdout.close()
    assert [p.returncode for p in parents] == [0] * len(parents)
    assert wait_until(lambda: not any(k.is_running() for k in kids), timeout=30.0), (
        f"{sum(k.is_running() for k in kids)} children left"
    )


# -- 7. hostile command lines ---------------------------------------------------------------------------

LONG = "L" * 10_000
CONTROL = "\x1b[2J\x1b]0;owned\x07\rcarriage\ttab\nnewline\x7f\x9bcsi"
INVALID_UTF8 = b"\xff\xfe\x1b[31mred\xc3(\xed\xa0\x80end"
COMM = b"\x1b]0;x\x07) Z 1 (\xc3\xa9"  # a thread name with ESC, BEL, ")" and UTF-8 (15 bytes at most)
COMM_UNDECODABLE = b"caf\xe9"  # a name in Latin-1: not UTF-8 (an executable named so gets it too)


def test_hostile_command_lines_and_names(world: World, children: Children) -> None:
    assert len(COMM) <= 15
    listed = children.start(LONG, CONTROL, INVALID_UTF8, holds=(world.device(1),), comm=COMM)
    holder = children.start(CONTROL, INVALID_UTF8, LONG, holds=(world.device(2),), comm=COMM)
    world.fake.gpus[1].processes["C"].append(FakeProcess(pid=listed.pid, memory=GiB))
    world.sampler.want_relatives = True
    for _ in range(2):
        snap = world.tick()  # check_snapshot: JSON and the --once text survive it
    for child, gpu, kinds, category in ((listed, 1, "C", OK), (holder, 2, "", UNSEEN)):
        r = row(snap, child.pid)
        assert (r.gpu, r.kinds, r.visible) == (gpu, kinds, True)
        # The model holds the command made safe where it was read: printable, cut to MAX_COMMAND characters
        # (psutil reads /proc/PID/cmdline in universal-newline text mode: its "\r" arrives as "\n").
        assert r.command is not None and r.command.isprintable() and len(r.command) == MAX_COMMAND
        assert "L" * 1000 in r.command
        # ... and its state is parsed past the ")" in its name: not the "Z" (zombie) the name holds.
        assert r.state in ("sleeping", "running") and r.category == category
        assert r.name is not None and r.name.isprintable() and "?]0;x?) Z 1 (" in r.name
        assert r.devices == (str(world.device(gpu)),)
    held = row(snap, holder.pid).command
    assert held is not None and printable(CONTROL.replace("\r", "\n")) in held
    assert printable(os.fsdecode(INVALID_UTF8)) in held
    held.encode("utf-8")  # no surrogate escapes left
    text = render(snap)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    for child in (listed, holder):  # one line each, whole: a newline in argv does not break it
        (line,) = [x for x in text.splitlines() if re.match(rf"\s+{child.pid} ", x)]
        assert "L" * 100 in line
    assert "?newline" in line and "?[2J?]0;owned??carriage?tab?newline??csi" in line
    for line in render(snap, 100).splitlines():
        if re.match(rf"\s+({listed.pid}|{holder.pid}) ", line):
            assert len(line) <= 100
    back = snapshot_from_dict(json.loads(dumps(snap)))
    assert row(back, listed.pid).command == row(snap, listed.pid).command


# -- 8. user ids without a name -----------------------------------------------------------------------------

NO_SUCH_UID = 54321


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: starts a process as a uid without a passwd entry")
def test_a_uid_without_a_passwd_entry(world: World, children: Children) -> None:
    uid = NO_SUCH_UID
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            break
        uid += 1
    sh = shutil.which("sh") or "/bin/sh"
    script = 'exec 3<"$1"; echo ready; exec sleep 600'
    listed = children.start_argv(
        [sh, "-c", script, "sh", str(world.device(5))], user=uid, group=uid, extra_groups=[]
    )
    holder = children.start_argv(
        [sh, "-c", script, "sh", str(world.device(6))], user=uid, group=uid, extra_groups=[]
    )
    for p in (listed, holder):
        assert wait_until(functools.partial(_is_sleep, p.pid), timeout=5.0)
    world.fake.gpus[5].processes["C"].append(FakeProcess(pid=listed.pid, memory=GiB))
    snap = world.ticks(2)
    for p, gpu, category in ((listed, 5, OK), (holder, 6, UNSEEN)):
        r = row(snap, p.pid)
        assert (r.gpu, r.visible, r.category) == (gpu, True, category)
        assert r.user == str(uid)  # the numeric uid, as psutil gives it
        assert r.command == "sleep 600"
        assert re.search(rf"^\s+{p.pid} {uid} ", render(snap), re.M)
        detail = describe(p.pid, r.create_time, world.devices)
        assert detail.error is None and detail.device_files == (str(world.device(gpu)),)


def _is_sleep(pid: int) -> bool:
    try:
        return psutil.Process(pid).cmdline()[:1] == ["sleep"]
    except psutil.Error:
        return False


# -- 9. the wall clock jumping back an hour -----------------------------------------------------------------


def test_the_wall_clock_jumping_back_an_hour(world: World) -> None:
    fake, me = world.fake, os.getpid()
    fake.gpus[0].processes["C"].append(FakeProcess(pid=me, memory=GiB))  # a job on GPU 0: dips count
    start = world.wall.t
    plan = (
        [95] * 12
        + [10] * 4
        + [95] * 4  # a 4 s dip before the jump
        + [10] * 2
        + ["jump"]
        + [10] * 1
        + [95] * 6  # a dip the jump cuts in two
        + [10] * 4
        + [95] * 3
    )  # a 4 s dip after the jump
    times: list[float] = []
    for step in plan:
        if isinstance(step, str):  # "jump"
            world.wall.t -= 3600.0
            continue
        fake.gpus[0].util_gpu = step
        snap = world.tick()
        times.append(snap.time)
        assert snap.time == world.wall.t  # snapshots carry the wall clock as it is
        for d in (*world.dips.dips, *world.dips.ongoing(snap.time)):
            assert d.duration >= 0, d
    assert times[21] == start + 22 and times[22] == start + 23 - 3600
    assert world.sampler.ticks == len(plan) - 1

    # History keeps everything, in arrival order: nothing before the jump is wiped.
    h = world.history.gpus[0]
    assert list(h.times) == times
    assert list(h.util) == [s for s in plan if s != "jump"]
    assert all(len(world.history.gpus[i]) == len(times) for i in range(N_GPUS))
    mean, covered = world.history.busy_seconds(0, snap.time - 300)
    assert 10 <= mean <= 95 and covered >= 0

    # Dips: the one before and the one after are kept with their true lengths; the one the jump cut in
    # two (its end an hour before its start) is dropped, never reported with a negative length.
    assert [(d.start - start, d.duration) for d in world.dips.dips] == [(13.0, 4.0), (30.0 - 3600, 4.0)]
    assert world.dips.ongoing(snap.time) == []
    summary = world.dips.summary(0, snap.time - 600, snap.time, 0.0)
    assert summary["dips"] == 2 and summary["mean_dip_s"] == 4.0

    # %CPU and idle time are on the monotonic clock: the jump does not touch them.
    r = row(snap, me)
    assert r.cpu_percent is not None and r.cpu_percent >= 0

    # The sparklines' buckets (built from this history) start again from the new time after the jump:
    # the newest bucket is the last sample's, and nothing from before the jump is left in them.
    from gputui.ui.widgets.spark import BucketSeries

    series = BucketSeries(5.0, 100)
    series.extend(zip(h.times, h.util, strict=True))
    assert series.latest == int(h.times[-1] // 5.0)
    assert all(n <= series.latest for n, _ in series.buckets)


def test_a_process_name_that_is_not_utf8(world: World, children: Children) -> None:
    listed = children.start("--marker-latin1-name", comm=COMM_UNDECODABLE)
    holder = children.start(holds=(world.device(2),), comm=COMM_UNDECODABLE)
    world.fake.gpus[1].processes["C"].append(FakeProcess(pid=listed.pid, memory=GiB))
    assert psutil.Process(listed.pid).name() == os.fsdecode(COMM_UNDECODABLE)  # psutil reads it fine
    snap = world.tick()  # never raises, and check_snapshot() passes: the damage is in what is shown
    assert rows(snap, holder.pid) != [], "the holder is not shown"
    r = row(snap, listed.pid)
    assert r.visible and r.name == "caf?"  # the undecodable byte replaced where the name was read
