"""Attaching: the agent's files put where the target can read them and nobody else can write, the
bootstrap run in the target (gdb, or sys.remote_exec on Python 3.14+), then its agent's answer awaited.

The bootstrap is one expression that binds no name in the target: it runs gputui_boot.py from the copy,
which starts the agent exactly as `gputui.agent.start()` does (the target's own gputui if it has one).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

import gputui
from gputui.attach.preflight import GDB_INSTALL, Plan, Refusal, check
from gputui.collect.agents import AgentPoller
from gputui.collect.signals import same_start
from gputui.units import printable

TIMEOUT_S = 8.0  # the debugger and the agent's first answer, together
GRACE_S = 2.0  # after an interrupt, for gdb to unwind its call and detach
AGENT = "agent"  # the package the target needs of gputui: standard library only, all of it copied
BOOT = "agent/autostart/gputui_boot.py"
_SAFE_PATH = re.compile(r"/[A-Za-z0-9_./-]+")  # quoted into a gdb command and a Python literal


@dataclass(frozen=True)
class Outcome:
    pid: int
    ok: bool
    message: str  # one line
    already: bool = False
    seconds: float | None = None  # how long the debugger held the target (at most: gdb's whole run)
    timed_out: bool = False  # the debugger was interrupted at the timeout (and its call unwound)
    refused: bool = False  # nothing was started: the pid is another process's now


def attach(pid: int, timeout: float = TIMEOUT_S, create_time: float | None = None) -> Outcome:
    """Start gputui's agent in `pid`; never raises. A second attach finds the agent and does nothing.
    `create_time`: the start time of the process the user chose (read as it was described to them, before
    the question): another process that has since got its pid is refused, checked again just before the
    debugger starts and said right after it returns."""
    plan = check(pid)
    if isinstance(plan, Refusal):
        return Outcome(pid, False, plan.reason)
    if (changed := _replaced(pid, create_time)) is not None:
        return changed
    if plan.already:
        if _answers(pid, 1.0):
            return Outcome(pid, True, plan.describe(), already=True)
        if plan.mechanism == "agent":  # and this process may not attach: nothing more to try
            return Outcome(pid, False, f"pid {pid} has an agent socket that does not answer")
        # A socket an earlier process with this pid left: attach, and the new agent takes its place.
    deadline = time.monotonic() + timeout
    try:
        with payload(plan.uid) as boot:
            outcome = _run(plan, boot, timeout, create_time)
            if outcome.timed_out:
                # Stopped at an unlucky instant (inside malloc, whose lock gdb's own call then waits for):
                # the call was unwound, the process runs on; another instant is almost surely fine.
                again = _run(plan, boot, timeout, create_time)
                outcome = (
                    again if again.ok or again.refused else replace(again, message=again.message + " (twice)")
                )
            if outcome.refused:
                return outcome
            if (changed := _replaced(pid, create_time, during=True)) is not None:
                return replace(changed, seconds=outcome.seconds)
            if not outcome.ok:
                return outcome
            # gdb returns once the agent's socket is made; remote_exec once the script is queued.
            if _answers(pid, max(0.5, deadline - time.monotonic())):
                return outcome
    except OSError as err:
        return Outcome(pid, False, f"cannot prepare the agent's files: {printable(err.strerror or str(err))}")
    return Outcome(
        pid,
        False,
        f"the bootstrap ran in pid {pid} but its agent did not answer within {timeout:g} s "
        "(its stderr says why; a Python started with -I or without a writable /tmp?)",
    )


def _run(plan: Plan, boot: Path, timeout: float, create_time: float | None) -> Outcome:
    """The debugger or sys.remote_exec, once; not started when the pid is another process's now."""
    if (changed := _replaced(plan.pid, create_time)) is not None:
        return changed
    if plan.mechanism == "remote_exec":
        return run_remote_exec(plan, boot, timeout)
    return run_debugger(plan, boot, timeout)


def _replaced(pid: int, create_time: float | None, during: bool = False) -> Outcome | None:
    """Why not, in one line, when the process the user chose (started at `create_time`) is `pid` no more:
    before the debugger starts (`refused`: nothing was started), or once it has returned (`during`)."""
    if create_time is None:
        return None
    now = start_time(pid)
    if same_start(create_time, now):
        return None
    if not during:
        gone = "has ended" if now is None else "is another process now (the one you chose has ended)"
        return Outcome(pid, False, f"pid {pid} {gone}: nothing was attached", refused=True)
    if now is None:
        return Outcome(pid, False, f"pid {pid} ended during the attach")
    return Outcome(
        pid,
        False,
        f"pid {pid} ended during the attach and is another process now: the agent may have started in that "
        "one, not in the one you chose",
    )


def start_time(pid: int) -> float | None:
    """`pid`'s start time as psutil says it (what attach()'s `create_time` is compared with); None: none."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _answers(pid: int, within: float) -> bool:
    poller = AgentPoller()
    end = time.monotonic() + within
    while True:
        report = poller.report(pid, deadline_s=min(1.0, within))
        if report is not None and report.ok:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


@contextlib.contextmanager
def payload(uid: int) -> Iterator[Path]:
    """A fresh copy of the agent in a new directory that only this user (the target's, or root) can write,
    readable by the target; removed afterwards (the target has imported what it needs by then). Yields
    the boot file's path."""
    source = Path(gputui.__file__).parent
    root = Path(tempfile.mkdtemp(prefix="gputui-attach-"))
    try:
        for name in agent_files(source):
            dest = root / "gputui" / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, dest)
        if os.geteuid() == 0 and uid != 0:  # root's copy: the target may read it, only root write it
            for path in (root, *root.rglob("*")):
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
        boot = root / "gputui" / BOOT
        if not _SAFE_PATH.fullmatch(str(boot)):  # TMPDIR with a quote or a space in it
            raise OSError(f"the temporary directory {printable(str(root))!r} has characters gdb cannot quote")
        yield boot
    finally:
        shutil.rmtree(root, ignore_errors=True)


def agent_files(source: Path) -> list[str]:
    """What the target needs of gputui, relative to the package: every module of the agent package (found,
    not listed: a module added to the agent is copied too) and gputui/__init__.py, which imports nothing
    (a test reads the imports of the copy)."""
    modules = (p.relative_to(source) for p in (source / AGENT).rglob("*.py"))
    return ["__init__.py", *sorted(p.as_posix() for p in modules if "__pycache__" not in p.parts)]


def bootstrap(boot: Path) -> str:
    """The one expression the target runs: no name is bound in its __main__."""
    return f"__import__('runpy').run_path('{boot}', run_name='gputui_attach')"


# -- gdb and lldb -----------------------------------------------------------------------------------
#
# The order matters. The bootstrap's text goes into the target before the GIL is taken: its buffer comes
# from the target's malloc (the one call that could wait on a lock the stopped process holds; interrupted,
# it is unwound and nothing else was done) and is filled by the debugger's own memory write. Only then is
# the GIL taken, the text run, the GIL given back and the buffer freed.


def gdb_script(boot: Path) -> str:
    """A command that fails ends the script (gdb detaches as it quits); `unwindonsignal` undoes a call that
    an interrupt cut short, so the target is left as it was."""
    code = bootstrap(boot)
    size = len(code.encode()) + 1
    return "\n".join(
        [
            "set pagination off",
            "set confirm off",
            "set unwindonsignal on",
            "sharedlibrary libc",  # malloc and free
            "sharedlibrary libpython",  # a Python built as a shared library
            f"set $gputui_code = (char *) malloc({size})",
            f'set {{char[{size}]}} $gputui_code = "{code}"',
            "set $gputui_gil = (int) PyGILState_Ensure()",
            "set $gputui_rc = (int) PyRun_SimpleString($gputui_code)",
            "call (void) PyGILState_Release($gputui_gil)",
            "call (void) free($gputui_code)",
            'printf "gputui-attach: bootstrap returned %d\\n", $gputui_rc',
            "detach",
            "quit",
        ]
    )


def lldb_commands(boot: Path, timeout: float) -> list[str]:
    """The same steps for lldb: each expression unwinds on an error or at its timeout (`-u true -t`), and
    functions are called through pointer casts so that a Python without debug information works too."""
    code = bootstrap(boot)
    size = len(code.encode()) + 1
    us = max(1, int(timeout * 1e6 / 2))
    expr = f"expr -u true -t {us} --"
    return [
        f"{expr} char *$gputui_code = (char *) ((void *(*)(unsigned long)) malloc)({size})",
        f"memory write -i {boot.parent / 'bootstrap.txt'} $gputui_code",  # with its NUL (run_debugger)
        f"{expr} int $gputui_gil = ((int (*)(void)) PyGILState_Ensure)()",
        f"{expr} int $gputui_rc = ((int (*)(const char *)) PyRun_SimpleString)($gputui_code)",
        f"{expr} ((void (*)(int)) PyGILState_Release)($gputui_gil)",
        f"{expr} ((void (*)(void *)) free)($gputui_code)",
        "expr -- $gputui_rc",
        "process detach",
    ]


def run_debugger(plan: Plan, boot: Path, timeout: float) -> Outcome:
    if plan.mechanism == "lldb":
        (boot.parent / "bootstrap.txt").write_bytes(bootstrap(boot).encode() + b"\0")
        command = [plan.tool, "--batch", "--no-lldbinit"]
        command += ["-O", "settings set target.load-script-from-symbol-file false", "-p", str(plan.pid)]
        for line in lldb_commands(boot, timeout):
            command += ["-o", line]
    else:
        script = boot.parent / "attach.gdb"
        script.write_text(gdb_script(boot) + "\n")
        command = [
            plan.tool,
            "--batch",
            "-nx",  # no ~/.gdbinit: gputui may be root, the init file another user's
            "-q",
            "-iex",
            "set auto-load off",  # nor the target's libraries' gdb scripts
            "-iex",
            "set auto-solib-add off",  # libtorch's symbols would take gdb seconds to read
            "-p",
            str(plan.pid),
            "-x",
            str(script),
        ]
    name = plan.mechanism
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as err:
        why = printable(err.strerror or str(err))
        return Outcome(plan.pid, False, f"cannot run {name}: {why}: {GDB_INSTALL}")
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # the debugger interrupts its call, unwinds it, detaches as it quits
        try:
            out, _ = proc.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()  # the kernel detaches a dead tracer's tracees
            out, _ = proc.communicate()
        return Outcome(
            plan.pid,
            False,
            f"{name} did not finish within {timeout:g} s (the target may hold a lock its call needs): "
            f"it was interrupted and detached; pid {plan.pid} runs on as it was",
            seconds=time.monotonic() - started,
            timed_out=True,
        )
    seconds = time.monotonic() - started
    if "gputui-attach: bootstrap returned 0" in out or "$gputui_rc = 0" in out:
        return Outcome(plan.pid, True, f"attached to pid {plan.pid} with {name}", seconds=seconds)
    return Outcome(plan.pid, False, _debugger_failure(plan.pid, name, out), seconds=seconds)


run_gdb = run_debugger  # the name the tests and the timeout's story use


def _debugger_failure(pid: int, name: str, out: str) -> str:
    """The debugger's complaint, in one line with the fix."""
    text = out.lower()
    if "operation not permitted" in text:
        return (
            f"the kernel refused to let {name} attach to pid {pid} (ptrace: operation not permitted): run as "
            "root, or check kernel.yama.ptrace_scope and the container's CAP_SYS_PTRACE"
        )
    if "pygilstate_ensure" in text and ("no symbol" in text or "undeclared" in text):
        return (
            f"pid {pid}'s Python has no PyGILState_Ensure symbol {name} can find (a Python built without the "
            "symbols a debugger needs, or statically linked without exporting them)"
        )
    if "bootstrap returned" in text or "$gputui_rc" in text:
        return f"the bootstrap failed in pid {pid} (its stderr says why)"
    last = [line for line in out.splitlines() if line.strip()][-1:] or ["no output"]
    return f"{name} could not attach to pid {pid}: {printable(last[0])[:160]}"


# -- sys.remote_exec (Python 3.14+) ------------------------------------------------------------------


def run_remote_exec(plan: Plan, boot: Path, timeout: float) -> Outcome:
    """The target's own interpreter (/proc/PID/exe: sys.remote_exec needs the same version) queues the
    bootstrap; the target runs it at its next safe point, without being stopped."""
    script = boot.parent / "attach_remote.py"
    script.write_text(bootstrap(boot) + "\n")
    if os.geteuid() == 0 and plan.uid != 0:
        os.chmod(script, 0o644)
    code = f"import sys; sys.remote_exec({plan.pid}, {str(script)!r})"
    started = time.monotonic()
    try:
        # -I -S: none of the user's site-packages or .pth files run in it (gputui may be root).
        done = subprocess.run(
            [plan.tool, "-I", "-S", "-c", code],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Outcome(plan.pid, False, f"sys.remote_exec did not return within {timeout:g} s")
    except OSError as err:
        why = printable(err.strerror or str(err))
        return Outcome(plan.pid, False, f"cannot run {printable(plan.tool)}: {why}")
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        return Outcome(plan.pid, False, f"sys.remote_exec failed: {printable(last[0])[:160]}")
    return Outcome(
        plan.pid, True, f"attached to pid {plan.pid} with sys.remote_exec", seconds=time.monotonic() - started
    )
