"""Owners: every cgroup shape parsed (and hostile ones refused), a fake /proc and /var/log/pods for
the names and the cache, and the sampler's orphan reason over a fake cgroup mount."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.collect.procs import owners as owners_mod
from gputui.collect.procs.owners import (
    ContainerNames,
    Owners,
    ask_container_name,
    find,
    parse_cgroup,
    read_pods,
    slurm_job_name,
)
from gputui.collect.sampler import Sampler
from gputui.model import Category, Owner, ProcessRow
from tests.builders import holder_row
from tests.helpers import wait_until

CID = "4f1c0e2ab3d94c5e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e"
UID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
UID_ = UID.replace("-", "_")
STATIC_UID = "6a4bf2c7d8e9f0a1b2c3d4e5f6a7b8c9"

V1_SYSTEMD_OTHERS = "9:pids:/\n8:memory:/\n1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n"


def v2(path: str) -> str:
    return f"0::{path}\n"


def v1(path: str) -> str:
    """A cgroup v1 (cgroupfs driver) process: every controller at the same path."""
    ctrls = ("cpu,cpuacct", "memory", "pids", "devices", "blkio", "name=systemd")
    return "".join(f"{12 - i}:{c}:{path}\n" for i, c in enumerate(ctrls))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Docker: cgroupfs driver (v1 and v2), systemd driver, and the hybrid layout where only the
        # systemd hierarchy and the controllers say so.
        (v1(f"/docker/{CID}"), Owner(kind="docker", id=CID)),
        (v2(f"/docker/{CID}"), Owner(kind="docker", id=CID)),
        (v2(f"/system.slice/docker-{CID}.scope"), Owner(kind="docker", id=CID)),
        (
            f"0::/\n1:name=systemd:/system.slice/docker-{CID}.scope\n4:memory:/system.slice/docker-{CID}.scope\n",
            Owner(kind="docker", id=CID),
        ),
        (v2(f"/system.slice/cri-containerd-{CID}.scope"), Owner(kind="containerd", id=CID)),
        (v2(f"/machine.slice/crio-{CID}.scope"), Owner(kind="cri-o", id=CID)),
        (v2(f"/machine.slice/libpod-{CID}.scope/container"), Owner(kind="podman", id=CID)),
        (v1(f"/libpod_parent/libpod-{CID}"), Owner(kind="podman", id=CID)),
        # Rootless podman: under the user's own systemd, and that user's (by name, else by uid).
        (
            v2(f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope"),
            Owner(kind="podman", id=CID, user=owners_mod._user_name(1000) or "1000"),
        ),
        # Kubernetes, systemd driver: burstable, besteffort, guaranteed (no QoS slice); three runtimes.
        (
            v2(
                "/kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope"
            ),
            Owner(kind="kubernetes", id=UID, container=CID, qos="burstable"),
        ),
        (
            v2(
                f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope"
            ),
            Owner(kind="kubernetes", id=UID, container=CID, qos="besteffort"),
        ),
        (
            v2(f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope"),
            Owner(kind="kubernetes", id=UID, container=CID, qos="guaranteed"),
        ),
        # The pod's own cgroup (no container yet), and a static pod's hash UID.
        (
            v2(f"/kubepods.slice/kubepods-pod{STATIC_UID}.slice"),
            Owner(kind="kubernetes", id=STATIC_UID, qos="guaranteed"),
        ),
        # Kubernetes, cgroupfs driver, v1 and v2.
        (
            v1(f"/kubepods/burstable/pod{UID}/{CID}"),
            Owner(kind="kubernetes", id=UID, container=CID, qos="burstable"),
        ),
        (
            v2(f"/kubepods/pod{UID}/{CID}"),
            Owner(kind="kubernetes", id=UID, container=CID, qos="guaranteed"),
        ),
        # SLURM, cgroup v1 (uid_0: root, whose name every machine has) and v2.
        (
            v1("/slurm/uid_0/job_81234/step_0/task_0"),
            Owner(kind="slurm", id="81234", step="0", user="root"),
        ),
        (
            v1("/slurm_node7/uid_0/job_81234/step_batch"),
            Owner(kind="slurm", id="81234", step="batch", user="root"),
        ),
        (v1("/slurm/uid_0/job_81234"), Owner(kind="slurm", id="81234", user="root")),
        (
            v2("/system.slice/slurmstepd.scope/job_81234/step_batch/user/task_0"),
            Owner(kind="slurm", id="81234", step="batch"),
        ),
        (
            v2("/system.slice/slurmstepd.scope/job_81234/step_extern"),
            Owner(kind="slurm", id="81234", step="extern"),
        ),
        # A process in a deleted cgroup.
        (v2(f"/system.slice/docker-{CID}.scope (deleted)"), Owner(kind="docker", id=CID)),
    ],
)
def test_every_known_shape(text: str, expected: Owner) -> None:
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        v2("/"),
        v2("/user.slice/user-1000.slice/session-3.scope"),
        v2("/system.slice/nginx.service"),
        v2("/system.slice/slurmstepd.scope/system"),  # slurmstepd's own, no job
        V1_SYSTEMD_OTHERS + v2("/init.scope"),
        # Ids of the wrong shape: short, upper case, too long, not hex, not digits.
        v2(f"/docker/{CID[:63]}"),
        v2(f"/docker/{CID.upper()}"),
        v2(f"/system.slice/docker-{CID}0.scope"),
        v2(f"/system.slice/docker-{CID[:-1]}g.scope"),
        v2("/system.slice/slurmstepd.scope/job_12345678901"),
        v2("/system.slice/slurmstepd.scope/job_8a"),
        v2(
            "/system.slice/slurmstepd.scope/job_\uff18\uff11"
        ),  # fullwidth digits: str.isdigit() would take them
        v1("/slurm/uid_x/job_81234/step_0"),
        # Pods: a QoS slice that does not match the pod's, a UID of the wrong shape, the QoS level only.
        v2(f"/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod{UID_}.slice"),
        v2(f"/kubepods.slice/kubepods-pod{UID}.slice"),  # dashes: not the systemd driver's name
        v2("/kubepods.slice/kubepods-burstable.slice"),
        v2("/kubepods/burstable/podnot-a-uid"),
        # The conmon processes beside a container are not in it.
        v2(f"/machine.slice/libpod-conmon-{CID}.scope"),
        # Not lines of /proc/PID/cgroup.
        "",
        "garbage\n",
        "0::relative/docker/" + CID,
        "\0" * 100,
    ],
)
def test_no_owner(text: str) -> None:
    assert parse_cgroup(text) is None


def test_the_outermost_shape_wins() -> None:
    """A container's owner may make cgroups below its own: a fake SLURM job or pod inside a docker
    container is still that container, and a fake job inside a real one is the real job."""
    inner = f"/slurm/uid_0/job_1/step_0/kubepods/pod{UID}/{CID}"
    assert parse_cgroup(v2(f"/system.slice/docker-{CID}.scope{inner}")) == Owner(kind="docker", id=CID)
    owner = parse_cgroup(v2(f"/system.slice/slurmstepd.scope/job_7/step_0/user/docker/{CID}"))
    assert owner == Owner(kind="slurm", id="7", step="0")
    pod = parse_cgroup(v2(f"/kubepods/pod{UID}/{CID}/slurm/uid_0/job_1"))
    assert pod is not None and pod.kind == "kubernetes" and pod.id == UID


def test_cgroup_v2_line_first_then_systemd_then_controllers() -> None:
    """A hybrid host: the unified line decides when it has an owner; else v1's systemd hierarchy."""
    other = "a" * 64
    text = f"4:memory:/docker/{other}\n1:name=systemd:/docker/{other}\n0::/system.slice/docker-{CID}.scope\n"
    assert parse_cgroup(text) == Owner(kind="docker", id=CID)
    text = f"4:memory:/docker/{other}\n1:name=systemd:/system.slice/docker-{CID}.scope\n0::/\n"
    assert parse_cgroup(text) == Owner(kind="docker", id=CID)


def test_lengths_are_bounded() -> None:
    """A path past PATH_MAX, thousands of lines or segments: refused or cut, never slow."""
    assert parse_cgroup(v2("/" + "a" * 5000 + f"/docker/{CID}")) is None
    assert parse_cgroup(v2("/x" * 100 + f"/docker/{CID}")) is None  # past 64 segments
    assert parse_cgroup("0::/\n" * 40 + v1(f"/docker/{CID}")) is None  # past 32 lines
    found = find(v2(f"/kubepods/burstable/pod{UID}/{CID}"))
    assert found is not None and found.group == f"/kubepods/burstable/pod{UID}" and found.hierarchy == ""
    assert find(v1("/slurm/uid_0/job_9/step_0")) is not None


def test_unknown_uid_has_no_user() -> None:
    owner = parse_cgroup(v1("/slurm/uid_4000000000/job_5/step_0"))
    assert owner == Owner(kind="slurm", id="5", step="0", user=None)


def test_slurm_job_name_only_for_its_own_job() -> None:
    env = b"PATH=/bin\0SLURM_JOB_ID=81234\0SLURM_JOB_NAME=train\x1b[2Jbig\0SLURM_JOB_NAME=second\0"
    assert slurm_job_name(env, "81234") == "train?[2Jbig"  # the first, made printable
    assert slurm_job_name(env, "81235") is None  # another job's environment
    assert slurm_job_name(b"SLURM_JOB_NAME=x\0", "81234") is None
    long = b"SLURM_JOB_ID=1\0SLURM_JOB_NAME=" + b"n" * 100_000
    assert slurm_job_name(long, "1") == "n" * owners_mod.MAX_JOB_NAME


def test_read_pods(tmp_path: Path) -> None:
    for name in (
        f"ml-team_trainer-0_{UID}",
        f"kube-system_etcd-node1_{STATIC_UID}",
        f"Bad_Name_{UID}",  # upper case: no Kubernetes name
        "ns_name_not-a-uid",
        f"a_b_c_{UID}",
        f"ns_na\x1bme_{UID}",
    ):
        (tmp_path / name).mkdir()
    assert read_pods(tmp_path) == {UID: ("ml-team", "trainer-0"), STATIC_UID: ("kube-system", "etcd-node1")}
    assert read_pods(tmp_path / "absent") == {}


class FakeProc:
    """A /proc of made-up processes: cgroup and environ files."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, cgroup: str, environ: bytes | None = None) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "cgroup").write_text(cgroup)
        if environ is not None:
            (d / "environ").write_bytes(environ)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def world(tmp_path: Path) -> tuple[FakeProc, Path, Clock, Owners]:
    proc, pods = tmp_path / "proc", tmp_path / "pods"
    proc.mkdir()
    pods.mkdir()
    clock = Clock()
    # No Docker API: these tests must not ask this machine's daemon (see the tests of ContainerNames).
    names = ContainerNames(sockets={})
    return (
        FakeProc(proc),
        pods,
        clock,
        Owners(proc=proc, pods_dir=pods, monotonic=clock, container_names=names),
    )


def test_read_once_per_process_and_start_time(world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, _, _, owners = world
    fake.add(10, v2(f"/system.slice/docker-{CID}.scope"))
    fake.add(11, v2("/user.slice"))
    for _ in range(5):
        assert owners.lookup(10, 1.0) == Owner(kind="docker", id=CID)
        assert owners.lookup(11, 1.0) is None
    assert owners.reads == 2
    # The same pid with another start time is another process: read again.
    fake.add(10, v2("/user.slice"))
    assert owners.lookup(10, 2.0) is None
    assert owners.reads == 3
    # Gone, or never readable: no owner, and no error.
    assert owners.lookup(999, 1.0) is None


def test_forget_departed(world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, _, _, owners = world
    for pid in (1, 2, 3):
        fake.add(pid, v2(f"/docker/{CID}"))
        owners.lookup(pid, 1.0)
    owners.forget_except([2])
    assert owners.reads == 3
    owners.lookup(2, 1.0)
    assert owners.reads == 3
    owners.lookup(1, 1.0)
    assert owners.reads == 4


def test_pod_names_from_var_log_pods_refreshed_every_30s(world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, pods, clock, owners = world
    fake.add(20, v2(f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope"))
    assert owners.lookup(20, 1.0) == Owner(kind="kubernetes", id=UID, container=CID, qos="guaranteed")
    (pods / f"ml-team_trainer-0_{UID}").mkdir()
    clock.t += 10  # too soon to look again
    assert owners.lookup(20, 1.0).name is None  # type: ignore[union-attr]
    clock.t += 25
    owner = owners.lookup(20, 1.0)
    assert owner is not None and (owner.namespace, owner.name) == ("ml-team", "trainer-0")
    assert owner.label == "pod ml-team/trainer-0"
    assert owners.reads == 1  # the name came without reading the process again
    # A second pod seen later is named from the same scan.
    fake.add(21, v1(f"/kubepods/besteffort/pod{UID}/{CID}"))
    owner = owners.lookup(21, 1.0)
    assert owner is not None and owner.name == "trainer-0" and owner.qos == "besteffort"


def test_slurm_job_name_and_user(world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, _, _, owners = world
    path = "/system.slice/slurmstepd.scope/job_81234/step_0/user/task_0"
    fake.add(30, v2(path), b"SLURM_JOB_ID=81234\0SLURM_JOB_NAME=llama-pretrain\0")
    fake.add(31, v2(path))  # its environ is not readable: the job's name comes from its sibling
    fake.add(32, v2("/system.slice/slurmstepd.scope/job_5/step_batch"), b"SLURM_JOB_ID=4\0SLURM_JOB_NAME=x\0")
    a = owners.lookup(30, 1.0)
    b = owners.lookup(31, 1.0)
    c = owners.lookup(32, 1.0)
    assert a is not None and a.name == "llama-pretrain" and a.label == "slurm 81234.0"
    assert b is not None and b.name == "llama-pretrain"
    assert c is not None and c.name is None
    # cgroup v2 names no uid: the job's user is the process's (here the test's own).
    import pwd

    assert a.user == pwd.getpwuid(os.getuid()).pw_name


def test_the_cache_is_bounded(
    world: tuple[FakeProc, Path, Clock, Owners], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, _, owners = world
    monkeypatch.setattr(owners_mod, "MAX_CACHE", 10)
    for pid in range(100):
        owners.lookup(pid, 1.0)
    assert len(owners._cache) <= 10


def _row(pid: int, category: Category = "ok", reason: str = "", visible: bool = True) -> ProcessRow:
    return holder_row(0, pid, visible=visible, create_time=1.0, category=category, reason=reason)


def _cgroup_world(
    tmp_path: Path, world: tuple[FakeProc, Path, Clock, Owners]
) -> tuple[FakeProc, Path, Sampler]:
    """A cgroup2 mount of the job's and pod's directories (mountinfo points at tmp_path/cg)."""
    fake, pods, clock, _ = world
    cg = tmp_path / "cg"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"30 25 0:26 / {cg} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        "31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    )
    owners = Owners(
        proc=fake.root,
        pods_dir=pods,
        monotonic=clock,
        mountinfo=mountinfo,
        container_names=ContainerNames(sockets={}),
    )
    sampler = Sampler.__new__(Sampler)
    sampler.owners = owners
    return fake, cg, sampler


def _procs(d: Path, *pids: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))


REASON = "holds /dev/nvidia0; parent gone (now 1 systemd); not in NVML's list"


def test_orphan_of_an_ended_slurm_job(tmp_path: Path, world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, cg, sampler = _cgroup_world(tmp_path, world)
    job = cg / "system.slice/slurmstepd.scope/job_81234"
    fake.add(40, v2("/system.slice/slurmstepd.scope/job_81234/step_0/user/task_0"))
    fake.add(41, v2("/system.slice/slurmstepd.scope/job_81234/step_0/user/task_1"))
    fake.add(42, v2("/user.slice"))
    for d in ("", "step_0", "step_0/user"):
        _procs(job / d)
    _procs(job / "step_0/user/task_0", 40)
    _procs(job / "step_0/user/task_1", 41)
    rows = (_row(40, "orphan", REASON), _row(41, "orphan", REASON), _row(42, "orphan", REASON))
    out = sampler._with_owners(rows)
    assert out[0].reason == f"orphan of SLURM job 81234, which has ended; {REASON}"
    assert out[1].reason == out[0].reason  # two orphans of one job: neither keeps it alive
    assert out[2] is rows[2]  # no owner: the same row, not a copy
    # slurmstepd (or the job's shell) still there: the job runs.
    _procs(job / "step_0/slurm", 7)
    out = sampler._with_owners(rows)
    assert out[0].reason == f"orphan of SLURM job 81234, which still runs (1 other process); {REASON}"


def test_orphan_of_a_pod(tmp_path: Path, world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, cg, sampler = _cgroup_world(tmp_path, world)
    pod = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
    fake.add(50, v2(f"{pod}/cri-containerd-{CID}.scope"))
    (world[1] / f"ml-team_trainer-0_{UID}").mkdir()
    _procs(cg / pod.lstrip("/"))
    _procs(cg / pod.lstrip("/") / f"cri-containerd-{CID}.scope", 50, 51, 52)
    out = sampler._with_owners((_row(50, "orphan", REASON),))
    assert out[0].owner is not None and out[0].owner.label == "pod ml-team/trainer-0"
    assert out[0].reason == f"orphan of pod ml-team/trainer-0, which still runs (2 other processes); {REASON}"


def test_orphan_whose_cgroup_is_unknown(tmp_path: Path, world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    """No readable cgroup (not root, another mount): whose orphan it is, and nothing about "ended"."""
    fake, _, sampler = _cgroup_world(tmp_path, world)
    fake.add(60, v1("/slurm/uid_0/job_9/step_0"))  # cpu,cpuacct: not mounted here
    fake.add(61, v2("/system.slice/slurmstepd.scope/job_10/step_0"))  # the directory is absent
    fake.add(62, v2(f"/docker/{CID}"))  # a container's orphan: its init adopts it, no "ended"
    out = sampler._with_owners(
        (_row(60, "orphan", REASON), _row(61, "orphan", ""), _row(62, "orphan", REASON))
    )
    assert out[0].reason == f"orphan of SLURM job 9; {REASON}"
    assert out[1].reason == "orphan of SLURM job 10"
    assert out[2].reason == REASON and out[2].owner == Owner(kind="docker", id=CID)


def test_invisible_and_unreadable_rows_keep_no_owner(world: tuple[FakeProc, Path, Clock, Owners]) -> None:
    fake, _, _, owners = world
    fake.add(70, v2(f"/docker/{CID}"))
    sampler = Sampler.__new__(Sampler)
    sampler.owners = owners
    rows = (_row(70, visible=False), _row(71))
    assert sampler._with_owners(rows) == rows
    assert owners.reads == 1  # the invisible row's pid is another namespace's: not read
    assert owners.lookup(70, 1.0) is not None and owners.reads == 2


class FakeDockerApi(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The Docker API's /containers/ID/json on a unix socket: `names` answers, `stall` never does, `held`
    only once `release` is set (so that a test knows the answer came after what it checked)."""

    daemon_threads = True

    def __init__(self, path: str, names: dict[str, object], stall: bool = False, held: bool = False) -> None:
        self.names, self.stall, self.requests = names, stall, 0
        self.release = threading.Event()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.requests += 1
                if api.stall or held:
                    api.release.wait(10)
                if api.stall:
                    return
                cid = self.path.split("/")[2]
                if cid not in api.names:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps({"Id": cid, "Name": api.names[cid], "Config": {"Env": ["A=1"]}}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(path, Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


@pytest.fixture
def api_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # a unix socket's path: at most 107 bytes
        yield Path(d)


def test_container_names_from_the_docker_api(
    world: tuple[FakeProc, Path, Clock, Owners], api_dir: Path
) -> None:
    fake, pods, clock, _ = world
    other = "b" * 64
    api = FakeDockerApi(str(api_dir / "docker.sock"), {CID: "/trainer-3", other: "/evil\x1b[2J"}, held=True)
    try:
        owners = Owners(
            proc=fake.root,
            pods_dir=pods,
            monotonic=clock,
            container_names=ContainerNames({"docker": api_dir / "docker.sock"}, monotonic=clock),
        )
        fake.add(80, v2(f"/system.slice/docker-{CID}.scope"))
        fake.add(81, v2(f"/system.slice/docker-{other}.scope"))
        fake.add(82, v2(f"/machine.slice/libpod-{CID}.scope"))  # podman: no socket of its own here
        assert owners.lookup(80, 1.0) == Owner(kind="docker", id=CID)  # not known yet: never waited for
        assert owners.lookup(81, 1.0) == Owner(kind="docker", id=other)
        api.release.set()  # only now: a quick answer on the thread could beat the second look of lookup()
        assert wait_until(lambda: owners.container_names.asks == 2, 5.0)
        owner = owners.lookup(80, 1.0)
        assert owner is not None and owner.name == "trainer-3" and owner.label == "docker trainer-3"
        assert owners.lookup(81, 1.0) == Owner(kind="docker", id=other)  # not a container name: refused
        assert owners.lookup(82, 1.0) == Owner(kind="podman", id=CID)
        for _ in range(10):
            owners.lookup(81, 1.0)
        assert api.requests == 2  # a name the daemon would not give is not asked for every tick
        clock.t += 61
        owners.lookup(81, 1.0)
        assert wait_until(lambda: api.requests == 3, 5.0)
    finally:
        api.close()


def test_a_stalled_daemon_never_holds_up_a_lookup(
    world: tuple[FakeProc, Path, Clock, Owners], api_dir: Path
) -> None:
    fake, pods, clock, _ = world
    api = FakeDockerApi(str(api_dir / "docker.sock"), {}, stall=True)
    try:
        names = ContainerNames({"docker": api_dir / "docker.sock"}, timeout=1.0, monotonic=clock)
        owners = Owners(proc=fake.root, pods_dir=pods, monotonic=clock, container_names=names)
        fake.add(90, v2(f"/docker/{CID}"))
        t0 = time.perf_counter()
        for _ in range(100):
            assert owners.lookup(90, 1.0) == Owner(kind="docker", id=CID)
        assert time.perf_counter() - t0 < 0.5  # none waited for the 1 s timeout (the rest: slack for load)
        assert wait_until(lambda: names.asks == 1, timeout=5.0)  # the thread gave up after its timeout
        t0 = time.monotonic()
        assert ask_container_name(str(api_dir / "docker.sock"), CID, timeout=0.2) is None
        assert time.monotonic() - t0 < 3.0  # its 0.2 s timeout, not the daemon's 10 s stall
    finally:
        api.close()


def test_no_usable_socket_no_thread(world: tuple[FakeProc, Path, Clock, Owners], api_dir: Path) -> None:
    fake, pods, clock, _ = world
    (api_dir / "docker.sock").write_text("not a socket")
    names = ContainerNames({"docker": api_dir / "docker.sock", "podman": api_dir / "absent.sock"})
    owners = Owners(proc=fake.root, pods_dir=pods, monotonic=clock, container_names=names)
    fake.add(95, v2(f"/docker/{CID}"))
    fake.add(96, v2(f"/machine.slice/libpod-{CID}.scope"))
    assert owners.lookup(95, 1.0) == Owner(kind="docker", id=CID)
    assert owners.lookup(96, 1.0) == Owner(kind="podman", id=CID)
    assert names._thread is None


def test_ask_a_socket_that_is_not_there() -> None:
    assert ask_container_name("/nonexistent/docker.sock", CID) is None
