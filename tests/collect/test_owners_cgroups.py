"""Owners of real processes moved into real cgroup v2 directories shaped like a Kubernetes pod, a
docker scope and a SLURM job (under a directory of the test's own, removed after); and a real orphan
of the demo whose job has ended, through a Sampler tick. Needs root and a writable cgroup2 mount."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputui.collect.procs.owners import Owners
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource
from gputui.model import Owner

CID = "0123456789abcdef" * 4


def _cgroup2_mount() -> Path | None:
    """The root of the cgroup v2 hierarchy as mounted here (hybrid hosts: /sys/fs/cgroup/unified)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(" ")
        if " - cgroup2 " in line and fields[3] == "/":
            return Path(fields[4])
    return None


def _own_cgroup() -> str | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


class Cgroups:
    """Directories under <mount>/gputui-test-*, and the processes moved into them."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.base = mount / f"gputui-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.base.mkdir()
        self.home = mount / (_own_cgroup() or "/").lstrip("/")

    @property
    def root(self) -> str:
        """Where the managers' locations start for Owners: this test's own directory (cgroup_root)."""
        return self.path("")

    def path(self, rel: str) -> str:
        """The cgroup path /proc/PID/cgroup shows for `rel`."""
        return "/" + str((self.base / rel).relative_to(self.mount))

    def move(self, pid: int, rel: str) -> None:
        d = self.base / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        dirs = sorted((p for p in self.base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, self.base]:
            for pid in (d / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # it ended meanwhile
                    (self.home / "cgroup.procs").write_text(pid)
            d.rmdir()


@pytest.fixture
def cgroups() -> Iterator[Cgroups]:
    if os.geteuid() != 0:
        pytest.skip("moving processes between cgroups takes root")
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount of the hierarchy's root (check `mount | grep cgroup`)")
    try:
        groups = Cgroups(mount)
    except OSError as err:
        pytest.skip(f"cgroup2 at {mount} is not writable: {err}")
    try:
        yield groups
    finally:
        groups.remove()


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _sleep(procs: list[subprocess.Popen[bytes]], env: dict[str, str] | None = None) -> psutil.Process:
    """`sleep 600` with `env`, once its exec is done: before, /proc/PID/environ is pytest's, and in the
    middle of the exec it is empty (a job name read then was None, seen in CI)."""
    p = subprocess.Popen(["sleep", "600"], env={**os.environ, **(env or {})})
    procs.append(p)
    process = psutil.Process(p.pid)
    environ = Path(f"/proc/{p.pid}/environ")
    deadline = time.monotonic() + 10.0
    while process.cmdline() != ["sleep", "600"] or not environ.read_bytes():
        assert time.monotonic() < deadline, "sleep did not start"
        time.sleep(0.005)
    return process


def test_real_processes_in_real_cgroups(
    cgroups: Cgroups, sleepers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    uid = str(uuid.uuid4())
    pod, docker, job, plain = (_sleep(sleepers) for _ in range(4))
    slurm_env = {"SLURM_JOB_ID": "81234", "SLURM_JOB_NAME": "llama\x1b[31m-pretrain"}
    named = _sleep(sleepers, slurm_env)
    cgroups.move(
        pod.pid,
        "kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
    )
    cgroups.move(docker.pid, f"system.slice/docker-{CID}.scope")
    cgroups.move(job.pid, "system.slice/slurmstepd.scope/job_81234/step_0/user/task_0")
    cgroups.move(named.pid, "system.slice/slurmstepd.scope/job_81234/step_0/user/task_1")
    cgroups.move(plain.pid, "user.slice/user-1000.slice/session-4.scope")
    (tmp_path / f"ml-team_trainer-0_{uid}").mkdir()
    owners = Owners(pods_dir=tmp_path, cgroup_root=cgroups.root)

    assert owners.lookup(pod.pid, pod.create_time()) == Owner(
        kind="kubernetes", id=uid, name="trainer-0", namespace="ml-team", container=CID, qos="burstable"
    )
    assert owners.lookup(docker.pid, docker.create_time()) == Owner(kind="docker", id=CID)
    # The job's name from the one process whose environment has it, made printable, for both.
    expected = Owner(kind="slurm", id="81234", name="llama?[31m-pretrain", step="0", user="root")
    assert owners.lookup(named.pid, named.create_time()) == expected
    assert owners.lookup(job.pid, job.create_time()) == expected
    assert owners.lookup(plain.pid, plain.create_time()) is None
    # Its cgroup, seen through the real mount: the job holds the two sleepers.
    found = owners.found(job.pid, job.create_time())
    assert found is not None and found.group == cgroups.path("system.slice/slurmstepd.scope/job_81234")
    assert owners.others_in_group(found, {job.pid}) == 1
    assert owners.others_in_group(found, {job.pid, named.pid}) == 0


def test_an_orphan_of_an_ended_slurm_job_through_a_tick(
    cgroups: Cgroups, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """The demo's real orphan (a worker whose parent exited, holding a stand-in /dev/nvidia0) moved
    into a job's step: the job has ended while nothing else is in its cgroup; it runs while something is."""
    with Sampler(DemoSource(gpus=1)) as sampler:
        sampler.owners = Owners(monotonic=sampler.monotonic, cgroup_root=cgroups.root)
        src = sampler.source
        assert isinstance(src, DemoSource) and src.orphan_pid is not None
        job = "system.slice/slurmstepd.scope/job_4242"
        cgroups.move(src.orphan_pid, f"{job}/step_0/user/task_0")
        deadline = time.monotonic() + 10
        while True:
            rows = [r for r in sampler.tick().processes if r.pid == src.orphan_pid]
            if (rows and rows[0].category == "orphan") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert rows and rows[0].category == "orphan", rows
        assert rows[0].owner is not None and rows[0].owner.label == "slurm 4242.0"
        assert rows[0].reason.startswith("orphan of SLURM job 4242, which has ended; holds /dev/nvidia0")
        # The job's shell still there: a process in the job's cgroup that is not an orphan.
        cgroups.move(_sleep(sleepers).pid, f"{job}/step_batch")
        row = next(r for r in sampler.tick().processes if r.pid == src.orphan_pid)
        assert row.reason.startswith("orphan of SLURM job 4242, which still runs (1 other process); holds")
        # Every other row of the demo has no owner: they are in the test's own cgroup.
        assert all(r.owner is None for r in sampler.tick().processes if r.pid != src.orphan_pid)


ALICE = 1003
TREE = f"user.slice/user-{ALICE}.slice/user@{ALICE}.service"


def test_a_job_forged_in_a_users_own_subtree_is_nobodys(
    cgroups: Cgroups, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """Alice's delegated subtree (user@1003.service, hers as systemd hands it over) holds a copy of bob's
    job's path; her process there, whose environment names bob's job, is no part of it."""
    forged = _sleep(sleepers, {"SLURM_JOB_ID": "81234", "SLURM_JOB_NAME": "evil"})
    real = _sleep(sleepers, {"SLURM_JOB_ID": "81234", "SLURM_JOB_NAME": "bob-train"})
    (cgroups.base / TREE).mkdir(parents=True)
    os.chown(cgroups.base / TREE, ALICE, ALICE)  # what systemd does for user@.service (Delegate=yes)
    cgroups.move(forged.pid, f"{TREE}/slurm/uid_1002/job_81234/step_0")
    for d in ("slurm", "slurm/uid_1002", "slurm/uid_1002/job_81234", "slurm/uid_1002/job_81234/step_0"):
        os.chown(cgroups.base / TREE / d, ALICE, ALICE)  # made by alice
    cgroups.move(real.pid, "system.slice/slurmstepd.scope/job_81234/step_0/user/task_0")
    owners = Owners(cgroup_root=cgroups.root)
    assert owners.lookup(forged.pid, forged.create_time()) is None
    owner = owners.lookup(real.pid, real.create_time())
    assert owner is not None and (owner.id, owner.name) == ("81234", "bob-train")


def test_a_job_below_a_directory_another_user_owns_is_refused(
    cgroups: Cgroups, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """At the manager's location, but `uid_1002` belongs to uid 1003: made by 1003, not by slurmd."""
    p = _sleep(sleepers)
    cgroups.move(p.pid, "slurm/uid_1002/job_81234/step_0")
    assert Owners(cgroup_root=cgroups.root).lookup(p.pid, p.create_time()) is not None
    os.chown(cgroups.base / "slurm/uid_1002", ALICE, ALICE)
    assert Owners(cgroup_root=cgroups.root).lookup(p.pid, p.create_time()) is None
