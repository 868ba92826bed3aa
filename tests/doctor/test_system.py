"""The doctor's driver, library, device-file and GPU verdicts, reached from a fake NVML (FakeNvml) and a
fake machine root in a temporary directory: /proc/driver/nvidia/version, /sys/module/nvidia, /dev/nvidia*
and the process's memory maps."""

from __future__ import annotations

import ctypes.util
import os
import stat
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gputui.doctor import checks_system, facts
from gputui.doctor.checks_system import INSTALL_DRIVER
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.report import OK, PROBLEM, WARNING, Check
from tests.collect.fake_nvml import FakeNvml

NVRM = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
NVRM_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:22:33 UTC 2024\n"
)
LIBRARY = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"
MAPS = (
    "5581c2a4f000-5581c2a51000 r--p 00000000 fd:01 1835019                    /usr/bin/python3.11\n"
    "7f3a1c000000-7f3a1c021000 rw-p 00000000 00:00 0 \n"
    f"7f3a1d200000-7f3a1d2a6000 r--p 00000000 fd:01 1842571                    {LIBRARY}\n"
    f"7f3a1d2a6000-7f3a1d4f1000 r-xp 000a6000 fd:01 1842571                    {LIBRARY}\n"
    "7f3a1e000000-7f3a1e1c8000 r-xp 00028000 fd:01 1838201                    "
    "/usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "7ffd5b3e0000-7ffd5b401000 rw-p 00000000 00:00 0                          [stack]\n"
)


# -- the fake machine -------------------------------------------------------------------------------------


def machine(
    tmp_path: Path, version: str | None = NVRM, sys_module: bool = True, dev: dict[str, int] | None = None
) -> Path:
    """A machine root: the driver's version file (None: none), /sys/module/nvidia, and /dev files as
    plain files with the given modes (default: nvidiactl, nvidia-uvm and the fake's GPUs' minors 7, 6)."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    if version is not None:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(version)
    if sys_module:
        (root / "sys/module/nvidia").mkdir(parents=True)
    files = (
        {"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia7": 0o666, "nvidia6": 0o666} if dev is None else dev
    )
    for name, mode in files.items():
        (root / "dev" / name).write_bytes(b"")
        (root / "dev" / name).chmod(mode)
    return root


@pytest.fixture
def maps(tmp_path: Path) -> Path:
    path = tmp_path / "maps"
    path.write_text(MAPS)
    return path


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    f = FakeNvml(n_gpus=2).install(monkeypatch)
    yield f
    assert f.violations == []
    assert f.initialized == 0, "the doctor left NVML initialized"


@pytest.fixture
def as_other_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.access as an unprivileged user who neither owns the files nor is in their group: only the
    "other" permission bits count. (Tests may run as root, for whom os.access ignores the modes.)"""
    real = os.access

    def access(path: Any, mode: int, **kw: Any) -> bool:
        if Path(path).parent.name != "dev":
            return real(path, mode, **kw)
        other = stat.S_IMODE(os.stat(path).st_mode)
        want = (0o004 if mode & os.R_OK else 0) | (0o002 if mode & os.W_OK else 0)
        return other & want == want

    monkeypatch.setattr(os, "access", access)  # facts reads os.access


def gathered(fake: FakeNvml, root: Path, maps: Path) -> SystemFacts:
    return facts.gather(root, maps)


def only(checks: list[Check], word: str) -> Check:
    found = [c for c in checks if word in c.found]
    assert len(found) == 1, (word, checks)
    return found[0]


def device_check(f: SystemFacts) -> Check:
    return checks_system.driver(f)[-1]


# -- the kernel module ----------------------------------------------------------------------------------


def test_kernel_module_version_from_the_nvrm_line(tmp_path: Path) -> None:
    assert facts.kernel_module(machine(tmp_path)) == "550.54.15"


def test_kernel_module_version_of_the_open_module(tmp_path: Path) -> None:
    assert facts.kernel_module(machine(tmp_path, version=NVRM_OPEN)) == "560.35.03"


def test_kernel_module_without_a_readable_version_is_loaded(tmp_path: Path) -> None:
    assert facts.kernel_module(machine(tmp_path, version="NVRM: something else entirely\n")) == "loaded"
    # No /proc/driver/nvidia at all, but /sys/module/nvidia: loaded, version unknown.
    assert facts.kernel_module(machine(tmp_path / "b", version=None)) == "loaded"


def test_kernel_module_absent(tmp_path: Path) -> None:
    assert facts.kernel_module(machine(tmp_path, version=None, sys_module=False)) is None


def test_driver_module_loaded_with_version(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    checks = checks_system.driver(gathered(fake, machine(tmp_path), maps))
    assert checks[0] == Check("driver", OK, "NVIDIA kernel module 550.54.15 loaded")


def test_driver_module_loaded_without_version(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    checks = checks_system.driver(gathered(fake, machine(tmp_path, version=None), maps))
    assert checks[0] == Check("driver", OK, "NVIDIA kernel module loaded")


def test_driver_module_not_loaded_is_a_problem(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.init_error = pynvml.NVMLError_DriverNotLoaded
    f = gathered(fake, machine(tmp_path, version=None, sys_module=False), maps)
    assert f.kernel_module is None
    first = checks_system.driver(f)[0]
    assert first.status == PROBLEM
    assert "kernel module is not loaded" in first.found
    assert "sudo modprobe nvidia" in first.fix and "dmesg" in first.fix and "Secure Boot" in first.fix


# -- NVML and its library ---------------------------------------------------------------------------------


def test_healthy_machine_every_driver_check_ok(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    f = gathered(fake, machine(tmp_path), maps)
    assert f.nvml_error is None
    assert f.library == LIBRARY
    assert (f.driver_version, f.cuda_version) == ("550.54.15", "12.4")
    checks = checks_system.driver(f)
    assert [c.status for c in checks] == [OK] * 4
    assert checks[1].found == f"libnvidia-ml loaded from {LIBRARY}"
    assert checks[2].found == "driver 550.54.15, supports CUDA up to 12.4"
    assert checks[3].found == "4 /dev/nvidia* files, readable and writable by this user"


@pytest.mark.parametrize(
    ("reported", "shown"), [(12040, "12.4"), (12080, "12.8"), (11080, "11.8"), (13000, "13.0")]
)
def test_cuda_version_from_the_driver(
    fake: FakeNvml, tmp_path: Path, maps: Path, reported: int, shown: str
) -> None:
    fake.cuda_version = reported
    fake.driver_version = "570.86.10"
    checks = checks_system.driver(gathered(fake, machine(tmp_path), maps))
    assert only(checks, "driver 570").found == f"driver 570.86.10, supports CUDA up to {shown}"


def test_cuda_version_not_reported(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.fail(None, "nvmlSystemGetCudaDriverVersion", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    checks = checks_system.driver(gathered(fake, machine(tmp_path), maps))
    line = only(checks, "driver 550")
    assert line.status == OK and line.found == "driver 550.54.15, CUDA version not reported"


def test_library_path_read_from_the_maps(tmp_path: Path, maps: Path) -> None:
    assert facts.loaded_library(maps) == LIBRARY
    other = tmp_path / "other_maps"
    other.write_text("\n".join(ln for ln in MAPS.splitlines() if "nvidia" not in ln))
    assert facts.loaded_library(other) is None
    assert facts.loaded_library(tmp_path / "no_such_maps") is None


def test_library_unknown_when_not_in_the_maps(fake: FakeNvml, tmp_path: Path) -> None:
    empty = tmp_path / "maps"
    empty.write_text("")
    checks = checks_system.driver(gathered(fake, machine(tmp_path), empty))
    assert only(checks, "libnvidia-ml").found == "libnvidia-ml loaded from the default library path"


INIT_FAILURES = [
    (pynvml.NVMLError_LibraryNotFound, "library", "libnvidia-ml.so.1 cannot be loaded", INSTALL_DRIVER),
    (
        pynvml.NVMLError_DriverNotLoaded,
        "driver",
        "libnvidia-ml is installed but the driver is not loaded",
        "`sudo modprobe nvidia`",
    ),
    (
        pynvml.NVMLError_NoPermission,
        "permission",
        "NVML: no permission to use the driver",
        "permissions of /dev/nvidia*",
    ),
    (pynvml.NVMLError_LibRmVersionMismatch, "mismatch", "driver/library version mismatch", "reboot"),
    (pynvml.NVMLError_Unknown, "other", "NVML failed to start: Unknown Error", "nvidia-smi"),
    (
        OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory"),
        "library",
        "libnvidia-ml.so.1 cannot be loaded",
        INSTALL_DRIVER,
    ),
]


@pytest.mark.parametrize(
    ("error", "kind", "found", "fix"),
    INIT_FAILURES,
    ids=["LibraryNotFound", "DriverNotLoaded", "NoPermission", "LibRmVersionMismatch", "Unknown", "OSError"],
)
def test_nvml_init_failure(
    fake: FakeNvml,
    tmp_path: Path,
    maps: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: Any,
    kind: str,
    found: str,
    fix: str,
) -> None:
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    fake.init_error = error
    f = gathered(fake, machine(tmp_path), maps)
    assert f.nvml_error == kind
    assert f.gpus == () and f.driver_version is None and f.library is None
    checks = checks_system.driver(f)
    # module, library (the problem), device files: no driver-version line without NVML.
    assert len(checks) == 3
    lib = checks[1]
    assert lib.status == PROBLEM
    assert lib.found.startswith(found), lib.found
    assert fix in lib.fix
    assert checks_system.gpus(f) == []  # nothing to say about GPUs NVML could not list


def test_library_not_found_names_the_candidates(
    fake: FakeNvml, tmp_path: Path, maps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        ctypes.util, "find_library", lambda name: "libnvidia-ml.so.1" if name == "nvidia-ml" else None
    )
    fake.init_error = pynvml.NVMLError_LibraryNotFound
    f = gathered(fake, machine(tmp_path), maps)
    assert f.library_candidates == ("libnvidia-ml.so.1",)
    lib = checks_system.driver(f)[1]
    assert lib.found == "libnvidia-ml.so.1 cannot be loaded (libnvidia-ml.so.1 is on the library path)"


def test_nvml_failing_after_init_is_other(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.fail(None, "nvmlDeviceGetCount", pynvml.NVML_ERROR_UNKNOWN)
    f = gathered(fake, machine(tmp_path), maps)
    assert f.nvml_error == "other"
    lib = checks_system.driver(f)[1]
    assert lib.status == PROBLEM
    assert lib.found == "NVML failed to start: NVML cannot count the GPUs: Unknown Error"


def test_device_files_checked_even_when_nvml_fails(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.init_error = pynvml.NVMLError_LibraryNotFound
    root = machine(
        tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia0": 0o666, "nvidia1": 0o666}
    )
    f = gathered(fake, root, maps)
    assert sorted(Path(p).name for p in f.device_files) == ["nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"]
    assert device_check(f).status == OK


# -- device files -------------------------------------------------------------------------------------


def test_device_files_named_by_minor_number(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    # The fake's GPUs have minors 7 and 6, not their NVML indices: /dev/nvidia0 is not theirs.
    root = machine(
        tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia0": 0o666, "nvidia1": 0o666}
    )
    f = gathered(fake, root, maps)
    assert [(g.index, g.minor) for g in f.gpus] == [(0, 7), (1, 6)]
    assert f.device_files == {
        str(root / "dev/nvidiactl"): "ok",
        str(root / "dev/nvidia-uvm"): "ok",
        str(root / "dev/nvidia7"): "missing",
        str(root / "dev/nvidia6"): "missing",
    }
    check = device_check(f)
    assert check.status == PROBLEM
    assert check.found == f"missing: {root / 'dev/nvidia7'}, {root / 'dev/nvidia6'}"
    assert "nvidia-modprobe -c=0" in check.fix and "-u" not in check.fix


def test_device_files_minor_unknown_falls_back_to_the_index(
    fake: FakeNvml, tmp_path: Path, maps: Path
) -> None:
    for g in fake.gpus:
        g.minor = None  # nvmlDeviceGetMinorNumber not supported
    root = machine(
        tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia0": 0o666, "nvidia1": 0o666}
    )
    f = gathered(fake, root, maps)
    assert sorted(Path(p).name for p in f.device_files) == ["nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"]
    assert device_check(f).status == OK


def test_device_files_all_ok(fake: FakeNvml, tmp_path: Path, maps: Path, as_other_user: None) -> None:
    root = machine(tmp_path)
    f = gathered(fake, root, maps)
    assert set(f.device_files.values()) == {"ok"}
    assert len(f.device_files) == 4
    assert device_check(f) == Check("driver", OK, "4 /dev/nvidia* files, readable and writable by this user")


def test_nvidia_uvm_missing(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    root = machine(tmp_path, dev={"nvidiactl": 0o666, "nvidia7": 0o666, "nvidia6": 0o666})
    check = device_check(gathered(fake, root, maps))
    assert check.status == PROBLEM
    assert check.found == f"missing: {root / 'dev/nvidia-uvm'}"
    assert "nvidia-modprobe -u" in check.fix
    assert "CUDA cannot start without it" in check.fix


def test_device_file_without_access_for_this_user(
    fake: FakeNvml, tmp_path: Path, maps: Path, as_other_user: None
) -> None:
    # /dev/nvidia6 is crw-rw---- root:video and this user is not in the group.
    root = machine(
        tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia7": 0o666, "nvidia6": 0o660}
    )
    f = gathered(fake, root, maps)
    assert f.device_files[str(root / "dev/nvidia6")] == "no access"
    assert f.device_files[str(root / "dev/nvidia7")] == "ok"
    check = device_check(f)
    assert check.status == PROBLEM
    assert check.found == f"this user cannot open {root / 'dev/nvidia6'} for reading and writing"
    assert "group" in check.fix and "ls -l /dev/nvidia*" in check.fix


def test_device_file_readable_but_not_writable_is_no_access(
    fake: FakeNvml, tmp_path: Path, maps: Path, as_other_user: None
) -> None:
    root = machine(
        tmp_path, dev={"nvidiactl": 0o644, "nvidia-uvm": 0o666, "nvidia7": 0o666, "nvidia6": 0o666}
    )
    f = gathered(fake, root, maps)
    assert f.device_files[str(root / "dev/nvidiactl")] == "no access"
    assert device_check(f).status == PROBLEM


def test_denied_is_reported_before_missing(
    fake: FakeNvml, tmp_path: Path, maps: Path, as_other_user: None
) -> None:
    root = machine(tmp_path, dev={"nvidiactl": 0o600, "nvidia7": 0o666, "nvidia6": 0o666})
    check = device_check(gathered(fake, root, maps))
    assert check.found.startswith("this user cannot open") and "nvidiactl" in check.found


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens any file whatever its mode: os.access is True")
def test_device_file_without_access_real_modes(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    root = machine(
        tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia7": 0o000, "nvidia6": 0o666}
    )
    f = gathered(fake, root, maps)
    assert f.device_files[str(root / "dev/nvidia7")] == "no access"
    assert device_check(f).status == PROBLEM


def test_no_device_files_verdict() -> None:
    check = device_check(SystemFacts(kernel_module="550.54.15", device_files={}))
    assert check.status == PROBLEM
    assert check.found == "no /dev/nvidia* device files"
    assert check.fix == INSTALL_DRIVER


def test_no_device_files_at_all_from_a_bare_dev(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    # A container started without --gpus: no libnvidia-ml, no device files.
    fake.init_error = pynvml.NVMLError_LibraryNotFound
    f = gathered(fake, machine(tmp_path, version=None, sys_module=False, dev={}), maps)
    check = device_check(f)
    assert check.status == PROBLEM
    assert check.found == "no /dev/nvidia* device files"
    assert check.fix == INSTALL_DRIVER


# -- GPUs -------------------------------------------------------------------------------------------------


def test_gpus_visible_and_mig_off(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus[1].name = "NVIDIA A100-SXM4-80GB"
    fake.gpus[1].capability = (8, 0)
    f = gathered(fake, machine(tmp_path), maps)
    assert [(g.index, g.name, g.capability, g.mig, g.lost) for g in f.gpus] == [
        (0, "NVIDIA H100 80GB HBM3", (9, 0), False, False),
        (1, "NVIDIA A100-SXM4-80GB", (8, 0), False, False),
    ]
    assert f.gpus[0].uuid == fake.gpus[0].uuid and f.gpus[1].pci_bus_id == fake.gpus[1].pci_bus_id
    assert f.gpus[0].sm_clock_max == 1980
    checks = checks_system.gpus(f)
    assert checks == [
        Check("gpus", OK, "2 GPUs visible to NVML: NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3"),
        Check("gpus", OK, "MIG mode off"),
    ]


def test_one_gpu_singular(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus.pop()
    f = gathered(
        fake, machine(tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia7": 0o666}), maps
    )
    assert checks_system.gpus(f)[0].found == "1 GPU visible to NVML: NVIDIA H100 80GB HBM3"


def test_no_gpu_visible_is_a_problem(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus.clear()
    f = gathered(fake, machine(tmp_path, dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666}), maps)
    assert f.nvml_error is None and f.gpus == ()
    checks = checks_system.gpus(f)
    assert len(checks) == 1
    assert checks[0].status == PROBLEM
    assert checks[0].found == "NVML sees no GPU"
    assert "lspci" in checks[0].fix and "passed" in checks[0].fix


def test_a_lost_gpu_among_several(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus.append(fake.gpus[0].__class__(2))
    fake.fail(1, "nvmlDeviceGetHandleByIndex", pynvml.NVMLError_GpuIsLost)
    f = gathered(fake, machine(tmp_path), maps)
    assert [g.lost for g in f.gpus] == [False, True, False]
    assert f.gpus[1].capability is None  # no NVML call for a lost GPU
    checks = checks_system.gpus(f)
    assert checks[0].status == OK and checks[0].found.startswith("3 GPUs visible to NVML")
    lost = [c for c in checks if c.status == PROBLEM]
    assert len(lost) == 1
    assert lost[0].found == "GPU 1 lost (fallen off the bus)"
    assert "Xid 79" in lost[0].fix and "nvidia-smi -r" in lost[0].fix
    # MIG is judged on the GPUs that answer: off on both.
    assert checks[-1] == Check("gpus", OK, "MIG mode off")


def test_a_lost_gpu_does_not_invent_a_missing_device_file(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus.append(fake.gpus[0].__class__(2))  # minors 7, 6, 5
    fake.fail(1, "nvmlDeviceGetHandleByIndex", pynvml.NVMLError_GpuIsLost)
    root = machine(
        tmp_path,
        dev={"nvidiactl": 0o666, "nvidia-uvm": 0o666, "nvidia7": 0o666, "nvidia6": 0o666, "nvidia5": 0o666},
    )
    check = device_check(gathered(fake, root, maps))
    assert check.status == OK, check


def test_mig_on_for_one_gpu_is_a_warning(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus[1].mig = (1, 1)
    f = gathered(fake, machine(tmp_path), maps)
    assert [g.mig for g in f.gpus] == [False, True]
    checks = checks_system.gpus(f)
    assert len(checks) == 2
    mig = checks[1]
    assert mig.status == WARNING
    assert mig.found.startswith("MIG mode is on for GPU 1:")
    assert "GPU 0" not in mig.found
    assert "nvidia-smi -L" in mig.fix and "-mig 0" in mig.fix


def test_mig_not_supported_says_nothing_about_mig(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    for g in fake.gpus:
        g.mig = None  # a GeForce card
    checks = checks_system.gpus(gathered(fake, machine(tmp_path), maps))
    assert len(checks) == 1 and not any("MIG" in c.found for c in checks)


def test_capability_unsupported_is_none(fake: FakeNvml, tmp_path: Path, maps: Path) -> None:
    fake.gpus[0].capability = None
    f = gathered(fake, machine(tmp_path), maps)
    assert [g.capability for g in f.gpus] == [None, (9, 0)]


def test_gpus_silent_when_nvml_failed() -> None:
    f = SystemFacts(
        kernel_module="550.54.15", nvml_error="driver", gpus=(GpuFact(0, "NVIDIA H100 80GB HBM3"),)
    )
    assert checks_system.gpus(f) == []


# -- how long the GPUs have been idle ---------------------------------------------------------------------


def us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def test_idle_since_the_oldest_sample_when_all_zero(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=4242, sm=0, mem=0)  # at 1000 s
    fake.advance(30)
    fake.add_util_sample(0, pid=4242, sm=0, mem=0)
    fake.advance(30)
    assert facts.idle_seconds([0], fake.now) == pytest.approx(60.0)
    # The samples asked for: the last 600 s (microseconds of the same clock).
    assert fake.proc_util_args[0] == [us(fake.now - 600)]


def test_idle_since_the_last_busy_sample(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=4242, sm=0, mem=0)  # 1000
    fake.advance(10)
    fake.add_util_sample(0, pid=4242, sm=40, mem=10)  # 1010: busy
    fake.advance(30)
    fake.add_util_sample(0, pid=4242, sm=0, mem=0)  # 1040
    fake.advance(20)  # now 1060
    assert facts.idle_seconds([0], fake.now) == pytest.approx(50.0)


def test_idle_busy_just_now_is_zero(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=4242, sm=0, mem=0, timestamp=us(fake.now - 100))
    fake.add_util_sample(0, pid=4242, sm=97, mem=50)
    assert facts.idle_seconds([0], fake.now) == pytest.approx(0.0)


def test_idle_over_several_gpus(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=1, sm=0, mem=0, timestamp=us(1000))
    fake.add_util_sample(1, pid=2, sm=0, mem=0, timestamp=us(1005))
    fake.add_util_sample(1, pid=2, sm=12, mem=3, timestamp=us(1020))
    now = 1060.0
    assert facts.idle_seconds([0], now) == pytest.approx(60.0)
    assert facts.idle_seconds([1], now) == pytest.approx(40.0)
    assert facts.idle_seconds([0, 1], now) == pytest.approx(40.0)  # idle together since GPU 1 stopped


def test_idle_ignores_samples_outside_the_window(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=1, sm=80, mem=3, timestamp=us(1000))  # busy, but 60 s ago
    fake.add_util_sample(0, pid=1, sm=0, mem=0, timestamp=us(1040))
    assert facts.idle_seconds([0], 1060.0, window_s=30.0) == pytest.approx(20.0)
    assert facts.idle_seconds([0], 1060.0) == pytest.approx(60.0)


def test_idle_ignores_garbage_above_100_percent(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=1, sm=0, mem=0, timestamp=us(1000))
    fake.add_util_sample(0, pid=1, sm=255, mem=0, timestamp=us(1030))  # 255 %: garbage
    assert facts.idle_seconds([0], 1060.0) == pytest.approx(60.0)


def test_idle_unknown_without_samples(fake: FakeNvml) -> None:
    assert facts.idle_seconds([0, 1], fake.now) is None
    assert fake.proc_util_args[0] and fake.proc_util_args[1]  # it did ask both GPUs


def test_idle_unknown_when_nvml_fails(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=1, sm=0, mem=0)
    fake.init_error = pynvml.NVMLError_DriverNotLoaded
    assert facts.idle_seconds([0], fake.now) is None


def test_idle_skips_a_gpu_that_fails(fake: FakeNvml) -> None:
    fake.add_util_sample(0, pid=1, sm=0, mem=0, timestamp=us(1000))
    fake.add_util_sample(1, pid=2, sm=50, mem=0, timestamp=us(1050))
    fake.fail(1, "nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_GPU_IS_LOST)
    assert facts.idle_seconds([0, 1], 1060.0) == pytest.approx(60.0)
