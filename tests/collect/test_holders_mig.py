"""MIG capability holders: real children holding stand-in /dev/nvidia-caps/nvidia-capN files, mapped
through a stand-in /proc/driver/nvidia-caps/mig-minors (the driver's format)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.collect.procs.holders import HolderScanner, MigCap, cap_minor, device_paths, read_mig_minors
from tests.collect.test_holders import (
    Clock,
)
from tests.holders import Spawner

# As the driver writes it (the NVIDIA MIG user guide's example), and what a GPU with two instances adds.
MIG_MINORS = """config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi1/ci1/access 14
gpu1/gi2/access 129
gpu1/gi2/ci0/access 130
"""
CAPS = (1, 2, 12, 13, 14, 129, 130, 200)  # 200: a cap mig-minors does not name


@pytest.fixture
def devices() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gputui-test-caps-"))
    try:
        for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-cap3", "nvidia-caps-x"):
            (path / name).touch()
        caps = path / "nvidia-caps"
        caps.mkdir()
        for n in CAPS:
            (caps / f"nvidia-cap{n}").touch()
        for odd in ("nvidia-cap", "nvidia-capx", "nvidia-cap1x", "cap13"):
            (caps / odd).touch()
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def minors_file(tmp_path: Path) -> Path:
    f = tmp_path / "mig-minors"
    f.write_text(MIG_MINORS)
    return f


def scanner(devices: Path, minors: Path) -> HolderScanner:
    return HolderScanner(devices, monotonic=Clock(), mig_minors=str(minors))


def test_device_paths_include_the_mig_capabilities(devices: Path) -> None:
    caps = sorted(p for p in device_paths(devices) if "/nvidia-caps/" in p)
    assert caps == sorted(str(devices / "nvidia-caps" / f"nvidia-cap{n}") for n in CAPS)
    # A file named like a cap outside nvidia-caps is nothing; nor is nvidia-caps-x at the top.
    assert not any(p.endswith(("/nvidia-cap3", "/nvidia-caps-x")) for p in device_paths(devices))


def test_cap_minor_only_for_files_in_nvidia_caps() -> None:
    assert cap_minor("/dev/nvidia-caps/nvidia-cap13") == 13
    assert cap_minor("/dev/nvidia-cap13") is None
    assert cap_minor("/dev/nvidia0") is None
    assert cap_minor("/dev/nvidia-caps/nvidia-cap13 (deleted)") is None


def test_read_mig_minors(minors_file: Path) -> None:
    caps = read_mig_minors(str(minors_file))
    assert caps[1] == MigCap(1, "config")
    assert caps[2] == MigCap(2, "monitor")
    assert caps[12] == MigCap(12, "gi", gpu_minor=0, gpu_instance=1)
    assert caps[14] == MigCap(14, "ci", gpu_minor=0, gpu_instance=1, compute_instance=1)
    assert caps[130] == MigCap(130, "ci", gpu_minor=1, gpu_instance=2, compute_instance=0)
    assert len(caps) == 9
    assert [caps[n].label for n in (1, 12, 13)] == ["MIG config", "MIG 1", "MIG 1/0"]


def test_read_mig_minors_skips_what_is_not_the_drivers(tmp_path: Path) -> None:
    f = tmp_path / "mig-minors"
    f.write_bytes(
        b"gpu0/gi1/ci0/access 13\n"
        b"gpu0/gi1/ci0/access\n"  # no minor
        b"gpu0/gi1/ci0/access 13 14\n"
        b"\x1b[31mgpu0/gi9/access 40\n"
        b"gpu99999/gi1/access 41\n"
        b"bogus 42\n" + b"x" * 200_000 + b"\n"
    )
    assert read_mig_minors(str(f)) == {13: MigCap(13, "ci", 0, 1, 0)}
    assert read_mig_minors(str(tmp_path / "absent")) == {}
    assert read_mig_minors(str(tmp_path)) == {}  # a directory: read() fails


def test_a_mig_process_is_placed_on_its_instance(devices: Path, holders: Spawner, minors_file: Path) -> None:
    """A CUDA process in MIG 1/0 of GPU 0 holds /dev/nvidia0 and the caps of GI 1 and of its CI 0."""
    child = holders("nvidia0", "nvidiactl", "nvidia-caps/nvidia-cap12", "nvidia-caps/nvidia-cap13")
    h = scanner(devices, minors_file).scan().holders[child.pid]
    assert h.minors == (0,)
    assert [c.kind for c in h.mig] == ["gi", "ci"]
    assert h.instances == ((0, 1, 0),)
    assert str(devices / "nvidia-caps" / "nvidia-cap13") in h.devices


def test_holding_only_a_cap_still_names_the_gpu(devices: Path, holders: Spawner, minors_file: Path) -> None:
    child = holders("nvidia-caps/nvidia-cap129", "nvidia-caps/nvidia-cap130")
    h = scanner(devices, minors_file).scan().holders[child.pid]
    assert h.minors == (1,) and h.instances == ((1, 2, 0),)


def test_a_monitor_holds_no_gpu(devices: Path, holders: Spawner, minors_file: Path) -> None:
    """nvidia-smi and DCGM hold the monitor cap: MIG-wide, no GPU of its own."""
    child = holders("nvidiactl", "nvidia-caps/nvidia-cap2")
    h = scanner(devices, minors_file).scan().holders[child.pid]
    assert (h.minors, h.mig, h.instances) == ((), (MigCap(2, "monitor"),), ())


def test_without_mig_minors_a_cap_is_just_a_mig_capability(
    devices: Path, holders: Spawner, tmp_path: Path, minors_file: Path
) -> None:
    child = holders("nvidia-caps/nvidia-cap13", "nvidia-caps/nvidia-cap200")
    unreadable = scanner(devices, tmp_path / "absent").scan().holders[child.pid]
    assert unreadable.mig == (MigCap(13), MigCap(200)) and unreadable.minors == ()
    assert unreadable.mig[0].label == "a MIG capability"
    readable = scanner(devices, minors_file).scan().holders[child.pid]
    assert readable.mig == (MigCap(13, "ci", 0, 1, 0), MigCap(200)) and readable.minors == (0,)


def test_the_map_is_read_again_at_a_rescan(devices: Path, holders: Spawner, minors_file: Path) -> None:
    """An admin destroys and re-creates instances: the caps are numbered anew."""
    clock = Clock()
    scan = HolderScanner(devices, rescan_s=5.0, monotonic=clock, mig_minors=str(minors_file))
    child = holders("nvidia-caps/nvidia-cap200")
    assert scan.scan().holders[child.pid].mig == (MigCap(200),)
    minors_file.write_text(MIG_MINORS + "gpu0/gi3/ci0/access 200\n")
    clock.t += 5.0
    assert scan.scan().holders[child.pid].mig == (MigCap(200, "ci", 0, 3, 0),)
