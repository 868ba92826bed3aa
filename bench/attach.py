"""attach: `gputui attach` through gdb on a real CPU-torch training loop."""

from __future__ import annotations

import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.shared import ROOT


def bench_attach(runs: int = 3) -> dict[str, object]:
    """`gputui attach` through gdb on a real CPU-torch training loop (tests/attach/train_loop.py, a 5 ms
    step): how long gdb ran and the loop's longest gap between two steps around it (the real pause)."""
    from gputui.actions.attach import attach

    if shutil.which("gdb") is None:
        return {"skipped": "gdb is not installed"}
    gdb_s, pauses = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            steps = Path(tmp) / "steps"
            steps.touch()
            loop = ROOT / "tests" / "attach" / "train_loop.py"
            proc = subprocess.Popen([sys.executable, str(loop), str(steps)], cwd=tmp)
            try:
                while len(steps.read_text().splitlines()) < 50:
                    time.sleep(0.05)
                t0 = time.monotonic()
                outcome = attach(proc.pid)
                t1 = time.monotonic()
                time.sleep(0.5)
                if not outcome.ok:
                    return {"failed": outcome.message}
                times = [float(line.split()[1]) for line in steps.read_text().splitlines() if " " in line]
                around = [t for t in times if t0 - 0.5 <= t <= t1 + 0.5]
                pauses.append(max(b - a for a, b in itertools.pairwise(around)))
                gdb_s.append(outcome.seconds or 0.0)
            finally:
                proc.kill()
                proc.wait()
    return {
        "runs": runs,
        "gdb_s_median": round(statistics.median(gdb_s), 3),
        "longest_step_gap_s_median": round(statistics.median(pauses), 3),
        "longest_step_gap_s_max": round(max(pauses), 3),
        "usual_step_s": 0.005,
    }
