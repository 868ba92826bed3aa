"""What the machine is: the facts every other number depends on."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys

from bench.gpucheck.common import Result, smi, smi_csv


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_line(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0][:200] if lines else None


def run(r: Result) -> None:
    gpus = smi_csv("gpu", ["index", "name", "uuid", "driver_version", "memory.total", "mig.mode.current"])
    r.number("gpus", gpus)
    r.number("nvidia_smi_L", smi("-L").strip().splitlines())
    r.number("python", sys.version.split()[0])
    r.number("kernel", platform.release())
    for dist in ("nvidia-ml-py", "torch", "textual", "rich", "psutil", "prometheus-client"):
        r.number(dist, _version(dist))
    cuda_gdb = shutil.which("cuda-gdb") or (
        "/usr/local/cuda/bin/cuda-gdb" if os.path.exists("/usr/local/cuda/bin/cuda-gdb") else None
    )
    r.number("debuggers", {d: shutil.which(d) for d in ("gdb", "lldb")} | {"cuda-gdb": cuda_gdb})
    if cuda_gdb:
        r.number("cuda_gdb_version", _first_line([cuda_gdb, "--version"]))
    dcgm = subprocess.run(["pgrep", "-a", "nv-hostengine|dcgm-exporter"], capture_output=True, text=True)
    r.number("dcgm_running", dcgm.stdout.strip() or None)
    import torch

    r.number("torch_cuda", torch.version.cuda)
    r.check("torch sees the GPU", torch.cuda.is_available(), torch.cuda.device_count(), ">= 1 device")
    r.check("nvidia-smi lists a GPU", len(gpus) >= 1, len(gpus), ">= 1")
    r.check(
        "Textual importable (carried wheels)", _version("textual") is not None, _version("textual"), "8.x"
    )
