"""The everyday box of issue 26, fixed: 8 H100s under torchrun (8 ranks, 3 DataLoader workers each), two
orphaned workers of a crashed run holding GPU 5 (9.5 GiB no process accounts for), a notebook kernel idle
on GPU 0, a thermal slowdown on GPU 3 from 30 s before the screen opens, and a memory spike to 76.4 GiB
for 3 s every 30 s (GPU 6). The GPUs serve GPM (the demo's): SM activity ~90 % and tensor ~60 % while a
rank trains, and rank 2 is starved for data as the screen opens, as twice before in its sparkline
(STARVED_GPU: NVML's utilization ~95 %, SM activity ~6 %).
Built on tests/ui/world.py's demo (seed 0, fixed clock), so every run draws the same screen.

`screen_text(app)` is what the terminal shows, one string a row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from textual.app import App

from gputui.collect.sources import demo
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import GPM_RATIOS, GpmMetrics, GpuSample, HostProcess, ProcessRow, Snapshot
from gputui.ui.app import GpuTuiApp
from tests.builders import holder_row, process_row
from tests.ui import world
from tests.ui.world import GIB, START

GPUS = 8
SECONDS = 360
HISTORY = 300  # put into the app's History before it starts: five minutes of sparklines at once
ORPHANS = (23401, 23402)  # a crashed finetune's workers, parent gone, still holding /dev/nvidia5
ORPHAN_GPU = 5
UNACCOUNTED = int(9.5 * GIB)
NOTEBOOK = 31337
SPIKE_GPU = 6  # (its memory sits at 56 %: the spike to 96 % stands out)
SPIKE = int(76.4 * GIB)
HOT_GPU = 3
STARVED_GPU = demo.STARVED_GPU
TORCHRUN = "torchrun --nnodes 1 --nproc-per-node 8 --rdzv-endpoint localhost:29500 train.py"


def command(rank: int) -> str:
    return (
        "/opt/conda/envs/llm/bin/python -u train.py --config configs/llama-7b.yaml "
        f"--local-rank {rank} --batch-size 16"
    )


def _gpu(g: GpuSample, k: int) -> GpuSample:
    if g.index == ORPHAN_GPU and g.mem_used is not None:
        return dataclasses.replace(g, mem_used=min(g.mem_total or 0, g.mem_used + UNACCOUNTED) or None)
    if g.index == SPIKE_GPU and k % 30 in (10, 11, 12):
        return dataclasses.replace(g, mem_used=SPIKE)
    if g.index == HOT_GPU and k >= HISTORY - 30:  # a thermal slowdown: the reason its util dipped
        util = min(g.util_gpu or 0, 41)
        return dataclasses.replace(
            g,
            temperature=91,
            sm_clock=1155,
            throttle_reasons=("hw_thermal", "sw_thermal"),
            util_gpu=util,
            gpm=_scaled(g.gpm, util / g.util_gpu if g.util_gpu else 1.0),
        )
    return g


def _scaled(m: GpmMetrics | None, k: float) -> GpmMetrics | None:
    """GPM's ratios down with the utilization they went with."""
    if m is None:
        return None
    ratios = {name: getattr(m, name) for name in GPM_RATIOS}
    return dataclasses.replace(m, **{name: v * k for name, v in ratios.items() if v is not None})


def _rows(snap: Snapshot) -> tuple[ProcessRow, ...]:
    rows = []
    for r in snap.processes:
        if (r.category == "ok" and r.pid == world.trainer_pid(r.gpu or 0)) or r.category == "worker":
            r = dataclasses.replace(r, command=command(r.gpu or 0))
        rows.append(r)
    rows.append(
        process_row(
            0,
            NOTEBOOK,
            used_memory=2 * GIB,
            sm_util=0,
            mem_util=0,
            user="root",
            name="python",
            command="/usr/bin/python3 -m ipykernel_launcher -f /root/.local/share/jupyter/runtime/k-7.json",
            cpu_percent=0.0,
            rss=GIB,
            create_time=START - 86400,
            state="sleeping",
            ppid=1,
        )
    )
    for pid in ORPHANS:
        rows.append(
            holder_row(
                ORPHAN_GPU,
                pid,
                user="carol",
                name="pt_data_worker",
                command="python finetune.py --data /datasets/sft --local-rank 5",
                cpu_percent=0.0,
                rss=3 * GIB,
                create_time=START - 7200,
                state="sleeping",
                ppid=1,
                devices=(f"/dev/nvidia{ORPHAN_GPU}", "/dev/nvidiactl", "/dev/nvidia-uvm"),
                category="orphan",
                reason="its parent has ended and it still holds a GPU's device file",
            )
        )
    return tuple(rows)


def _hosts(hosts: tuple[HostProcess, ...]) -> tuple[HostProcess, ...]:
    out = []
    for h in hosts:
        if h.pid == world.LAUNCHER:
            h = dataclasses.replace(h, command=TORCHRUN)
        elif h.name == "pt_data_worker":
            gpu = ((h.ppid or 0) - world.trainer_pid(0)) // 10
            h = dataclasses.replace(h, command=command(gpu))
        out.append(h)
    return tuple(out)


def snapshots() -> list[Snapshot]:
    out = []
    for k, snap in enumerate(world.snapshots(GPUS, SECONDS, weird=False, workers=3, holding=True)):
        out.append(
            dataclasses.replace(
                snap,
                gpus=tuple(_gpu(g, k) for g in snap.gpus),
                processes=_rows(snap),
                host_processes=_hosts(snap.host_processes),
                unaccounted_memory={ORPHAN_GPU: UNACCOUNTED},
            )
        )
    return out


def app(interval: float = 1.0) -> GpuTuiApp:
    snaps = snapshots()
    box = GpuTuiApp(ReplaySampler(snaps[HISTORY:]), interval=interval, devices_dir=Path("/nonexistent"))
    for snap in snaps[:HISTORY]:
        box.ingest(snap)
    return box


def screen_text(app: App[Any]) -> list[str]:
    """The terminal's rows as text, as a user reads them."""
    update = app.screen._compositor.render_update(full=True)
    strips = getattr(update, "strips", [])  # a row: the strips of the widgets side by side in it
    return ["".join(strip.text for strip in row) for row in strips]
