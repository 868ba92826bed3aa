"""The bench's first full frame (bench.shared.first_frames): the median of several real starts in a
pseudo-terminal, each one listed, and unknown when one start never drew its frame."""

from __future__ import annotations

import statistics
import subprocess
import sys
from functools import partial

from bench.shared import PtyRun, first_frame_only, first_frames, start_in_pty

# Draws its "frame" in two writes after `delay` seconds, then waits for `q` (the terminal is raw, as a
# full-screen program's is), as bench.shared.quit_in_pty quits it.
PROGRAM = (
    "import os, sys, time, tty\n"
    "tty.setraw(0)\n"
    "time.sleep(float(sys.argv[1]))\n"
    "os.write(1, b'GPU 7 ')\n"
    "os.write(1, b'train.py')\n"
    "while os.read(0, 1) != b'q':\n"
    "    pass\n"
)
FRAME = (b"GPU 7", b"train.py")


def _start(delay: float) -> tuple[subprocess.Popen[bytes], int]:
    return start_in_pty((), 80, 24, command=[sys.executable, "-c", PROGRAM, str(delay)])


def _run(first_frame_s: float | None) -> PtyRun:
    return PtyRun(10.0, 1000, 1.0, 30 * 1024, 0.1, first_frame_s, b"")


def test_a_start_is_timed_to_its_whole_frame() -> None:
    seconds = first_frame_only(partial(_start, 0.3), FRAME)
    assert seconds is not None and 0.3 <= seconds < 5.0


def test_the_first_frame_is_the_median_of_the_starts_and_each_is_listed() -> None:
    out = first_frames(_run(9.0), partial(_start, 0.0), FRAME, starts=3)
    starts = out["first_full_frame_starts_s"]
    assert isinstance(starts, list) and len(starts) == 3 and starts[0] == 9.0
    assert all(isinstance(s, float) and s < 5.0 for s in starts[1:])
    # The slow measured run is the slowest, not the median: one slow start moves the median by nothing.
    assert out["first_full_frame_s"] == round(statistics.median(starts), 3) < 9.0
    assert out["first_full_frame_slowest_s"] == 9.0


def _start_and_die() -> tuple[subprocess.Popen[bytes], int]:
    return start_in_pty((), 80, 24, command=[sys.executable, "-c", "raise SystemExit(1)"])


def test_a_start_that_never_draws_its_frame_makes_the_median_unknown() -> None:
    assert first_frame_only(_start_and_die, FRAME) is None
    out = first_frames(_run(0.2), _start_and_die, FRAME, starts=2)
    assert out["first_full_frame_starts_s"] == [0.2, None]
    assert out["first_full_frame_s"] is None  # the budget fails: not the median of the starts that drew
    assert out["first_full_frame_slowest_s"] == 0.2
