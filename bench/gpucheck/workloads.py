"""CUDA loads with a known signature, run as `python -m bench.gpucheck.workloads KIND SECONDS READY [GIB]`:

matmul  bf16 8192x8192 products back to back: tensor pipes busy, SM activity high
copy    device-to-device copies of 2 GiB: DRAM bandwidth high, tensor pipes idle
spin    one thread of one block spinning (torch.cuda._sleep): NVML's utilization ~100 %, SM activity ~1/#SMs
hold    allocates GIB GiB and sleeps: memory without work
light   a small matmul every 50 ms: a modest load for the TUI's run

READY is touched once the load runs steadily (after a warm-up), then the loop runs for SECONDS.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main() -> None:
    kind, seconds, ready = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    gib = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    import torch

    dev = torch.device("cuda")
    keep = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device=dev)  # noqa: F841 (held memory)
    if kind == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

        def step() -> None:
            for _ in range(8):
                torch.mm(a, b)
    elif kind == "copy":
        src = torch.empty(1 << 30, dtype=torch.float16, device=dev).normal_()
        dst = torch.empty_like(src)

        def step() -> None:
            for _ in range(8):
                dst.copy_(src)
    elif kind == "spin":

        def step() -> None:
            torch.cuda._sleep(400_000_000)  # GPU clock cycles: ~0.2 s at 2 GHz
    elif kind == "light":
        a = torch.randn(2048, 2048, device=dev)

        def step() -> None:
            torch.mm(a, a)
            torch.cuda.synchronize()
            time.sleep(0.05)
    elif kind == "hold":

        def step() -> None:
            time.sleep(0.2)
    else:
        raise SystemExit(f"unknown workload {kind}")
    for _ in range(3):  # warm-up: cuBLAS handles, clocks up
        step()
    torch.cuda.synchronize()
    ready.touch()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
