"""The orphan's "job has ended / still runs" walk is bounded per tick: a job's cgroup is read at most once
a tick whatever the number of its orphans, a large one at most once every GROUP_TTL_S, and all groups
together share one budget of directory listings and file opens (MAX_TICK_READS). Counted, not timed:
every os.scandir, os.listdir, os.open and open() below the cgroup root is a read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputui.collect.procs import owners as owners_mod
from gputui.collect.procs.owners import ContainerNames, Owners
from gputui.collect.sampler import Sampler
from gputui.model import ProcessRow
from tests.collect.test_owners import REASON, Clock, FakeProc, _procs, _row, v2

BOUND = getattr(owners_mod, "MAX_TICK_READS", 2048)
SCOPE = "system.slice/slurmstepd.scope"


class Counter:
    """Calls that read the cgroup tree (a path below `root`)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.n = str(root), 0
        for module, name in ((os, "scandir"), (os, "listdir"), (os, "open"), (owners_mod, "open")):
            real = getattr(module, name, None) or open
            monkeypatch.setattr(module, name, self._counted(real), raising=False)

    def _counted(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any = ".", *args: Any, **kw: Any) -> Any:
            if os.fspath(path).startswith(self.root) if isinstance(path, (str, os.PathLike)) else False:
                self.n += 1
            return real(path, *args, **kw)

        return call

    def take(self) -> int:
        n, self.n = self.n, 0
        return n


def _world(tmp_path: Path) -> tuple[FakeProc, Path, Clock, Sampler]:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    proc.mkdir()
    cg.mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 25 0:26 / {cg} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    clock = Clock()
    owners = Owners(
        proc=proc,
        pods_dir=tmp_path,
        monotonic=clock,
        mountinfo=mountinfo,
        container_names=ContainerNames(sockets={}),
    )
    sampler = Sampler.__new__(Sampler)
    sampler.owners = owners
    return FakeProc(proc), cg, clock, sampler


def _orphans(fake: FakeProc, cg: Path, job: int, pids: range, dirs: int) -> tuple[ProcessRow, ...]:
    """Job `job` with `dirs` empty cgroups below its first task, and `pids` as orphans in its tasks."""
    top = cg / SCOPE / f"job_{job}"
    for d in ("", "step_0", "step_0/user"):
        _procs(top / d)
    for n in range(dirs):  # each with its cgroup.procs, as cgroupfs makes them
        _procs(top / "step_0/user/task_0" / f"d{n // 100}")
        _procs(top / "step_0/user/task_0" / f"d{n // 100}" / f"e{n % 100}")
    for k, pid in enumerate(pids):
        task = f"step_0/user/task_{k}"
        _procs(top / task, pid)
        fake.add(pid, v2(f"/{SCOPE}/job_{job}/{task}"))
    return tuple(_row(pid, "orphan", REASON) for pid in pids)


def test_a_job_of_thousands_of_cgroups_with_sixty_orphans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, cg, clock, sampler = _world(tmp_path)
    rows = _orphans(fake, cg, 81234, range(1000, 1060), dirs=4000)
    count = Counter(cg, monkeypatch)
    per_tick = []
    for _ in range(25):
        out = sampler._with_owners(rows)
        per_tick.append(count.take())
        clock.t += 1.0
    assert max(per_tick) <= BOUND, per_tick
    # Too large to count: re-tried only every GROUP_TTL_S (here 25 ticks of 1 s: 3 times at most).
    assert sum(per_tick) <= 3 * BOUND, per_tick
    assert out[0].reason == f"orphan of SLURM job 81234; {REASON}"  # unknown: said so by saying nothing


def test_sixty_jobs_share_one_budget_and_all_get_an_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, cg, clock, sampler = _world(tmp_path)
    rows: tuple[ProcessRow, ...] = ()
    for j in range(60):
        rows += _orphans(fake, cg, 5000 + j, range(2000 + j, 2001 + j), dirs=60)
    count = Counter(cg, monkeypatch)
    per_tick = []
    for _ in range(8):
        out = sampler._with_owners(rows)
        per_tick.append(count.take())
        clock.t += 1.0
    assert max(per_tick) <= BOUND, per_tick
    # Each job read whole once, in turns, then remembered for a while: every orphan's job is known.
    assert all(r.reason.endswith(f", which has ended; {REASON}") for r in out), [r.reason for r in out]


def test_sixty_orphans_of_one_small_job_read_it_once_a_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, cg, clock, sampler = _world(tmp_path)
    rows = _orphans(fake, cg, 81234, range(1000, 1060), dirs=0)
    sampler._with_owners(rows)
    dirs = sum(1 for _ in (cg / SCOPE / "job_81234").rglob("*") if _.is_dir()) + 1
    count = Counter(cg, monkeypatch)
    out = sampler._with_owners(rows)
    assert count.take() <= 2 * dirs  # one listing and one cgroup.procs a directory, once
    assert out[0].reason == f"orphan of SLURM job 81234, which has ended; {REASON}"
    # A small job is read again on the next tick: a process that joined it is seen at once.
    _procs(cg / SCOPE / "job_81234/step_0/slurm", 7)
    clock.t += 1.0
    out = sampler._with_owners(rows)
    assert out[0].reason == f"orphan of SLURM job 81234, which still runs (1 other process); {REASON}"
