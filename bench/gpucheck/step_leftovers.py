"""Real leftovers: a trainer holding 2 GiB forks a worker (inheriting its device files), and is SIGKILLed.
What the driver keeps, whether gputui finds the worker and classes it an orphan holding the GPU, and
whether killing it through gputui (pid and create time, as the kill dialog sends) frees the memory."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from bench.gpucheck.common import MIB, Result, python, spawn, until, work_dir
from gputui.actions import signals
from gputui.collect.sampler import Sampler
from gputui.collect.sources.nvml import NvmlSource

JOB = Path(__file__).with_name("leftover_job.py")
GIB = 2.0


def used_mib(sampler: Sampler) -> float | None:
    snap = sampler.tick()
    g = snap.gpus[0]
    return None if g.mem_used is None else g.mem_used / MIB


def run(r: Result) -> None:
    d = work_dir() / "leftover"
    d.mkdir(parents=True)
    with Sampler(NvmlSource(), slow_interval=1.0) as sampler:
        base = used_mib(sampler)
        job = spawn([python(), str(JOB), str(d), str(GIB)], log=d / "log")
        if not until((d / "pids").exists, 60):
            r.check("trainer and worker start", False, None, "pids written")
            return
        trainer, worker = map(int, (d / "pids").read_text().split())
        loaded = used_mib(sampler)
        r.number("used_mib", {"before": base, "with_trainer": loaded})
        os.kill(trainer, signal.SIGKILL)
        job.wait(10)  # reaped: the trainer is gone, its worker reparented
        until(lambda: psutil.Process(worker).ppid() != trainer, 5)
        time.sleep(1.0)
        snap = sampler.tick()
        after_kill = used_mib(sampler)
        r.number("used_mib_after_trainer_killed", after_kill)
        r.number(
            "nvml_processes_after_trainer_killed",
            [(p.pid, p.kinds, p.used_memory) for p in snap.processes if p.kinds],
        )
        kept = after_kill is not None and base is not None and after_kill - base > GIB * 1024 * 0.9
        r.note(
            f"after SIGKILL of the trainer the driver {'keeps' if kept else 'freed'} its {GIB:g} GiB "
            f"while its forked worker holds the device files (used {after_kill} MiB, baseline {base} MiB)"
        )
        row = next((p for p in snap.processes if p.pid == worker), None)
        r.check(
            "the worker is found and classed an orphan holding the GPU",
            row is not None and row.category == "orphan" and bool(row.devices),
            None if row is None else (row.category, row.reason, row.devices, row.ppid),
            "category orphan, device files listed",
        )
        una = snap.unaccounted_memory.get(0)
        r.number("unaccounted_mib", None if una is None else una / MIB)
        if kept:
            r.check(
                "the kept memory shows as unaccounted",
                una is not None and una / MIB >= GIB * 1024 * 0.9,
                None if una is None else una / MIB,
                f">= {GIB * 1024 * 0.9:.0f} MiB",
            )
        target = signals.target_for(worker)
        outcomes = signals.send([target], "SIGTERM") if target is not None else []
        r.check(
            "SIGTERM through gputui reaches the worker",
            bool(outcomes) and outcomes[0].ok,
            [str(o) for o in outcomes],
            "sent",
        )
        gone = until(lambda: not psutil.pid_exists(worker) or psutil.Process(worker).status() == "zombie", 10)
        t0 = time.monotonic()
        freed = until(lambda: (used_mib(sampler) or 1e12) - (base or 0) < 64, 15, every=0.25)
        r.number("memory_freed_after_s", round(time.monotonic() - t0, 2) if freed else None)
        r.check("the worker is gone", bool(gone), gone, "gone within 10 s")
        r.check("NVML shows the memory freed", bool(freed), used_mib(sampler), f"within 64 MiB of {base}")
