"""`make screenshots`: SVGs of the main views, from the demo (seed 0) with five minutes behind it.

The demo runs for real (its processes are real children), but its clock is driven here: five simulated
minutes of history are sampled in a moment, so every picture has full sparklines.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from gputui.collect.demo import DemoSource
from gputui.collect.sampler import Sampler
from gputui.ui.app import GpuTuiApp

OUT = Path(__file__).resolve().parent
HISTORY_S = 330


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


async def shoot(name: str, size: tuple[int, int], gpus: int, keys: tuple[str, ...] = ()) -> None:
    clock = Clock()
    sampler = Sampler(DemoSource(gpus=gpus, seed=0, clock=clock, start_at=600.0), clock=clock,
                      monotonic=clock)
    app = GpuTuiApp(sampler, interval=1.0)
    sampler.open()
    try:
        for _ in range(HISTORY_S):
            app.history.add(sampler.tick())
            clock.t += 1.0
        async with app.run_test(size=size) as pilot:
            while app.frames < 1:
                await pilot.pause(0.05)
            for key in keys:
                await pilot.press(key)
                await pilot.pause(0.3)
            await pilot.pause(0.3)
            app.save_screenshot(str(OUT / f"{name}.svg"))
    finally:
        sampler.close()
    print(f"screenshots/{name}.svg")


async def main() -> None:
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    await shoot("main-120x40", (120, 40), gpus=8)
    await shoot("compact-80x24", (80, 24), gpus=4)
    await shoot("detail", (120, 40), gpus=4, keys=("enter",))
    await shoot("help", (120, 40), gpus=4, keys=("question_mark",))


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
