"""The demo source: simulated GPUs whose processes are real.

The GPU readings are simulated (training epochs at ~95 % with short data-loader stalls and longer
evaluation dips; memory ramping up at start), deterministic for a seed and a clock. The GPUs are H100s, so
they serve GPM (SM, tensor and DRAM activity) as NVML's reader takes it: a healthy bf16 rank keeps its SMs
~90 % active and its tensor cores ~60 %; one rank (STARVED_GPU) is starved for data part of the time, so
NVML's utilization still reads ~95 % while its SMs sit nearly empty; a stall, an evaluation or an idle GPU
is low on both.

The processes are real children: one trainer per GPU with data-loader workers, one orphaned worker whose
parent has exited, one defunct child, all holding stand-in device files (nvidia0..N-1, nvidiactl,
nvidia-uvm in a private temporary directory) exactly as CUDA processes hold /dev/nvidia*. So the process
join, the holder scan and kill all run on real processes.

Nothing outlives gputui: every child watches a pipe whose only writer is gputui, and exits at its
end-of-file, which the kernel delivers however gputui ends (exit, signal, crash, SIGKILL).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

import psutil

from gputui.collect.sources.base import Reading, SourceInfo, SourceUnavailable
from gputui.model import (
    GPM_MIN_INTERVAL_S,
    GPM_MODES,
    GPM_OFF_NOTE,
    GPM_RATES,
    GPM_RATIOS,
    GpmMetrics,
    GpuHealth,
    GpuProcess,
    GpuSample,
    MigInstance,
    XidEvent,
)


class _SlowFields(TypedDict):
    """The GpuSample fields NVML refreshes only every few seconds."""

    temperature: int
    sm_clock: int
    sm_clock_max: int
    mem_clock: int
    mem_clock_max: int
    pstate: int
    throttle_reasons: tuple[str, ...]
    enc_util: int
    dec_util: int


MAX_GPUS = 16
GIB = 1 << 30
_TOTAL = 81559 * (1 << 20)  # an H100 80GB HBM3 as NVML reports it
_RESERVED = 515 * (1 << 20)
_CHILD = Path(__file__).with_name("demo_train.py")
_RAMP_S = 10.0  # warm-up: memory climbs, utilization follows
_ALLREDUCE_BPS = 75e9  # NVLink bytes/s each way while training
MIB = 1 << 20
LEAKY_GPU = 3  # its trainer leaks after the warm-up: the memory forecast has something to show
LEAK_FROM_S = 60.0
LEAK_BPS = 120 * MIB / 60.0  # 120 MiB/min
# With faults=True: from FAULT_AT_S on, FAULTY_GPU has had an uncorrectable memory error that was
# contained (Xid 94) and whose row waits for a reset to be remapped (Xid 63, remap pending); the PCIe link
# of NARROW_GPU trained at x8 of x16.
FAULTY_GPU, NARROW_GPU = 1, 2
FAULT_AT_S = 90.0
FAULT_XIDS = (94, 63)
# With mig=True, GPU 0 is split as an H100 80GB can be (sizes as nvidia-smi mig -lgip lists them):
# (GPU instance, compute instance, profile, memory). Its trainer runs in the first.
MIG_LAYOUT = ((1, 0, "3g.40gb", 40192 * MIB), (5, 0, "2g.20gb", 20224 * MIB), (13, 0, "1g.10gb", 9984 * MIB))
# Of an H100's 7 compute slices and 8 memory slices, what each of MIG_LAYOUT's instances has: a GPU's GPM
# ratio is its instances' weighted by their share of the SMs (DRAM: of the memory).
MIG_SLICES = ((3, 4), (2, 2), (1, 1))
# For STARVED_FOR_S of every STARVED_EVERY_S from STARVED_FROM_S on (a one-shot reading of the demo, at
# 120 s, falls in the first stretch), this rank's data loader cannot keep up (a slow shard): between
# batches the trainer runs a loop of tiny kernels, so a kernel is nearly always running (NVML's utilization
# ~95 %) while its SMs are nearly empty (GPM: SM active ~6 %). Only GPM shows it: a dip on SM activity,
# and `busy but starved` on screen.
STARVED_GPU = 2
STARVED_EVERY_S, STARVED_FROM_S, STARVED_FOR_S = 130.0, 100.0, 45.0
POWER_LIMIT_MAX = 700.0  # an H100 SXM's highest settable power limit
# open() takes the first sample as NvmlSource.open does, dated this much earlier: a one-shot reading's
# wait for its GPM interval (gputui.commands.GPM_ONESHOT_S) is simulated, not slept.
GPM_PRIMED_S = 0.1


# GPM per stage of a trainer: (mean, spread) in percent of SM active, SM occupancy, tensor (all HMMA: bf16),
# DRAM, fp16, fp32 and integer pipes; the level drifts within the spread every GPM_DRIFT_S. A healthy bf16
# step keeps the SMs ~92 % active at ~50 % occupancy (big GEMM blocks) with the tensor cores ~60 %; the
# starved rank's tiny kernels leave them nearly empty.
GPM_DRIFT_S = 10.0
GPM_LEVELS: dict[str, tuple[tuple[float, float], ...]] = {
    "train": ((92.0, 3.0), (50.0, 6.0), (60.0, 7.0), (50.0, 7.0), (6.0, 2.0), (12.0, 3.0), (9.0, 3.0)),
    "starved": ((6.0, 2.0), (3.0, 1.0), (0.4, 0.4), (3.0, 1.0), (0.3, 0.3), (1.0, 0.5), (1.0, 0.5)),
    "eval": ((14.0, 4.0), (10.0, 3.0), (4.0, 2.0), (8.0, 3.0), (1.0, 0.5), (3.0, 1.0), (3.0, 1.0)),
    "stall": ((4.0, 2.0), (2.0, 1.0), (0.2, 0.2), (3.0, 1.0), (0.1, 0.1), (0.5, 0.3), (0.5, 0.3)),
}


class _Sim:
    """One simulated GPU: its timeline is a pure function of (seed, index, seconds since start)."""

    def __init__(self, seed: int, index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        self.seed, self.index = seed, index
        self.epoch = rng.uniform(50.0, 80.0)
        self.eval = rng.uniform(6.0, 10.0)
        self.phase = rng.uniform(0.0, self.epoch)
        # Data-loader stalls: a few short dips at fixed points of each epoch.
        self.stalls = sorted(
            (rng.uniform(5.0, self.epoch - self.eval - 5.0), rng.uniform(2.0, 3.5))
            for _ in range(rng.randint(2, 3))
        )
        self.target_mem = int(rng.uniform(0.55, 0.9) * _TOTAL)
        # The leaky trainer starts near the top, so its GPU fills within the hour (~50 min).
        self.leaks = index == LEAKY_GPU
        if self.leaks:
            self.target_mem = _TOTAL - 7 * GIB
        self.power_cap = 500.0 if index == 3 else 700.0  # GPU 3 runs power-capped: it throttles
        self.uuid = "GPU-" + "-".join(f"{rng.getrandbits(b):0{b // 4}x}" for b in (32, 16, 16, 16, 48))
        self.ended_at: float | None = None  # when its trainer ended: from then on the GPU idles
        self.starved = index == STARVED_GPU
        # noise(): the seeded draws of this second and of the one before (see there)
        self._noise_second = -1
        self._noise: dict[str, float] = {}
        self._noise_last: dict[str, float] = {}

    def noise(self, t: float, spread: float, salt: str = "") -> float:
        # Random.uniform(-spread, spread) of a Random seeded per (GPU, second, salt): the seeded draw is
        # kept for the second (seeding is most of a demo tick's cost), the arithmetic is uniform's own.
        second = int(t)
        if second != self._noise_second:
            self._noise_second, self._noise_last, self._noise = second, self._noise, {}
        key = f"{self.seed}:{self.index}:{second}{salt}"
        draw = self._noise.get(key)
        if draw is None:
            draw = self._noise_last.get(key)
            if draw is None:
                draw = random.Random(key).random()
            self._noise[key] = draw
        return -spread + (spread - -spread) * draw

    def stage(self, t: float) -> str:
        """Where the trainer is at `t`: train, eval, stall (the data loader cannot keep up) or ended."""
        if self.ended_at is not None and t >= self.ended_at:
            return "ended"
        pos = (t + self.phase) % self.epoch
        if pos > self.epoch - self.eval:
            return "eval"
        if any(s <= pos < s + d for s, d in self.stalls):
            return "stall"
        return "train"

    def util(self, t: float) -> float:
        stage = self.stage(t)
        if stage == "ended":
            return 0.0
        ramp = min(1.0, t / _RAMP_S)
        if stage == "eval":
            level = 18.0 + self.noise(t, 8.0)  # evaluation: small batches, CPU-side metrics
        elif stage == "stall":
            level = 22.0 + self.noise(t, 10.0)
        else:
            level = 95.0 + self.noise(t, 3.0)
        return _percent(level * (0.3 + 0.7 * ramp))

    def starving(self, t: float) -> bool:
        """Training, on the starved rank, while its loader lags: kernels all the time, almost no work in
        them."""
        lagging = t >= STARVED_FROM_S and (t - STARVED_FROM_S) % STARVED_EVERY_S < STARVED_FOR_S
        return self.starved and lagging and self.stage(t) == "train"

    def load(self, t: float) -> float:
        """How hard the GPU works, 0..1, for its power draw: its utilization, but a starved loop's tiny
        kernels draw little."""
        return self.util(t) / 100.0 * (0.2 if self.starving(t) else 1.0)

    def pcie(self, t: float) -> tuple[int, int]:
        """(rx, tx) bytes/s over PCIe. Each training step's batch comes from the host (a few hundred MB/s
        of a language model's tokens and masks), little goes back (losses, logs); evaluation sends its
        metrics back; a stalled or starved trainer gets only what its data loader makes."""
        stage = self.stage(t)
        if stage == "ended":
            return 0, 0
        rx, tx = {"train": (4.5e8, 4e7), "eval": (1.5e8, 6e7), "stall": (3e7, 5e6)}[stage]
        if self.starving(t):
            rx, tx = 6e7, 1e7
        elif stage == "train":
            ramp = 0.3 + 0.7 * min(1.0, t / _RAMP_S)
            rx, tx = rx * ramp, tx * ramp
        return round(rx * (1 + self.noise(t, 0.1, ":prx"))), round(tx * (1 + self.noise(t, 0.1, ":ptx")))

    def gpm(self, t: float, interval: float) -> GpmMetrics:
        """GPM's metrics over the `interval` seconds up to `t`, as NVML computes them for an H100 (see
        GPM_LEVELS). The graphics engine is busy whenever a kernel runs: NVML's utilization; no SM is
        active longer than that. Rates as NVML's own (the same PCIe and NVLink counters)."""
        util = self.util(t)
        stage = self.stage(t)
        pcie_rx, pcie_tx = self.pcie(t)
        nvlink_rx, nvlink_tx = self.nvlink(t)
        rates = dict(pcie_rx=float(pcie_rx), pcie_tx=float(pcie_tx))
        rates.update(nvlink_rx=float(nvlink_rx), nvlink_tx=float(nvlink_tx))
        if stage == "ended":
            return GpmMetrics(interval=round(interval, 3), **dict.fromkeys(GPM_RATIOS, 0.0), **rates)
        scale = 0.3 + 0.7 * min(1.0, t / _RAMP_S)  # the warm-up, as utilization's
        levels = GPM_LEVELS["starved" if self.starving(t) else stage]
        # GPM averages every SM over the whole interval: a steady loop reads nearly the same each second.
        # Its level drifts over GPM_DRIFT_S (the batch's sequence lengths), within a jitter of that.
        block = t - t % GPM_DRIFT_S
        drift = (self.noise(block, spread, f":gpm{k}") for k, (_, spread) in enumerate(levels))
        jitter = (self.noise(t, 0.3, f":j{k}") for k in range(len(levels)))
        sm, occupancy, tensor, dram, fp16, fp32, integer = (
            round(_percent((level + d + j) * scale), 1)
            for (level, _), d, j in zip(levels, drift, jitter, strict=True)
        )
        return GpmMetrics(
            interval=round(interval, 3),
            graphics=round(util, 1),
            sm_active=min(sm, round(util, 1)),
            sm_occupancy=occupancy,
            tensor=tensor,
            hmma=tensor,  # bf16 autocast: all of its tensor-core work is HMMA
            imma=0.0,
            dfma=0.0,
            dram=dram,
            fp16=fp16,
            fp32=fp32,
            fp64=0.0,
            integer=integer,
            **rates,
        )

    def nvlink(self, t: float) -> tuple[int, int]:
        """(rx, tx) bytes/s. The trainers are ranks of one data-parallel job: every training step ends in a
        ring all-reduce of the gradients, sending and receiving about the same amount, ~75 GB/s each way
        averaged over a second (an H100 SXM's 18 links carry 450 GB/s each way). Evaluation only
        gathers metrics; a stalled or ended trainer sends nothing."""
        stage = self.stage(t)
        if stage == "train":
            level = _ALLREDUCE_BPS * (0.3 + 0.7 * min(1.0, t / _RAMP_S))
        elif stage == "eval":
            level = 0.2e9
        else:
            return 0, 0
        return round(level * (1 + self.noise(t, 0.08, ":rx"))), round(
            level * (1 + self.noise(t, 0.08, ":tx"))
        )

    def memory(self, t: float) -> int:
        """Climbs while the model and optimizer state load, then stays flat: the caching allocator keeps
        what it reserved. The leaky GPU's trainer then grows LEAK_BPS (a list that keeps tensors)."""
        ramp = min(1.0, t / _RAMP_S)
        mem = int(0.4 * GIB + ramp * (self.target_mem - 0.4 * GIB))
        if self.leaks and t > LEAK_FROM_S:  # until the GPU is full: a real one would then fail (OOM)
            mem = min(_TOTAL - 2 * GIB, mem + int((t - LEAK_FROM_S) * LEAK_BPS))
        return mem

    def temperature(self, t: float) -> int:
        """Follows the load of the last half minute, not of this second: the heatsink is slow."""
        recent = [self.util(max(0.0, t - k * 5.0)) for k in range(7)]
        return round(34 + 0.38 * sum(recent) / len(recent))


def _alive(proc: psutil.Process) -> bool:
    """Running, and not merely a zombie waiting for init (or a subreaper) to reap it."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class DemoSource:
    name = "demo"

    def __init__(
        self,
        gpus: int = 4,
        seed: int = 0,
        workers: int = 3,
        clock: Callable[[], float] = time.time,
        start_at: float = 0.0,
        mig: bool = False,
        faults: bool = False,
        gpm: str = "auto",
    ) -> None:
        """`start_at`: simulated seconds of training already done when the demo opens (0: warm-up).
        `mig`: GPU 0 is MIG-enabled (MIG_LAYOUT), its trainer in the 3g.40gb instance; as on a real MIG
        GPU, NVML then reports no utilization for the GPU, its instances or its processes (GPM has them).
        `gpm`: as NvmlSource's ("auto" and "on" arm it: no DCGM runs here; "off": n/a, with the note)."""
        if not 1 <= gpus <= MAX_GPUS:
            raise SourceUnavailable(f"--demo-gpus must be between 1 and {MAX_GPUS}, not {gpus}")
        if gpm not in GPM_MODES:
            raise ValueError(f"gpm: {gpm!r} is not one of {GPM_MODES}")
        self.gpm_mode = gpm
        self._gpm_t: float | None = None  # simulated time of the last GPM sample; None: none taken yet
        self.gpu_count, self.seed, self.workers, self.clock = gpus, seed, workers, clock
        self.start_at = start_at
        self.mig = mig
        self.faults = faults
        self._xids_sent = False
        self.sims = [_Sim(seed, i) for i in range(gpus)]
        self.devices_dir = Path("/nonexistent")
        self.trainers: list[subprocess.Popen[bytes]] = []
        self.orphan_pid: int | None = None
        self.ghost_pid: int | None = None
        self._watch_w: int | None = None
        self._t0 = 0.0
        self._energy = [0.0] * gpus
        self._slow: dict[int, _SlowFields] = {}
        self._last_t: float | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> SourceInfo:
        self.devices_dir = Path(tempfile.mkdtemp(prefix="gputui-demo-"))
        for name in [f"nvidia{i}" for i in range(self.gpu_count)] + ["nvidiactl", "nvidia-uvm"]:
            (self.devices_dir / name).touch(mode=0o666)
        atexit.register(self.close)
        read_end, self._watch_w = os.pipe()  # both ends close-on-exec; only the read end is passed on
        try:
            for i in range(self.gpu_count):
                self.trainers.append(
                    self._spawn(read_end, "trainer", i, workers=self.workers, defunct=i == 0, janitor=i == 0)
                )
            orphan_parent = self._spawn(read_end, "orphan-parent", 0)
            assert orphan_parent.stdout is not None
            with orphan_parent.stdout:
                self.orphan_pid = int(orphan_parent.stdout.readline())
            orphan_parent.wait()  # it exits right after printing; a timeout here would poll
            for p in self.trainers:
                assert p.stdout is not None
                if p.stdout.readline().strip() != b"ready":
                    raise OSError(f"demo trainer {p.pid} did not start")
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as err:
            self.close()
            raise SourceUnavailable(f"the demo could not start its processes: {err}") from None
        finally:
            os.close(read_end)
        self.ghost_pid = self._free_pid()
        self._t0 = self.clock() - self.start_at
        self._gpm_t = self.start_at - GPM_PRIMED_S  # the first sample, as NvmlSource.open takes it
        return SourceInfo(driver_version="580.95.05", nvml_version="13.580.95.05", cuda_driver_version="13.0")

    def _spawn(
        self, watch: int, role: str, gpu: int, workers: int = 0, defunct: bool = False, janitor: bool = False
    ) -> subprocess.Popen[bytes]:
        # Run from the script's folder as "python -IS demo_train.py ...": a command line as short as a
        # real "python train.py ..." one, isolated, and no site import (it starts twice as fast).
        cmd = ["python", "-IS", _CHILD.name, "--role", role, "--gpu", str(gpu), "--workers", str(workers)]
        cmd += ["--defunct"] * defunct + ["--janitor"] * janitor
        env = {
            **os.environ,
            "GPUTUI_DEMO_DEVICES": str(self.devices_dir),
            "GPUTUI_DEMO_WATCH": str(watch),
            "CUDA_VISIBLE_DEVICES": str(gpu),
        }
        # A session of its own: a Ctrl-C in gputui's terminal must not reach the children.
        return subprocess.Popen(
            cmd,
            executable=sys.executable,
            cwd=_CHILD.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            pass_fds=(watch,),
            start_new_session=True,
        )

    def close(self) -> None:
        if self._watch_w is not None:
            os.close(self._watch_w)  # every child sees end-of-file and exits
            self._watch_w = None
        leftovers = self._descendants([p.pid for p in self.trainers])
        for p in self.trainers:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        if self.orphan_pid is not None:
            with contextlib.suppress(psutil.Error):
                leftovers.append(psutil.Process(self.orphan_pid))
        deadline = time.monotonic() + 2.0
        while (alive := [p for p in leftovers if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.01)
        for proc in alive:  # only if a child ignored the pipe; is_running() guards against PID reuse
            with contextlib.suppress(psutil.Error):
                proc.kill()
        self.trainers = []
        self.orphan_pid = None
        if self.devices_dir.name.startswith("gputui-demo-"):
            shutil.rmtree(self.devices_dir, ignore_errors=True)
        atexit.unregister(self.close)

    @staticmethod
    def _descendants(pids: list[int]) -> list[psutil.Process]:
        """Every descendant of `pids`, from one pass over /proc/*/stat (psutil's children() makes a pass per
        call: eight trainers cost eight, 15 ms of a one-shot's exit)."""
        if not pids:
            return []
        below: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # after "(comm) state"
                except (OSError, ValueError, IndexError):
                    continue  # gone meanwhile
                below.setdefault(ppid, []).append(int(name))
        out, todo, seen = [], list(pids), set(pids)
        while todo:
            for child in below.get(todo.pop(), ()):
                if child not in seen:  # (a pid reused meanwhile could make a loop)
                    seen.add(child)
                    todo.append(child)
                    with contextlib.suppress(psutil.Error):
                        out.append(psutil.Process(child))
        return out

    @staticmethod
    def _free_pid() -> int:
        """A PID nobody uses here: a process NVML lists that lives in another PID namespace."""
        pid = 48_213
        while psutil.pid_exists(pid):
            pid += 1
        return pid

    # -- reading -----------------------------------------------------------------------------------

    def read(self, slow: bool) -> Reading:
        t = max(0.0, self.clock() - self._t0)
        return self.reading_at(t, slow, self.running_trainers())

    def running_trainers(self) -> list[int | None]:
        """Per GPU, its trainer's pid, or None once it has ended. A trainer that ended (killed from the
        UI, say) is reaped here, so it does not stay a zombie of gputui; as with a real CUDA process,
        its memory and its load leave the GPU with it."""
        return [p.pid if p.poll() is None else None for p in self.trainers]

    def reading_at(self, t: float, slow: bool, trainer_pids: Sequence[int | None]) -> Reading:
        """The simulation at `t` seconds, the trainers given by pid (tests pass made-up ones); None: that
        GPU's trainer has ended, and the GPU idles."""
        dt = 0.0 if self._last_t is None else max(0.0, t - self._last_t)
        self._last_t = t
        gpm_interval = self._gpm_interval(t)
        gpus, procs = [], []
        for sim, trainer_pid in zip(self.sims, trainer_pids, strict=False):
            i = sim.index
            running = trainer_pid is not None
            if not running and sim.ended_at is None:
                sim.ended_at = t  # and the heatsink cools over the next half minute
            util = sim.util(t)
            on_mig = self.mig and i == 0
            trainer_mem = sim.memory(t) if running else 0
            if on_mig:  # the model was sized for the 3g.40gb instance, not for the whole GPU
                trainer_mem = trainer_mem * MIG_LAYOUT[0][3] // _TOTAL
            leaked = GIB + GIB // 2 if i == 0 else 0  # held by the orphan: unaccounted on GPU 0
            ghost = GIB if i == self.gpu_count - 1 and self.gpu_count > 1 else 0
            power = min(sim.power_cap, 72.0 + 600.0 * sim.load(t) + sim.noise(t, 6.0))
            nvlink_rx, nvlink_tx = sim.nvlink(t)
            pcie_rx, pcie_tx = sim.pcie(t)
            gpm = sim.gpm(t, gpm_interval) if gpm_interval is not None else None
            instances = self._mig_instances(sim, trainer_mem, leaked, gpm) if on_mig else ()
            if on_mig and gpm is not None:
                gpm = _whole_gpu(gpm, instances)
            self._energy[i] += power * dt
            if slow or i not in self._slow or not running:  # like NVML's: refreshed every few seconds
                self._slow[i] = self._slow_fields(sim, t, util, power)
            gpus.append(
                GpuSample(
                    index=i,
                    name="NVIDIA H100 80GB HBM3",
                    uuid=sim.uuid,
                    pci_bus_id=f"00000000:{0x18 + 0x08 * i:02X}:00.0",
                    minor=i,
                    util_gpu=None if on_mig else round(util),
                    util_mem=None if on_mig else round(util * 0.45),
                    mem_total=_TOTAL,
                    mem_used=trainer_mem + leaked + ghost,
                    mem_reserved=_RESERVED,
                    power=round(power, 1),
                    power_limit=sim.power_cap,
                    power_limit_max=POWER_LIMIT_MAX,
                    energy=round(self._energy[i], 1),
                    fan=None,  # an H100 SXM module has no fan (the chassis cools it): NVML says N/A
                    pcie_rx=pcie_rx,
                    pcie_tx=pcie_tx,
                    nvlink_rx=nvlink_rx,
                    nvlink_tx=nvlink_tx,
                    ecc_errors=0,  # ECC on, as on data-centre H100s, and no error since the driver loaded
                    compute_mode="Default",
                    persistence_mode=True,
                    mig_mode=on_mig,
                    mig=instances,
                    health=self._health(i, t),
                    gpm=gpm,
                    **self._slow[i],
                )
            )
            if trainer_pid is not None:
                trainer = self._trainer_process(i, trainer_pid, trainer_mem, util)
                if on_mig:
                    gi, ci = MIG_LAYOUT[0][:2]
                    trainer = dataclasses.replace(
                        trainer, sm_util=None, mem_util=None, gpu_instance=gi, compute_instance=ci
                    )
                procs.append(trainer)
            if ghost and self.ghost_pid is not None:
                procs.append(
                    GpuProcess(gpu=i, pid=self.ghost_pid, kinds="C", used_memory=ghost, sm_util=0, mem_util=0)
                )
        note = GPM_OFF_NOTE if self.gpm_mode == "off" else None
        return Reading(tuple(gpus), tuple(procs), xids=self._fault_xids(t), gpm_note=note)

    def _gpm_interval(self, t: float) -> float | None:
        """Seconds since the last GPM sample, this reading taking the next (as gputui.collect.sources.gpm
        does); None: no metrics this time (GPM off, the first sample, or too soon after the last)."""
        if self.gpm_mode == "off":
            return None
        last = self._gpm_t
        if last is not None and 0.0 <= t - last < GPM_MIN_INTERVAL_S:
            return None  # too soon: the previous sample stays the one to measure from
        self._gpm_t = t
        if last is None or t < last:  # the first sample (reading_at without open), or time went back
            return None
        return t - last

    def _health(self, gpu: int, t: float) -> GpuHealth:
        """A healthy H100 (ECC on, row remapping, no page retirement, PCIe gen 5 x16), unless `faults`."""
        faulty = self.faults and gpu == FAULTY_GPU and t >= FAULT_AT_S
        return GpuHealth(
            ecc_corrected_volatile=0,
            ecc_uncorrected_volatile=1 if faulty else 0,
            ecc_corrected_aggregate=3 if gpu == FAULTY_GPU else 0,
            ecc_uncorrected_aggregate=1 if faulty else 0,
            remapped_rows_correctable=0,
            remapped_rows_uncorrectable=1 if faulty else 0,
            remap_pending=faulty,
            remap_failed=False,
            pcie_gen=5,
            pcie_gen_max=5,
            pcie_width=8 if self.faults and gpu == NARROW_GPU else 16,
            pcie_width_max=16,
        )

    def _fault_xids(self, t: float) -> tuple[XidEvent, ...]:
        """The faulty GPU's Xid events, once, in the first reading at or after FAULT_AT_S."""
        if not self.faults or self._xids_sent or t < FAULT_AT_S or self.gpu_count <= FAULTY_GPU:
            return ()
        self._xids_sent = True
        return tuple(XidEvent(gpu=FAULTY_GPU, xid=x, time=self._t0 + t) for x in FAULT_XIDS)

    @staticmethod
    def _mig_instances(
        sim: _Sim, trainer_mem: int, leaked: int, gpm: GpmMetrics | None
    ) -> tuple[MigInstance, ...]:
        """The trainer's memory in the first instance, the orphan's leak in the second, the third idle
        (each with the few MiB a CUDA-less instance uses); utilization n/a, as NVML has none per instance.
        GPM measures each instance on its own SMs: the trainer's work in the first, none in the others
        (the orphan holds memory and runs nothing); an instance has no NVLink (MIG turns it off)."""
        used = (trainer_mem, leaked, 0)
        idle = None
        if gpm is not None:
            idle = dataclasses.replace(gpm, **dict.fromkeys((*GPM_RATIOS, *GPM_RATES), 0.0))
        return tuple(
            MigInstance(
                gpu_instance=gi,
                compute_instance=ci,
                profile=profile,
                uuid=f"MIG-{sim.uuid[4:12]}-{gi:04x}-{ci:04x}-8000-{sim.uuid[-12:]}",
                mem_total=total,
                mem_used=min(total, u + 13 * MIB),
                gpm=(dataclasses.replace(gpm, nvlink_rx=0.0, nvlink_tx=0.0) if k == 0 else idle)
                if gpm is not None
                else None,
            )
            for k, ((gi, ci, profile, total), u) in enumerate(zip(MIG_LAYOUT, used, strict=True))
        )

    @staticmethod
    def _trainer_process(gpu: int, pid: int, memory: int, util: float) -> GpuProcess:
        return GpuProcess(
            gpu=gpu,
            pid=pid,
            kinds="C",
            used_memory=memory,
            sm_util=round(util * 0.97),
            mem_util=round(util * 0.44),
        )

    @staticmethod
    def _slow_fields(sim: _Sim, t: float, util: float, power: float) -> _SlowFields:
        capped = power >= sim.power_cap - 1.0
        idle = util <= 5
        return {
            "temperature": sim.temperature(t),
            "sm_clock": 345 if idle else 1755 if capped else 1980,
            "sm_clock_max": 1980,
            "mem_clock": 2619,
            "mem_clock_max": 2619,
            "pstate": 8 if idle else 0,
            "throttle_reasons": ("gpu_idle",) if idle else ("sw_power_cap",) if capped else (),
            "enc_util": 0,
            "dec_util": 12 if sim.index == 1 and util > 50 else 0,
        }


# The GPM ratios of a MIG GPU that are its instances' weighted by their slices (the graphics engine is busy
# while any instance is: the trainer's instance says).
_MIG_SUMMED = tuple(name for name in GPM_RATIOS if name != "graphics")


def _percent(value: float) -> float:
    return max(0.0, min(100.0, value))


def _whole_gpu(gpm: GpmMetrics, instances: tuple[MigInstance, ...]) -> GpmMetrics:
    """The whole MIG GPU's GPM from its instances': each ratio weighted by the instances' share of the 7
    compute slices (DRAM: of the 8 memory slices), the slices no instance has counting as idle. Rates and
    the graphics engine stay `gpm`'s (the trainer's instance, and the GPU's own NVLink)."""
    values: dict[str, float | None] = {}
    for name in _MIG_SUMMED:
        parts = [getattr(m.gpm, name) if m.gpm is not None else None for m in instances]
        weights = [memory / 8 if name == "dram" else compute / 7 for compute, memory in MIG_SLICES]
        known = [v * w for v, w in zip(parts, weights, strict=True) if v is not None]
        values[name] = round(sum(known), 1) if len(known) == len(parts) else None
    return dataclasses.replace(gpm, **values)
