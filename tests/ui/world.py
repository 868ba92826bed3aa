"""A fixed world for UI tests: the demo's simulated GPUs (seed 0, fixed clock) with made-up, stable
processes, so snapshots and assertions are the same on every run and machine."""

from __future__ import annotations

from gputui.collect.sources.demo import DemoSource
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import GpuProcess, HostProcess, HostStats, ProcessRow, Snapshot, unaccounted_memory
from tests.builders import holder_row, nvml_only_row, process_row

START = 1_795_000_000.0  # the wall clock of the first snapshot
LAUNCHER = 4000
GHOST = 48213
WEIRD_PID = 4999
WEIRD_COMMAND = "python eval.py --tag [/] [bold]not bold[/bold] \x1b[31mred\x07 [link=x]y"
GIB = 1 << 30


def trainer_pid(gpu: int) -> int:
    return 4101 + 10 * gpu


def _row(gp: GpuProcess) -> ProcessRow:
    if gp.pid == GHOST:
        return nvml_only_row(
            gp.gpu,
            gp.pid,
            kinds=gp.kinds,
            used_memory=gp.used_memory,
            sm_util=gp.sm_util,
            mem_util=gp.mem_util,
        )
    return process_row(
        gp.gpu,
        gp.pid,
        kinds=gp.kinds,
        used_memory=gp.used_memory,
        sm_util=gp.sm_util,
        mem_util=gp.mem_util,
        user="alice" if gp.gpu % 2 == 0 else "bob",
        name="python",
        command=f"python train.py --config configs/llama-7b.yaml --rank {gp.gpu}",
        cpu_percent=97.0 + gp.gpu,
        rss=(11 + gp.gpu) * GIB,
        create_time=START - 5400 - gp.gpu,
        state="running",
        ppid=LAUNCHER,
        gpu_instance=gp.gpu_instance,
        compute_instance=gp.compute_instance,
    )


def _worker_row(h: HostProcess) -> ProcessRow:
    gpu = ((h.ppid or 0) - trainer_pid(0)) // 10  # its rank's GPU
    return holder_row(
        gpu,
        h.pid,
        user=h.user,
        name=h.name,
        command=h.command,
        cpu_percent=h.cpu_percent,
        rss=h.rss,
        create_time=h.create_time,
        state=h.state,
        ppid=h.ppid,
        devices=(f"/dev/nvidia{gpu}", "/dev/nvidiactl", "/dev/nvidia-uvm"),
        category="worker",
        reason=f"a child of GPU process {h.ppid}",
    )


def _hosts(gpus: int, workers: int = 2) -> tuple[HostProcess, ...]:
    hosts = [
        HostProcess(
            pid=LAUNCHER,
            ppid=1,
            user="alice",
            name="torchrun",
            command="torchrun --nproc-per-node 4 train.py",
            cpu_percent=0.3,
            rss=GIB // 4,
            create_time=START - 5500,
            state="sleeping",
        )
    ]
    for g in range(gpus):
        for w in range(workers):
            hosts.append(
                HostProcess(
                    pid=trainer_pid(g) + 1 + w,
                    ppid=trainer_pid(g),
                    user="alice" if g % 2 == 0 else "bob",
                    name="pt_data_worker",
                    command=f"python train.py --config configs/llama-7b.yaml --rank {g}",
                    cpu_percent=55.0,
                    rss=2 * GIB,
                    create_time=START - 5300,
                    state="sleeping",
                )
            )
    return tuple(hosts)


def snapshots(
    gpus: int = 4,
    seconds: int = 360,
    weird: bool = True,
    unaccounted: bool = False,
    workers: int = 2,
    holding: bool = False,
    mig: bool = False,
) -> list[Snapshot]:
    """`seconds` + 1 snapshots, one a second, of a job that has been running for a while, each rank with
    `workers` DataLoader workers; `holding`: the workers hold their rank's device file (forked after CUDA
    started, as real ones are), so they are rows of class worker. With `unaccounted`, GPU 0 has 1.5 GiB that
    no process accounts for (the demo's leak), which adds a row. With `mig`, GPU 0 is MIG-enabled (the
    demo's MIG_LAYOUT) and its trainer runs in instance 1/0."""
    demo = DemoSource(gpus=gpus, seed=0, mig=mig)
    demo.ghost_pid = GHOST
    pids = [trainer_pid(g) for g in range(gpus)]
    hosts = _hosts(gpus, workers)
    out = []
    for k in range(seconds + 1):
        reading = demo.reading_at(600.0 + k, slow=k % 5 == 0, trainer_pids=pids)
        procs = list(reading.processes)
        if weird and gpus > 1:
            procs.append(GpuProcess(gpu=1, pid=WEIRD_PID, kinds="C", used_memory=GIB, sm_util=3, mem_util=1))
        rows = [_row(p) for p in procs]
        if weird and gpus > 1:
            rows[-1] = process_row(
                1,
                WEIRD_PID,
                used_memory=GIB,
                sm_util=3,
                mem_util=1,
                user="mallory",
                name="python",
                command=WEIRD_COMMAND,
                cpu_percent=1.5,
                rss=GIB,
                create_time=START - 60,
                state="sleeping",
                ppid=1,
            )
        if holding:
            rows += [_worker_row(h) for h in hosts if h.name == "pt_data_worker"]
        out.append(
            Snapshot(
                time=START + k,
                hostname="train-box-01",
                source="demo",
                driver_version="580.95.05",
                nvml_version="13.580.95.05",
                cuda_driver_version="13.0",
                gpus=reading.gpus,
                processes=tuple(rows),
                unaccounted_memory=unaccounted_memory(reading.gpus, tuple(procs)) if unaccounted else {},
                host_processes=hosts,
                host=HostStats(
                    cpu_percent=38.0 + (k % 7),
                    cpu_count=96,
                    mem_total=2048 * GIB,
                    mem_used=(612 + k % 3) * GIB,
                    swap_total=8 * GIB,
                    swap_used=0,
                    load=(36.2, 35.8, 33.1),
                    uptime=9 * 86400 + 4 * 3600 + k,
                ),
            )
        )
    return out


def sampler(
    gpus: int = 4,
    seconds: int = 360,
    history: int = 360,
    weird: bool = True,
    unaccounted: bool = False,
    workers: int = 2,
    holding: bool = False,
    mig: bool = False,
) -> tuple[ReplaySampler, list[Snapshot]]:
    """A ReplaySampler whose first `history` snapshots are meant to be put into the app's History
    before it starts (see `make_app`), so sparklines have five minutes behind them at once."""
    snaps = snapshots(gpus, seconds, weird, unaccounted, workers, holding, mig)
    return ReplaySampler(snaps[history:]), snaps[:history]
