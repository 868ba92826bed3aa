"""A small real training job for the check: a CUDA model fed by a DataLoader of 3 worker processes whose
dataset is slow on purpose (input-bound, as the profile should say). Standard library and torch only, so it
runs on an interpreter without gputui (`python -I`).

    python train_job.py DIR

Appends "step time" lines to DIR/steps. While DIR/hold exists it stops stepping, keeps its tensors and
writes DIR/stats.json once (its own torch.cuda.memory_stats() and memory_snapshot() summary), so the
check can compare what gputui's agent reports with what the job itself sees at the same moment.
"""

import json
import os
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.004)  # a dataset that reads and decodes: the loop waits for it
        return torch.randn(256), i % 10


def own_stats() -> dict[str, Any]:
    stats = torch.cuda.memory_stats()
    segments = torch.cuda.memory_snapshot()
    free_blocks = [b["size"] for s in segments for b in s["blocks"] if b["state"] == "inactive"]
    return {
        "time": time.time(),
        "allocated": stats.get("allocated_bytes.all.current"),
        "reserved": stats.get("reserved_bytes.all.current"),
        "active": stats.get("active_bytes.all.current"),
        "allocated_peak": stats.get("allocated_bytes.all.peak"),
        "num_alloc_retries": stats.get("num_alloc_retries"),
        "segments": len(segments),
        "largest_free_block": max(free_blocks, default=0),
    }


def main() -> None:
    out = sys.argv[1]
    steps_path, hold, stats_path = (os.path.join(out, n) for n in ("steps", "hold", "stats.json"))
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 10),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ballast = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")  # noqa: F841 (memory to see)
    loader = DataLoader(Slow(), batch_size=32, num_workers=3, persistent_workers=True)
    step = 0
    with open(steps_path, "a", buffering=1) as steps:
        for x, y in loader:
            if os.path.exists(hold):
                torch.cuda.synchronize()
                if not os.path.exists(stats_path):
                    tmp = stats_path + ".tmp"
                    with open(tmp, "w") as f:
                        json.dump(own_stats(), f)
                    os.replace(tmp, stats_path)
                while os.path.exists(hold):
                    time.sleep(0.05)
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            steps.write(f"{step} {time.time():.4f}\n")


if __name__ == "__main__":
    main()
