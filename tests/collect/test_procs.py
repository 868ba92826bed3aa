"""ProcessJoiner against real processes: sleeping Python children of the test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

import gputui.collect.procs.join as procs_module
from gputui.collect.procs.join import ProcessJoiner
from gputui.model import GpuProcess, ProcessRow
from tests.helpers import Children, wait_until

SLEEPER = "import time; time.sleep(120)"
# Process identity is (PID, creation time), and creation times tick in 1/100 s on Linux: two processes
# that got the same PID within one tick cannot be told apart by anyone. Ours are further apart.
CREATE_TIME_TICK = 0.05
HOST_FIELDS = ("user", "name", "command", "cpu_percent", "rss", "create_time", "state", "ppid")


Sleeper = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def sleeper(spawn: Children) -> Sleeper:
    def start(*marker: str) -> subprocess.Popen[str]:
        # The markers only make the command line recognisable; the child sleeps until killed.
        argv = [sys.executable, "-c", SLEEPER, *marker]
        p = spawn(argv, stdout=subprocess.DEVNULL)
        assert wait_until(lambda: psutil.Process(p.pid).cmdline() == argv, 10.0), "the child did not start"
        return p

    return start


def _free_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid -= 1
    return pid


def _rows(joiner: ProcessJoiner, procs: list[GpuProcess]) -> tuple[ProcessRow, ...]:
    rows, _relatives = joiner.join(procs)
    return rows


def _gp(pid: int, gpu: int = 0, used: int | None = 1 << 30) -> GpuProcess:
    return GpuProcess(gpu=gpu, pid=pid, kinds="C", used_memory=used, sm_util=50, mem_util=20)


def test_host_fields_of_a_real_child(sleeper: Sleeper) -> None:
    child = sleeper("gputui-test-marker")
    ps = psutil.Process(child.pid)
    (row,) = _rows(ProcessJoiner(), [_gp(child.pid)])
    assert row.visible is True
    assert (row.gpu, row.pid, row.kinds, row.used_memory, row.sm_util, row.mem_util) == (
        0,
        child.pid,
        "C",
        1 << 30,
        50,
        20,
    )
    assert row.user == psutil.Process().username()
    assert row.name == ps.name()
    assert row.command == " ".join([sys.executable, "-c", SLEEPER, "gputui-test-marker"])
    assert row.rss is not None and 0 < row.rss < 1 << 30
    assert row.create_time == ps.create_time()
    assert abs(row.create_time - time.time()) < 60
    assert row.state in (psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING)
    assert row.ppid == os.getpid()


def test_cpu_percent_needs_a_second_sighting(sleeper: Sleeper) -> None:
    child = sleeper()
    joiner = ProcessJoiner()
    (first,) = _rows(joiner, [_gp(child.pid)])
    assert first.visible and first.cpu_percent is None  # unknown, not 0 %
    time.sleep(0.05)
    (second,) = _rows(joiner, [_gp(child.pid)])
    assert isinstance(second.cpu_percent, float) and second.cpu_percent >= 0.0
    (third,) = _rows(joiner, [_gp(child.pid)])
    assert isinstance(third.cpu_percent, float)
    # Off every GPU for a tick: forgotten, so the next sighting is a first one again.
    assert _rows(joiner, []) == ()
    (again,) = _rows(joiner, [_gp(child.pid)])
    assert again.visible and again.cpu_percent is None


def test_a_pid_that_does_not_exist() -> None:
    pid = _free_pid()
    (row,) = _rows(ProcessJoiner(), [_gp(pid)])
    assert row.visible is False
    assert row.pid == pid and row.used_memory == 1 << 30
    assert all(getattr(row, f) is None for f in HOST_FIELDS)


@pytest.mark.parametrize("pid", [0, -1])
def test_pids_no_process_can_have(pid: int) -> None:
    (row,) = _rows(ProcessJoiner(), [_gp(pid)])
    assert row.visible is False


@pytest.mark.parametrize("seen_before", [False, True], ids=["unknown", "known"])
def test_process_exits_between_gpu_list_and_lookup(sleeper: Sleeper, seen_before: bool) -> None:
    child = sleeper()
    joiner = ProcessJoiner()
    listed = [_gp(child.pid)]  # what the GPU source listed ...
    if seen_before:
        assert _rows(joiner, listed)[0].visible
    child.kill()  # ... and the process ends before the join
    child.wait(timeout=10)
    (row,) = _rows(joiner, listed)
    assert row.visible is False
    assert all(getattr(row, f) is None for f in HOST_FIELDS)
    assert row.used_memory == 1 << 30  # what the GPU said is kept


def test_a_zombie_is_still_visible(sleeper: Sleeper) -> None:
    child = sleeper()
    joiner = ProcessJoiner()
    _rows(joiner, [_gp(child.pid)])
    child.kill()  # not waited for: a zombie until the fixture reaps it
    assert wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 10.0)
    for j in (joiner, ProcessJoiner()):  # known from before, and seen for the first time
        (row,) = _rows(j, [_gp(child.pid)])
        assert row.visible is True
        assert row.state == psutil.STATUS_ZOMBIE
        assert row.ppid == os.getpid()


def _count_cmdline_reads(monkeypatch: pytest.MonkeyPatch, empty_first: int = 0) -> list[int]:
    """psutil's command line reads, by PID; the first `empty_first` read empty, as one caught in the moment
    of its exec does (the kernel has named the new program, and not yet written its arguments)."""
    reads: list[int] = []
    real = psutil.Process.cmdline

    def cmdline(proc: psutil.Process) -> list[str]:
        reads.append(proc.pid)
        return [] if len(reads) <= empty_first else real(proc)

    monkeypatch.setattr(psutil.Process, "cmdline", cmdline)
    return reads


def test_a_command_line_read_empty_is_read_again_until_it_is_there(
    sleeper: Sleeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI caught a process inside its exec: name already `sleep`, command line still empty. Its row read
    `[sleep]` for good (only a new start time or name made the joiner look again)."""
    child = sleeper("gputui-read-again")
    reads = _count_cmdline_reads(monkeypatch, empty_first=2)
    joiner = ProcessJoiner()
    commands = [_rows(joiner, [_gp(child.pid)])[0].command for _ in range(4)]
    assert len(reads) == 3  # once it was there, never read again
    name = psutil.Process(child.pid).name()
    assert commands[:2] == [f"[{name}]"] * 2
    assert commands[2:] == [" ".join(psutil.Process(child.pid).cmdline())] * 2
    assert "gputui-read-again" in (commands[3] or "")


def test_an_empty_command_line_is_final_for_a_zombie(
    sleeper: Sleeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = sleeper()
    child.kill()  # not waited for: a zombie until the fixture reaps it
    assert wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 10.0)
    reads = _count_cmdline_reads(monkeypatch)
    joiner = ProcessJoiner()
    for _ in range(3):
        (row,) = _rows(joiner, [_gp(child.pid)])
    assert reads == [child.pid]  # its first sight only
    assert row.state == psutil.STATUS_ZOMBIE and row.command is not None and row.command.startswith("[")


def _kernel_thread() -> int | None:
    for proc in psutil.process_iter(["ppid", "cmdline"]):
        if proc.info["ppid"] == 2 and proc.info["cmdline"] == []:
            return proc.pid
    return None


def test_a_kernel_thread_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel thread's command line is empty for good (it has no user memory): once is enough."""
    pid = _kernel_thread()
    if pid is None:
        pytest.skip("no kernel thread visible in this PID namespace")
    reads = _count_cmdline_reads(monkeypatch)
    joiner = ProcessJoiner()
    assert joiner.lookup(pid) is not None
    first_sight = len(reads)  # psutil's name() reads it too when the kernel's name is cut at 15 characters
    for _ in range(2):
        joiner.lookup(pid)
    assert first_sight >= 1 and len(reads) == first_sight


def test_a_reused_pid_is_a_new_process_simulated(sleeper: Sleeper, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML keeps reporting pid P; meanwhile the process we knew as P ended and P went to another one.

    Simulated: once the first process has ended, `psutil.Process(P)` and /proc/P/stat (as the joiner
    reads them) describe a second real process. The joiner must describe that one at once, not the first
    from its cache, and must not compute a %CPU across the two.
    """
    old = sleeper("old-job")
    time.sleep(CREATE_TIME_TICK)
    new = sleeper("new-job")
    pid = old.pid
    real_process = psutil.Process
    target = {pid: pid}
    shim = types.SimpleNamespace(**{k: getattr(psutil, k) for k in dir(psutil) if not k.startswith("__")})
    shim.Process = lambda p: real_process(target.get(p, p))
    monkeypatch.setattr(procs_module, "psutil", shim)
    real_read_stat = procs_module._read_stat

    def read_stat(p: int) -> object:
        return real_read_stat(target.get(p, p))

    monkeypatch.setattr(procs_module, "_read_stat", read_stat)

    joiner = ProcessJoiner()
    _rows(joiner, [_gp(pid)])
    (before,) = _rows(joiner, [_gp(pid)])
    assert before.command is not None and before.command.endswith("old-job")
    assert before.cpu_percent is not None

    old.kill()
    old.wait(timeout=10)
    target[pid] = new.pid  # P now names another process, created later
    (after,) = _rows(joiner, [_gp(pid)])
    assert after.visible is True
    assert after.command is not None and after.command.endswith("new-job")
    assert after.create_time == psutil.Process(new.pid).create_time() != before.create_time
    assert after.cpu_percent is None  # a first sighting of the new process


def _spawn_with_pid(pid: int, argv: list[str]) -> subprocess.Popen[bytes] | None:
    """Start `argv` as PID `pid` (free by now) through /proc/sys/kernel/ns_last_pid; None if not allowed."""
    for _ in range(50):  # another process may take the PID between the write and our fork: retry
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(pid - 1))
        except OSError:
            return None
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        if p.pid == pid:
            return p
        p.kill()
        p.wait(timeout=10)
    return None


def test_a_really_reused_pid_is_a_new_process(sleeper: Sleeper) -> None:
    """A genuine PID reuse (needs CAP_SYS_ADMIN over the PID namespace: root in a container)."""
    old = sleeper("old-job")
    pid = old.pid
    joiner = ProcessJoiner()
    _rows(joiner, [_gp(pid)])
    (before,) = _rows(joiner, [_gp(pid)])
    assert before.command is not None and before.command.endswith("old-job")
    old.kill()
    old.wait(timeout=10)
    time.sleep(CREATE_TIME_TICK)

    argv = [sys.executable, "-c", SLEEPER, "new-job"]
    new = _spawn_with_pid(pid, argv)
    if new is None:
        pytest.skip("cannot choose the next PID here (/proc/sys/kernel/ns_last_pid)")
    try:
        assert wait_until(lambda: psutil.Process(pid).cmdline() == argv, 10.0)
        (after,) = _rows(joiner, [_gp(pid)])
        assert after.visible is True
        assert after.command == " ".join(argv)
        assert after.create_time == psutil.Process(pid).create_time() != before.create_time
        assert after.cpu_percent is None
    finally:
        new.kill()
        new.wait(timeout=10)


def test_after_a_reused_pid_the_new_process_is_described(
    sleeper: Sleeper,
) -> None:
    """Whatever the tick right after the reuse shows, the joiner never mixes the two processes."""
    old = sleeper("old-job")
    pid = old.pid
    joiner = ProcessJoiner()
    _rows(joiner, [_gp(pid)])
    (before,) = _rows(joiner, [_gp(pid)])
    old.kill()
    old.wait(timeout=10)
    time.sleep(CREATE_TIME_TICK)
    argv = [sys.executable, "-c", SLEEPER, "new-job"]
    new = _spawn_with_pid(pid, argv)
    if new is None:
        pytest.skip("cannot choose the next PID here (/proc/sys/kernel/ns_last_pid)")
    try:
        assert wait_until(lambda: psutil.Process(pid).cmdline() == argv, 10.0)
        rows = [_rows(joiner, [_gp(pid)])[0] for _ in range(3)]
        for row in rows:
            if row.visible:  # the new process, all of it: never the old command with new numbers
                assert row.command == " ".join(argv)
                assert row.create_time == psutil.Process(pid).create_time() != before.create_time
                assert row.cpu_percent is None or row.cpu_percent >= 0.0
        assert rows[-1].visible and rows[-1].cpu_percent is not None
    finally:
        new.kill()
        new.wait(timeout=10)


def test_same_pid_on_two_gpus(sleeper: Sleeper) -> None:
    child = sleeper()
    joiner = ProcessJoiner()
    for _ in range(2):  # first sighting, then one with %CPU
        rows = _rows(joiner, [_gp(child.pid, gpu=0, used=1 << 30), _gp(child.pid, gpu=1, used=2 << 30)])
        assert [(r.gpu, r.pid, r.used_memory) for r in rows] == [
            (0, child.pid, 1 << 30),
            (1, child.pid, 2 << 30),
        ]
        assert all(r.visible for r in rows)
        assert [getattr(rows[0], f) for f in HOST_FIELDS] == [getattr(rows[1], f) for f in HOST_FIELDS]
    assert rows[0].cpu_percent is not None


def test_mixed_list_keeps_order_and_hides_nothing(sleeper: Sleeper) -> None:
    a, b = sleeper(), sleeper()
    missing = _free_pid()
    rows = _rows(ProcessJoiner(), [_gp(a.pid, gpu=1), _gp(missing, gpu=0), _gp(b.pid, gpu=0)])
    assert [(r.gpu, r.pid, r.visible) for r in rows] == [
        (1, a.pid, True),
        (0, missing, False),
        (0, b.pid, True),
    ]


def test_a_process_seen_before_its_exec_shows_its_new_command(tmp_path: Path) -> None:
    """A process first seen between fork and exec had its parent's command line; once it execs, the next
    tick reads the new one (it was kept for good: the exporter served a hostile test's parent command)."""
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "os.execv('/bin/sleep', ['sleep', '29.5'])\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, "gputui-before-exec"])
    try:
        # Popen returns once Python's own exec began: its command line is there a moment later (under load,
        # the first read was still empty). The test's first sight is of the running Python, before *its* exec.
        assert wait_until(lambda: "gputui-before-exec" in psutil.Process(child.pid).cmdline(), 10.0)
        joiner = ProcessJoiner()
        (before,) = _rows(joiner, [_gp(child.pid)])
        assert "gputui-before-exec" in (before.command or ""), before.command
        go.touch()
        assert wait_until(lambda: psutil.Process(child.pid).name() == "sleep", 10.0)
        _rows(joiner, [_gp(child.pid)])  # the tick may land inside the exec: its arguments not yet written
        assert wait_until(lambda: psutil.Process(child.pid).cmdline() == ["sleep", "29.5"], 10.0)
        (after,) = _rows(joiner, [_gp(child.pid)])
        assert after.command == "sleep 29.5" and after.name == "sleep", after
    finally:
        child.kill()
        child.wait()
