"""`make screenshots`: SVGs of the main views, from the demo (seed 0) with five minutes behind it.

The demo runs for real (its processes are real children), but its clock is driven here: five simulated
minutes of history are sampled in a moment, so every picture has full sparklines.
"""

from __future__ import annotations

import asyncio
import json
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


async def shoot(name: str, size: tuple[int, int], gpus: int, keys: tuple[str, ...] = (),
                agent: bool = False) -> None:
    clock = Clock()
    sampler = Sampler(DemoSource(gpus=gpus, seed=0, clock=clock, start_at=600.0), clock=clock,
                      monotonic=clock)
    if agent:  # the demo's trainer 0 "runs" an agent: a reply recorded in tests/fixtures
        sampler.agents = _RecordedAgent(sampler)  # type: ignore[assignment]
    app = GpuTuiApp(sampler, interval=1.0)
    sampler.open()
    try:
        for _ in range(HISTORY_S):
            app.ingest(sampler.tick())
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


class _RecordedAgent:
    """Answers for trainer 0 with the recorded reply of a CUDA training process."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.reply = json.loads((OUT.parent / "tests" / "fixtures" / "agent_stats_cuda.json").read_text())

    def poll(self) -> dict[int, dict[str, object]]:
        trainers = getattr(self.sampler.source, "trainers", [])
        return {trainers[0].pid: self.reply} if trainers else {}

    def act(self, pid: int, op: str, **params: object) -> dict[str, object]:
        return {"ok": False, "error": "a recorded agent takes no actions"}


async def main() -> None:
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    await shoot("main-120x40", (120, 40), gpus=8)
    await shoot("compact-80x24", (80, 24), gpus=4)
    await shoot("detail", (120, 40), gpus=4, keys=("enter",))
    await shoot("help", (120, 40), gpus=4, keys=("question_mark",))
    await shoot("allocator", (120, 40), gpus=4, keys=("a",), agent=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
