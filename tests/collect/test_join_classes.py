"""The process classes end to end: the demo's real processes through Sampler (NVML's list joined with the
device holder scan), and `gputui --demo --json`.

The demo runs trainers (on NVML's list) with data-loader workers, an orphaned worker, a defunct child and a
"ghost" (listed by NVML, invisible here); the tests add device holders of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import psutil
import pytest

import gputui
from gputui.analyze.classify import SUBREAPERS
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource
from gputui.model import ProcessRow, Snapshot
from gputui.output.jsonout import schema, snapshot_from_dict
from tests.helpers import Children, wait_until

REPO = Path(gputui.__file__).resolve().parents[1]
GPUS = 3
WORKERS = 2
# Opens the files named on its command line and keeps them open until its stdin closes.
HOLDER = (
    "import os, sys; fds = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]; "
    "print('ready', flush=True); sys.stdin.read()"
)
StartHolder = Callable[..., subprocess.Popen[str]]


@dataclass
class Demo:
    src: DemoSource
    sampler: Sampler
    trainers: list[int]  # index: GPU
    workers: dict[int, list[int]]  # GPU -> its trainer's live children
    defunct: int  # trainer 0's unreaped child
    orphan: int
    ghost: int

    def path(self, name: str) -> str:
        return str(self.src.devices_dir / name)

    def devices_of_gpu(self, gpu: int) -> tuple[str, ...]:
        return tuple(sorted(self.path(n) for n in ("nvidiactl", "nvidia-uvm", f"nvidia{gpu}")))


def _end(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                p.kill()  # psutil will not kill a reused PID


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    src = DemoSource(gpus=GPUS, workers=WORKERS, start_at=120.0)
    sampler = Sampler(src)
    leftovers: list[psutil.Process] = []
    try:
        sampler.open()
        trainers = [p.pid for p in src.trainers]
        workers: dict[int, list[int]] = {}
        zombies = []
        for gpu, pid in enumerate(trainers):
            kids = psutil.Process(pid).children()
            leftovers += kids
            workers[gpu] = [k.pid for k in kids if k.status() != psutil.STATUS_ZOMBIE]
            zombies += [k.pid for k in kids if k.status() == psutil.STATUS_ZOMBIE]
        assert src.orphan_pid is not None and src.ghost_pid is not None
        leftovers.append(psutil.Process(src.orphan_pid))
        assert len(zombies) == 1, zombies
        assert all(len(w) == WORKERS for w in workers.values()), workers
        sampler.tick()  # the first reading: %CPU needs a previous one
        yield Demo(src, sampler, trainers, workers, zombies[0], src.orphan_pid, src.ghost_pid)
    finally:
        sampler.close()
        _end(leftovers)


@pytest.fixture
def holders(demo: Demo, spawn: Children) -> StartHolder:
    """Processes of the test's own (children of this test, which is on no GPU) holding demo device files."""

    def start(*names: str) -> subprocess.Popen[str]:
        p = spawn([sys.executable, "-c", HOLDER, *(demo.path(n) for n in names)], stdin=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        return p

    return start


def rows_of(snap: Snapshot, pid: int) -> list[ProcessRow]:
    return [r for r in snap.processes if r.pid == pid]


def row_of(snap: Snapshot, pid: int) -> ProcessRow:
    (row,) = rows_of(snap, pid)
    return row


# -- the demo's processes ----------------------------------------------------------------------------


def test_trainers_are_ok_with_their_devices(demo: Demo) -> None:
    snap = demo.sampler.tick()
    for gpu, pid in enumerate(demo.trainers):
        row = row_of(snap, pid)
        assert (row.gpu, row.kinds, row.visible) == (gpu, "C", True)
        assert row.category == "ok", row.reason
        assert row.devices == demo.devices_of_gpu(gpu)
        assert row.reason == f"holds /dev/nvidia{gpu}"
        assert row.used_memory is not None and row.used_memory > 0


def test_workers_are_holders_on_their_trainers_gpu(demo: Demo) -> None:
    snap = demo.sampler.tick()
    for gpu, pids in demo.workers.items():
        for pid in pids:
            row = row_of(snap, pid)
            assert (row.gpu, row.kinds, row.visible) == (gpu, "", True)
            assert row.category == "worker", row.reason
            assert row.ppid == demo.trainers[gpu]
            assert row.devices == demo.devices_of_gpu(gpu)
            assert row.used_memory is None  # NVML does not list it: no memory of its own
            assert f"holds /dev/nvidia{gpu}" in row.reason
            assert "not in NVML's list" in row.reason
            assert "child of a GPU process" in row.reason


def test_the_orphan(demo: Demo) -> None:
    snap = demo.sampler.tick()
    row = row_of(snap, demo.orphan)
    assert (row.gpu, row.kinds, row.visible) == (0, "", True)
    assert row.devices == demo.devices_of_gpu(0)
    adopter = psutil.Process(row.ppid) if row.ppid else None
    if row.ppid not in (0, 1) and (adopter is None or adopter.name() not in SUBREAPERS):
        pytest.skip(f"adopted by a subreaper gputui does not know: {adopter}")
    assert row.category == "orphan", row.reason
    assert "holds /dev/nvidia0" in row.reason
    assert "parent gone" in row.reason
    assert "not in NVML's list" in row.reason


def test_the_defunct_child(demo: Demo) -> None:
    snap = demo.sampler.tick()
    row = row_of(snap, demo.defunct)
    assert (row.gpu, row.kinds, row.visible) == (0, "", True)
    assert row.state == "zombie"
    assert row.ppid == demo.trainers[0]
    assert row.category == "defunct", row.reason
    assert f"its parent {demo.trainers[0]} has not reaped it" in row.reason
    assert row.devices == ()  # a zombie's descriptors are closed


def test_the_ghost_is_nvml_only(demo: Demo) -> None:
    snap = demo.sampler.tick()
    row = row_of(snap, demo.ghost)
    assert (row.gpu, row.kinds, row.visible) == (GPUS - 1, "C", False)
    assert row.category == "nvml-only"
    assert "not visible here" in row.reason
    assert row.user is None and row.command is None


def test_the_union_has_exactly_the_demos_processes(demo: Demo) -> None:
    snap = demo.sampler.tick()
    expected = {(gpu, pid) for gpu, pid in enumerate(demo.trainers)}
    expected |= {(gpu, pid) for gpu, pids in demo.workers.items() for pid in pids}
    expected |= {(0, demo.orphan), (0, demo.defunct), (GPUS - 1, demo.ghost)}
    got = [(r.gpu, r.pid) for r in snap.processes]
    assert sorted(got) == sorted(expected)  # and no row twice
    if os.geteuid() == 0:
        assert snap.unreadable_fds == 0
    assert snap.unaccounted_memory[0] == 3 << 29  # the orphan's 1.5 GiB, listed nowhere


def test_holder_rows_have_no_kinds_and_the_gpu_of_their_device(demo: Demo) -> None:
    snap = demo.sampler.tick()
    holder_rows = [r for r in snap.processes if r.kinds == ""]
    assert len(holder_rows) == GPUS * WORKERS + 2  # workers, the orphan, the defunct child
    for r in holder_rows:
        if r.devices:
            minors = {int(d.rsplit("nvidia", 1)[1]) for d in r.devices if d.rsplit("nvidia", 1)[1].isdigit()}
            assert minors == {r.gpu}, r
        assert r.used_memory is None and r.sm_util is None


# -- holders of the test's own -----------------------------------------------------------------------


def test_a_holder_no_gpu_process_is_parent_of_is_unseen(demo: Demo, holders: StartHolder) -> None:
    mine = holders("nvidiactl", "nvidia1")
    snap = demo.sampler.tick()  # a new PID: the incremental scan looks at it on this tick
    row = row_of(snap, mine.pid)
    assert (row.gpu, row.kinds, row.visible) == (1, "", True)
    assert row.ppid == os.getpid()  # its parent is alive, and not on a GPU
    assert row.devices == tuple(sorted((demo.path("nvidiactl"), demo.path("nvidia1"))))
    assert row.category == "unseen", row.reason
    assert row.reason == "holds /dev/nvidia1; not in NVML's list"

    mine.kill()
    mine.wait(timeout=10)
    assert rows_of(demo.sampler.tick(), mine.pid) == []


def test_a_holder_of_two_gpus_has_a_row_on_each(demo: Demo, holders: StartHolder) -> None:
    mine = holders("nvidia2", "nvidia0")
    rows = rows_of(demo.sampler.tick(), mine.pid)
    assert sorted(r.gpu for r in rows if r.gpu is not None) == [0, 2] and len(rows) == 2
    for r in rows:
        assert r.category == "unseen"
        assert r.reason.startswith("holds /dev/nvidia0, /dev/nvidia2;")


def test_a_holder_of_nvidiactl_only_has_no_gpu(demo: Demo, holders: StartHolder) -> None:
    mine = holders("nvidiactl")
    snap = demo.sampler.tick()
    row = row_of(snap, mine.pid)
    assert row.gpu is None and row.kinds == ""
    assert row.category == "unseen"
    assert row.reason == "holds /dev/nvidiactl; not in NVML's list"
    assert row in snap.processes_on(None)


def test_a_stopped_holder_is_stuck(demo: Demo, holders: StartHolder) -> None:
    mine = holders("nvidia2")
    mine.send_signal(signal.SIGSTOP)
    assert wait_until(lambda: psutil.Process(mine.pid).status() == psutil.STATUS_STOPPED)
    row = row_of(demo.sampler.tick(), mine.pid)
    assert row.gpu == 2 and row.state == "stopped"
    assert row.category == "stuck"
    assert row.reason.startswith("stopped (T)")
    assert "holds /dev/nvidia2" in row.reason


# -- gputui --demo --json ----------------------------------------------------------------------------


def test_gputui_demo_json_has_the_classes_and_follows_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gputui", "--demo", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    jsonschema.Draft202012Validator(schema()).validate(data)
    procs = data["processes"]
    by_category: dict[str, list[dict[str, object]]] = {}
    for p in procs:
        by_category.setdefault(p["category"], []).append(p)
        assert isinstance(p["reason"], str)
        assert p["devices"] is None or isinstance(p["devices"], list)
    assert {"ok", "worker", "defunct", "nvml-only"} <= set(by_category), sorted(by_category)

    assert len(by_category["ok"]) == 4  # a trainer per GPU
    for p in by_category["ok"]:
        assert p["kinds"] == "C" and p["visible"] is True
        devices = p["devices"]
        assert isinstance(devices, list)
        names = sorted(str(d).rsplit("/", 1)[1] for d in devices)
        assert names == sorted(["nvidiactl", "nvidia-uvm", f"nvidia{p['gpu']}"])
        assert p["reason"] == f"holds /dev/nvidia{p['gpu']}"
    assert len(by_category["worker"]) == 4 * 3
    assert all(p["kinds"] == "" and p["devices"] for p in by_category["worker"])
    (defunct,) = by_category["defunct"]
    assert defunct["gpu"] == 0 and "has not reaped it" in str(defunct["reason"])
    (ghost,) = by_category["nvml-only"]
    assert ghost["visible"] is False and ghost["gpu"] == 3

    (orphan,) = [p for p in procs if "orphan-parent" in str(p["command"])]
    assert orphan["kinds"] == "" and orphan["gpu"] == 0
    if orphan["ppid"] == 1:
        assert orphan["category"] == "orphan"
        assert "parent gone" in str(orphan["reason"]) and "not in NVML's list" in str(orphan["reason"])
    assert orphan["category"] in ("orphan", "unseen")

    snap = snapshot_from_dict(data)
    assert {p.category for p in snap.processes} == set(by_category)
