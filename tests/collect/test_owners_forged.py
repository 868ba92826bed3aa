"""Forged owners: every logged-in user owns a delegated cgroup subtree (`user@UID.service`) and may make
any directory in it, `slurm/uid_1002/job_81234/step_0`, `kubepods.slice/...` or `docker-ID.scope`
included. A job, pod or container counts only where its manager makes it (the hierarchy's root,
`system.slice`, `machine.slice`), and only while the directories above it belong to root (or slurm, or a
rootless container's own user). A SLURM job's name comes from its own user's processes in it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui.collect.procs import owners as owners_mod
from gputui.collect.procs.owners import ContainerNames, Owners, parse_cgroup
from gputui.collect.sampler import Sampler
from gputui.model import Owner
from tests.collect.test_owners import CID, REASON, UID, UID_, Clock, FakeProc, _procs, _row, v1, v2

ALICE = 1003  # the attacker: a logged-in user with her own systemd (user@1003.service)
TREE = f"/user.slice/user-{ALICE}.slice/user@{ALICE}.service"
JOB = "/system.slice/slurmstepd.scope/job_81234"  # bob's real job (cgroup v2)


def _users_name(uid: int) -> str:
    return owners_mod._user_name(uid) or str(uid)


@pytest.mark.parametrize(
    "path",
    [
        # Every shape a manager makes, made again inside alice's own systemd's subtree.
        f"{TREE}/slurm/uid_1002/job_81234/step_0",
        f"{TREE}/app.slice/slurm/uid_1002/job_81234/step_0/task_0",
        f"{TREE}/system.slice/slurmstepd.scope/job_81234/step_0/user/task_0",
        f"{TREE}/slurmstepd.scope/job_81234/step_0",
        f"{TREE}/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
        f"{TREE}/kubepods/burstable/pod{UID}/{CID}",
        f"{TREE}/docker/{CID}",
        f"{TREE}/cri-containerd-{CID}.scope",
        f"{TREE}/user.slice/crio-{CID}.scope",
        # Elsewhere under user.slice (a session is no manager's), and below a service that delegates.
        f"/user.slice/user-{ALICE}.slice/session-3.scope/slurm/uid_1002/job_81234",
        "/user.slice/slurm/uid_1002/job_81234/step_0",
        f"/user.slice/kubepods.slice/kubepods-pod{UID_}.slice",
        "/system.slice/build.service/slurm/uid_1002/job_81234/step_0",
        f"/system.slice/build.service/docker-{CID}.scope",
        f"/system.slice/build.service/kubepods/pod{UID}/{CID}",
        f"/init.scope/docker/{CID}",
        f"/machine.slice/vm.scope/libpod-{CID}.scope",
        # The user's own systemd of another uid than its slice's.
        f"/user.slice/user-1002.slice/user@{ALICE}.service/user.slice/libpod-{CID}.scope",
        # Another cgroup namespace's view: where it lies is unknown.
        f"/../../kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
    ],
)
def test_a_managers_shape_elsewhere_is_no_owner(path: str) -> None:
    assert parse_cgroup(v2(path)) is None
    assert parse_cgroup(v1(path)) is None


def test_rootless_containers_are_their_own_users() -> None:
    """Rootless podman (and docker) put containers in the user's own systemd: that user's, never a job."""
    for path in (
        f"{TREE}/user.slice/libpod-{CID}.scope",
        f"{TREE}/user.slice/libpod-{CID}.scope/container",
        f"{TREE}/user.slice/user-libpod_pod_abc.slice/libpod-{CID}.scope",
    ):
        assert parse_cgroup(v2(path)) == Owner(kind="podman", id=CID, user=_users_name(ALICE)), path
    docker = parse_cgroup(v2(f"{TREE}/user.slice/docker-{CID}.scope"))
    assert docker == Owner(kind="docker", id=CID, user=_users_name(ALICE))
    # Rootful ones name no user.
    assert parse_cgroup(v2(f"/machine.slice/libpod-{CID}.scope")) == Owner(kind="podman", id=CID)


@pytest.fixture
def world(tmp_path: Path) -> tuple[FakeProc, Path, Clock, Path]:
    proc, pods, cg = tmp_path / "proc", tmp_path / "pods", tmp_path / "cg"
    for d in (proc, pods, cg):
        d.mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"30 25 0:26 / {cg} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    return FakeProc(proc), pods, Clock(), mountinfo


def _owners(world: tuple[FakeProc, Path, Clock, Path], **kw: object) -> Owners:
    fake, pods, clock, mountinfo = world
    return Owners(
        proc=fake.root,
        pods_dir=pods,
        monotonic=clock,
        mountinfo=mountinfo,
        container_names=ContainerNames(sockets={}),
        **kw,  # type: ignore[arg-type]
    )


def test_a_forged_job_neither_joins_nor_names_the_real_one(world: tuple[FakeProc, Path, Clock, Path]) -> None:
    """Alice's process in her own `.../slurm/uid_1002/job_81234/step_0`, her SLURM_JOB_NAME saying
    81234: not bob's job, not its name; his job's rows, its sum and a job kill hold his processes only."""
    fake, _, _, _ = world
    owners = _owners(world)
    fake.add(100, v2(f"{TREE}/slurm/uid_1002/job_81234/step_0"), b"SLURM_JOB_ID=81234\0SLURM_JOB_NAME=evil\0")
    fake.add(101, v2(f"{TREE}/system.slice/slurmstepd.scope/job_81234/step_0"), b"SLURM_JOB_ID=81234\0")
    fake.add(102, v2(f"{JOB}/step_0/user/task_0"))  # bob's: its environ is not readable
    sampler = Sampler.__new__(Sampler)
    sampler.owners = owners
    out = sampler._with_owners((_row(100), _row(101), _row(102)))
    assert out[0].owner is None and out[1].owner is None
    assert out[2].owner is not None and (out[2].owner.kind, out[2].owner.id) == ("slurm", "81234")
    assert out[2].owner.name is None


def test_a_v1_jobs_name_only_from_its_own_users_processes(world: tuple[FakeProc, Path, Clock, Path]) -> None:
    """cgroup v1 names the job's user (uid_N): a process of another uid in the job names nothing."""
    fake, _, _, _ = world
    owners = _owners(world)
    me, other = os.getuid(), os.getuid() + 4242  # the fake /proc's processes are this test's user's
    fake.add(110, v1(f"/slurm/uid_{other}/job_7/step_0"), b"SLURM_JOB_ID=7\0SLURM_JOB_NAME=not-yours\0")
    fake.add(111, v1(f"/slurm/uid_{me}/job_8/step_0"), b"SLURM_JOB_ID=8\0SLURM_JOB_NAME=mine\0")
    a, b = owners.lookup(110, 1.0), owners.lookup(111, 1.0)
    assert a is not None and a.id == "7" and a.name is None
    assert b is not None and b.id == "8" and b.name == "mine"


def _tree(cg: Path, rel: str) -> Path:
    d = cg / rel.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.mark.parametrize(
    ("path", "owned_by_another"),
    [
        ("/slurm/uid_1002/job_81234/step_0", "slurm/uid_1002"),
        ("/slurm/uid_1002/job_81234/step_0", "slurm"),
        (f"{JOB}/step_0/user/task_0", "system.slice/slurmstepd.scope"),
        (
            f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
            f"kubepods.slice/kubepods-pod{UID_}.slice",
        ),
        (f"/system.slice/docker-{CID}.scope", "system.slice"),
        (f"/docker/{CID}", "docker"),
    ],
)
def test_a_shape_below_another_users_directory_is_refused(
    world: tuple[FakeProc, Path, Clock, Path],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    owned_by_another: str,
) -> None:
    """The claim is checked against who owns the directories above it (a `uid_1002` that uid 1003 owns:
    made by 1003). Here the owner is faked (the test need not be root; see the real-cgroup tests)."""
    fake, _, _, mountinfo = world
    cg = Path(mountinfo.read_text().split(" ")[4])
    _tree(cg, path)
    stranger = os.geteuid() + 4242
    real = owners_mod._dir_uid if hasattr(owners_mod, "_dir_uid") else None

    def dir_uid(p: str) -> int | None:
        if Path(p) == cg / owned_by_another:
            return stranger
        return real(p) if real is not None else None

    monkeypatch.setattr(owners_mod, "_dir_uid", dir_uid, raising=False)
    fake.add(120, v2(path))
    assert _owners(world).lookup(120, 1.0) is None
    # The same tree owned as its manager leaves it: the owner is back.
    monkeypatch.setattr(owners_mod, "_dir_uid", real, raising=False)
    assert _owners(world).lookup(120, 1.0) is not None


def test_a_rootless_container_below_another_users_directory_is_refused(
    world: tuple[FakeProc, Path, Clock, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, _, _, mountinfo = world
    cg = Path(mountinfo.read_text().split(" ")[4])
    path = f"{TREE}/user.slice/libpod-{CID}.scope"
    _tree(cg, path)
    owner_of: dict[Path, int] = {cg / TREE.lstrip("/"): ALICE, cg / TREE.lstrip("/") / "user.slice": ALICE}
    monkeypatch.setattr(owners_mod, "_dir_uid", lambda p: owner_of.get(Path(p), 0), raising=False)
    fake.add(130, v2(path))
    assert _owners(world).lookup(130, 1.0) == Owner(kind="podman", id=CID, user=_users_name(ALICE))
    owner_of[cg / TREE.lstrip("/") / "user.slice"] = ALICE + 1  # not alice's: not her container either
    assert _owners(world).lookup(130, 1.0) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid takes root")
def test_a_shape_below_a_directory_chowned_to_another_user_is_refused(
    world: tuple[FakeProc, Path, Clock, Path],
) -> None:
    """The same with real ownership: `slurm/uid_1002` made by (owned by) uid 1003."""
    fake, _, _, mountinfo = world
    cg = Path(mountinfo.read_text().split(" ")[4])
    _tree(cg, "/slurm/uid_1002/job_81234/step_0")
    fake.add(140, v2("/slurm/uid_1002/job_81234/step_0"))
    assert _owners(world).lookup(140, 1.0) is not None
    os.chown(cg / "slurm/uid_1002", ALICE, ALICE)
    assert _owners(world).lookup(140, 1.0) is None


def test_no_mount_trusts_the_managers_locations_only(tmp_path: Path) -> None:
    """Directories that cannot be read (no cgroup mount here): the location alone decides."""
    fake = FakeProc(tmp_path / "proc")
    fake.root.mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("")
    owners = Owners(
        proc=fake.root, pods_dir=tmp_path, mountinfo=mountinfo, container_names=ContainerNames(sockets={})
    )
    fake.add(150, v2(f"{JOB}/step_0"))
    fake.add(151, v2(f"{TREE}{JOB}/step_0"))
    assert owners.lookup(150, 1.0) is not None
    assert owners.lookup(151, 1.0) is None


def test_an_orphan_in_a_forged_job_is_nobodys(world: tuple[FakeProc, Path, Clock, Path]) -> None:
    """Nor does alice's forged job keep bob's job "running": it is no part of his job's cgroup."""
    fake, _, _, mountinfo = world
    cg = Path(mountinfo.read_text().split(" ")[4])
    _procs(_tree(cg, JOB))
    _procs(_tree(cg, f"{JOB}/step_0"), 160)
    _procs(_tree(cg, f"{TREE}/slurm/uid_1002/job_81234/step_0"), 161)
    fake.add(160, v2(f"{JOB}/step_0"))
    fake.add(161, v2(f"{TREE}/slurm/uid_1002/job_81234/step_0"))
    sampler = Sampler.__new__(Sampler)
    sampler.owners = _owners(world)
    out = sampler._with_owners((_row(160, "orphan", REASON), _row(161, "orphan", REASON)))
    assert out[0].reason == f"orphan of SLURM job 81234, which has ended; {REASON}"
    assert out[1].owner is None and out[1].reason == REASON


def test_the_job_metric_sums_the_real_jobs_memory_only(world: tuple[FakeProc, Path, Clock, Path]) -> None:
    """gputui_job_gpu_memory_bytes of bob's job 81234: his process's memory, not alice's forged one's."""
    from tests.export.test_metrics import MIB, proc, scrape_snapshot, snapshot

    fake, _, _, _ = world
    fake.add(170, v2(f"{TREE}/slurm/uid_1002/job_81234/step_0"))
    fake.add(171, v2(f"{JOB}/step_0/user/task_0"))
    sampler = Sampler.__new__(Sampler)
    sampler.owners = _owners(world)
    rows = (proc(170, used=50_000 * MIB, user="alice"), proc(171, used=3 * MIB, user="bob"))
    out = sampler._with_owners(rows)
    s = scrape_snapshot(snapshot(processes=out))
    assert s.by("gputui_job_gpu_memory_bytes", "gpu", hpc_job="81234") == {"0": 3 * MIB}
