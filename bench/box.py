"""box: the side-by-side box of issue 29. 8 GPUs, each with a rank of 1 trainer and 3 workers (32 real
processes, bench/box_rank.py), every one a compute process of its GPU whose SM % changes every 0.5 s, on a
fake NVML in the monitor's own process (bench/box_world.py). gputui at 1 Hz in a 120x40 pseudo-terminal:
CPU % of one core, bytes/s written to the terminal, peak RSS (VmHWM), first full frame (the median of
bench.shared.FIRST_FRAME_STARTS starts); nvitop the same
on the same box when it is installed (its numbers set the budgets); and where gputui's bytes go, per
widget per tick (bench/ptybytes.py over the captured stream, on the widget layout of the same app run
headless at the same size).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from bench.ptybytes import attribute, by_widget
from bench.shared import ROOT, PtyRun, first_frames, quit_in_pty, start_in_pty, watch_pty

WORLD = ROOT / "bench" / "box_world.py"
RANK = ROOT / "bench" / "box_rank.py"
# The budgets when nvitop is not installed (a 2-core VM), and relative to nvitop's when it is.
ABSOLUTE_CPU_PERCENT, ABSOLUTE_BYTES_PER_S = 1.2, 900
CPU_VS_NVITOP, BYTES_VS_NVITOP = 0.6, 2.0
SPLIT = frozenset({"panes"})  # counted as its charts and bars apart from its text


@contextlib.contextmanager
def ranks(gpus: int, workers: int) -> Iterator[list[list[int]]]:
    """`gpus` ranks of 1 trainer + `workers` workers each; per rank its pids, the trainer's first."""
    read_end, write_end = os.pipe()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        out = []
        for rank in range(gpus):
            argv = ["python", "-IS", RANK.name, "--rank", str(rank), "--workers", str(workers)]
            proc = subprocess.Popen(
                argv, executable=sys.executable, cwd=RANK.parent, stdin=read_end, stdout=subprocess.PIPE
            )
            procs.append(proc)
            assert proc.stdout is not None
            with proc.stdout:
                out.append([proc.pid, *(int(pid) for pid in proc.stdout.readline().split())])
        os.close(read_end)
        read_end = -1
        yield out
    finally:
        if read_end >= 0:
            os.close(read_end)
        os.close(write_end)  # every process of every rank sees end-of-file and exits
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def nvitop_version() -> str | None:
    if importlib.util.find_spec("nvitop") is None:
        return None
    return importlib.metadata.version("nvitop")


def run_tool(
    box: list[list[int]],
    tool: str,
    args: tuple[str, ...],
    full_frame: tuple[bytes, ...],
    size: tuple[int, int],
    warmup: float,
    measure: float,
    capture: bool = False,
) -> PtyRun:
    start = time.monotonic()
    proc, master = start_tool(box, tool, args, size)
    try:
        return watch_pty(proc, master, start, warmup, measure, full_frame, capture)
    finally:
        quit_in_pty(proc, master)


def start_tool(
    box: list[list[int]], tool: str, args: tuple[str, ...], size: tuple[int, int]
) -> tuple[subprocess.Popen[bytes], int]:
    return start_in_pty((), *size, command=[sys.executable, str(WORLD), json.dumps(box), tool, *args])


def layout(box: list[list[int]], args: tuple[str, ...], size: tuple[int, int]) -> list[list[str]]:
    """The name of gputui's top widget under each cell, from the app run headless on the same box (in a
    terminal of the same size all the same: gputui starts only in one)."""
    with tempfile.TemporaryDirectory(prefix="gputui-bench-box-") as tmp:
        out = Path(tmp) / "layout.json"
        env = {"BOX_LAYOUT": str(out), "BOX_SIZE": f"{size[0]}x{size[1]}"}
        command = [sys.executable, str(WORLD), json.dumps(box), "layout", *args]
        proc, master = start_in_pty((), *size, env=env, command=command)
        try:
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                if select.select([master], [], [], 0.1)[0]:
                    with contextlib.suppress(OSError):
                        os.read(master, 65536)
        finally:
            quit_in_pty(proc, master)
        grid: list[list[str]] = json.loads(out.read_text())
        return grid


def bytes_per_tick(run: PtyRun, grid: list[list[str]], interval: float) -> dict[str, float]:
    """Bytes per widget per tick over the run's window, the largest first."""
    ticks = run.seconds / interval
    counts = by_widget(attribute(run.stream), grid, SPLIT)
    return {name: round(n / ticks, 1) for name, n in counts.most_common()}


def bench_box(
    gpus: int = 8,
    workers: int = 3,
    measure: float = 60.0,
    warmup: float = 5.0,
    cols: int = 120,
    rows: int = 40,
    where_bytes_go: bool = True,
    with_nvitop: bool = True,
) -> dict[str, object]:
    size = (cols, rows)
    interval = 1.0
    gputui_args = ("--interval", f"{interval:g}")
    # The full frame: the last GPU's pane and the table's rows are on screen.
    gputui_frame = (f"{gpus - 1} H100".encode(), RANK.name.encode())
    result: dict[str, object] = {"gpus": gpus, "processes": gpus * (1 + workers), "size": f"{cols}x{rows}"}
    with ranks(gpus, workers) as box:
        run = run_tool(box, "gputui", gputui_args, gputui_frame, size, warmup, measure, where_bytes_go)
        result.update(run.summary())
        result.update(first_frames(run, partial(start_tool, box, "gputui", gputui_args, size), gputui_frame))
        version = nvitop_version() if with_nvitop else None
        if version is not None:
            nv_args = ("--monitor", "--interval", f"{interval:g}")
            nv_frame = (RANK.name.encode(),)
            nv = run_tool(box, "nvitop", nv_args, nv_frame, size, warmup, measure)
            nv_starts = first_frames(nv, partial(start_tool, box, "nvitop", nv_args, size), nv_frame)
            result["nvitop"] = {"version": version, **nv.summary(), **nv_starts}
            result.update(_relative_limits(run, nv))
        else:
            result.update(
                limits_from="absolute: nvitop is not installed",
                cpu_limit=ABSOLUTE_CPU_PERCENT,
                bytes_limit=ABSOLUTE_BYTES_PER_S,
            )
        if where_bytes_go:
            result["bytes_per_tick_by_widget"] = bytes_per_tick(run, layout(box, gputui_args, size), interval)
    return result


def _relative_limits(run: PtyRun, nv: PtyRun) -> dict[str, object]:
    mine, theirs = run.summary(), nv.summary()
    cpu, bytes_s = theirs["cpu_percent_of_core"], theirs["bytes_per_s"]
    out: dict[str, object] = {
        "limits_from": f"nvitop on the same box (x{CPU_VS_NVITOP} CPU, x{BYTES_VS_NVITOP} bytes)"
    }
    out["cpu_limit"] = round(CPU_VS_NVITOP * cpu, 2) if cpu is not None else None
    out["bytes_limit"] = round(BYTES_VS_NVITOP * bytes_s) if bytes_s is not None else None
    if cpu and mine["cpu_percent_of_core"] is not None:
        out["cpu_vs_nvitop"] = round(mine["cpu_percent_of_core"] / cpu, 2)
    if bytes_s and mine["bytes_per_s"] is not None:
        out["bytes_vs_nvitop"] = round(mine["bytes_per_s"] / bytes_s, 2)
    return out
