"""`gputui attach PID` on the command line: `python -m gputui` in a subprocess, on real processes (a Python
loop, `sleep`, a stopped Python); the question asked on a real terminal (a pty)."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui import cli, commands
from gputui.actions.attach import Outcome, Plan, Refusal, check
from gputui.actions.attach import run as attach_run
from gputui.collect.agents.client import AgentPoller
from tests.helpers import ready_loop, wait_until

TIMEOUT = 60
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt install gdb)")


def gputui(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)


def end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)  # a stopped one would not die of SIGTERM
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture
def loop() -> Iterator[subprocess.Popen[str]]:
    with ready_loop([sys.executable]) as proc:
        yield proc


def attachable(pid: int) -> Plan:
    """The plan for a test's own child; skipped where this machine forbids attaching at all."""
    plan = check(pid)
    if isinstance(plan, Refusal) and ("ptrace" in plan.reason or "CAP_SYS_PTRACE" in plan.reason):
        pytest.skip(f"this machine does not let gputui attach: {plan.reason}")
    assert isinstance(plan, Plan), plan
    assert not plan.already
    return plan


def has_agent(pid: int) -> bool:
    report = AgentPoller().report(pid)
    return report is not None and report.ok


def one_error(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """A mistake: one line on stderr, nothing on stdout, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    return line


# -- attaching for real ------------------------------------------------------------------------------


@needs_gdb
def test_attach_with_yes_then_again_is_nothing_to_do(loop: subprocess.Popen[str]) -> None:
    plan = attachable(loop.pid)
    first = gputui("attach", str(loop.pid), "--yes")
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    described, done = first.stdout.splitlines()
    assert described == plan.describe()
    how = {
        "gdb": r"with gdb \(the process was paused at most (\S+) s\)",
        "remote_exec": r"with sys.remote_exec \(in (\S+) s, without pausing it\)",
    }[plan.mechanism]
    m = re.fullmatch(rf"attached to pid {loop.pid} {how}", done)
    assert m, done
    assert 0 < float(m.group(1)) < cli.ATTACH_TIMEOUT_S
    assert loop.poll() is None, "the attached process died"
    assert has_agent(loop.pid)
    tracer = Path(f"/proc/{loop.pid}/status").read_text().split("TracerPid:")[1].split()[0]
    assert tracer == "0", "the debugger did not detach"

    again = gputui("attach", str(loop.pid), "--yes")
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"pid {loop.pid} already runs gputui's agent: nothing to do\n"
    assert again.stderr == ""
    # Nothing to do needs no confirmation: not even --yes without a terminal.
    assert gputui("attach", str(loop.pid)).stdout == again.stdout
    assert loop.poll() is None


# -- refusals ----------------------------------------------------------------------------------------


def test_a_process_that_is_not_python_is_refused() -> None:
    sleeper = start(["sleep", "60"])
    try:
        result = gputui("attach", str(sleeper.pid), "--yes")
        line = one_error(result, 1)
        assert line.startswith(f"gputui attach: pid {sleeper.pid} is not a Python process ("), line
        assert line.endswith("the agent runs in a Python")
        assert sleeper.poll() is None
    finally:
        end(sleeper)


def test_a_stopped_python_is_refused(loop: subprocess.Popen[str]) -> None:
    os.kill(loop.pid, signal.SIGSTOP)
    assert wait_until(lambda: _state(loop.pid) == "T", 10)
    line = one_error(gputui("attach", str(loop.pid), "--yes"), 1)
    assert line == (
        f"gputui attach: pid {loop.pid} is stopped (state T): resume it first (kill -CONT {loop.pid})"
    )
    assert _state(loop.pid) == "T"  # left as it was
    os.kill(loop.pid, signal.SIGCONT)
    assert not has_agent(loop.pid)


def test_a_process_that_does_not_exist() -> None:
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    line = one_error(gputui("attach", str(pid), "--yes"), 1)
    assert line == f"gputui attach: no process with pid {pid}"


def test_readonly_refuses_to_attach(loop: subprocess.Popen[str]) -> None:
    line = one_error(gputui("--readonly", "attach", str(loop.pid), "--yes"))
    assert line.startswith("gputui attach: error: --readonly: "), line
    assert not has_agent(loop.pid)


@pytest.mark.parametrize("pid", ["abc", "0", "-3", "1.5", "²", ""])
def test_a_bad_pid_is_one_line(pid: str) -> None:
    line = one_error(gputui("attach", pid, "--yes"))
    assert line == f"gputui attach: error: argument PID: not a process id: {pid!r} (see gputui attach --help)"


@pytest.mark.parametrize("timeout", ["0", "0.5", "61", "nan", "inf", "soon"])
def test_a_bad_timeout_is_one_line(timeout: str) -> None:
    line = one_error(gputui("attach", "123", "--timeout", timeout, "--yes"))
    assert line.startswith("gputui attach: error: argument --timeout: "), line


def test_no_pid_is_one_line() -> None:
    line = one_error(gputui("attach"))
    assert line.startswith("gputui attach: error: the following arguments are required: PID"), line


def test_without_a_terminal_it_needs_yes(loop: subprocess.Popen[str]) -> None:
    attachable(loop.pid)
    line = one_error(gputui("attach", str(loop.pid)))
    assert line == (
        f"gputui attach: error: standard input is not a terminal to confirm on: pass --yes to attach to pid "
        f"{loop.pid} (see gputui attach --help)"
    )
    assert not has_agent(loop.pid)


# -- the question, on a real terminal ----------------------------------------------------------------


class Asked:
    """`gputui attach PID` with a pty on standard input, as a person runs it."""

    def __init__(self, pid: int) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gputui", "attach", str(pid)],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(slave)
        self.out = b""

    def wait_for_question(self) -> None:
        assert self.proc.stdout is not None
        end = time.monotonic() + TIMEOUT
        while not self.out.endswith(b"Attach? [y/N] "):
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"no question: {self.out!r}"
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            assert chunk, f"it ended without asking: {self.out!r}"
            self.out += chunk

    def answer(self, text: str) -> None:
        os.write(self.master, text.encode())

    def result(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=TIMEOUT)
        os.close(self.master)
        return self.proc.returncode, (self.out + out).decode(), err.decode()


@pytest.mark.terminal
@pytest.mark.parametrize("said", ["n\n", "\n", "yess\n", "no\n", "\x04"])
def test_anything_but_yes_cancels(loop: subprocess.Popen[str], said: str) -> None:
    plan = attachable(loop.pid)
    asked = Asked(loop.pid)
    asked.wait_for_question()
    asked.answer(said)
    code, out, err = asked.result()
    assert code == 1, err
    assert out == plan.describe() + "\nAttach? [y/N] "
    assert err == "gputui attach: cancelled: nothing was done\n"
    assert not has_agent(loop.pid)


@pytest.mark.terminal
def test_interrupted_at_the_question(loop: subprocess.Popen[str]) -> None:
    attachable(loop.pid)
    asked = Asked(loop.pid)
    asked.wait_for_question()
    asked.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    code, _out, err = asked.result()
    assert code == 130
    assert err.splitlines()[-1] == "gputui attach: cancelled: nothing was done"
    assert "Traceback" not in err
    assert not has_agent(loop.pid)


@pytest.mark.terminal
@needs_gdb
@pytest.mark.parametrize("said", ["y\n", "YES\n"])
def test_yes_attaches(loop: subprocess.Popen[str], said: str) -> None:
    attachable(loop.pid)
    asked = Asked(loop.pid)
    asked.wait_for_question()
    asked.answer(said)
    code, out, err = asked.result()
    assert code == 0, err
    assert out.splitlines()[-1].startswith(f"Attach? [y/N] attached to pid {loop.pid} with ")
    assert has_agent(loop.pid)


# -- in-process ------------------------------------------------------------------------------------


def test_the_command_lines_default_timeout_is_attachs_own() -> None:
    assert cli.ATTACH_TIMEOUT_S == attach_run.TIMEOUT_S
    assert cli.build_parser().parse_args(["attach", "1"]).timeout == attach_run.TIMEOUT_S


def test_a_signal_does_not_cut_the_attach_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """gdb must not be left in the middle of its call, nor the agent's files removed under the target: a
    signal during attach() waits for it to finish (it has its own time limit)."""
    finished = []

    def slow_attach(pid: int, timeout: float, create_time: float | None = None) -> Outcome:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        finished.append(pid)
        return Outcome(pid, True, f"attached to pid {pid} with gdb", seconds=0.05)

    monkeypatch.setattr("gputui.actions.attach.attach", slow_attach)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    outcome, interrupted = commands._attach_to_the_end(4242, 8.0, None)
    assert finished == [4242] and outcome.ok and interrupted
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_process_replaced_after_the_question_is_refused(
    loop: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The start time read as the process was described travels to attach(): the process ended and another
    got its pid while the user read the question (a start time that differs from then on), and the attach
    is refused in one line with no debugger started."""
    plan = attachable(loop.pid)
    chosen = attach_run.start_time(loop.pid)
    assert chosen is not None
    readings = iter([chosen])
    monkeypatch.setattr(attach_run, "start_time", lambda pid: next(readings, chosen + 100.0))
    ran: list[str] = []

    def debugger(plan: Plan, boot: Path, timeout: float) -> Outcome:
        ran.append(plan.mechanism)
        return Outcome(plan.pid, True, "attached", seconds=0.01)

    monkeypatch.setattr(attach_run, "run_debugger", debugger)
    monkeypatch.setattr(attach_run, "run_remote_exec", debugger)
    args = cli.build_parser().parse_args(["attach", str(loop.pid), "--yes"])
    assert commands.attach(args) == 1
    out, err = capsys.readouterr()
    assert out == plan.describe() + "\n"
    assert err == (
        f"gputui attach: pid {loop.pid} is another process now (the one you chose has ended): nothing was "
        "attached\n"
    )
    assert ran == [] and not has_agent(loop.pid)


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt install gdb)")
def test_attach_through_cuda_gdb_names_it(loop: subprocess.Popen[str], tmp_path: Path) -> None:
    """A machine with cuda-gdb and neither gdb nor lldb (a CUDA image): the line says which debugger ran."""
    attachable(loop.pid)
    only = tmp_path / "bin"
    only.mkdir()
    (only / "cuda-gdb").symlink_to(shutil.which("gdb") or "gdb")
    done = subprocess.run(
        [sys.executable, "-m", "gputui", "attach", str(loop.pid), "--yes"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PATH": str(only)},
    )
    assert done.returncode == 0, done.stderr
    described, said = done.stdout.splitlines()
    assert "cuda-gdb pauses it for a moment" in described
    assert re.fullmatch(
        rf"attached to pid {loop.pid} with cuda-gdb \(the process was paused at most \S+ s\)", said
    )
    assert has_agent(loop.pid)


def _state(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return "?"
