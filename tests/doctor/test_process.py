"""`gputui doctor --pid`: process.gather and process.checks against real child processes.

The children hold stand-in device files (regular files named nvidiactl, nvidia-uvm, nvidia0, nvidia1 in a
temporary directory) exactly as a CUDA process holds /dev/nvidia*, so gather reads their real
/proc/PID/fd and /proc/PID/environ. NVML's view (which GPUs, how much memory) is a SystemFacts made by
hand, with GpuFacts whose minor numbers match the stand-in files.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from gputui.analyze import classify
from gputui.collect.agents.reply import parse
from gputui.doctor import process
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.process import NoSuchProcess, ProcessFacts
from gputui.doctor.report import OK, PROBLEM, WARNING, Check
from gputui.model import AgentReport, GpuProcess
from tests.helpers import wait_until
from tests.holders import Child, Spawner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEVICE_NAMES = ("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1")
GIB = 1 << 30
TIMEOUT = 10.0


# -- helpers -----------------------------------------------------------------------------------------


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    path = tmp_path / "dev"
    path.mkdir()
    for name in DEVICE_NAMES:
        (path / name).touch()
    return path


GPUS = (
    GpuFact(
        0,
        "NVIDIA A100-SXM4-80GB",
        "GPU-aaaaaaaa-0000",
        "00000000:07:00.0",
        minor=0,
        mig=False,
        capability=(8, 0),
        sm_clock_max=1410,
    ),
    GpuFact(
        1,
        "NVIDIA A100-SXM4-80GB",
        "GPU-bbbbbbbb-1111",
        "00000000:0F:00.0",
        minor=1,
        mig=False,
        capability=(8, 0),
        sm_clock_max=1410,
    ),
)


def system(*procs: GpuProcess) -> SystemFacts:
    return SystemFacts(
        kernel_module="550.54.14",
        library="/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        driver_version="550.54.14",
        cuda_version="12.4",
        gpus=GPUS,
        processes=procs,
        device_files={f"/dev/{n}": "ok" for n in DEVICE_NAMES},
    )


def listed(pid: int, gpu: int = 0, used: int | None = 10 * GIB) -> GpuProcess:
    return GpuProcess(gpu=gpu, pid=pid, kinds="C", used_memory=used, sm_util=0, mem_util=0)


def no_agent(_pid: int) -> AgentReport | None:
    return None


def examine(pid: int, facts: SystemFacts, devices: Path, **kw: Any) -> tuple[ProcessFacts, list[Check]]:
    kw.setdefault("agent", no_agent)
    p = process.gather(pid, facts, devices, **kw)
    return p, process.checks(p, facts)


def held(devices: Path, *names: str) -> tuple[str, ...]:
    return tuple(sorted(os.path.join(os.path.realpath(devices), n) for n in names))


def lines(checks: list[Check], status: str | None = None) -> list[str]:
    return [c.found for c in checks if status is None or c.status == status]


def env_without_cvd(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    env.update(extra)
    return env


# -- the device files --------------------------------------------------------------------------------


def test_a_process_holding_the_device_files(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    facts = system(listed(child.pid))
    p, checks = examine(child.pid, facts, devices)
    assert p.pid == child.pid
    assert p.devices == held(devices, "nvidia-uvm", "nvidia0", "nvidiactl")
    assert p.command.startswith(sys.executable) and p.command.endswith(str(devices / "nvidia0"))
    assert p.category == classify.OK
    assert all(c.area == "process" for c in checks)
    first = checks[0]
    assert first.status == OK and first.fix == ""
    names = ", ".join(held(devices, "nvidia-uvm", "nvidia0", "nvidiactl"))
    assert first.found == f"pid {child.pid} holds {names}"
    assert lines(checks, PROBLEM) == [] and lines(checks, WARNING) == []


def test_a_process_holding_nothing_never_initialized_cuda(devices: Path, holders: Spawner) -> None:
    child = holders()
    p, checks = examine(child.pid, system(), devices)
    assert p.devices == ()
    assert p.memory == {}
    assert p.category == classify.OK  # neither NVML nor the device files know it: no class
    problems = [c for c in checks if c.status == PROBLEM]
    assert len(problems) == 1
    assert problems[0].found == f"pid {child.pid} holds no /dev/nvidia* file: it never initialized CUDA"
    assert "CUDA_VISIBLE_DEVICES" in problems[0].fix and "--python" in problems[0].fix


def test_only_the_files_of_the_devices_dir_count(devices: Path, holders: Spawner, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "nvidia0").touch()
    child = holders("nvidia1")
    p, _ = examine(child.pid, system(listed(child.pid, gpu=1)), elsewhere)
    assert p.devices == ()
    p, checks = examine(child.pid, system(listed(child.pid, gpu=1)), devices)
    assert p.devices == held(devices, "nvidia1")
    assert checks[0].status == OK


# -- CUDA_VISIBLE_DEVICES from its real environment --------------------------------------------------


def test_its_cuda_visible_devices_names_the_nvml_gpu(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia1", env=env_without_cvd(CUDA_VISIBLE_DEVICES="1"))
    p, checks = examine(child.pid, system(listed(child.pid, gpu=1)), devices)
    assert p.environ is not None and p.environ["CUDA_VISIBLE_DEVICES"] == "1"
    cvd = [c for c in checks if "CUDA_VISIBLE_DEVICES" in c.found]
    assert len(cvd) == 1
    assert cvd[0].area == "process" and cvd[0].status == OK
    assert cvd[0].found == f"pid {child.pid}: its CUDA_VISIBLE_DEVICES=1: cuda:0 = NVML GPU 1"


def test_its_cuda_visible_devices_minus_one_hides_every_gpu(devices: Path, holders: Spawner) -> None:
    child = holders(env=env_without_cvd(CUDA_VISIBLE_DEVICES="-1"))
    p, checks = examine(child.pid, system(), devices)
    assert p.environ is not None and p.environ["CUDA_VISIBLE_DEVICES"] == "-1"
    cvd = [c for c in checks if "CUDA_VISIBLE_DEVICES=-1" in c.found]
    assert len(cvd) == 1
    assert cvd[0].status == PROBLEM and cvd[0].area == "process"
    assert cvd[0].found.startswith(f"pid {child.pid}: its CUDA_VISIBLE_DEVICES=-1: -1 hides every GPU")
    assert "0..1" in cvd[0].fix  # the ids this machine has


def test_its_cuda_visible_devices_unset_sees_all_gpus(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia0", env=env_without_cvd())
    p, checks = examine(child.pid, system(listed(child.pid)), devices)
    assert p.environ is not None and "CUDA_VISIBLE_DEVICES" not in p.environ
    assert (
        Check("process", OK, f"pid {child.pid}: its CUDA_VISIBLE_DEVICES is unset: CUDA sees all 2 GPUs")
        in checks
    )


def test_the_test_processes_own_environment_does_not_leak_in(
    devices: Path, holders: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child's environment is read from /proc/PID/environ, not taken from the doctor's own."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    child = holders(env=env_without_cvd(CUDA_VISIBLE_DEVICES="1"))
    p, _ = examine(child.pid, system(), devices)
    assert p.environ is not None and p.environ["CUDA_VISIBLE_DEVICES"] == "1"


# -- GPU memory, idle --------------------------------------------------------------------------------


def test_gpu_memory_from_nvml(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    other = holders("nvidiactl", "nvidia1")
    facts = system(listed(child.pid, gpu=0, used=10 * GIB), listed(other.pid, gpu=1, used=3 * GIB))
    p, checks = examine(child.pid, facts, devices)
    assert p.memory == {0: 10 * GIB}  # only its own
    assert Check("process", OK, f"pid {child.pid} uses 10.0 GiB on GPU 0") in checks


def test_gpu_memory_on_two_gpus(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1")
    facts = system(listed(child.pid, gpu=1, used=2 * GIB), listed(child.pid, gpu=0, used=10 * GIB))
    p, checks = examine(child.pid, facts, devices)
    assert p.memory == {0: 10 * GIB, 1: 2 * GIB}
    assert f"pid {child.pid} uses 10.0 GiB on GPU 0, 2.0 GiB on GPU 1" in lines(checks, OK)
    assert lines(checks, PROBLEM) == [] and lines(checks, WARNING) == []


def test_holds_device_files_but_nvml_lists_no_memory(devices: Path, holders: Spawner) -> None:
    """NVML lists it, without a memory figure (it may not say, e.g. for another user's process)."""
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    p, checks = examine(child.pid, system(listed(child.pid, used=None)), devices)
    assert p.memory == {0: None}
    assert p.category == classify.OK
    warnings = [c for c in checks if c.status == WARNING]
    assert [c.found for c in warnings] == [
        f"pid {child.pid} holds device files but NVML lists no GPU memory for it"
    ]
    assert "container" in warnings[0].fix
    assert not any(f.startswith(f"pid {child.pid} uses ") for f in lines(checks, OK))
    assert lines(checks, PROBLEM) == []


def test_holds_device_files_and_nvml_does_not_list_it(devices: Path, holders: Spawner) -> None:
    """Not in NVML's list at all, and its parent (this test) is on no GPU: unseen."""
    child = holders("nvidiactl", "nvidia0")
    p, checks = examine(child.pid, system(), devices)
    assert p.memory == {}
    assert p.category == classify.UNSEEN
    assert f"pid {child.pid} holds device files but NVML lists no GPU memory for it" in lines(checks, WARNING)
    (unseen,) = [c for c in checks if c.status == PROBLEM]
    assert unseen.found.startswith(f"pid {child.pid} is unseen: holds /dev/nvidia0")
    assert "kill it" in unseen.fix


def test_idle_on_the_gpu_while_holding_memory(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    asked: list[dict[int, int | None]] = []

    def idle(memory: dict[int, int | None]) -> float:
        asked.append(dict(memory))
        return 600.0

    p, checks = examine(child.pid, system(listed(child.pid)), devices, idle_s=idle)
    assert asked == [{0: 10 * GIB}]  # asked about its own GPUs
    assert p.idle_s == 600.0
    (idle_warning,) = [c for c in checks if c.status == WARNING]
    assert idle_warning.found == (f"pid {child.pid} holds GPU memory but its GPU has been at 0% for 10m")
    assert "py-spy dump" in idle_warning.fix
    assert f"pid {child.pid} uses 10.0 GiB on GPU 0" in lines(checks, OK)


@pytest.mark.parametrize("seconds", [30.0, None], ids=["30s", "unknown"])
def test_not_idle_long_enough_for_a_warning(devices: Path, holders: Spawner, seconds: float | None) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    p, checks = examine(child.pid, system(listed(child.pid)), devices, idle_s=lambda _m: seconds)
    assert p.idle_s == seconds
    assert not any("0%" in c.found for c in checks)
    assert lines(checks, WARNING) == [] and lines(checks, PROBLEM) == []


def test_idle_is_not_asked_without_gpu_memory(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia0")
    asked: list[dict[int, int | None]] = []

    def idle_s(m: dict[int, int | None]) -> float:
        asked.append(m)
        return 3600.0

    p, checks = examine(child.pid, system(listed(child.pid, used=None)), devices, idle_s=idle_s)
    assert asked == [] and p.idle_s is None
    assert not any("0%" in c.found for c in checks)


# -- zombie classes ----------------------------------------------------------------------------------


def make_zombie(holders: Spawner, parent: Child) -> int:
    zombie = holders.fork(parent, "zombie")
    assert wait_until(lambda: psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE, TIMEOUT)
    assert psutil.Process(zombie).ppid() == parent.pid
    return zombie


@pytest.mark.parametrize("nvml_lists", ["the-zombie", "its-parent"])
def test_a_defunct_process_is_a_problem(devices: Path, holders: Spawner, nvml_lists: str) -> None:
    """A parent that never reaps a child that exited. The defunct holds no files (its descriptors are
    closed); NVML may still list it (a context not yet torn down) or list its parent."""
    parent = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    zombie = make_zombie(holders, parent)
    facts = system(listed(zombie if nvml_lists == "the-zombie" else parent.pid))
    p, checks = examine(zombie, facts, devices)
    assert p.category == classify.DEFUNCT
    defunct = [c for c in checks if c.status == PROBLEM and " is defunct" in c.found]
    assert len(defunct) == 1
    assert defunct[0].found.startswith(f"pid {zombie} is defunct: ")
    assert f"its parent {parent.pid} has not reaped it" in defunct[0].found
    assert defunct[0].fix == "only its parent can reap it: end or signal the parent"
    assert checks == defunct  # nothing about its files or environment: they went when it exited


def test_an_orphan_holder_is_a_problem(devices: Path, holders: Spawner) -> None:
    parent = holders("nvidiactl", "nvidia0")
    orphan = holders.fork(parent, "fork-holder")
    assert wait_until(
        lambda: (
            process.gather(orphan, system(), devices, agent=no_agent).devices
            == held(devices, "nvidia0", "nvidiactl")
        ),
        TIMEOUT,
    )
    parent.popen.kill()  # its parent goes: it is reparented to init (or a subreaper)
    parent.popen.wait(timeout=TIMEOUT)
    assert wait_until(lambda: psutil.Process(orphan).ppid() != parent.pid, TIMEOUT)
    adopter = psutil.Process(orphan).ppid()
    if adopter != 1 and psutil.Process(adopter).name() not in classify.SUBREAPERS:
        pytest.skip(
            f"adopted by pid {adopter} ({psutil.Process(adopter).name()}), a subreaper gputui does not know"
        )

    p, checks = examine(orphan, system(), devices)
    assert p.devices == held(devices, "nvidia0", "nvidiactl")
    assert p.category == classify.ORPHAN
    orphans = [c for c in checks if c.status == PROBLEM]
    assert len(orphans) == 1
    assert orphans[0].found.startswith(
        f"pid {orphan} is orphan: holds /dev/nvidia0; parent gone (now {adopter}"
    )
    assert "not in NVML's list" in orphans[0].found
    assert orphans[0].fix == "its parent is gone: kill it (gputui, k) to free the GPU"
    assert f"pid {orphan} holds device files but NVML lists no GPU memory for it" in lines(checks, WARNING)


def test_a_data_loader_worker_is_no_problem(devices: Path, holders: Spawner) -> None:
    """A fork of a GPU process that holds its files but has no memory of its own: a worker, not a zombie."""
    parent = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    worker = holders.fork(parent, "fork-holder")
    facts = system(listed(parent.pid))
    assert wait_until(
        lambda: (
            process.gather(worker, facts, devices, agent=no_agent).devices
            == held(devices, "nvidia-uvm", "nvidia0", "nvidiactl")
        ),
        TIMEOUT,
    )
    p, checks = examine(worker, facts, devices)
    assert p.category == classify.WORKER
    assert lines(checks, PROBLEM) == []
    assert lines(checks, WARNING) == []
    worker_line = f"pid {worker} is a data-loader worker of a GPU process (it inherited the files)"
    assert worker_line in lines(checks, OK)


def test_a_stopped_process_is_stuck(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    os.kill(child.pid, signal.SIGSTOP)
    assert wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED, TIMEOUT)
    p, checks = examine(child.pid, system(listed(child.pid)), devices)
    assert p.category == classify.STUCK
    (stuck,) = [c for c in checks if c.status == PROBLEM]
    assert stuck.found.startswith(f"pid {child.pid} is stuck: stopped (T)")
    assert "SIGCONT" in stuck.fix


# -- the data loader (the gputui agent in the process) ----------------------------------------------


def agent_reply(share: object = 0.071, progress: object = None) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads((FIXTURES / "agent_stats_cuda.json").read_text())
    if progress is not None:
        reply["progress"] = progress
    else:
        reply["progress"]["data_wait_share"] = share
    return reply


def report(pid: int, reply: Any) -> AgentReport:
    """What the monitor makes of a reply: through the boundary, as the agent of `pid`."""
    return parse(pid, {**reply, "pid": pid} if isinstance(reply, dict) else reply)


def test_input_bound_from_the_agent(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    asked: list[int] = []

    def agent(pid: int) -> AgentReport:
        asked.append(pid)
        return report(pid, agent_reply(0.71))

    p, checks = examine(child.pid, system(listed(child.pid)), devices, agent=agent)
    assert asked == [child.pid]
    assert p.wait_share == pytest.approx(0.71)
    (bound,) = [c for c in checks if c.status == WARNING]
    assert bound.found == f"pid {child.pid} is input-bound: 71% of step time waiting for data"
    assert "num_workers" in bound.fix


def test_not_input_bound(devices: Path, holders: Spawner) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    p, checks = examine(
        child.pid, system(listed(child.pid)), devices, agent=lambda pid: report(pid, agent_reply())
    )
    assert p.wait_share == pytest.approx(0.071)
    assert f"pid {child.pid} waits for data 7% of step time" in lines(checks, OK)
    assert lines(checks, WARNING) == [] and lines(checks, PROBLEM) == []


@pytest.mark.parametrize(
    "reply",
    [
        agent_reply(share="n/a"),
        agent_reply(progress="n/a"),
        agent_reply(share=True),
        agent_reply(share=None),
        agent_reply(progress=[0.9]),
        {"v": 1, "ok": False, "error": "busy"},
        ["not", "a", "dict"],
        None,
    ],
    ids=[
        "share-string",
        "progress-string",
        "share-bool",
        "share-null",
        "progress-list",
        "no-progress",
        "reply-list",
        "no-agent",
    ],
)
def test_a_malformed_agent_reply_gives_no_data_loader_line(
    devices: Path, holders: Spawner, reply: Any
) -> None:
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    p, checks = examine(
        child.pid,
        system(listed(child.pid)),
        devices,
        agent=lambda pid: None if reply is None else report(pid, reply),
    )
    assert p.wait_share is None
    assert not any("data" in c.found for c in checks)
    assert lines(checks, WARNING) == [] and lines(checks, PROBLEM) == []


def test_without_an_agent_argument_no_agent_is_found(devices: Path, holders: Spawner) -> None:
    """The default asks the real agent directory; a plain child runs no agent."""
    child = holders("nvidiactl", "nvidia-uvm", "nvidia0")
    p = process.gather(child.pid, system(listed(child.pid)), devices)
    assert p.wait_share is None


# -- no such process ---------------------------------------------------------------------------------


def test_a_pid_no_process_can_have(devices: Path) -> None:
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    with pytest.raises(NoSuchProcess, match=f"no process with pid {pid}"):
        process.gather(pid, system(), devices, agent=no_agent)


def test_a_process_that_has_ended(devices: Path, holders: Spawner) -> None:
    child = holders("nvidia0")
    child.popen.kill()
    child.popen.wait(timeout=TIMEOUT)
    assert not psutil.pid_exists(child.pid)
    with pytest.raises(NoSuchProcess):
        process.gather(child.pid, system(listed(child.pid)), devices, agent=no_agent)


# -- checks() on made-up facts -----------------------------------------------------------------------


def made(**kw: Any) -> ProcessFacts:
    base: dict[str, Any] = dict(
        pid=4242, command="python train.py", devices=("/dev/nvidia0",), environ={}, memory={0: GIB}
    )
    base.update(kw)
    return ProcessFacts(**base)


def test_an_unreadable_environment_is_a_warning() -> None:
    checks = process.checks(made(environ=None), system())
    (w,) = [c for c in checks if c.status == WARNING]
    assert w.area == "process"
    assert w.found == "pid 4242: its environment is not readable, so its CUDA_VISIBLE_DEVICES is unknown"
    assert "root" in w.fix
    assert not any("CUDA_VISIBLE_DEVICES is unset" in c.found for c in checks)


def test_unreadable_open_files_are_a_warning() -> None:
    checks = process.checks(made(devices=None), system())
    assert checks[0] == Check(
        "process", WARNING, "pid 4242: its open files are not readable", "run the doctor as its user or root"
    )
    assert lines(checks, PROBLEM) == []  # not "never initialized CUDA": unknown is not none


def test_no_gpus_means_no_cuda_visible_devices_line() -> None:
    checks = process.checks(made(environ={"CUDA_VISIBLE_DEVICES": "7"}), SystemFacts())
    assert not any("CUDA_VISIBLE_DEVICES" in c.found for c in checks)


def test_a_worker_class_is_no_problem_but_others_are() -> None:
    assert (
        lines(
            process.checks(made(category=classify.WORKER, reason="child of a GPU process"), system()), PROBLEM
        )
        == []
    )
    no_access = made(category=classify.NO_PERMISSION, reason="cannot read /proc/PID/fd")
    checks = process.checks(no_access, system())
    (p,) = [c for c in checks if c.status == PROBLEM]
    assert p.found == "pid 4242 is no-permission: cannot read /proc/PID/fd"
    assert "root" in p.fix


@pytest.mark.parametrize(("share", "status"), [(0.5, WARNING), (0.499, OK), (1.0, WARNING), (0.0, OK)])
def test_the_input_bound_threshold(share: float, status: str) -> None:
    (line,) = [c for c in process.checks(made(wait_share=share), system()) if "data" in c.found]
    assert line.status == status
    assert f"{round(100 * share)}%" in line.found
