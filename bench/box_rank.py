"""One rank of the bench's box (bench/box.py): `python -IS box_rank.py --rank R --workers N` starts N
workers (this script with --worker K), prints their pids and waits. Every process of a rank reads its
stdin, a pipe only the bench writes to, and exits at its end-of-file: nothing outlives the bench."""

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    rank = argv[argv.index("--rank") + 1]
    workers = []
    if "--worker" not in argv:
        count = int(argv[argv.index("--workers") + 1])
        workers = [
            # Started as the trainer was: `python` in argv, the real interpreter (sys.executable is looked up
            # from argv[0] on PATH), this script by its name (the working directory is its folder).
            subprocess.Popen(
                ["python", "-IS", os.path.basename(__file__), "--rank", rank, "--worker", str(k)],
                executable=os.readlink("/proc/self/exe"),
            )
            for k in range(count)
        ]
        print(" ".join(str(w.pid) for w in workers), flush=True)
    sys.stdin.buffer.read()
    for w in workers:
        w.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
