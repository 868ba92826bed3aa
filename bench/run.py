"""`make bench`: performance numbers as JSON, comparable across commits.

sampler: one Sampler tick on the demo (8 GPUs, ~34 real processes), 100 ticks after a warm-up.
agent:   the in-process agent's CPU cost when gputui polls it once a second.
holders: the /dev/nvidia* holder scan in a world of 1,000 real processes with ~24 open fds each, 20 of
         them holding a stand-in device file: the steady-state tick, a full rescan, and for scale a plain
         scan of every /proc/*/fd (and fuser / lsof when installed).
tui:     `gputui --demo --demo-gpus 8` at 1 Hz in a 120x40 pseudo-terminal (TERM=xterm-256color, no
         COLORTERM, as over SSH), measured for 30 s after a 5 s warm-up: bytes/s written to the terminal,
         CPU % of one core (the whole process tree), peak RSS, time to the first full frame. The demo's
         8 trainers are 8 ranks with 3 DataLoader workers each. tui_16_gpus_200x60, tui_4_gpus_200x60:
         the same for the one-line-per-GPU layout and for taller charts (no budget of their own).
nvml:    NVML queries per GPU per tick through the Sampler at 1 Hz on a fake NVML (real pynvml structs).
budgets: each budget of the TUI and Zombies issues with its value and pass/fail (also on stderr).
attach:  `gputui attach` through gdb on a real CPU-torch training loop: gdb's run and the loop's longest
         gap between two 5 ms steps around it (how long the job was paused).
exporter: `gputui export` on the demo: a sample, a scrape (and its bytes), a real exporter's CPU and RSS.
owners:  the owner (container, pod, SLURM job) of 1,000 real `sleep` processes, a quarter each in cgroups
         shaped like pods, docker scopes and SLURM job steps and a quarter in none (real cgroup v2
         directories as root where cgroup2 is writable, else a simulated /proc): the first sight of all,
         the steady (cached) lookups of a tick, and the sampler's whole owner step over 1,000 rows.
fleet:   `gputui fleet` over 100 hosts x 8 GPUs from a fake Prometheus on loopback: queries and ms per
         refresh, and the TUI in a 200x60 pseudo-terminal at a 5 s refresh.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import fcntl
import itertools
import json
import os
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.export: the bench's servers

from gputui.collect.procs.holders import HolderScanner, device_paths
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource


def bench_sampler(gpus: int = 8, ticks: int = 100) -> dict[str, float | int]:
    with Sampler(DemoSource(gpus=gpus), slow_interval=5.0) as sampler:
        for _ in range(3):
            sampler.tick()
        times = []
        for _ in range(ticks):
            t0 = time.perf_counter()
            snap = sampler.tick()
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        return {
            "gpus": gpus,
            "gpu_processes": len(snap.processes),
            "ticks": ticks,
            "tick_ms_median": round(statistics.median(times), 3),
            "tick_ms_p95": round(times[int(0.95 * len(times)) - 1], 3),
        }


def _plain_scan(paths: frozenset[str]) -> int:
    """The naive way: every /proc/*/fd, every link."""
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") in paths:
                    found += 1
                    break
            except OSError:
                continue
    return found


def _timed(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def bench_holders(processes: int = 1000, fds: int = 24, holders: int = 20) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="gputui-bench-"))
    dev = root / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    opened = []
    for i in range(fds - 3):  # plus stdin, stdout, stderr
        path = root / f"file{i}"
        path.touch()
        opened.append(os.open(path, os.O_RDONLY))
    world: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(processes):
            extra = [os.open(dev / f"nvidia{i % 4}", os.O_RDONLY)] if i < holders else []
            # `sleep` inherits the descriptors: a cheap process with ~24 open files.
            world.append(
                subprocess.Popen(
                    ["sleep", "3600"],
                    pass_fds=[*opened, *extra],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
            for fd in extra:
                os.close(fd)
        clock = [0.0]
        scanner = HolderScanner(dev, rescan_s=5.0, deep_every=1_000_000, monotonic=lambda: clock[0])
        deep = HolderScanner(dev, rescan_s=5.0, deep_every=1, monotonic=lambda: clock[0])
        scanner.scan()

        def rescan(s: HolderScanner) -> None:
            clock[0] += 10.0
            s.scan()

        rescan_ms = _timed(lambda: rescan(scanner), 5)
        deep_ms = _timed(lambda: rescan(deep), 5)
        tick_ms = _timed(scanner.scan, 50)
        found = len(scanner.scan().holders)
        paths = device_paths(dev)
        result: dict[str, object] = {
            "processes": len(os.listdir("/proc")),
            "holders_found": found,
            "tick_ms_median": tick_ms,
            "rescan_ms_median": rescan_ms,  # every 5 s: descriptor lists, links only where they changed
            "deep_rescan_ms_median": deep_ms,  # every 60 s: every link
            "plain_scan_ms_median": _timed(lambda: _plain_scan(paths), 5),
        }
        targets = [str(dev / n) for n in sorted(os.listdir(dev))]
        for tool, args in (("fuser", ["fuser", *targets]), ("lsof", ["lsof", "-w", *targets])):
            if shutil.which(tool):
                result[f"{tool}_ms_median"] = _timed(
                    lambda a=args: subprocess.run(a, capture_output=True, check=False), 3
                )  # type: ignore[misc]
        return result
    finally:
        for p in world:
            p.kill()
        for p in world:
            p.wait()
        for fd in opened:
            os.close(fd)
        shutil.rmtree(root, ignore_errors=True)


def bench_agent(seconds: float = 10.0) -> dict[str, object]:
    """CPU of a process running the agent (torch imported, a DataLoader stepping) while gputui polls
    it once a second, against the same process not polled."""
    script = (
        "import time, torch, gputui.agent\n"
        "from torch.utils.data import DataLoader\n"
        "gputui.agent.start()\n"
        "end = time.time() + 3600\n"
        "while time.time() < end:\n"
        "    for _ in DataLoader(range(64), batch_size=8):\n"
        "        time.sleep(0.05)\n"
    )
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"skipped": "torch is not installed"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        from gputui.collect.agents.client import AgentPoller, discover

        deadline = time.monotonic() + 30
        while proc.pid not in discover() and time.monotonic() < deadline:
            time.sleep(0.1)
        ps = psutil.Process(proc.pid)
        time.sleep(2.0)

        def cpu() -> float:
            t = ps.cpu_times()
            return t.user + t.system

        c0 = cpu()
        time.sleep(seconds)
        idle = (cpu() - c0) / seconds * 100
        poller = AgentPoller()
        c0, t0 = cpu(), time.monotonic()
        polls = 0
        while time.monotonic() - t0 < seconds:
            polls += len(poller.poll())
            time.sleep(1.0)
        polled = (cpu() - c0) / (time.monotonic() - t0) * 100
        return {
            "polls": polls,
            "process_cpu_percent_not_polled": round(idle, 2),
            "process_cpu_percent_polled_1hz": round(polled, 2),
            "agent_cost_percent_of_core": round(polled - idle, 2),
        }
    finally:
        proc.kill()
        proc.wait()


def bench_agent_poll(agents: int = 16, stopped: int = 8, polls: int = 20) -> dict[str, object]:
    """One tick's poll of `agents` real agents, `stopped` of them halted (SIGSTOP): the wall time of a
    poll, which the 150 ms deadline must bound whatever the agents do."""
    import tempfile

    from gputui.collect.agents.client import AgentPoller

    script = (
        "import sys, time; from pathlib import Path; from gputui.agent.server import Agent\n"
        "Agent(directory=Path(sys.argv[1])).start(); print('up', flush=True); time.sleep(600)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            subprocess.Popen([sys.executable, "-c", script, tmp], stdout=subprocess.PIPE)
            for _ in range(agents)
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
            poller = AgentPoller(Path(tmp))

            def poll_ms() -> list[float]:
                times = []
                for _ in range(polls):
                    t0 = time.perf_counter()
                    poller.poll()
                    times.append((time.perf_counter() - t0) * 1000)
                return times

            answering = poll_ms()
            for proc in procs[:stopped]:
                os.kill(proc.pid, signal.SIGSTOP)
            # The first polls wait out the deadline; once a stopped agent's queue of connections is full,
            # connecting fails at once.
            with_stopped = poll_ms()
            slow = sum(r.status == "slow" for r in poller.poll().values())
        finally:
            for proc in procs:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    return {
        "agents": agents,
        "stopped": stopped,
        "poll_ms_median_all_answering": round(statistics.median(answering), 2),
        "poll_ms_max_all_answering": round(max(answering), 2),
        "poll_ms_median_with_stopped": round(statistics.median(with_stopped), 1),
        "poll_ms_max_with_stopped": round(max(with_stopped), 1),
        "marked_slow": slow,
    }


def _tree_cpu(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def _peak_rss_kib(pid: int) -> int | None:
    """gputui's own peak resident set (VmHWM); None if it already exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM")), None)
    except OSError:
        return None


_NO_SETTINGS = tempfile.TemporaryDirectory(prefix="gputui-bench-config-")


def start_in_pty(
    args: tuple[str, ...], cols: int, rows: int, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """`gputui ARGS` in a pseudo-terminal of cols x rows, as over SSH (256 colours, no COLORTERM)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k != "COLORTERM"}
    # The defaults, whatever the person running the bench saved (gputui.settings).
    environ.update(TERM="xterm-256color", XDG_CONFIG_HOME=_NO_SETTINGS.name, **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputui", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=environ,
        start_new_session=True,
    )
    os.close(slave)
    return proc, master


def quit_in_pty(proc: subprocess.Popen[bytes], master: int) -> None:
    """`q`, as a person quits; SIGKILL if it does not go within 5 s."""
    os.write(master, b"q")
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    os.close(master)


def bench_tui(
    gpus: int = 8,
    warmup: float = 5.0,
    measure: float = 30.0,
    cols: int = 120,
    rows: int = 40,
    args: tuple[str, ...] | None = None,
    full_frame: tuple[bytes, ...] | None = None,
) -> dict[str, float | int | None]:
    """A gputui TUI in a pseudo-terminal: `gputui --demo` unless `args` says otherwise; the first full
    frame is when every byte string of `full_frame` has been written."""
    args = args or ("--demo", "--demo-gpus", str(gpus), "--interval", "1")
    # The full frame: the last GPU's pane and the table's rows are on screen.
    full_frame = full_frame or (f"{gpus - 1} H100".encode(), b"demo_train.py")
    start = time.monotonic()
    proc, master = start_in_pty(args, cols, rows)
    ps = psutil.Process(proc.pid)
    seen = b""
    first_frame = first_output = None
    written = 0
    cpu0 = None
    t_measure = None
    try:
        while True:
            now = time.monotonic()
            if t_measure is None and now - start >= warmup:
                t_measure, written, cpu0 = now, 0, _tree_cpu(ps)
            if t_measure is not None and now - t_measure >= measure:
                break
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            written += len(chunk)
            if first_output is None:
                first_output = time.monotonic() - start
            if first_frame is None:
                seen += chunk
                if all(mark in seen for mark in full_frame):
                    first_frame = time.monotonic() - start
        elapsed = time.monotonic() - t_measure if t_measure else 0.0
        cpu = (_tree_cpu(ps) - cpu0) / elapsed * 100 if cpu0 is not None and elapsed else None
        hwm = _peak_rss_kib(proc.pid)
        result = {
            "gpus": gpus,
            "size": f"{cols}x{rows}",
            "seconds": round(elapsed, 1),
            "bytes_per_s": round(written / elapsed) if elapsed else None,
            "cpu_percent_of_core": round(cpu, 2) if cpu is not None else None,
            "peak_rss_mib": round(hwm / 1024, 1) if hwm is not None else None,
            "first_output_s": round(first_output, 3) if first_output is not None else None,
            "first_full_frame_s": round(first_frame, 3) if first_frame is not None else None,
        }
    finally:
        quit_in_pty(proc, master)
    return result


def bench_attach(runs: int = 3) -> dict[str, object]:
    """`gputui attach` through gdb on a real CPU-torch training loop (tests/attach/train_loop.py, a 5 ms
    step): how long gdb ran and the loop's longest gap between two steps around it (the real pause)."""
    from gputui.actions.attach import attach

    if shutil.which("gdb") is None:
        return {"skipped": "gdb is not installed"}
    gdb_s, pauses = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            steps = Path(tmp) / "steps"
            steps.touch()
            loop = Path(__file__).resolve().parents[1] / "tests" / "attach" / "train_loop.py"
            proc = subprocess.Popen([sys.executable, str(loop), str(steps)], cwd=tmp)
            try:
                while len(steps.read_text().splitlines()) < 50:
                    time.sleep(0.05)
                t0 = time.monotonic()
                outcome = attach(proc.pid)
                t1 = time.monotonic()
                time.sleep(0.5)
                if not outcome.ok:
                    return {"failed": outcome.message}
                times = [float(line.split()[1]) for line in steps.read_text().splitlines() if " " in line]
                around = [t for t in times if t0 - 0.5 <= t <= t1 + 0.5]
                pauses.append(max(b - a for a, b in itertools.pairwise(around)))
                gdb_s.append(outcome.seconds or 0.0)
            finally:
                proc.kill()
                proc.wait()
    return {
        "runs": runs,
        "gdb_s_median": round(statistics.median(gdb_s), 3),
        "longest_step_gap_s_median": round(statistics.median(pauses), 3),
        "longest_step_gap_s_max": round(max(pauses), 3),
        "usual_step_s": 0.005,
    }


def bench_exporter(gpus: int = 8, ticks: int = 60, measure: float = 20.0) -> dict[str, object]:
    """`gputui export` on the demo: one sample (+ dips), one scrape, and a real exporter process's CPU
    at 1 Hz sampling while it is scraped every second."""
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from gputui.export.exporter import Exporter

    with Sampler(DemoSource(gpus=gpus, start_at=120.0)) as sampler:
        exporter = Exporter(sampler)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(exporter)  # type: ignore[arg-type]
        tick, scrape = [], []
        for _ in range(ticks):
            t0 = time.perf_counter()
            exporter.tick()
            t1 = time.perf_counter()
            body = generate_latest(registry)
            tick.append((t1 - t0) * 1000)
            scrape.append((time.perf_counter() - t1) * 1000)
    from tests.export.servers import Exporter as ExporterProcess

    proc = ExporterProcess("bench", gpus=gpus, interval=1.0)
    try:
        ps = psutil.Process(proc.proc.pid)
        time.sleep(2.0)
        cpu0, t0 = ps.cpu_times(), time.monotonic()
        while time.monotonic() - t0 < measure:
            proc.scrape()
            time.sleep(1.0)
        cpu1, elapsed = ps.cpu_times(), time.monotonic() - t0
        rss = ps.memory_info().rss
    finally:
        proc.stop()
    used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "gpus": gpus,
        "sample_ms_median": round(statistics.median(tick), 3),
        "scrape_ms_median": round(statistics.median(scrape), 3),
        "scrape_bytes": len(body),
        "process_cpu_percent_of_core": round(100 * used / elapsed, 2),
        "process_rss_mib": round(rss / 2**20, 1),
    }


def bench_fleet(
    hosts: int = 100, gpus: int = 8, refreshes: int = 10, measure: float = 30.0
) -> dict[str, object]:
    """`gputui fleet` over a fleet of `hosts` x `gpus` served by a fake Prometheus on loopback (a real
    HTTP server answering the reader's queries): one refresh, and the TUI at a 5 s refresh in 200x60."""
    from gputui.export.fleet import FleetReader
    from gputui.export.promql import Prometheus
    from tests.export.fake_prometheus import FakePrometheus

    with FakePrometheus(hosts=hosts, gpus=gpus, gputui=True) as fake:
        reader = FleetReader(Prometheus(fake.url))
        times = []
        for _ in range(refreshes):
            t0 = time.perf_counter()
            view = reader.refresh()
            times.append((time.perf_counter() - t0) * 1000)
        assert view.error is None and len(view.hosts) == hosts, view.error
        tui = bench_tui(
            gpus=hosts * gpus,
            measure=measure,
            cols=200,
            rows=60,
            args=("fleet", "--prometheus", fake.url, "--interval", "5", "--sort", "name"),
            full_frame=(b"UTILIZATION PER GPU", sorted(h.name for h in view.hosts)[0].encode()),
        )
    return {
        "hosts": hosts,
        "gpus": hosts * gpus,
        "queries_per_refresh": view.queries,
        "refresh_ms_median": round(statistics.median(times), 1),
        "tui": tui,
    }


def bench_nvml_calls(gpus: int = 8, ticks: int = 60) -> dict[str, object]:
    """NVML queries per GPU per tick through the Sampler at 1 Hz (slow fields every 5th tick), on a fake
    NVML (tests/collect/fake_nvml.py: real pynvml structs) where every GPU runs one process."""
    from _pytest.monkeypatch import MonkeyPatch

    from gputui.collect.sources.nvml import NvmlSource
    from tests.collect.fake_nvml import FakeNvml, FakeProcess

    patch = MonkeyPatch()
    fake = FakeNvml(n_gpus=gpus).install(patch)
    try:
        for i in range(gpus):
            fake.gpus[i].processes["C"].append(FakeProcess(100 + i, 10 * 2**30))
        with Sampler(
            NvmlSource(), clock=lambda: fake.now, monotonic=lambda: fake.now, scan_holders=False
        ) as sampler:
            fake.reset_counts()
            for _ in range(ticks):
                for i in range(gpus):
                    fake.add_util_sample(i, 100 + i, 90, 40)
                sampler.tick()
                fake.advance(1.0)
        per_gpu = [fake.total_calls(i) / ticks for i in range(gpus)]
        lib = [fake.total_lib_calls(i) / ticks for i in range(gpus)]
    finally:
        patch.undo()
    return {
        "gpus": gpus,
        "ticks": ticks,
        "queries_per_gpu_per_tick": round(max(per_gpu), 2),
        "c_calls_per_gpu_per_tick": round(max(lib), 2),
    }


def bench_gpm(gpus: int = 8, ticks: int = 60) -> dict[str, object]:
    """GPM's cost per GPU per tick (issue 27): its NVML calls, and the time NvmlSource.read takes with GPM
    armed against the same fake without GPM (the fake's own Python counts on both sides, so the difference
    is gputui's: building the request, reading 16 metrics back, checking them)."""
    from _pytest.monkeypatch import MonkeyPatch

    from gputui.collect.sources.nvml import NvmlSource
    from tests.collect.fake_nvml import FakeNvml

    values = {metric: 50.0 for _name, metric in gpm_ids()}

    def run(with_gpm: bool) -> tuple[float, float]:
        patch = MonkeyPatch()
        fake = FakeNvml(n_gpus=gpus).install(patch)
        try:
            for g in fake.gpus:
                g.gpm = dict(values) if with_gpm else None
            src = NvmlSource(gpm="on")
            src.open()
            src.read(True)
            fake.reset_counts()
            took = []
            for i in range(ticks):
                fake.advance(1.0)
                start = time.perf_counter()
                src.read(i % 5 == 0)
                took.append(time.perf_counter() - start)
            calls = sum(fake.calls[i][n] for i in range(gpus) for n in GPM_CALLS) / ticks / gpus
            src.close()
        finally:
            patch.undo()
        return statistics.median(took) * 1000 / gpus, calls

    with_ms, calls = run(True)
    without_ms, _ = run(False)
    return {
        "gpus": gpus,
        "gpm_calls_per_gpu_per_tick": round(calls, 2),
        "read_ms_per_gpu_with_gpm": round(with_ms, 3),
        "read_ms_per_gpu_without_gpm": round(without_ms, 3),
        "gpm_ms_per_gpu_per_tick": round(with_ms - without_ms, 3),
    }


GPM_CALLS = ("nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlGpmMigSampleGet")


def gpm_ids() -> tuple[tuple[str, int], ...]:
    from gputui.collect.sources.gpm import RATE_IDS, RATIO_IDS

    return (*RATIO_IDS, *RATE_IDS)


def _bench_cgroup2() -> Path | None:
    """A writable cgroup v2 directory of the bench's own (root, a cgroup2 mount of the hierarchy's root)."""
    if os.geteuid() != 0:
        return None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if " - cgroup2 " in line and fields[3] == "/":
            base = Path(fields[4]) / f"gputui-bench-{os.getpid()}"
            try:
                base.mkdir()
            except OSError:
                return None
            return base
    return None


def bench_xid_idle(gpus: int = 8, seconds: float = 10.0) -> dict[str, object]:
    """The Xid event thread while no event comes. The fake NVML's wait blocks as the driver's does, for
    the whole timeout (WAIT_MS) unless an event arrives: what is measured is gputui's loop around it."""
    import pytest

    from gputui.collect.sources.xid_events import WAIT_MS, XidWatcher
    from tests.collect.fake_nvml import FakeHandle, FakeNvml

    patch = pytest.MonkeyPatch()
    fake = FakeNvml(n_gpus=gpus).install(patch)
    fake.event_wait_cap = WAIT_MS / 1000
    try:
        fake.nvmlInit()
        watcher = XidWatcher([(i, FakeHandle(i)) for i in range(gpus)])
        assert watcher.start()
        thread = watcher._thread
        assert thread is not None and thread.native_id is not None

        def cpu() -> float:
            t = next(t for t in psutil.Process().threads() if t.id == thread.native_id)
            return t.user_time + t.system_time

        time.sleep(0.1)
        waits0, cpu0, t0 = fake.event_sets[0].waits, cpu(), time.monotonic()
        time.sleep(seconds)
        waits, spent, elapsed = fake.event_sets[0].waits - waits0, cpu() - cpu0, time.monotonic() - t0
        watcher.close(wait=WAIT_MS / 1000 + 1)
        fake.nvmlShutdown()
    finally:
        patch.undo()
    return {
        "gpus": gpus,
        "seconds": round(elapsed, 1),
        "wakeups_per_s": round(waits / elapsed, 2),
        "cpu_ms_per_min": round(spent * 1000 / elapsed * 60, 1),  # clock-tick resolution: 0 is "under 10 ms"
    }


def bench_owners(processes: int = 1000, ticks: int = 50) -> dict[str, object]:
    """Owners.lookup over `processes` processes: every one's first sight (a fresh cache) and a steady
    tick (cached); and Sampler._with_owners, the whole owner step of a tick, over as many rows."""
    import uuid

    from gputui.collect.procs.owners import Owners
    from gputui.model import ProcessRow

    cid = "0123456789abcdef" * 4
    pods = [str(uuid.uuid4()) for _ in range(processes // 40 + 1)]  # 10 processes a pod

    def shape(i: int) -> str | None:
        kind = i % 4
        if kind == 0:
            uid = pods[i // 40].replace("-", "_")
            return (
                f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
                f"cri-containerd-{cid}.scope"
            )
        if kind == 1:
            return f"system.slice/docker-{cid[:-4]}{i % 10000:04d}.scope"
        if kind == 2:
            return f"system.slice/slurmstepd.scope/job_{1000 + i // 20}/step_0/user/task_{i % 20}"
        return None

    tmp = Path(tempfile.mkdtemp(prefix="gputui-bench-owners-"))
    pods_dir = tmp / "pods"
    pods_dir.mkdir()
    for n, uid in enumerate(pods):
        (pods_dir / f"team_trainer-{n}_{uid}").mkdir()
    cg = _bench_cgroup2()
    world = [
        subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    made: list[Path] = []
    try:
        proc = Path("/proc")
        if cg is not None:
            for i, p in enumerate(world):
                rel = shape(i)
                if rel is not None:
                    d = cg / rel
                    if not d.exists():
                        d.mkdir(parents=True)
                        made.append(d)
                    (d / "cgroup.procs").write_text(str(p.pid))
        else:  # a simulated /proc: the same shapes in files of a temporary directory
            proc = tmp / "proc"
            for i, p in enumerate(world):
                rel = shape(i)
                (proc / str(p.pid)).mkdir(parents=True)
                (proc / str(p.pid) / "cgroup").write_text(f"0::/{rel or 'user.slice/session-1.scope'}\n")
        started = {p.pid: psutil.Process(p.pid).create_time() for p in world}

        # Shapes count only where their managers make them: here below the bench's own directory.
        root = f"/{cg.name}" if cg is not None else "/"

        def first_sight() -> Owners:
            owners = Owners(proc=proc, pods_dir=pods_dir, cgroup_root=root)
            for pid, ct in started.items():
                owners.lookup(pid, ct)
            return owners

        first_ms = _timed(first_sight, 5)
        owners = first_sight()
        found = sum(owners.lookup(pid, ct) is not None for pid, ct in started.items())

        def steady() -> None:
            for pid, ct in started.items():
                owners.lookup(pid, ct)
            owners.forget_except(started)

        steady_ms = _timed(steady, ticks)
        sampler = Sampler.__new__(Sampler)
        sampler.owners = owners
        rows = tuple(
            ProcessRow(
                gpu=0,
                pid=pid,
                kinds="C",
                used_memory=1 << 30,
                sm_util=50,
                mem_util=20,
                visible=True,
                create_time=ct,
            )
            for pid, ct in started.items()
        )
        rows_ms = _timed(lambda: sampler._with_owners(rows), ticks)
        return {
            "processes": processes,
            "world": "real cgroup v2 directories" if cg is not None else "simulated /proc",
            "with_an_owner": found,
            "first_sight_ms": first_ms,
            "first_sight_us_per_process": round(first_ms * 1000 / processes, 1),
            "steady_tick_ms_median": steady_ms,
            "sampler_owner_step_ms_median": rows_ms,  # plus a copy of each row that has an owner
        }
    finally:
        for p in world:
            p.kill()
        for p in world:
            p.wait()
        for d in sorted(made, key=lambda d: -len(d.parts)):
            while d != cg and d.exists():
                try:
                    d.rmdir()
                except OSError:
                    break  # a sibling still there: removed with it
                d = d.parent
        if cg is not None:
            with contextlib.suppress(OSError):
                cg.rmdir()
        shutil.rmtree(tmp, ignore_errors=True)


# `gputui --once` on a fake NVML (tests/collect/fake_nvml.py, real pynvml structs): the real one-shot path
# without a driver's own latency, and without the demo's 33 processes to start and reap.
_FAKE_NVML_ONESHOT = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.collect.fake_nvml import FakeNvml, FakeProcess
class Patch:
    def setattr(self, target, name, value, raising=True):
        setattr(target, name, value)
fake = FakeNvml(n_gpus=int(sys.argv[2])).install(Patch())
for i, gpu in enumerate(fake.gpus):
    gpu.processes["C"].append(FakeProcess(100 + i, 10 * 2**30))
    fake.add_util_sample(i, 100 + i, 90, 40)
from gputui.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _median_wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 3)


def bench_oneshot(gpus: int = 8, runs: int = 11) -> dict[str, object]:
    """Wall time of `gputui --once` / `--json` (one reading) as a user's shell sees it: on the demo, on a
    fake NVML, and the demo's own start and stop (spawning and reaping its processes) to tell apart."""
    root = str(Path(__file__).resolve().parents[1])
    demo = [sys.executable, "-m", "gputui", "--demo", "--demo-gpus", str(gpus)]
    fake = [sys.executable, "-c", _FAKE_NVML_ONESHOT, root, str(gpus)]
    starts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        source = DemoSource(gpus=gpus)
        source.open()
        source.close()
        starts.append(time.perf_counter() - t0)
    start_stop = round(statistics.median(starts), 3)
    once = _median_wall([*demo, "--once"], runs)
    return {
        "gpus": gpus,
        "runs": runs,
        "demo_once_wall_s": once,
        "demo_json_wall_s": _median_wall([*demo, "--json"], runs),
        "demo_start_stop_s": start_stop,
        "demo_once_wall_s_less_demo_start_stop": round(once - start_stop, 3),
        "once_wall_s_fake_nvml": _median_wall([*fake, "--once"], runs),
        "json_wall_s_fake_nvml": _median_wall([*fake, "--json"], runs),
        "python_startup_s": _median_wall([sys.executable, "-c", "pass"], runs),
    }


def bench_recording(gpus: int = 8, seconds: float = 60.0) -> dict[str, object]:
    """`gputui record` of the demo at 1 Hz for `seconds`, the same snapshots as JSON Lines and as .gz:
    bytes per snapshot and per hour."""
    from gputui.output.record import Recorder

    tmp = Path(tempfile.mkdtemp(prefix="gputui-bench-rec-"))
    plain, gz = Recorder(tmp / "rec.jsonl"), Recorder(tmp / "rec.jsonl.gz")
    try:
        with Sampler(DemoSource(gpus=gpus, start_at=120.0)) as sampler:
            n, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                snap = sampler.tick()
                plain.write(snap)
                gz.write(snap)
                n += 1
                time.sleep(max(0.0, start + n - time.monotonic()))
        gz_live = (tmp / "rec.jsonl.gz").stat().st_size  # as a running recorder leaves it
        plain.close()
        gz.close()
        sizes = {name: (tmp / name).stat().st_size for name in ("rec.jsonl", "rec.jsonl.gz")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "gpus": gpus,
        "snapshots": n,
        "plain_bytes_per_snapshot": sizes["rec.jsonl"] // n,
        "gzip_bytes_per_snapshot": sizes["rec.jsonl.gz"] // n,
        "plain_mb_per_hour": round(sizes["rec.jsonl"] / n * 3600 / 1e6, 2),
        "gzip_mb_per_hour": round(max(gz_live, sizes["rec.jsonl.gz"]) / n * 3600 / 1e6, 2),
    }


# (name, where the value is in the results, its upper limit): the budgets of the TUI and Zombies issues
# (bytes/s: 1,200 since the 8-to-16-GPU box issue.)
BUDGETS = (
    ("tui bytes/s (8 GPUs, 1 Hz, 120x40)", ("tui", "bytes_per_s"), 1200),
    ("tui CPU % of a core", ("tui", "cpu_percent_of_core"), 1.5),
    ("tui first full frame s", ("tui", "first_full_frame_s"), 0.5),
    ("tui peak RSS MiB", ("tui", "peak_rss_mib"), 60),
    ("holder steady tick ms (1000 processes)", ("holders", "tick_ms_median"), 5),
    (
        "holder full rescan ms vs plain scan ms",
        ("holders", "rescan_ms_median"),
        ("holders", "plain_scan_ms_median"),
    ),
    ("agent poll ms (worst), 16 agents of which 8 stopped", ("agent_poll", "poll_ms_max_with_stopped"), 165),
    ("owner lookup steady tick ms (1000 processes)", ("owners", "steady_tick_ms_median"), 1),
    # Issue 26: one reading answers at once (the demo's own process start and stop counted apart).
    ("--once wall s (8 GPUs, fake NVML)", ("oneshot", "once_wall_s_fake_nvml"), 0.2),
    ("--json wall s (8 GPUs, fake NVML)", ("oneshot", "json_wall_s_fake_nvml"), 0.2),
    (
        "--demo --once wall s less the demo's start/stop (8 GPUs)",
        ("oneshot", "demo_once_wall_s_less_demo_start_stop"),
        0.2,
    ),
    ("recording MB per hour (8-GPU demo, 1 Hz, .jsonl.gz)", ("recording", "gzip_mb_per_hour"), 6),
    # Issue 27: GPM's two calls per GPU per tick (a sample, the metrics since the last), and their time.
    ("GPM NVML calls per GPU per tick", ("gpm", "gpm_calls_per_gpu_per_tick"), 2),
    ("GPM ms per GPU per tick (fake NVML)", ("gpm", "gpm_ms_per_gpu_per_tick"), 0.5),
)


def budgets(results: dict[str, object]) -> list[dict[str, object]]:
    def get(path: tuple[str, str]) -> object:
        section = results.get(path[0])
        return section.get(path[1]) if isinstance(section, dict) else None

    out = []
    for name, path, budget in BUDGETS:
        value = get(path)
        limit = get(budget) if isinstance(budget, tuple) else budget
        ok = isinstance(value, (int, float)) and isinstance(limit, (int, float)) and value <= limit
        out.append({"budget": name, "value": value, "limit": limit, "pass": ok})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", type=float, default=30.0, help="seconds measured in the terminal")
    ap.add_argument("--record-seconds", type=float, default=60.0, help="seconds of demo recorded (1 Hz)")
    ap.add_argument(
        "--only", metavar="NAMES", help="comma-separated sections to run (e.g. oneshot,recording)"
    )
    args = ap.parse_args()
    # As pip installs it: compiled. A checkout run with PYTHONDONTWRITEBYTECODE=1 recompiles every edited
    # module on each start (100 ms of the first frame), which is the checkout's cost, not gputui's.
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "gputui", quiet=1)
    sections: dict[str, Callable[[], object]] = {
        "sampler": bench_sampler,
        "nvml": bench_nvml_calls,
        "gpm": bench_gpm,
        "holders": bench_holders,
        "agent": bench_agent,
        "agent_poll": bench_agent_poll,
        "tui": lambda: bench_tui(measure=args.measure),
        # The other layouts the issue names: one line per GPU, and taller charts for a few GPUs.
        "tui_16_gpus_200x60": lambda: bench_tui(gpus=16, cols=200, rows=60, measure=args.measure),
        "tui_4_gpus_200x60": lambda: bench_tui(gpus=4, cols=200, rows=60, measure=args.measure),
        "attach": bench_attach,
        "exporter": bench_exporter,
        "fleet": lambda: bench_fleet(measure=args.measure),
        "owners": bench_owners,
        "xid_events_idle": bench_xid_idle,
        "oneshot": bench_oneshot,
        "recording": lambda: bench_recording(seconds=args.record_seconds),
    }
    only = sections if args.only is None else args.only.split(",")
    unknown = [name for name in only if name not in sections]
    if unknown:
        ap.error(f"no section {unknown[0]!r}; the sections: {', '.join(sections)}")
    results: dict[str, object] = {name: sections[name]() for name in only}
    # A partial run judges only the budgets of what it ran.
    judged = [b for b in budgets(results) if args.only is None or b["value"] is not None]
    results["budgets"] = judged
    json.dump(results, sys.stdout, indent=2)
    print()
    for b in judged:
        print(
            f"{'PASS' if b['pass'] else 'FAIL'}  {b['budget']}: {b['value']} (limit {b['limit']})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
