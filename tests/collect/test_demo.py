"""The demo source: real child processes that hold stand-in device files, and a deterministic simulation.

Every test that starts processes finds them (psutil) before it ends anything and kills whatever is left
in a `finally`, so a failing test leaves no process and no temporary directory behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from gputui.collect.sampler import Sampler
from gputui.collect.sources.base import Reading, SourceUnavailable
from gputui.collect.sources.demo import DemoSource
from tests.helpers import known
from tests.helpers import wait_until as _wait_until
from tests.processes import cmdline as _cmdline
from tests.processes import describe as _describe
from tests.processes import gone as _gone
from tests.processes import not_running as _not_running
from tests.ui.pty_run import PtyRun

GIB = 1 << 30


# -- helpers -----------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _assert_all_gone(procs: list[psutil.Process], timeout: float = 3.0) -> None:
    # Prefer "really gone" (reaped); a zombie left to init is accepted only once the wait is over.
    if _wait_until(lambda: all(_not_running(p) for p in procs), timeout):
        return
    left = [p for p in procs if not _gone(p)]
    assert not left, f"demo processes still alive: {_describe(left)}"


def _kill(procs: Iterable[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                p.kill()  # psutil refuses to kill a reused PID


def _remove_demo_dir(path: Path | None) -> None:
    if path is not None and path.name.startswith("gputui-demo-"):
        shutil.rmtree(path, ignore_errors=True)


def _fd_targets(pid: int) -> set[str]:
    fd_dir = f"/proc/{pid}/fd"
    out = set()
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            out.add(os.readlink(os.path.join(fd_dir, fd)))
    return out


def _expected_files(devices_dir: Path, gpu: int) -> set[str]:
    return {os.path.realpath(devices_dir / n) for n in ("nvidiactl", "nvidia-uvm", f"nvidia{gpu}")}


def _gpu_of(proc: psutil.Process) -> int:
    args = _cmdline(proc)
    return int(args[args.index("--gpu") + 1])


@dataclass
class DemoTree:
    """The demo's processes as psutil sees them."""

    devices_dir: Path | None = None
    trainers: list[psutil.Process] = field(default_factory=list)  # index = GPU
    workers: dict[int, list[psutil.Process]] = field(default_factory=dict)  # trainer pid -> live children
    zombies: dict[int, list[psutil.Process]] = field(default_factory=dict)  # trainer pid -> defunct children
    orphan: psutil.Process | None = None

    def all(self) -> list[psutil.Process]:
        procs = list(self.trainers)
        for t in self.trainers:
            procs += self.workers.get(t.pid, []) + self.zombies.get(t.pid, [])
        return procs + ([self.orphan] if self.orphan is not None else [])


def _classify_children(tree: DemoTree) -> None:
    for t in tree.trainers:
        kids = t.children()
        tree.workers[t.pid] = [k for k in kids if k.status() != psutil.STATUS_ZOMBIE]
        tree.zombies[t.pid] = [k for k in kids if k.status() == psutil.STATUS_ZOMBIE]


def _tree_of_source(src: DemoSource) -> DemoTree:
    tree = DemoTree(devices_dir=src.devices_dir, trainers=[psutil.Process(p.pid) for p in src.trainers])

    def settled() -> bool:
        # The defunct child is forked before it exits: until then it reads as one more worker.
        try:
            _classify_children(tree)
        except psutil.Error:
            return False
        full = all(len(tree.workers[t.pid]) == src.workers for t in tree.trainers)
        return full and len(tree.zombies[tree.trainers[0].pid]) == 1

    _wait_until(settled, 10.0)  # the tests below say what is wrong if it never settles
    _classify_children(tree)
    assert src.orphan_pid is not None
    tree.orphan = psutil.Process(src.orphan_pid)
    return tree


def _find_orphan(devices_dir: Path) -> psutil.Process | None:
    for p in psutil.process_iter(["cmdline"]):
        args = p.info["cmdline"] or []
        if not any(a.endswith("demo_train.py") for a in args) or "orphan-parent" not in args:
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get("GPUTUI_DEMO_DEVICES") == str(devices_dir) and p.status() != "zombie":
                return p
    return None


def _wait_for_tree(tree: DemoTree, gputui: psutil.Process, gpus: int, workers: int = 3) -> None:
    """Fill `tree` with the demo processes of a running `gputui --demo`, once all of them are up."""

    def ready() -> bool:
        try:
            kids = gputui.children()
            trainers = [k for k in kids if "trainer" in _cmdline(k)]
            if len(trainers) != gpus:
                return False
            tree.trainers = sorted(trainers, key=_gpu_of)
            _classify_children(tree)
            if any(len(tree.workers[t.pid]) != workers for t in tree.trainers):
                return False
            if len(tree.zombies[tree.trainers[0].pid]) != 1:
                return False
            tree.devices_dir = Path(tree.trainers[0].environ()["GPUTUI_DEMO_DEVICES"])
            tree.orphan = _find_orphan(tree.devices_dir)
            return tree.orphan is not None and tree.orphan.ppid() != gputui.pid
        except (psutil.Error, KeyError, ValueError):
            return False

    assert _wait_until(ready, 20.0), f"the demo did not start: {_describe(tree.all())}"


@pytest.fixture
def cleanup() -> Iterator[list[object]]:
    """Register DemoSources, DemoTrees and Popens; whatever is left of them is killed afterwards."""
    things: list[object] = []
    yield things
    for thing in things:
        if isinstance(thing, DemoSource):
            dirs = thing.devices_dir
            with contextlib.suppress(Exception):
                thing.close()
            _remove_demo_dir(dirs)
        elif isinstance(thing, DemoTree):
            _kill(thing.all())
            _remove_demo_dir(thing.devices_dir)
        elif isinstance(thing, subprocess.Popen):
            if thing.poll() is None:
                thing.kill()
            thing.wait(timeout=10)
        elif isinstance(thing, PtyRun):
            thing.close()


# -- the processes -----------------------------------------------------------------------------------


@pytest.fixture
def opened(cleanup: list[object]) -> tuple[DemoSource, DemoTree]:
    src = DemoSource(gpus=3, workers=2)
    cleanup.append(src)
    src.open()
    tree = _tree_of_source(src)
    cleanup.append(tree)  # killed only if close() left anything
    return src, tree


def test_one_trainer_per_gpu_with_its_workers(opened: tuple[DemoSource, DemoTree]) -> None:
    src, tree = opened
    assert len(tree.trainers) == 3
    for gpu, (popen, trainer) in enumerate(zip(src.trainers, tree.trainers, strict=True)):
        assert trainer.pid == popen.pid
        assert trainer.ppid() == os.getpid()
        assert trainer.status() != psutil.STATUS_ZOMBIE
        args = trainer.cmdline()
        assert any(a.endswith("demo_train.py") for a in args)
        assert args[args.index("--role") + 1] == "trainer"
        assert _gpu_of(trainer) == gpu
        workers = tree.workers[trainer.pid]
        assert len(workers) == 2, _describe(workers)
        assert all(w.ppid() == trainer.pid for w in workers)
        # A session of its own: Ctrl-C in gputui's terminal does not reach the demo.
        assert os.getsid(trainer.pid) == trainer.pid != os.getsid(0)


def test_trainer_0_has_one_defunct_child(opened: tuple[DemoSource, DemoTree]) -> None:
    _, tree = opened
    zombies = tree.zombies[tree.trainers[0].pid]
    assert len(zombies) == 1
    assert zombies[0].status() == psutil.STATUS_ZOMBIE
    assert zombies[0].ppid() == tree.trainers[0].pid
    for trainer in tree.trainers[1:]:
        assert tree.zombies[trainer.pid] == []


def test_orphan_outlived_its_parent(opened: tuple[DemoSource, DemoTree]) -> None:
    src, tree = opened
    orphan = tree.orphan
    assert orphan is not None and orphan.pid == src.orphan_pid
    assert orphan.status() != psutil.STATUS_ZOMBIE
    assert "orphan-parent" in orphan.cmdline()  # a fork of the orphan-parent, which has exited
    ppid = orphan.ppid()
    assert ppid != os.getpid()
    assert ppid not in {t.pid for t in tree.trainers}
    # Re-parented to init or to a subreaper, which can only be one of our own ancestors.
    assert ppid == 1 or ppid in {p.pid for p in psutil.Process().parents()}
    assert not any(a.endswith("demo_train.py") for a in _cmdline(psutil.Process(ppid)))


def test_every_process_holds_the_stand_in_device_files(opened: tuple[DemoSource, DemoTree]) -> None:
    src, tree = opened
    assert src.devices_dir.is_dir() and src.devices_dir.name.startswith("gputui-demo-")
    assert sorted(p.name for p in src.devices_dir.iterdir()) == sorted(
        ["nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"]
    )
    for gpu, trainer in enumerate(tree.trainers):
        expected = _expected_files(src.devices_dir, gpu)
        for proc in [trainer, *tree.workers[trainer.pid]]:
            held = _fd_targets(proc.pid)
            assert expected <= held, (proc.pid, held)
            others = {os.path.realpath(src.devices_dir / f"nvidia{g}") for g in range(3) if g != gpu}
            assert not held & others
    assert tree.orphan is not None
    assert _expected_files(src.devices_dir, 0) <= _fd_targets(tree.orphan.pid)


def test_trainer_environment(opened: tuple[DemoSource, DemoTree]) -> None:
    src, tree = opened
    for gpu, trainer in enumerate(tree.trainers):
        env = trainer.environ()
        assert env["CUDA_VISIBLE_DEVICES"] == str(gpu)
        assert env["GPUTUI_DEMO_DEVICES"] == str(src.devices_dir)


def test_the_ghost_pid_is_not_a_process_here(opened: tuple[DemoSource, DemoTree]) -> None:
    src, _ = opened
    assert src.ghost_pid is not None
    assert not psutil.pid_exists(src.ghost_pid)


def test_close_ends_every_process_and_removes_the_files(opened: tuple[DemoSource, DemoTree]) -> None:
    src, tree = opened
    procs = tree.all()
    assert len(procs) == 3 + 3 * 2 + 1 + 1  # trainers, workers, the defunct child, the orphan
    devices_dir = src.devices_dir
    src.close()
    _assert_all_gone(procs)
    assert not devices_dir.exists()
    assert src.trainers == [] and src.orphan_pid is None
    src.close()  # idempotent
    src.close()
    assert not devices_dir.exists()


def _reaped(pid: int, started: float) -> bool:
    """No process of that pid and start time is left, not even a zombie."""
    try:
        return abs(psutil.Process(pid).create_time() - started) > 0.01  # a later process got the PID
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_killed_trainer_is_reaped_and_leaves_its_gpu(
    opened: tuple[DemoSource, DemoTree], sig: signal.Signals
) -> None:
    src, tree = opened
    trainer = tree.trainers[1]  # GPU 1 of 3: no leaked memory, no ghost on it
    started = trainer.create_time()
    before = src.read(slow=True)
    assert [p.pid for p in before.processes if p.gpu == 1] == [trainer.pid]
    assert before.gpus[1].mem_used and before.gpus[1].mem_used > 0
    os.kill(trainer.pid, sig)
    # Our child: until someone reaps it, it is a zombie of this process (of gputui).
    assert _wait_until(lambda: _not_running(trainer) or trainer.status() == psutil.STATUS_ZOMBIE, 3.0)
    after = src.read(slow=True)
    assert _reaped(trainer.pid, started), "the demo left its trainer a zombie"
    assert [p for p in after.processes if p.gpu == 1] == []
    gpu = after.gpus[1]
    assert (gpu.util_gpu, gpu.util_mem, gpu.mem_used) == (0, 0, 0)
    assert gpu.throttle_reasons == ("gpu_idle",) and gpu.pstate == 8
    assert gpu.power is not None and gpu.power < 100.0
    # The other trainers run on.
    assert {p.gpu for p in after.processes if p.pid in (tree.trainers[0].pid, tree.trainers[2].pid)} == {0, 2}
    assert src.running_trainers() == [tree.trainers[0].pid, None, tree.trainers[2].pid]


def test_a_killed_trainer_0_keeps_only_the_orphan_s_leak(opened: tuple[DemoSource, DemoTree]) -> None:
    src, tree = opened
    os.kill(tree.trainers[0].pid, signal.SIGKILL)
    assert _wait_until(lambda: src.running_trainers()[0] is None, 3.0)
    gpu = src.read(slow=False).gpus[0]
    assert gpu.util_gpu == 0 and gpu.mem_used == GIB + GIB // 2  # the orphan's, unaccounted


def test_a_dead_trainer_s_gpu_idles_in_the_simulation(cleanup: list[object]) -> None:
    src = DemoSource(gpus=2, seed=0, clock=FakeClock())
    cleanup.append(src)
    src.ghost_pid = 48213  # open() would pick a free one
    reading = src.reading_at(300.0, True, [4242, None])
    assert [(p.gpu, p.pid) for p in reading.processes] == [(0, 4242), (1, 48213)]
    busy, idle = reading.gpus
    assert busy.util_gpu and busy.util_gpu > 10 and busy.mem_used and busy.mem_used > 40 * GIB
    assert idle.util_gpu == 0 and idle.mem_used == GIB  # only the ghost's
    # Its heatsink cools over half a minute, to an idle GPU's temperature.
    temps = [
        known(src.reading_at(300.0 + dt, True, [4242, None]).gpus[1].temperature) for dt in (1, 10, 20, 40)
    ]
    assert temps == sorted(temps, reverse=True) and temps[0] != temps[-1] and temps[-1] == 34, temps


def test_close_without_open_is_harmless() -> None:
    src = DemoSource(gpus=2)
    src.close()
    src.close()
    assert src.trainers == []


@pytest.mark.parametrize("gpus", [0, -1, 17])
def test_gpu_count_out_of_range(gpus: int) -> None:
    with pytest.raises(SourceUnavailable, match="between 1 and 16"):
        DemoSource(gpus=gpus)


# -- nothing outlives gputui -------------------------------------------------------------------------


def _demo_on_a_terminal(cleanup: list[object]) -> PtyRun:
    """`gputui --demo` on a terminal of its own (it refuses to start the full-screen view without one)."""
    terminal = PtyRun(
        [sys.executable, "-m", "gputui", "--demo", "--demo-gpus", "2", "--interval", "0.2"], ctty=False
    )
    cleanup += [terminal.proc, terminal]
    return terminal


@pytest.mark.terminal
@pytest.mark.parametrize(
    ("signum", "returncodes"),
    [
        (signal.SIGTERM, {128 + signal.SIGTERM}),
        (signal.SIGHUP, {128 + signal.SIGHUP}),  # a dropped SSH connection
        (signal.SIGINT, {0, 130}),  # the full-screen UI may take it as a quit
        (signal.SIGKILL, {-signal.SIGKILL}),  # a crash: no cleanup code runs at all
    ],
    ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGKILL"],
)
def test_gputui_demo_leaves_nothing_behind(signum: int, returncodes: set[int], cleanup: list[object]) -> None:
    terminal = _demo_on_a_terminal(cleanup)
    proc = terminal.proc
    assert proc is not None
    tree = DemoTree()
    cleanup += [proc, tree]  # in this order: gputui first, then whatever it left
    _wait_for_tree(tree, psutil.Process(proc.pid), gpus=2)
    procs = tree.all()
    assert len(procs) == 2 + 2 * 3 + 1 + 1
    devices_dir = tree.devices_dir
    assert devices_dir is not None and devices_dir.is_dir()
    time.sleep(0.3)  # let it draw at least once

    proc.send_signal(signum)
    proc.wait(timeout=10)
    said = terminal.all_output().decode(errors="replace")
    assert proc.returncode in returncodes, said[-3000:]
    assert "Traceback" not in said, said
    # SIGKILL: no cleanup code ran; the children saw end-of-file on gputui's pipe, and trainer 0 (the
    # janitor) removed the directory.
    _assert_all_gone(procs)
    assert _wait_until(lambda: not devices_dir.exists(), 3.0), devices_dir


@pytest.mark.terminal
@pytest.mark.parametrize("delay", [0.05, 0.2, 0.35, 0.45, 0.55, 0.6, 0.65, 0.8, 1.0])
def test_a_sigterm_while_gputui_starts_is_a_clean_exit(delay: float, cleanup: list[object]) -> None:
    """Wherever start-up is when the signal comes (imports, the demo's children starting, Textual
    starting, the first frame), gputui ends without a traceback and leaves no child behind."""
    terminal = _demo_on_a_terminal(cleanup)
    proc = terminal.proc
    assert proc is not None
    time.sleep(delay)
    children: list[psutil.Process] = []
    with contextlib.suppress(psutil.NoSuchProcess):
        children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    said = terminal.all_output().decode(errors="replace")
    # Killed outright only before Python has run a line of gputui (nothing was started yet).
    assert proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM), said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    _assert_all_gone(children)


# -- the simulation ----------------------------------------------------------------------------------


@pytest.fixture
def sim(cleanup: list[object]) -> tuple[DemoSource, FakeClock]:
    clock = FakeClock()
    src = DemoSource(gpus=4, seed=0, clock=clock)
    cleanup.append(src)
    src.open()
    return src, clock


def _timeline(
    src: DemoSource, clock: FakeClock, start: float, stop: float, step: float
) -> list[tuple[float, Reading]]:
    out = []
    t = start
    while t <= stop:
        clock.t = 1000.0 + t
        out.append((t, src.read(slow=True)))
        t += step
    return out


def test_simulation_is_deterministic(cleanup: list[object]) -> None:
    def run(seed: int) -> list[object]:
        clock = FakeClock()
        src = DemoSource(gpus=3, seed=seed, clock=clock)
        cleanup.append(src)
        src.open()
        try:
            out: list[object] = []
            for t in (0.0, 0.5, 3.0, 17.25, 42.0, 99.9, 250.0):
                clock.t = 1000.0 + t
                r = src.read(slow=t == 0.0)
                # The PIDs are real and differ between runs; everything else is simulated.
                out.append(
                    (
                        r.gpus,
                        tuple(
                            (p.gpu, p.kinds, p.used_memory, p.sm_util, p.mem_util, p.pid == src.ghost_pid)
                            for p in r.processes
                        ),
                        r.errors,
                    )
                )
            return out
        finally:
            src.close()

    first = run(7)
    assert run(7) == first
    assert run(8) != first


def test_utilization_is_high_with_stalls_and_eval_dips(sim: tuple[DemoSource, FakeClock]) -> None:
    src, clock = sim
    step = 0.25
    samples = [(t, r) for t, r in _timeline(src, clock, 0.0, 320.0, step) if t >= 20.0]  # past warm-up
    dips: list[float] = []
    for gpu in range(4):
        util = [known(r.gpus[gpu].util_gpu) for _, r in samples]
        assert all(0 <= u <= 100 for u in util)
        assert sum(u > 85 for u in util) / len(util) > 0.6, gpu  # ~95 % most of the time
        assert any(u < 50 for u in util), gpu
        run = 0
        for u in [*util, 100]:
            if u < 50:
                run += 1
            elif run:
                dips.append(run * step)
                run = 0
    assert min(dips) <= 4.0  # short data-loader stalls (2-3.5 s) ...
    assert max(dips) >= 6.0  # ... and longer evaluation dips (6-10 s)
    assert max(dips) <= 12.0


def test_memory_ramps_up_during_warm_up(sim: tuple[DemoSource, FakeClock]) -> None:
    src, clock = sim
    mem = {
        t: [(known(g.mem_used), known(g.mem_total)) for g in r.gpus]
        for t, r in _timeline(src, clock, 0.0, 40.0, 1.0)
    }
    for gpu in range(4):
        assert mem[1.0][gpu][0] < mem[3.0][gpu][0] < mem[5.0][gpu][0]
        assert mem[1.0][gpu][0] < mem[30.0][gpu][0] / 2
        for g in mem.values():
            used, total = g[gpu]
            assert 0 < used <= total


def test_gpu_3_is_power_capped_when_busy(sim: tuple[DemoSource, FakeClock]) -> None:
    src, clock = sim
    busy = [r.gpus[3] for t, r in _timeline(src, clock, 20.0, 200.0, 0.5) if known(r.gpus[3].util_gpu) > 85]
    assert busy
    for g in busy:
        assert g.throttle_reasons is not None and "sw_power_cap" in g.throttle_reasons
        assert g.power_limit == 500.0 and known(g.power) <= g.power_limit
        assert known(g.sm_clock) < known(g.sm_clock_max)


def test_nvlink_follows_the_all_reduce_of_training_steps(sim: tuple[DemoSource, FakeClock]) -> None:
    src, clock = sim
    for t, r in _timeline(src, clock, 20.0, 320.0, 0.5):
        for g in r.gpus:
            stage = src.sims[g.index].stage(t)
            assert g.nvlink_rx is not None and g.nvlink_tx is not None
            if stage == "train":  # gradients all-reduced every step: both ways, tens of GB/s
                assert 60e9 <= g.nvlink_rx <= 90e9 and 60e9 <= g.nvlink_tx <= 90e9, (t, g)
                assert g.util_gpu is not None and g.util_gpu > 85
            elif stage == "eval":  # metrics only
                assert 0 < g.nvlink_rx < 1e9 and 0 < g.nvlink_tx < 1e9, (t, g)
            else:  # a stalled step sends nothing
                assert g.nvlink_rx == g.nvlink_tx == 0, (t, g)


def test_nvlink_ramps_up_with_warm_up_and_stops_with_the_trainer() -> None:
    src = DemoSource(gpus=2, clock=FakeClock())  # the simulation alone: no processes needed
    train_t = [t for t in range(30, 200) if src.sims[0].stage(t) == "train"]
    assert src.sims[0].stage(0.5) == "train"  # seed 0: GPU 0 starts mid-epoch
    early, late = src.reading_at(0.5, True, [1, 2]), src.reading_at(float(train_t[0]), True, [1, 2])
    assert early.gpus[0].nvlink_tx is not None and late.gpus[0].nvlink_tx is not None
    assert early.gpus[0].nvlink_tx < late.gpus[0].nvlink_tx / 2
    ended = src.reading_at(float(train_t[1]), True, [None, 2])
    assert (ended.gpus[0].nvlink_rx, ended.gpus[0].nvlink_tx) == (0, 0)


def test_ecc_on_without_errors_and_no_fan_as_on_an_h100_sxm(sim: tuple[DemoSource, FakeClock]) -> None:
    src, clock = sim
    for _, r in _timeline(src, clock, 0.0, 60.0, 5.0):
        for g in r.gpus:
            assert g.ecc_errors == 0
            assert g.fan is None  # NVML reports no fan speed for an SXM module


def test_unaccounted_memory_and_an_invisible_process(cleanup: list[object]) -> None:
    clock = FakeClock()
    src = DemoSource(gpus=4, clock=clock, start_at=120.0)
    sampler = Sampler(src, clock=clock)
    cleanup.append(src)
    sampler.open()
    snap = sampler.tick()
    assert snap.unaccounted_memory[0] == GIB + GIB // 2  # held by the orphan, listed nowhere
    assert all(snap.unaccounted_memory[i] == 0 for i in (1, 2, 3))

    last = snap.processes_on(3)
    ghost = [p for p in last if p.pid == src.ghost_pid]
    assert len(ghost) == 1 and ghost[0].visible is False and ghost[0].used_memory == GIB
    assert ghost[0].user is None and ghost[0].command is None
    for gpu in range(4):
        trainers = [p for p in snap.processes_on(gpu) if p.pid == src.trainers[gpu].pid]
        assert len(trainers) == 1 and trainers[0].visible
    assert not any(p.pid == src.ghost_pid for i in range(3) for p in snap.processes_on(i))
    sampler.close()


def test_a_single_gpu_demo_has_no_ghost(cleanup: list[object]) -> None:
    src = DemoSource(gpus=1, clock=FakeClock())
    cleanup.append(src)
    src.open()
    r = src.read(slow=True)
    assert len(r.gpus) == 1
    assert [p.pid for p in r.processes] == [src.trainers[0].pid]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--role", "trainer"], "--gpu N are required"),
        (["--role", "janitor", "--gpu", "0"], "--role trainer|orphan-parent"),
        (["--role", "trainer", "--gpu", "x"], "--gpu N are required"),
        (["--role", "trainer", "--gpu", "0", "--verbose"], "unknown argument '--verbose'"),
    ],
    ids=["no gpu", "bad role", "gpu not a number", "unknown flag"],
)
def test_a_demo_child_with_bad_arguments_says_so_in_one_line(args: list[str], error: str) -> None:
    from gputui.collect.sources import demo

    run = subprocess.run(
        [sys.executable, "-IS", str(demo._CHILD), *args],
        capture_output=True,
        text=True,
        timeout=10,
        env={**os.environ, "GPUTUI_DEMO_DEVICES": "/nonexistent", "GPUTUI_DEMO_WATCH": "0"},
    )
    assert run.returncode == 1
    assert error in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


# The trainer's own script, every fork's child held back 0.5 s before it goes on, as a loaded box may.
SLOW_CHILDREN = (
    "import os, runpy, sys, time\n"
    "fork = os.fork\n"
    "def slow_fork():\n"
    "    pid = fork()\n"
    "    if pid == 0:\n"
    "        time.sleep(0.5)\n"
    "    return pid\n"
    "os.fork = slow_fork\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def test_a_trainer_says_ready_only_once_its_defunct_child_is_a_zombie(tmp_path: Path) -> None:
    """The demo's world is whole at "ready": its one defunct process is already a zombie, however late
    the child ran (CI once saw it still alive, and a test counted no zombie)."""
    import gputui.collect.sources.demo_train as script

    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    read_end, write_end = os.pipe()
    argv = [script.__file__, "--role", "trainer", "--gpu", "0", "--workers", "0", "--defunct"]
    env = {**os.environ, "GPUTUI_DEMO_DEVICES": str(tmp_path), "GPUTUI_DEMO_WATCH": str(read_end)}
    trainer = subprocess.Popen(
        [sys.executable, "-I", "-c", SLOW_CHILDREN, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        env=env,
        pass_fds=(read_end,),
    )
    os.close(read_end)
    try:
        assert trainer.stdout is not None and trainer.stdout.readline().strip() == b"ready"
        kids = psutil.Process(trainer.pid).children()
        assert [k.status() for k in kids] == [psutil.STATUS_ZOMBIE]
    finally:
        os.close(write_end)  # end of file: the trainer exits
        assert trainer.wait(timeout=10) == 0
        if trainer.stdout is not None:
            trainer.stdout.close()
