"""The TUI on the real driver: `gputui --interval 1` in a 120x40 pseudo-terminal (as over SSH) for 60 s
while a light CUDA job runs: CPU % of a core, bytes/s, first full frame, peak RSS, the same numbers
`make bench` gives for the demo. Then a screenshot of the same screen (main-120x40.svg)."""

from __future__ import annotations

import asyncio
import os

from bench.gpucheck.common import Result, out_dir, running, smi_csv, until, work_dir, workload
from bench.run import bench_tui

MEASURE_S = float(os.environ.get("GPU_CHECK_TUI_S", "60"))


async def screenshot() -> None:
    from gputui.collect.sampler import Sampler
    from gputui.collect.sources.nvml import NvmlSource
    from gputui.ui.app import GpuTuiApp

    app = GpuTuiApp(Sampler(NvmlSource(xid_events=True)), interval=1.0)
    async with app.run_test(size=(120, 40)) as pilot:
        while app.frames < 1:
            await pilot.pause(0.05)
        await pilot.pause(5.0)  # a few real ticks behind the sparklines
        app.save_screenshot(str(out_dir() / "main-120x40.svg"))


def run(r: Result) -> None:
    name = smi_csv("gpu", ["name"])[0]["name"]
    ready = work_dir() / "tui.ready"
    with running(workload("light", MEASURE_S + 40, ready, "1")):
        until(ready.exists, 40)
        numbers = bench_tui(
            gpus=1,
            warmup=5.0,
            measure=MEASURE_S,
            args=("--interval", "1"),
            full_frame=(name.split()[-1].encode(), b"workloads"),
            starts=1,  # the device's minutes are few: one start says whether the frame comes
        )
        r.number("tui_120x40", numbers)
        r.check(
            "first full frame",
            numbers["first_full_frame_s"] is not None,
            numbers["first_full_frame_s"],
            "the GPU's pane and the job's row on screen",
        )
        cpu = numbers["cpu_percent_of_core"]
        r.check("CPU % of a core at 1 Hz", isinstance(cpu, (int, float)) and cpu <= 5.0, cpu, "<= 5 %")
        rss = numbers["peak_rss_mib"]
        r.check("peak RSS", isinstance(rss, (int, float)) and rss <= 80, rss, "<= 80 MiB")
        asyncio.run(screenshot())
        shot = out_dir() / "main-120x40.svg"
        r.check(
            "screenshot written",
            shot.exists() and shot.stat().st_size > 1000,
            shot.stat().st_size if shot.exists() else None,
            "an SVG",
        )
