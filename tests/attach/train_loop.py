"""A real CPU-torch training loop, run as a child process by the attach tests and `make bench`:

    python train_loop.py STEPS_FILE

Each step appends "<step> <time.monotonic()>" to STEPS_FILE, so a test sees the steps advance and the
longest gap between two of them (how long an attach paused the loop). It never starts an agent itself.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def main(steps_file: str) -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    with open(steps_file, "a", buffering=1) as out:
        while True:
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                out.write(f"{step} {time.monotonic():.6f}\n")
                time.sleep(0.005)  # a 5 ms step: a pause of tens of milliseconds is visible


if __name__ == "__main__":
    main(sys.argv[1])
