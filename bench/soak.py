"""`make soak`: `gputui --demo --demo-gpus 8` in a pseudo-terminal for a while, and its RSS growth per hour.

History and caches are bounded; once they are full, memory must stay flat. To get there in minutes
rather than an hour, the soak samples 4 times a second and keeps 2 minutes of history
(GPUTUI_HISTORY_S); RSS is sampled every 5 s and the growth is the slope of a least-squares line over
the samples after the warm-up. Budget: <= 2 MiB/h. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout: bench.*
from bench.shared import quit_in_pty, start_in_pty

BUDGET_MIB_PER_H = 2.0


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600 if var else 0.0


def soak(seconds: float, interval: float, history_s: float, warmup: float) -> dict[str, object]:
    proc, master = start_in_pty(
        ("--demo", "--demo-gpus", "8", "--interval", str(interval)),
        120,
        40,
        env={"GPUTUI_HISTORY_S": str(history_s)},
    )
    ps = psutil.Process(proc.pid)
    start = time.monotonic()
    samples: list[tuple[float, float]] = []
    next_sample = start
    written = 0
    try:
        while time.monotonic() - start < seconds:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    written += len(os.read(master, 65536))
                except OSError:
                    break
            now = time.monotonic()
            if now >= next_sample:
                samples.append((now - start, ps.memory_info().rss / 2**20))
                next_sample += 5.0
        alive = proc.poll() is None
    finally:
        quit_in_pty(proc, master)
    steady = [(t, v) for t, v in samples if t >= warmup]
    growth = slope_per_hour(steady) if len(steady) >= 3 else None
    return {
        "seconds": round(seconds),
        "interval_s": interval,
        "history_s": history_s,
        "warmup_s": warmup,
        "ticks": round(seconds / interval),
        "still_running": alive,
        "bytes_written": written,
        "rss_start_mib": round(samples[0][1], 1) if samples else None,
        "rss_after_warmup_mib": round(steady[0][1], 1) if steady else None,
        "rss_end_mib": round(samples[-1][1], 1) if samples else None,
        "growth_mib_per_h": round(growth, 2) if growth is not None else None,
        # RSS at every tenth of the run: a bounded cache filling up flattens out; a leak does not.
        "rss_by_tenth_mib": [round(v, 1) for _, v in samples[:: max(1, len(samples) // 10)]],
        "budget_mib_per_h": BUDGET_MIB_PER_H,
        "pass": alive and growth is not None and growth <= BUDGET_MIB_PER_H,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1800.0, help="how long to run (default 1800)")
    ap.add_argument("--interval", type=float, default=0.25, help="gputui's sampling interval")
    ap.add_argument("--history", type=float, default=120.0, help="seconds of history gputui keeps")
    ap.add_argument(
        "--warmup",
        type=float,
        help="seconds left out of the fit (default: a third of the run, at least history + 60)",
    )
    args = ap.parse_args()
    # Textual's and Rich's own caches (bounded: 1,024 to 4,096 entries each) take 15-20 minutes at 4 Hz
    # to fill; a fit that starts earlier measures them filling, not a leak.
    warmup = args.warmup if args.warmup is not None else max(args.history + 60.0, args.seconds / 3)
    if args.seconds < warmup + 60:
        ap.error(f"--seconds must be at least the warm-up plus a minute ({warmup + 60:g})")
    result = soak(args.seconds, args.interval, args.history, warmup)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
