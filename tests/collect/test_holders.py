"""HolderScanner against real processes holding stand-in device files, and against a fake /proc tree.

The stand-in "devices" are regular files named like the NVIDIA device files in a private temporary
directory: a process holds one exactly as a CUDA process holds /dev/nvidia0, so the scan reads the real
/proc/PID/fd of real children. Each child takes commands on its stdin (open, close, fork a zombie, fork a
holder) and answers on its stdout, so a test knows when the child has done what it was asked.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import gputui
from gputui.collect.procs.holders import HolderScanner, device_paths, minor_of
from tests.helpers import wait_until
from tests.holders import Spawner

REPO = Path(gputui.__file__).resolve().parents[1]
DEVICE_NAMES = ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm")
NOT_DEVICES = ("nvidia-modeset", "nvidia-uvm-tools", "nvidia0x", "xnvidia0", "nvidia")
NOBODY = 65534


# Runs the scanner as user nobody: it imports as root, then drops every privilege before the scan.
SCAN_AS_NOBODY = r"""
import json, os, sys
from pathlib import Path
from gputui.collect.procs.holders import HolderScanner
scanner = HolderScanner(Path(sys.argv[1]))
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
scan = scanner.scan()
print(json.dumps({"holders": {str(pid): list(h.devices) for pid, h in scan.holders.items()},
                  "unreadable": sorted(scan.unreadable), "full": scan.full}))
"""


# -- helpers -----------------------------------------------------------------------------------------


class Clock:
    """A monotonic clock the test moves by hand: it decides which scans are rescans."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def devices() -> Iterator[Path]:
    """A private stand-in for /dev: world-readable, so that a scanner running as nobody can list it."""
    base = "/tmp" if os.path.isdir("/tmp") else None
    path = Path(tempfile.mkdtemp(prefix="gputui-test-holders-", dir=base))
    try:
        path.chmod(0o755)
        for name in DEVICE_NAMES + NOT_DEVICES:
            (path / name).touch()
            (path / name).chmod(0o666)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def paths(devices: Path, *names: str) -> tuple[str, ...]:
    return tuple(sorted(str(devices / n) for n in names))


# -- real processes ----------------------------------------------------------------------------------


def test_device_paths_are_only_the_nvidia_device_names(devices: Path, tmp_path: Path) -> None:
    assert device_paths(devices) == frozenset(str(devices / n) for n in DEVICE_NAMES)
    assert device_paths(tmp_path / "missing") == frozenset()
    assert [minor_of(str(devices / n)) for n in DEVICE_NAMES] == [0, 1, 2, 3, None, None]
    assert minor_of("/dev/nvidia12") == 12


def test_a_holder_is_found_with_its_devices_and_minors(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia2", "nvidia0")
    scan = HolderScanner(devices).scan()
    assert scan.full
    holder = scan.holders[child.pid]
    assert holder.pid == child.pid
    assert holder.devices == paths(devices, "nvidiactl", "nvidia-uvm", "nvidia2", "nvidia0")
    assert holder.minors == (0, 2)
    assert child.pid not in scan.unreadable and child.pid not in scan.zombies
    assert os.getpid() not in scan.holders  # the test itself holds nothing


def test_only_our_children_hold_our_device_files(devices: Path, holders: Spawner) -> None:
    a = holders("nvidia1")
    b = holders("nvidia3", "nvidia-uvm")
    holders()  # holds nothing
    holders(*NOT_DEVICES)  # files that are not NVIDIA device files
    scan = HolderScanner(devices).scan()
    assert set(scan.holders) == {a.pid, b.pid}
    assert scan.holders[a.pid].minors == (1,)
    assert scan.holders[b.pid].devices == paths(devices, "nvidia-uvm", "nvidia3")
    assert scan.holders[b.pid].minors == (3,)


def test_a_process_holding_only_nvidiactl_has_no_minors(devices: Path, holders: Spawner) -> None:
    ctl = holders("nvidiactl")
    uvm = holders("nvidiactl", "nvidia-uvm")
    scan = HolderScanner(devices).scan()
    assert scan.holders[ctl.pid].devices == paths(devices, "nvidiactl")
    assert scan.holders[ctl.pid].minors == ()
    assert scan.holders[uvm.pid].minors == ()


def test_the_same_device_opened_twice_is_listed_once(devices: Path, holders: Spawner) -> None:
    child = holders("nvidia0", "nvidia0", "nvidiactl")
    assert child.ask(f"open {devices / 'nvidia0'}") == "ok"  # a third descriptor
    holder = HolderScanner(devices).scan().holders[child.pid]
    assert holder.devices == paths(devices, "nvidia0", "nvidiactl")
    assert holder.minors == (0,)


def test_new_processes_are_picked_up_on_the_next_incremental_tick(devices: Path, holders: Spawner) -> None:
    clock = Clock()
    scanner = HolderScanner(devices, rescan_s=5.0, monotonic=clock)
    first = scanner.scan()
    assert first.full and first.holders == {}
    child = holders("nvidia1", "nvidiactl")
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full
    assert scan.holders[child.pid].devices == paths(devices, "nvidia1", "nvidiactl")
    assert scan.holders[child.pid].minors == (1,)
    clock.t += 1.0
    assert child.pid in scanner.scan().holders  # and stays


def test_a_holder_that_closes_its_device_disappears_on_the_next_tick(devices: Path, holders: Spawner) -> None:
    clock = Clock()
    scanner = HolderScanner(devices, monotonic=clock)
    child = holders("nvidiactl", "nvidia0")
    assert scanner.scan().holders[child.pid].minors == (0,)

    assert child.ask(f"close {devices / 'nvidia0'}") == "ok"
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full
    assert scan.holders[child.pid].devices == paths(devices, "nvidiactl")  # re-checked: one fewer
    assert scan.holders[child.pid].minors == ()

    assert child.ask(f"close {devices / 'nvidiactl'}") == "ok"
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full
    assert child.pid not in scan.holders
    assert child.popen.poll() is None  # alive: it merely let go of the device


def test_a_device_opened_after_the_first_look_is_found_at_the_next_full_rescan(
    devices: Path, holders: Spawner
) -> None:
    clock = Clock()
    scanner = HolderScanner(devices, rescan_s=5.0, monotonic=clock)
    child = holders()
    assert child.pid not in scanner.scan().holders
    assert child.ask(f"open {devices / 'nvidia3'}") == "ok"

    for dt in (1.0, 2.0, 1.9):  # incremental ticks: the child was looked at already
        clock.t += dt
        scan = scanner.scan()
        assert not scan.full
        assert child.pid not in scan.holders
    clock.t += 0.1  # rescan_s after the first scan
    scan = scanner.scan()
    assert scan.full
    assert scan.holders[child.pid].devices == paths(devices, "nvidia3")
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full and child.pid in scan.holders


def test_exited_processes_disappear(devices: Path, holders: Spawner) -> None:
    clock = Clock()
    scanner = HolderScanner(devices, monotonic=clock)
    stays = holders("nvidia0")
    leaves = holders("nvidia1", "nvidiactl")
    assert set(scanner.scan().holders) == {stays.pid, leaves.pid}
    leaves.popen.kill()
    leaves.popen.wait(timeout=10)  # reaped: its PID is gone from /proc
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full
    assert set(scan.holders) == {stays.pid}
    clock.t += 10.0
    scan = scanner.scan()
    assert scan.full and set(scan.holders) == {stays.pid}
    assert leaves.pid not in scan.zombies


def test_a_zombie_child_is_in_zombies(devices: Path, holders: Spawner) -> None:
    parent = holders("nvidiactl", "nvidia2")
    zombie = int(parent.ask("zombie"))
    assert wait_until(lambda: is_zombie(zombie)), "the grandchild did not become a zombie"
    scan = HolderScanner(devices).scan()
    assert zombie in scan.zombies
    assert zombie not in scan.holders  # a zombie's descriptors are closed: it holds nothing
    assert parent.pid in scan.holders and parent.pid not in scan.zombies


def test_zombies_are_found_incrementally_and_forgotten_when_reaped(devices: Path, holders: Spawner) -> None:
    clock = Clock()
    scanner = HolderScanner(devices, monotonic=clock)
    parent = holders("nvidia0")
    assert scanner.scan().zombies.isdisjoint({parent.pid})
    zombie = int(parent.ask("zombie"))
    assert wait_until(lambda: is_zombie(zombie))
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full and zombie in scan.zombies  # a new PID: looked at on the next tick

    assert parent.ask(f"reap {zombie}") == "ok"
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full
    assert zombie not in scan.zombies and parent.pid in scan.holders


def _holder_turned_zombie(devices: Path, holders: Spawner) -> tuple[HolderScanner, Clock, int]:
    """A worker that held the device and exited, and that its parent never reaps."""
    clock = Clock()
    scanner = HolderScanner(devices, rescan_s=5.0, monotonic=clock)
    parent = holders("nvidiactl", "nvidia1")
    worker = holders.fork(parent, "fork-holder")
    assert wait_until(lambda: worker in scanner.scan().holders)  # the fork has inherited the files
    assert scanner.scan().holders[worker].minors == (1,)
    os.kill(worker, signal.SIGTERM)
    assert wait_until(lambda: is_zombie(worker))
    return scanner, clock, worker


def test_a_holder_that_exits_unreaped_is_a_zombie_by_the_next_full_rescan(
    devices: Path, holders: Spawner
) -> None:
    scanner, clock, worker = _holder_turned_zombie(devices, holders)
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full and worker not in scan.holders  # its descriptors are closed
    clock.t += 5.0
    scan = scanner.scan()
    assert scan.full and worker in scan.zombies and worker not in scan.holders


def test_a_holder_that_exits_unreaped_is_a_zombie_on_the_next_tick(devices: Path, holders: Spawner) -> None:
    scanner, clock, worker = _holder_turned_zombie(devices, holders)
    clock.t += 1.0
    scan = scanner.scan()
    assert not scan.full
    assert worker in scan.zombies


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: drops privileges to user nobody")
def test_a_scanner_without_privileges_reports_other_users_holders_as_unreadable(
    devices: Path, holders: Spawner
) -> None:
    root_holder = holders("nvidia0", "nvidiactl")
    nobody_holder = holders("nvidia1", drop=True)
    assert psutil.Process(nobody_holder.pid).uids().real == NOBODY
    out = subprocess.run(
        [sys.executable, "-c", SCAN_AS_NOBODY, str(devices)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    scan = json.loads(out.stdout)
    assert scan["full"] is True
    assert root_holder.pid in scan["unreadable"]
    assert str(root_holder.pid) not in scan["holders"]
    assert nobody_holder.pid not in scan["unreadable"]  # its own user's process: readable
    assert scan["holders"][str(nobody_holder.pid)] == [str(devices / "nvidia1")]
    assert 1 in scan["unreadable"]  # init is root's too


def test_a_relative_devices_dir_finds_holders(
    devices: Path, holders: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = holders("nvidia0")
    monkeypatch.chdir(devices.parent)
    scan = HolderScanner(Path(devices.name)).scan()
    assert child.pid in scan.holders
    assert scan.holders[child.pid].minors == (0,)


def test_a_devices_dir_behind_a_symlink_finds_holders(
    devices: Path, holders: Spawner, tmp_path: Path
) -> None:
    child = holders("nvidia2")
    link = tmp_path / "dev"
    link.symlink_to(devices, target_is_directory=True)
    scan = HolderScanner(link).scan()
    assert child.pid in scan.holders


# -- a fake /proc ------------------------------------------------------------------------------------


class FakeProc:
    """/proc/PID/stat and /proc/PID/fd/N symlinks, written by hand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        (root / "self").mkdir()  # not a PID: ignored
        (root / "meminfo").write_text("")

    def add(self, pid: int, state: str = "S", comm: str = "python", fd: bool = True) -> None:
        (self.root / str(pid)).mkdir()
        (self.root / str(pid) / "stat").write_text(f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560\n")
        if fd:
            (self.root / str(pid) / "fd").mkdir()
            (self.root / str(pid) / "fd" / "0").symlink_to("/dev/null")

    def link(self, pid: int, fd: int, target: str | Path) -> None:
        (self.root / str(pid) / "fd" / str(fd)).symlink_to(target)

    def unlink(self, pid: int, fd: int) -> None:
        (self.root / str(pid) / "fd" / str(fd)).unlink()

    def zombie(self, pid: int, comm: str = "python") -> None:
        self.add(pid, "Z", comm)
        (self.root / str(pid) / "fd" / "0").unlink()  # a zombie's fd directory is empty

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid))


@pytest.fixture
def fake(tmp_path: Path) -> tuple[FakeProc, Path]:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in DEVICE_NAMES:
        (dev / name).touch()
    return FakeProc(tmp_path / "proc"), dev


def test_fake_proc_holders_and_zombies(fake: tuple[FakeProc, Path]) -> None:
    proc, dev = fake
    proc.add(100)
    proc.link(100, 5, dev / "nvidia3")
    proc.link(100, 6, dev / "nvidiactl")
    proc.link(100, 7, dev / "nvidia3")
    proc.link(100, 8, dev / "nvidia-modeset")  # not one we look for
    proc.add(101)  # holds nothing
    proc.add(102, fd=False)  # no fd directory: gone between the listing and the look
    proc.add(103, comm="kworker/0:1")  # a kernel thread: no descriptors
    (proc.root / "103" / "fd" / "0").unlink()
    proc.zombie(104)
    proc.zombie(105, comm="evil) S (x")  # the command may contain ") S ("
    proc.zombie(106, comm="a b) Z")
    (proc.root / "106" / "stat").write_text("106 (a b) Z) S 1 106 106 0 -1 4194560\n")  # not a zombie
    scan = HolderScanner(dev, proc=str(proc.root)).scan()
    assert scan.full
    assert set(scan.holders) == {100}
    assert scan.holders[100].devices == (str(dev / "nvidia3"), str(dev / "nvidiactl"))
    assert scan.holders[100].minors == (3,)
    assert scan.zombies == frozenset({104, 105})
    assert scan.unreadable == frozenset()


def test_fake_proc_rescans(fake: tuple[FakeProc, Path]) -> None:
    proc, dev = fake
    clock = Clock()
    scanner = HolderScanner(dev, rescan_s=5.0, proc=str(proc.root), monotonic=clock)
    proc.add(200)
    proc.link(200, 3, dev / "nvidia0")
    proc.link(200, 4, dev / "nvidia1")
    proc.add(201)
    proc.add(202)
    proc.link(202, 3, dev / "nvidia2")
    scan = scanner.scan()
    assert scan.full and set(scan.holders) == {200, 202}

    clock.t += 1.0
    proc.unlink(200, 4)  # closes nvidia1
    proc.link(201, 9, dev / "nvidia-uvm")  # opens a device after it was first looked at
    proc.remove(202)  # exits
    proc.add(203)  # a new process
    proc.link(203, 3, dev / "nvidiactl")
    proc.zombie(204)  # a new zombie
    scan = scanner.scan()
    assert not scan.full
    assert set(scan.holders) == {200, 203}
    assert scan.holders[200].minors == (0,)
    assert scan.zombies == frozenset({204})

    clock.t += 1.0
    proc.unlink(200, 3)
    proc.link(200, 3, dev / "nvidia3")  # a known descriptor now names another device
    proc.link(200, 11, dev / "nvidia2")  # and a new one is opened
    scan = scanner.scan()
    assert not scan.full
    assert scan.holders[200].minors == (3,)  # re-checks only the descriptors it knew

    clock.t += 3.0  # 5 s since the first scan: a rescan (not a deep one)
    proc.remove(204)
    scan = scanner.scan()
    assert scan.full
    assert set(scan.holders) == {200, 201, 203}
    assert scan.holders[200].minors == (2, 3)
    assert scan.holders[201].devices == (str(dev / "nvidia-uvm"),)
    assert scan.zombies == frozenset()


def _device_appears_later(tmp_path: Path) -> tuple[HolderScanner, Clock]:
    """The device file appears (a driver load; nvidia-modprobe) after the first scan, and a process that
    starts before the next rescan opens it: when it was looked at, the scanner did not know the device."""
    proc = FakeProc(tmp_path / "proc")
    dev = tmp_path / "dev"
    dev.mkdir()
    clock = Clock()
    scanner = HolderScanner(dev, rescan_s=5.0, deep_every=3, proc=str(proc.root), monotonic=clock)
    proc.add(300)
    assert scanner.scan().holders == {}
    (dev / "nvidia-uvm").touch()
    proc.add(301)
    proc.link(301, 3, dev / "nvidia-uvm")
    clock.t += 1.0
    assert scanner.scan().holders == {}  # the list of device files is refreshed with each rescan
    return scanner, clock


def test_fake_proc_a_device_appearing_later_is_found_at_the_next_rescan(tmp_path: Path) -> None:
    scanner, clock = _device_appears_later(tmp_path)
    clock.t += 4.0
    scan = scanner.scan()
    assert scan.full and set(scan.holders) == {301}


def test_fake_proc_a_reused_descriptor_number_is_found_by_the_deep_rescan(
    fake: tuple[FakeProc, Path],
) -> None:
    proc, dev = fake
    clock = Clock()
    scanner = HolderScanner(dev, rescan_s=5.0, deep_every=2, proc=str(proc.root), monotonic=clock)
    proc.add(400)
    proc.link(400, 3, "/var/log/some.log")
    assert scanner.scan().holders == {}  # the first scan is a deep one
    proc.unlink(400, 3)
    proc.link(400, 3, dev / "nvidia1")  # closes the log; opens the device, which gets the same number
    clock.t += 5.0
    scan = scanner.scan()
    assert scan.full and scan.holders == {}  # the same descriptor numbers: links not read again
    clock.t += 5.0
    scan = scanner.scan()  # the second rescan: a deep one
    assert scan.full and scan.holders[400].minors == (1,)


def test_fake_proc_without_proc(tmp_path: Path) -> None:
    scan = HolderScanner(tmp_path, proc=str(tmp_path / "nothing")).scan()
    assert scan.holders == {} and scan.unreadable == frozenset() and scan.zombies == frozenset()
