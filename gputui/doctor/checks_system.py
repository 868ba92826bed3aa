"""Driver, library, device files and GPUs: judged from SystemFacts."""

from __future__ import annotations

from gputui.analyze.health import ERROR, problems
from gputui.doctor.facts import SystemFacts
from gputui.doctor.report import Check, ok, problem, warning

INSTALL_DRIVER = (
    "install the NVIDIA driver (e.g. `sudo apt install nvidia-driver-550`); in a container, "
    "start it with `--gpus all` (NVIDIA Container Toolkit)"
)


def driver(f: SystemFacts) -> list[Check]:
    checks = []
    if f.kernel_module is None:
        checks.append(
            problem(
                "driver",
                "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia)",
                "`sudo modprobe nvidia`; if it fails, `sudo dmesg | grep -i nvrm` says why "
                "(Secure Boot blocks unsigned modules; a kernel update needs the module "
                "rebuilt)",
            )
        )
    else:
        version = "" if f.kernel_module == "loaded" else f" {f.kernel_module}"
        checks.append(ok("driver", f"NVIDIA kernel module{version} loaded"))
    checks.append(_library(f))
    if f.nvml_error is None:
        cuda = f"supports CUDA up to {f.cuda_version}" if f.cuda_version else "CUDA version not reported"
        checks.append(ok("driver", f"driver {f.driver_version or 'version unknown'}, {cuda}"))
    checks.append(_device_files(f))
    return checks


def _library(f: SystemFacts) -> Check:
    if f.nvml_error is None:
        return ok("driver", f"libnvidia-ml loaded from {f.library or 'the default library path'}")
    found = f" ({', '.join(f.library_candidates)} is on the library path)" if f.library_candidates else ""
    if f.nvml_error == "library":
        return problem("driver", f"libnvidia-ml.so.1 cannot be loaded{found}", INSTALL_DRIVER)
    if f.nvml_error == "driver":
        return problem(
            "driver",
            "libnvidia-ml is installed but the driver is not loaded",
            "`sudo modprobe nvidia` (see `sudo dmesg | grep -i nvrm` if it fails)",
        )
    if f.nvml_error == "permission":
        return problem(
            "driver",
            "NVML: no permission to use the driver",
            "check the permissions of /dev/nvidia* (the check below) and the container's device cgroup",
        )
    if f.nvml_error == "mismatch":
        return problem(
            "driver",
            "driver/library version mismatch: the loaded kernel module is not the "
            "version of libnvidia-ml (the driver was upgraded)",
            "reboot (or unload and reload the nvidia modules)",
        )
    return problem(
        "driver",
        f"NVML failed to start: {f.nvml_error_text}",
        "run `nvidia-smi` to see the same failure; reinstall the driver if it fails too",
    )


def _device_files(f: SystemFacts) -> Check:
    missing = [p for p, state in f.device_files.items() if state == "missing"]
    denied = [p for p, state in f.device_files.items() if state == "no access"]
    if not f.device_files:
        return problem("driver", "no /dev/nvidia* device files", INSTALL_DRIVER)
    if denied:
        return problem(
            "driver",
            f"this user cannot open {', '.join(denied)} for reading and writing",
            "add the user to the group that owns them (`ls -l /dev/nvidia*`), or fix the "
            "container's device cgroup",
        )
    if missing:
        uvm = any(p.endswith("nvidia-uvm") for p in missing)
        fix = (
            "`sudo nvidia-modprobe -u -c=0` creates /dev/nvidia-uvm (CUDA cannot start without it)"
            if uvm
            else "`sudo nvidia-modprobe -c=0` (or a driver reinstall) creates the missing files"
        )
        return problem("driver", f"missing: {', '.join(missing)}", fix)
    return ok("driver", f"{len(f.device_files)} /dev/nvidia* files, readable and writable by this user")


def gpus(f: SystemFacts) -> list[Check]:
    if f.nvml_error is not None:
        return []
    if not f.gpus:
        return [
            problem(
                "gpus",
                "NVML sees no GPU",
                "check `lspci | grep -i nvidia`; in a VM or container, the GPU must be passed through",
            )
        ]
    names = ", ".join(sorted({g.name or "unknown model" for g in f.gpus}))
    checks = [ok("gpus", f"{len(f.gpus)} GPU{'s' * (len(f.gpus) > 1)} visible to NVML: {names}")]
    lost = [g for g in f.gpus if g.lost]
    if lost:
        names = ", ".join(f"GPU {g.index}" for g in lost)
        checks.append(
            problem(
                "gpus",
                f"{names} lost (fallen off the bus)",
                "`sudo dmesg | grep -i xid` (Xid 79); reset the GPU (`nvidia-smi -r -i N`) or reboot",
            )
        )
    mig = [g for g in f.gpus if g.mig]
    if mig:
        checks.append(
            warning(
                "gpus",
                f"MIG mode is on for {', '.join(f'GPU {g.index}' for g in mig)}: CUDA "
                "sees MIG instances there, not the whole GPU",
                "put MIG UUIDs from `nvidia-smi -L` in CUDA_VISIBLE_DEVICES, or turn MIG off "
                "(`sudo nvidia-smi -i N -mig 0`)",
            )
        )
    elif all(g.mig is not None for g in f.gpus if not g.lost):
        checks.append(ok("gpus", "MIG mode off"))
    return checks


def health(f: SystemFacts) -> list[Check]:
    """ECC errors, row remapping and retired pages, a PCIe link below its maximum: each with the fix (drain,
    reset when no process uses the GPU, RMA). Said only when NVML reported any of it."""
    known = [g for g in f.samples if g.health is not None and not g.lost]
    if not known:
        return []
    out = []
    for p in (p for g in known for p in problems(g)):
        judge = problem if p.severity == ERROR else warning
        out.append(judge("health", p.text, p.fix))
    if not out:
        out.append(ok("health", "no ECC errors, no pending row remap or retirement, PCIe at full width"))
    return out
