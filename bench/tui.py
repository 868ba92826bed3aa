"""tui: a gputui TUI in a pseudo-terminal (the demo unless told otherwise): bytes/s written to the
terminal, CPU % of one core (the whole process tree), peak RSS, time to the first full frame (the median of
bench.shared.FIRST_FRAME_STARTS starts)."""

from __future__ import annotations

import time
from functools import partial

from bench.shared import FIRST_FRAME_STARTS, first_frames, quit_in_pty, start_in_pty, watch_pty


def bench_tui(
    gpus: int = 8,
    warmup: float = 5.0,
    measure: float = 30.0,
    cols: int = 120,
    rows: int = 40,
    args: tuple[str, ...] | None = None,
    full_frame: tuple[bytes, ...] | None = None,
    starts: int = FIRST_FRAME_STARTS,
) -> dict[str, object]:
    """A gputui TUI in a pseudo-terminal: `gputui --demo` unless `args` says otherwise; the first full
    frame is when every byte string of `full_frame` has been written."""
    args = args or ("--demo", "--demo-gpus", str(gpus), "--interval", "1")
    # The full frame: the last GPU's pane and the table's rows are on screen.
    full_frame = full_frame or (f"{gpus - 1} H100".encode(), b"demo_train.py")
    start = time.monotonic()
    proc, master = start_in_pty(args, cols, rows)
    try:
        run = watch_pty(proc, master, start, warmup, measure, full_frame)
    finally:
        quit_in_pty(proc, master)
    first = first_frames(run, partial(start_in_pty, args, cols, rows), full_frame, starts)
    return {"gpus": gpus, "size": f"{cols}x{rows}", **run.summary(), **first}
