"""PyTorch: its build, its CUDA version against the driver's, what it sees, and whether it carries
kernels for each GPU's architecture ("no kernel image is available for execution on the device")."""

from __future__ import annotations

import re

from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.report import Check, ok, problem, warning
from gputui.doctor.torch_probe import TorchFacts

# PyTorch's CUDA wheels: (CUDA version, index name). The newest one the driver supports is suggested.
WHEELS = (
    ((11, 8), "cu118"),
    ((12, 1), "cu121"),
    ((12, 4), "cu124"),
    ((12, 6), "cu126"),
    ((12, 8), "cu128"),
    ((12, 9), "cu129"),
    ((13, 0), "cu130"),
)
_ARCH = re.compile(r"^(sm|compute)_(\d+?)(\d)([a-z]?)$")


def version(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def wheel_for(driver_cuda: str | None) -> str:
    """The newest CUDA wheel the driver supports; with the driver unknown, one most drivers run."""
    limit = version(driver_cuda)
    if limit is None:
        return "cu126"
    fitting = [name for v, name in WHEELS if v <= limit]
    return fitting[-1] if fitting else WHEELS[0][1]


def install_hint(driver_cuda: str | None) -> str:
    return f"pip install torch --index-url https://download.pytorch.org/whl/{wheel_for(driver_cuda)}"


def runs_on(capability: tuple[int, int], arch_list: tuple[str, ...]) -> bool:
    """Whether a build for `arch_list` has code for a GPU of `capability`: a cubin of the same major
    version and a minor at most the GPU's (sm_80 runs on 8.6), or PTX of at most its version, which the
    driver compiles (compute_80 runs on 9.0). Arch-specific code (sm_90a, compute_90a) runs only on its
    own capability, family-specific code (sm_100f) within its major version."""
    for arch in arch_list:
        match = _ARCH.match(arch)
        if not match:
            continue
        kind, major, minor, suffix = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
        if suffix == "a":  # arch-specific: that capability only
            if (major, minor) == capability:
                return True
        elif suffix == "f" or kind == "sm":  # family-specific code and cubins: same major, minor up to it
            if major == capability[0] and minor <= capability[1]:
                return True
        elif (major, minor) <= capability:  # plain PTX: the driver compiles it for any later GPU
            return True
    return False


def checks(t: TorchFacts, system: SystemFacts, seen_by_cuda: tuple[GpuFact, ...]) -> list[Check]:
    """`seen_by_cuda`: the GPUs CUDA_VISIBLE_DEVICES leaves to CUDA, in CUDA's order."""
    if t.error:
        return [
            warning(
                "torch",
                f"could not ask PyTorch: {t.error}",
                "pass --python with the interpreter you train with",
            )
        ]
    if t.torch is None:
        return [
            warning(
                "torch",
                f"torch is not importable by {t.python} ({t.import_error or 'unknown'})",
                f"{install_hint(system.cuda_version)} in the environment you train with, or pass "
                "--python /path/to/its/python",
            )
        ]
    out = [ok("torch", f"torch {t.torch} in {t.python}")]
    if t.hip:
        out.append(
            problem(
                "torch",
                f"torch {t.torch} is a ROCm (AMD) build: it cannot use NVIDIA GPUs",
                install_hint(system.cuda_version),
            )
        )
        return out
    if t.cuda is None:
        out.append(
            problem(
                "torch",
                f"torch {t.torch} is a CPU-only build: it never uses a GPU",
                install_hint(system.cuda_version),
            )
        )
        return out
    out.append(_cuda_versions(t, system))
    out.append(_available(t, system, seen_by_cuda))
    if t.available and t.device_count is not None and t.device_count != len(seen_by_cuda) and seen_by_cuda:
        out.append(
            warning(
                "torch",
                f"torch sees {t.device_count} GPU{'s' * (t.device_count != 1)}, "
                f"CUDA_VISIBLE_DEVICES leaves {len(seen_by_cuda)}",
                "check CUDA_VISIBLE_DEVICES where the job starts",
            )
        )
    out.extend(_architectures(t, system, seen_by_cuda))
    return out


def _cuda_versions(t: TorchFacts, system: SystemFacts) -> Check:
    built, supported = version(t.cuda), version(system.cuda_version)
    if built is None or supported is None:
        return ok("torch", f"built with CUDA {t.cuda}; the driver's CUDA version is unknown")
    if built[0] > supported[0]:
        return problem(
            "torch",
            f"torch is built with CUDA {t.cuda}, the driver supports only up to "
            f"{system.cuda_version}: CUDA cannot start",
            f"upgrade the NVIDIA driver, or {install_hint(system.cuda_version)}",
        )
    if built > supported:
        return warning(
            "torch",
            f"torch is built with CUDA {t.cuda}, the driver supports up to "
            f"{system.cuda_version}: it runs through CUDA minor-version compatibility, but "
            "kernels that need PTX compiled by the driver fail",
            f"upgrade the NVIDIA driver, or {install_hint(system.cuda_version)}",
        )
    return ok("torch", f"built with CUDA {t.cuda}; the driver supports up to {system.cuda_version}")


def _available(t: TorchFacts, system: SystemFacts, seen_by_cuda: tuple[GpuFact, ...]) -> Check:
    if t.available:
        return ok(
            "torch", f"torch.cuda.is_available() is True: {t.device_count} GPU{'s' * (t.device_count != 1)}"
        )
    said = t.cuda_error or (t.warnings[0] if t.warnings else "")
    found = "torch.cuda.is_available() is False" + (f": {said}" if said else "")
    if system.nvml_error is not None:
        fix = "fix the driver problems above first"
    elif not seen_by_cuda:
        fix = "CUDA_VISIBLE_DEVICES leaves no GPU (see above)"
    else:
        fix = (
            "run `python -c 'import torch; torch.cuda.init()'` for CUDA's own error; a driver/CUDA "
            "mismatch or a missing /dev/nvidia-uvm are the usual causes"
        )
    return problem("torch", found, fix)


def _architectures(t: TorchFacts, system: SystemFacts, seen_by_cuda: tuple[GpuFact, ...]) -> list[Check]:
    if not t.arch_list:
        return []
    # NVML's view when it has one (it needs no CUDA context), else what torch reported.
    gpus = [(g.label, g.capability) for g in seen_by_cuda if g.capability] or [
        (f"cuda:{i}", c) for i, c in enumerate(t.capabilities)
    ]
    missing = [(label, cap) for label, cap in gpus if not runs_on(cap, t.arch_list)]
    archs = " ".join(t.arch_list)
    if missing:
        label, (major, minor) = missing[0]
        return [
            problem(
                "torch",
                f"{label} is sm_{major}{minor}, and torch {t.torch} has no kernels for it "
                f'({archs}): CUDA fails with "no kernel image is available for execution on the '
                'device"',
                f"install a torch build for sm_{major}{minor} (a newer CUDA wheel, e.g. "
                f"{install_hint(system.cuda_version)})",
            )
        ]
    if gpus:
        caps = sorted({f"sm_{c[0]}{c[1]}" for _, c in gpus})
        return [ok("torch", f"kernels for {', '.join(caps)} in this build ({archs})")]
    return []
