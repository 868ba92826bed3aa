"""`gputui attach` on real processes: a CPU-torch training loop attached through gdb keeps stepping, its agent
answers, a second attach does nothing; stopped, non-Python and other users' processes are refused with
their reasons; a debugger that hangs is interrupted and the target left as it was."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputui.actions.attach import Plan, Refusal, attach, check, debugger
from gputui.actions.attach.run import bootstrap, gdb_script, payload, run_gdb
from gputui.collect.agents.client import AgentPoller
from tests.users import NOBODY, become

pytest.importorskip("torch")


def _ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


needs_gdb = pytest.mark.skipif(
    shutil.which("gdb") is None or (os.geteuid() != 0 and _ptrace_scope() > 0),
    reason="needs gdb (apt install gdb), and root or kernel.yama.ptrace_scope=0",
)
LOOP = Path(__file__).with_name("train_loop.py")
REPO = Path(__file__).resolve().parents[2]


def steps(path: Path) -> list[tuple[int, float]]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((int(parts[0]), float(parts[1])))
    return out


def wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@dataclasses.dataclass
class Trainer:
    proc: subprocess.Popen[bytes]
    steps_file: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def count(self) -> int:
        return len(steps(self.steps_file))


@pytest.fixture
def trainer(tmp_path: Path) -> Iterator[Trainer]:
    steps_file = tmp_path / "steps"
    steps_file.touch()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUTUI_AGENT", None)
    proc = subprocess.Popen([sys.executable, str(LOOP), str(steps_file)], env=env, cwd=tmp_path)
    t = Trainer(proc, steps_file)
    try:
        assert wait_for(lambda: t.count() >= 20), "the training loop did not start"
        yield t
    finally:
        proc.kill()
        proc.wait()


def _payloads() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("gputui-attach-*")}


@pytest.fixture
def own_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of this test's alone, as /tmp is (world-writable, sticky): the agent copies
    other tests make at the same time (xdist workers) are not counted as this attach's leftovers."""
    top = Path(tempfile.mkdtemp(prefix="gputui-test-tmp-"))
    top.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(top))
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


@needs_gdb
def test_gdb_attach_starts_the_agent_and_the_loop_keeps_stepping(trainer: Trainer, own_tmp: Path) -> None:
    plan = check(trainer.pid)
    assert isinstance(plan, Plan) and plan.mechanism == "gdb" and not plan.already, plan
    assert AgentPoller().report(trainer.pid) is None  # no agent before
    payloads = _payloads()
    before = trainer.count()
    t0 = time.monotonic()
    outcome = attach(trainer.pid)
    t1 = time.monotonic()
    assert outcome.ok, outcome.message
    assert "gdb" in outcome.message and outcome.seconds is not None and 0 < outcome.seconds < 8
    report = AgentPoller().report(trainer.pid)
    assert report is not None and report.ok and report.torch  # the allocator stats of a real torch
    assert report.cuda_initialized is False  # the agent touched no CUDA
    after = trainer.count()
    assert wait_for(lambda: trainer.count() > after + 20, 10.0), "the loop stopped stepping after the attach"
    during = [t for _, t in steps(trainer.steps_file) if t0 - 1 <= t <= t1 + 1]
    pause = max(b - a for a, b in itertools.pairwise(during))
    print(f"\nattach through gdb: gdb ran {outcome.seconds:.3f} s; the loop's longest step gap {pause:.3f} s")
    assert after > before and pause < outcome.seconds + 0.5
    # The agent's copy is removed once it runs: by the debugger's janitor, a process of its own that sees
    # gdb end and the socket made, so on a loaded machine a moment after attach() returned.
    assert wait_for(lambda: _payloads() == payloads, 10.0), _payloads()


@pytest.mark.skipif(shutil.which("lldb") is None, reason="lldb is not installed")
@needs_gdb
def test_lldb_when_there_is_no_gdb(trainer: Trainer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where gdb is missing and lldb is there, lldb does the same steps; the loop keeps stepping."""
    which = shutil.which
    monkeypatch.setattr(
        "gputui.actions.attach.preflight.shutil.which",
        lambda name, path=None: None if name in ("gdb", "cuda-gdb") else which(name, path=path),
    )
    plan = check(trainer.pid)
    assert isinstance(plan, Plan) and plan.mechanism == "lldb", plan
    outcome = attach(trainer.pid)
    assert outcome.ok and "lldb" in outcome.message, outcome.message
    report = AgentPoller().report(trainer.pid)
    assert report is not None and report.ok and report.torch
    n = trainer.count()
    assert wait_for(lambda: trainer.count() > n + 20, 10.0)
    print(f"\nattach through lldb: {outcome.seconds:.3f} s")


def test_no_debugger_is_one_line_with_the_fix(trainer: Trainer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gputui.actions.attach.preflight.shutil.which", lambda name, path=None: None)
    refusal = check(trainer.pid)
    assert isinstance(refusal, Refusal) and "apt install gdb" in refusal.reason, refusal


@needs_gdb
def test_a_second_attach_is_a_no_op(trainer: Trainer) -> None:
    assert attach(trainer.pid).ok
    first = os.stat(f"/tmp/gputui-{os.getuid()}/{trainer.pid}.sock").st_ino
    again = attach(trainer.pid)
    assert again.ok and again.already and "nothing to do" in again.message
    assert os.stat(f"/tmp/gputui-{os.getuid()}/{trainer.pid}.sock").st_ino == first  # no second agent


@needs_gdb
def test_a_socket_an_earlier_process_left_does_not_stop_the_attach(trainer: Trainer) -> None:
    """A dead agent's socket with this pid in its name answers nothing: the attach goes ahead and the new
    agent takes its place."""
    import socket as sockets

    from gputui.agent import protocol

    path = protocol.socket_path(trainer.pid, protocol.private_dir())
    stale = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    plan = check(trainer.pid)
    assert isinstance(plan, Plan) and plan.already and plan.mechanism in ("gdb", "lldb")
    outcome = attach(trainer.pid)
    assert outcome.ok and not outcome.already, outcome.message
    report = AgentPoller().report(trainer.pid)
    assert report is not None and report.ok


def test_a_pid_that_is_another_process_now_is_refused(trainer: Trainer) -> None:
    """The row the user confirmed was another process with this pid: nothing is attached."""
    started = psutil.Process(trainer.pid).create_time()
    outcome = attach(trainer.pid, create_time=started - 3600)
    assert not outcome.ok and "another process now" in outcome.message
    assert AgentPoller().report(trainer.pid) is None


def test_a_stopped_process_is_refused_and_left_stopped(trainer: Trainer) -> None:
    os.kill(trainer.pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: " T " in Path(f"/proc/{trainer.pid}/stat").read_text(), 5.0)
        refusal = check(trainer.pid)
        assert isinstance(refusal, Refusal) and "stopped" in refusal.reason and "kill -CONT" in refusal.reason
        outcome = attach(trainer.pid)
        assert not outcome.ok and outcome.message == refusal.reason
    finally:
        os.kill(trainer.pid, signal.SIGCONT)
    n = trainer.count()
    assert wait_for(lambda: trainer.count() > n, 5.0)


def test_a_process_that_is_not_python_is_refused() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        refusal = check(sleeper.pid)
        assert isinstance(refusal, Refusal) and "not a Python process" in refusal.reason, refusal
        assert not attach(sleeper.pid).ok
    finally:
        sleeper.kill()
        sleeper.wait()


def test_defunct_and_missing_processes_are_refused() -> None:
    child = subprocess.Popen(["true"])
    assert wait_for(lambda: " Z " in Path(f"/proc/{child.pid}/stat").read_text(), 5.0)
    refusal = check(child.pid)
    assert isinstance(refusal, Refusal) and "defunct" in refusal.reason
    child.wait()
    gone = check(child.pid)
    assert isinstance(gone, Refusal) and gone.reason == f"no process with pid {child.pid}"
    assert isinstance(check(1), Refusal) and isinstance(check(os.getpid()), Refusal)


@pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")
def test_another_users_process_is_refused_when_unprivileged(trainer: Trainer) -> None:
    """gputui running as `nobody` may not attach to root's training job: it says whose it is."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, ask, report, leave without running pytest's exit handlers
        try:
            os.close(read)
            become(NOBODY)
            result = check(trainer.pid)
            os.write(write, (result.reason if isinstance(result, Refusal) else "PLAN").encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read()
    os.waitpid(pid, 0)
    assert "belongs to root" in said and "sudo" in said, said


def test_a_debugger_that_hangs_is_interrupted_and_the_target_runs_on(
    trainer: Trainer, tmp_path: Path
) -> None:
    """The timeout: gdb is interrupted (it would unwind its call and detach) and the attach says so."""
    plan = check(trainer.pid)
    assert isinstance(plan, Plan)
    hang = tmp_path / "gdb"
    hang.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    hang.chmod(0o755)
    t0 = time.monotonic()
    with payload(plan.uid) as boot:
        outcome = run_gdb(dataclasses.replace(plan, tool=str(hang)), boot, timeout=1.0)
        assert not boot.exists()  # the debugger's wrapper removed the copy as it ended
    assert time.monotonic() - t0 < 1.0 + 2.5  # the timeout, then the interrupt's grace
    assert not outcome.ok and "did not finish within 1 s" in outcome.message and "runs on" in outcome.message
    assert outcome.timed_out and not outcome.pending
    n = trainer.count()
    assert wait_for(lambda: trainer.count() > n, 5.0)
    assert AgentPoller().report(trainer.pid) is None


def test_the_gdb_script_queues_the_bootstrap_and_never_waits_for_the_gil() -> None:
    """The text is put in the target first (its malloc is the one call that could wait on the stopped
    process: interrupted there, nothing else was done), then the step is claimed, then queued with
    Py_AddPendingCall (no GIL taken: the job's main thread runs it), and gdb detaches."""
    boot = Path("/tmp/gputui-attach-x/gputui/agent/autostart/gputui_boot.py")
    lines = gdb_script(boot).splitlines()
    keys = ["unwindonsignal on", "malloc(", "set {char[", "/bin/mv", debugger.CLAIMED, "Py_AddPendingCall("]
    keys += [f"quit {debugger.QUEUED_EXIT}"]
    order = [next(i for i, line in enumerate(lines) if key in line) for key in keys]
    assert order == sorted(order)
    assert not any("PyGILState" in line for line in lines)
    code = bootstrap(boot)
    compile(code, "bootstrap", "exec")  # one compound statement: it never raises out of the pending call
    assert "__import__('runpy').run_path(" in code and "import runpy" not in code  # binds no name
    assert "except BaseException" in code and " as " not in code


def _interpreter(minor: int) -> str | None:
    """A Python 3.<minor> that runs: one pyenv installed, or python3.<minor> on PATH (not a shim that
    only says which pyenv version has it)."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
    for candidate in [*map(str, reversed(pyenv)), shutil.which(f"python3.{minor}")]:
        if candidate is None:
            continue
        probe = "import sys; print(sys.version_info[:2])"
        try:
            said = subprocess.run([candidate, "-c", probe], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if said.stdout.strip() == f"(3, {minor})":
            return candidate
    return None


LOOP_WITHOUT_TORCH = "import time\nwhile True: time.sleep(0.01)"
# The same, in a Python that must not find gputui (exit 3 if it does): the agent comes from attach's copy.
ISOLATED_LOOP = (
    "import importlib.util, sys, time\n"
    "if importlib.util.find_spec('gputui'): sys.exit(3)\n"
    "while True: time.sleep(0.01)"
)


@needs_gdb
@pytest.mark.parametrize("minor", [10, 12, 13])
def test_gdb_attach_across_python_versions(minor: int, tmp_path: Path) -> None:
    """The bootstrap and the copied agent work in every Python the agent supports before 3.14; one that
    cannot import gputui (-I, outside the checkout), as a job's cannot, runs the copy."""
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no Python 3.{minor} here")
    loop = subprocess.Popen([python, "-I", "-c", ISOLATED_LOOP], cwd=tmp_path)
    try:
        time.sleep(0.3)
        assert loop.poll() is None, "gputui is importable in the target"
        plan = check(loop.pid)
        assert isinstance(plan, Plan) and plan.python == (3, minor), plan
        outcome = attach(loop.pid)
        assert outcome.ok, outcome.message
        report = AgentPoller().report(loop.pid)
        assert report is not None and report.ok and report.torch is None
    finally:
        loop.kill()
        loop.wait()


def test_a_python_older_than_3_10_is_refused() -> None:
    python = _interpreter(9)
    if python is None:
        pytest.skip("no Python 3.9 here")
    loop = subprocess.Popen([python, "-c", LOOP_WITHOUT_TORCH])
    try:
        time.sleep(0.3)
        refusal = check(loop.pid)
        assert isinstance(refusal, Refusal) and "needs Python 3.10 or later" in refusal.reason, refusal
    finally:
        loop.kill()
        loop.wait()


PY314 = _interpreter(14)


@pytest.mark.skipif(
    PY314 is None, reason="no Python 3.14 here (not on PATH, nor in pyenv): sys.remote_exec is untested"
)
def test_python_3_14_through_remote_exec(tmp_path: Path) -> None:
    assert PY314 is not None
    loop = subprocess.Popen([PY314, "-I", "-c", ISOLATED_LOOP], cwd=tmp_path)
    try:
        time.sleep(0.5)
        assert loop.poll() is None, "gputui is importable in the target"
        plan = check(loop.pid)
        assert isinstance(plan, Plan) and plan.mechanism == "remote_exec", plan
        outcome = attach(loop.pid)
        assert outcome.ok, outcome.message
        report = AgentPoller().report(loop.pid)
        assert report is not None and report.ok and report.torch is None  # no torch in it, none imported
    finally:
        loop.kill()
        loop.wait()
