"""A trainer that allocates GPU memory and forks a worker that never touches CUDA but inherits its open
device files (as a DataLoader worker does), then waits to be killed: `python leftover_job.py DIR GIB`.
Writes DIR/pids ("trainer worker") once both run."""

import os
import sys
import time

import torch


def main() -> None:
    out, gib = sys.argv[1], float(sys.argv[2])
    x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")  # noqa: F841
    torch.cuda.synchronize()
    child = os.fork()
    if child == 0:  # the worker: stuck in a read, as a worker on a dead NFS mount would be
        while True:
            time.sleep(3600)
    with open(os.path.join(out, "pids.tmp"), "w") as f:
        f.write(f"{os.getpid()} {child}\n")
    os.replace(os.path.join(out, "pids.tmp"), os.path.join(out, "pids"))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
