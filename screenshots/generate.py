"""`make screenshots`: SVGs of the main views, from the demo (seed 0) with five minutes behind it, and
of the fleet view over a made-up cluster (seeded).

The demo runs for real (its processes are real children), but its clock is driven here: five simulated
minutes of history are sampled in a moment, so every picture has full sparklines.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

from gputui.collect.agents import reply as agent_reply
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource
from gputui.export.fleet import (
    FleetAgent,
    FleetGpu,
    FleetHost,
    FleetProcess,
    FleetReader,
    FleetView,
    HostDetail,
)
from gputui.export.promql import Prometheus
from gputui.model import AgentReport
from gputui.ui.app import GpuTuiApp
from gputui.ui.fleet_app import FleetApp

OUT = Path(__file__).resolve().parent
HISTORY_S = 330


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


async def shoot(
    name: str,
    size: tuple[int, int],
    gpus: int,
    keys: tuple[str, ...] = (),
    agent: bool = False,
    faults: bool = False,
) -> None:
    clock = Clock()
    demo = DemoSource(gpus=gpus, seed=0, clock=clock, start_at=600.0, faults=faults)
    sampler = Sampler(demo, clock=clock, monotonic=clock)
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

    def poll(self) -> dict[int, AgentReport]:
        trainers = getattr(self.sampler.source, "trainers", [])
        if not trainers:
            return {}
        pid = trainers[0].pid
        return {pid: agent_reply.parse(pid, {**self.reply, "pid": pid})}

    def act(self, pid: int, op: str, **params: object) -> dict[str, object]:
        return {"ok": False, "message": "a recorded agent takes no actions"}


class _FleetOnRecord(FleetReader):
    """The fleet view of a made-up cluster (seeded), as if read from Prometheus: no server needed."""

    def __init__(self, now: float) -> None:
        super().__init__(Prometheus("http://prometheus:9090"), window=900.0)
        rng = random.Random(0)
        hosts = []
        for h in range(14):
            name = f"train-{h + 1:02d}"
            dcgm_only = h in (10, 11)  # scraped from a stock dcgm-exporter
            idle = h in (4, 12)
            gpus = []
            for g in range(8):
                level = 3.0 if idle else rng.uniform(80, 98)
                series = tuple(
                    max(
                        0.0,
                        min(100.0, level + rng.gauss(0, 3) - (60 if not idle and rng.random() < 0.01 else 0)),
                    )
                    for _ in range(self.points)
                )
                used = 2000.0 if idle else rng.uniform(50_000, 78_000)
                gpus.append(
                    FleetGpu(
                        str(g),
                        f"GPU-{h:02d}{g:02d}",
                        "NVIDIA H100 80GB HBM3",
                        util=series[-1],
                        mem_used=used,
                        mem_free=81_559.0 - used,
                        temperature=rng.uniform(40, 75),
                        power=80.0 if idle else rng.uniform(450, 690),
                        series=series,
                        dips=None if dcgm_only else float(rng.randint(0, 3) * (not idle)),
                    )
                )
            zombies = {"defunct": 1 if h == 4 else 0, "orphan": 1 if h == 2 else 0, "nvml-only": int(h == 2)}
            hosts.append(
                FleetHost(
                    name,
                    f"{name}:9400",
                    "gpu",
                    tuple(gpus),
                    last_seen=now,
                    gputui=not dcgm_only,
                    zombies={} if dcgm_only else zombies,
                )
            )
        hosts[7] = replace(hosts[7], stale=True, down=True, last_seen=now - 95)
        detail = HostDetail(
            "train-03",
            (
                FleetProcess(
                    "0", "41877", "alice", "python train.py --config llama-7b.yaml", "ok", 71.2 * 2**30
                ),
                FleetProcess(
                    "1", "41878", "alice", "python train.py --config llama-7b.yaml", "ok", 70.9 * 2**30
                ),
                FleetProcess("2", "39011", "bob", "python eval.py --ckpt last.pt", "orphan", 9.5 * 2**30),
                FleetProcess("3", "40002", "", "", "nvml-only", 1.0 * 2**30),
            ),
            (
                FleetAgent(
                    "41877",
                    "python train.py --config llama-7b.yaml",
                    "0",
                    {
                        "allocated_bytes": 52.6e9,
                        "reserved_bytes": 66.5e9,
                        "fragmentation_percent": 84.6,
                        "alloc_retries_total": 3.0,
                        "ooms_total": 0.0,
                    },
                ),
            ),
            {str(g): tuple(min(90.0, 60.0 + 4 * g + i / 20) for i in range(self.points)) for g in range(8)},
        )
        self.fixed = FleetView(
            tuple(hosts), start=now - 900.0, end=now, step=self.step, fetched_at=now, queries=5
        )
        self.detail = detail

    def refresh(self) -> FleetView:
        self.view = replace(
            self.fixed,
            detail=replace(self.detail, host=self.focus) if self.focus else None,
            queries=8 if self.focus else 5,
        )
        return self.view


async def shoot_fleet(name: str, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    app = FleetApp(_FleetOnRecord(time.time()), interval=3600.0)
    async with app.run_test(size=size) as pilot:
        while app.frames < 1:
            await pilot.pause(0.05)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.3)
        await pilot.pause(0.3)
        app.save_screenshot(str(OUT / f"{name}.svg"))
    print(f"screenshots/{name}.svg")


async def main() -> None:
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    await shoot_fleet("fleet-120x40", (120, 40))
    await shoot_fleet("fleet-host", (120, 40), keys=("n", "home", "down", "down", "enter"))  # train-03
    await shoot("main-120x40", (120, 40), gpus=8)
    await shoot("compact-80x24", (80, 24), gpus=4)
    await shoot("detail", (120, 40), gpus=4, keys=("enter",))
    await shoot("help", (120, 40), gpus=4, keys=("question_mark",))
    await shoot("allocator", (120, 40), gpus=4, keys=("a",), agent=True)
    # --demo-faults: GPU 1's health mark, GPU 2's x8 link, GPU 3's leak; then Events lists them all.
    await shoot("health-120x40", (120, 40), gpus=4, faults=True)
    await shoot("events-health", (120, 40), gpus=4, keys=("e",), faults=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
