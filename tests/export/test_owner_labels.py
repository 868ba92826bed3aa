"""Owners in the scrape: process series carry dcgm-exporter's `container`, `pod`, `namespace` and
`hpc_job` labels, and gputui_job_gpu_memory_bytes sums a job's GPU memory per GPU. Owner names come from
cgroup paths other users make: bounded and printable."""

from __future__ import annotations

from dataclasses import replace

from gputui.export.exporter import Exporter
from gputui.model import Owner, ProcessRow
from tests.export.test_metrics import MIB, FakeSampler, proc, scrape, scrape_snapshot, snapshot

POD_UID = "0f6c1a52-7d3e-4b8e-9a41-5c2d8e7f9b10"
CID = "3f4e9a0c1b2d" + "e" * 52  # 64 hex
JOB = "gputui_job_gpu_memory_bytes"
PROCS = "gputui_process_gpu_memory_bytes"


def owned(
    pid: int, owner: Owner | None, gpu: int = 0, used: int | None = MIB, user: str = "alice"
) -> ProcessRow:
    return replace(proc(pid, gpu=gpu, used=used, user=user), owner=owner)


def pod(container: str = CID, name: str | None = "trainer-0", namespace: str | None = "ml") -> Owner:
    return Owner("kubernetes", POD_UID, name=name, namespace=namespace, container=container, qos="guaranteed")


def owner_of(labels: dict[str, str]) -> tuple[str, str, str, str]:
    return labels["container"], labels["pod"], labels["namespace"], labels["hpc_job"]


def test_a_pods_process_has_dcgm_exporters_pod_labels() -> None:
    s = scrape_snapshot(snapshot(processes=[owned(10, pod())]))
    (labels, _), *_ = s.series(PROCS)
    assert owner_of(labels) == (CID[:12], "trainer-0", "ml", "")


def test_a_pod_known_only_by_its_uid_is_named_by_it() -> None:
    s = scrape_snapshot(snapshot(processes=[owned(10, pod(name=None, namespace=None))]))
    (labels, _), *_ = s.series(PROCS)
    assert owner_of(labels) == (CID[:12], POD_UID, "", "")


def test_a_container_is_named_by_its_name_else_its_short_id() -> None:
    procs = [
        owned(1, Owner("docker", CID, name="vllm-server")),
        owned(2, Owner("containerd", "a" * 64)),
    ]
    s = scrape_snapshot(snapshot(processes=procs))
    by_pid = {labels["pid"]: owner_of(labels) for labels, _ in s.series(PROCS)}
    assert by_pid == {"1": ("vllm-server", "", "", ""), "2": ("a" * 12, "", "", "")}


def test_a_slurm_jobs_process_has_the_hpc_job_label() -> None:
    s = scrape_snapshot(snapshot(processes=[owned(7, Owner("slurm", "81234", step="0", user="uid_1000"))]))
    (labels, _), *_ = s.series(PROCS)
    assert owner_of(labels) == ("", "", "", "81234")


def test_a_plain_process_has_the_labels_empty_and_no_job() -> None:
    s = scrape_snapshot(snapshot(processes=[owned(5, None)]))
    (labels, _), *_ = s.series(PROCS)
    assert owner_of(labels) == ("", "", "", "")
    assert s.series(JOB) == []
    assert f"# TYPE {JOB} gauge" in s.text  # described even while empty


def test_a_jobs_memory_is_summed_per_gpu_over_its_processes_and_steps() -> None:
    job = Owner("slurm", "81234", step="0", user="uid_1000")
    procs = [
        owned(1, job, gpu=0, used=3 * MIB),
        owned(2, replace(job, step="batch"), gpu=0, used=2 * MIB),  # another step: the same job
        owned(2, replace(job, step="batch"), gpu=0, used=2 * MIB),  # listed twice: counted once
        owned(3, job, gpu=1, used=4 * MIB),
        owned(4, job, gpu=1, used=None),  # memory unknown: not counted as 0 nor as anything
        owned(9, Owner("slurm", "99999"), gpu=1, used=MIB),  # another job
    ]
    s = scrape_snapshot(snapshot(processes=procs))
    assert s.by(JOB, "gpu", hpc_job="81234") == {"0": 5 * MIB, "1": 4 * MIB}
    assert s.by(JOB, "gpu", hpc_job="99999") == {"1": MIB}
    labels, _ = s.series(JOB, hpc_job="81234", gpu="0")[0]
    assert labels["kind"] == "slurm" and labels["user"] == "uid_1000"  # the job's user, from its cgroup
    assert labels["Hostname"] == "node-7" and labels["UUID"].startswith("GPU-")


def test_a_pods_containers_are_one_job_and_containers_are_each_one() -> None:
    procs = [
        owned(1, pod(container="1" * 64), used=MIB),
        owned(2, pod(container="2" * 64), used=2 * MIB),  # a sidecar of the same pod
        owned(3, Owner("docker", CID, name="vllm"), used=4 * MIB, user="root"),
        owned(4, Owner("docker", CID, name="vllm"), used=8 * MIB, user="bob"),
    ]
    s = scrape_snapshot(snapshot(processes=procs))
    jobs = {(lb["kind"], *owner_of(lb)): (v, lb["user"]) for lb, v in s.series(JOB)}
    assert jobs == {
        ("kubernetes", "", "trainer-0", "ml", ""): (3 * MIB, "alice"),  # the pod: no one container
        ("docker", "vllm", "", "", ""): (12 * MIB, ""),  # two users: none is the job's
    }


def test_hostile_owner_names_are_bounded_and_printable() -> None:
    evil = "x\x1b]0;pwned\x07\n\ud8ff" + "y" * 10_000
    procs = [
        owned(1, Owner("docker", "c" * 64, name=evil)),
        owned(2, Owner("kubernetes", POD_UID, name=evil, namespace='n"s\\', container=evil)),
        owned(3, Owner("slurm", evil, user=evil)),
    ]
    exporter = Exporter(FakeSampler([snapshot(processes=procs)]))  # type: ignore[arg-type]
    exporter.tick()
    s = scrape(exporter)  # through the exporter: printable_labels cleans what the families hold
    for name in (PROCS, JOB):
        for labels, _ in s.series(name):
            for key in ("container", "pod", "namespace", "hpc_job", "user"):
                assert len(labels[key]) <= 253 and labels[key].isprintable(), (name, key)
    pod_labels = s.series(PROCS, pid="2")[0][0]
    assert pod_labels["namespace"] == 'n"s\\'  # quotes and backslashes survive the exposition
    assert pod_labels["container"] == "x?]0;pwned??"  # its first 12 characters, made printable
    assert "\x1b" not in s.text and "\x07" not in s.text
