"""owners: the owner (container, pod, SLURM job) of 1,000 real `sleep` processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil

from bench.shared import timed
from gputui.collect.sampler import Sampler


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


_CID = "0123456789abcdef" * 4


def _shape(i: int, pods: list[str]) -> str | None:
    """The cgroup of the i-th process: a pod's container, a docker scope, a SLURM step, or none."""
    kind = i % 4
    if kind == 0:
        uid = pods[i // 40].replace("-", "_")
        return (
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
            f"cri-containerd-{_CID}.scope"
        )
    if kind == 1:
        return f"system.slice/docker-{_CID[:-4]}{i % 10000:04d}.scope"
    if kind == 2:
        return f"system.slice/slurmstepd.scope/job_{1000 + i // 20}/step_0/user/task_{i % 20}"
    return None


def _place(
    world: list[subprocess.Popen[bytes]], pods: list[str], cg: Path | None, tmp: Path, made: list[Path]
) -> Path:
    """Put each process in its cgroup (real directories under `cg`, each one made added to `made`), or
    write a simulated /proc under `tmp` with the same shapes; the /proc to read."""
    if cg is None:
        proc = tmp / "proc"
        for i, p in enumerate(world):
            rel = _shape(i, pods)
            (proc / str(p.pid)).mkdir(parents=True)
            (proc / str(p.pid) / "cgroup").write_text(f"0::/{rel or 'user.slice/session-1.scope'}\n")
        return proc
    for i, p in enumerate(world):
        rel = _shape(i, pods)
        if rel is not None:
            d = cg / rel
            if not d.exists():
                d.mkdir(parents=True)
                made.append(d)
            (d / "cgroup.procs").write_text(str(p.pid))
    return Path("/proc")


def _remove(made: list[Path], cg: Path | None) -> None:
    """The cgroup directories made, deepest first (a directory goes once its processes have)."""
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


def bench_owners(processes: int = 1000, ticks: int = 50) -> dict[str, object]:
    """Owners.lookup over `processes` processes: every one's first sight (a fresh cache) and a steady
    tick (cached); and Sampler._with_owners, the whole owner step of a tick, over as many rows."""
    import uuid

    from gputui.collect.procs.owners import Owners
    from gputui.model import ProcessRow

    pods = [str(uuid.uuid4()) for _ in range(processes // 40 + 1)]  # 10 processes a pod
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
        proc = _place(world, pods, cg, tmp, made)
        started = {p.pid: psutil.Process(p.pid).create_time() for p in world}

        # Shapes count only where their managers make them: here below the bench's own directory.
        root = f"/{cg.name}" if cg is not None else "/"

        def first_sight() -> Owners:
            owners = Owners(proc=proc, pods_dir=pods_dir, cgroup_root=root)
            for pid, ct in started.items():
                owners.lookup(pid, ct)
            return owners

        first_ms = timed(first_sight, 5)
        owners = first_sight()
        found = sum(owners.lookup(pid, ct) is not None for pid, ct in started.items())

        def steady() -> None:
            for pid, ct in started.items():
                owners.lookup(pid, ct)
            owners.forget_except(started)

        steady_ms = timed(steady, ticks)
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
        rows_ms = timed(lambda: sampler._with_owners(rows), ticks)
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
        _remove(made, cg)
        shutil.rmtree(tmp, ignore_errors=True)
