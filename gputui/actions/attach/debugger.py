"""gdb and lldb: the bootstrap queued inside the target, and how a debugger at work there is left.

The debugger never waits for the job's GIL. It queues the bootstrap with `Py_AddPendingCall`, which takes
no GIL (signal handlers use it), and detaches: the job's main thread runs the bootstrap at its next
bytecode, with its GIL, traced by nobody. (Calling `PyGILState_Ensure` from the debugger, as gputui did,
made the debugger wait inside the job for a GIL a long C call held: killed or hung up there, the job
returned into the debugger's dummy frame and died; left to wait, the job's GIL condition variable was
once seen wedged for good, glibc's lost wake-up under a tracer's stops and starts.)

Each of the debugger's calls in the job takes microseconds; the first, `malloc`, may wait on a lock that
the stopped process holds, and is then interrupted and unwound (safe: a lock's waiter leaves nothing
behind). `Py_AddPendingCall` must never be unwound (inside its lock the queue would be left locked, and
the job hang), so gdb claims that step with an atomic rename (`go` -> `taken`) in the agent's copy first;
gputui, to stop it (its timeout, quitting), renames `go` -> `stop` first. Whoever renames first wins:
gputui interrupts only a gdb that can no longer make the call, and leaves one that won to finish. lldb
has no conditional in a batch: it is never interrupted (its `malloc` has a timeout of its own).

The debugger runs under a janitor (a few lines of Python, in a session of its own: no hang-up and no Ctrl-C
of gputui's terminal reach it) that keeps the agent's copy until the job has run the bootstrap (its agent's
socket is new), has ended, or an hour has passed, and then removes it: gputui may quit long before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from gputui.actions.attach.preflight import GDB_INSTALL, Plan
from gputui.agent import protocol
from gputui.units import printable

GRACE_S = 2.0  # after an interrupt, for gdb to unwind its call and detach
KEEP_S = 3600.0  # at most, the agent's copy waits this long for the job's main thread to run the bootstrap
CLAIMED = "gputui-attach: queueing the bootstrap"  # gdb has claimed the step: never interrupted from here
QUEUED = "gputui-attach: bootstrap queued"  # followed by Py_AddPendingCall's return (0: queued)
GAVE_UP = "gputui-attach: stopped before queueing"  # gdb lost the claim, freed its buffer and detaches
ENDED = "gputui-attach: debugger exited"  # the janitor's line once the debugger has ended
GO, TAKEN, STOP = "go", "taken", "stop"  # the claim's file, in the copy's root
QUEUED_EXIT = 0  # gdb's exit status once the bootstrap is queued (anything else: nothing runs in the job)

# The janitor: `python -I -S -c JANITOR ROOT PID KEEP_S SOCKET... -- DEBUGGER...`. Its SIGINT handler does
# nothing (a handler, not SIG_IGN: the debugger, exec'd, starts with the default and sets its own), so
# the signal gputui sends the group is the debugger's alone.
JANITOR = """
import os, shutil, signal, subprocess, sys, time
signal.signal(signal.SIGINT, lambda *_: None)
root, pid, keep, *rest = sys.argv[1:]
sockets, command = rest[:rest.index("--")], rest[rest.index("--") + 1:]
start = time.time()
try:
    status = subprocess.call(command)
except OSError as err:
    print(f"cannot run {command[0]}: {err.strerror}", flush=True)
    status = 127
print(f"ENDED {status}", flush=True)


def ran():
    for path in sockets:
        try:
            if os.stat(path).st_mtime >= start:
                return True
        except OSError:
            pass
    return False


if status == 0:
    end = start + float(keep)
    while time.time() < end and os.path.exists(f"/proc/{pid}") and not ran():
        time.sleep(0.5)
shutil.rmtree(root, ignore_errors=True)
""".replace("ENDED", ENDED)


def bootstrap(boot: Path) -> str:
    """What the target runs: binds no name in its __main__, and never raises (a pending call that fails
    would leave an error without an exception in the job's main thread). A Ctrl-C that lands in it is sent
    on to the job."""
    return "\n".join(
        [
            "try:",
            f" __import__('runpy').run_path('{boot}', run_name='gputui_attach')",
            "except BaseException:",
            " __import__('traceback').print_exc()",
            " if __import__('sys').exc_info()[0] is KeyboardInterrupt: __import__('signal').raise_signal(2)",
        ]
    )


def copy_root(boot: Path) -> Path:
    """The agent copy's own directory (what the janitor removes), from its boot file's path."""
    return next(p for p in boot.parents if p.name.startswith("gputui-attach-"))


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# -- the scripts ------------------------------------------------------------------------------------


def gdb_script(boot: Path) -> str:
    """A command that fails ends the script (gdb detaches as it quits); `unwindonsignal` undoes a call that
    an interrupt cut short (only ever `malloc`, `free` or the claim's shell: see the module's rule)."""
    code = bootstrap(boot)
    size = len(code.encode()) + 1
    root = copy_root(boot)
    return "\n".join(
        [
            "set pagination off",
            "set confirm off",
            "set unwindonsignal on",
            "sharedlibrary libc",  # malloc and free
            "sharedlibrary libpython",  # a Python built as a shared library
            f"set $gputui_code = (char *) malloc({size})",
            f'set {{char[{size}]}} $gputui_code = "{_c_string(code)}"',
            f"shell /bin/mv -- {root}/{GO} {root}/{TAKEN} 2>/dev/null",  # (PATH may lack it)
            "if $_shell_exitcode != 0",
            "  call (void) free($gputui_code)",
            f'  printf "{GAVE_UP}\\n"',
            "  detach",
            "  quit 3",
            "end",
            f'printf "{CLAIMED}\\n"',
            # The job's main thread runs the text, and the buffer stays its (a hundred bytes).
            "set $gputui_rc = (int) Py_AddPendingCall(&PyRun_SimpleString, $gputui_code)",
            f'printf "{QUEUED} %d\\n", $gputui_rc',
            "if $gputui_rc != 0",
            "  call (void) free($gputui_code)",
            "  detach",
            "  quit 4",
            "end",
            "detach",
            f"quit {QUEUED_EXIT}",
        ]
    )


def lldb_commands(boot: Path, timeout: float) -> list[str]:
    """The same steps for lldb: `malloc` unwinds on an error or at its timeout (`-u true -t`); the queueing
    has no timeout (never unwound). Functions are called through pointer casts so that a Python without
    debug information works too."""
    size = len(bootstrap(boot).encode()) + 1
    us = max(1, int(timeout * 1e6 / 2))
    return [
        f"expr -u true -t {us} -- char *$gputui_code = (char *) ((void *(*)(unsigned long)) malloc)({size})",
        f"memory write -i {boot.parent / 'bootstrap.txt'} $gputui_code",  # with its NUL (command)
        "expr -- void *$gputui_run = (void *) &PyRun_SimpleString",  # (not as an argument: lldb cannot)
        "expr -u true -- int $gputui_rc = "
        "((int (*)(void *, void *)) Py_AddPendingCall)($gputui_run, $gputui_code)",
        "expr -- $gputui_rc",
        "process detach",
    ]


def command(plan: Plan, boot: Path, timeout: float) -> list[str]:
    """The debugger's command line, its script written beside the boot file."""
    if plan.mechanism == "lldb":
        (boot.parent / "bootstrap.txt").write_bytes(bootstrap(boot).encode() + b"\0")
        line = [plan.tool, "--batch", "--no-lldbinit"]
        line += ["-O", "settings set target.load-script-from-symbol-file false", "-p", str(plan.pid)]
        for step in lldb_commands(boot, timeout):
            line += ["-o", step]
        return line
    script = boot.parent / "attach.gdb"
    script.write_text(gdb_script(boot) + "\n")
    (copy_root(boot) / GO).touch()
    return [
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


# -- a debugger at work -----------------------------------------------------------------------------


@dataclass
class Session:
    """One debugger run under its janitor: its output file, and whether it may still be stopped."""

    plan: Plan
    root: Path  # the agent's copy, the janitor's to remove
    proc: subprocess.Popen[bytes]  # the janitor
    output: IO[bytes]
    started: float = field(default_factory=time.monotonic)
    stopped: bool = False  # gputui won the claim: this gdb never queues the bootstrap

    def text(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            return os.pread(self.output.fileno(), 1 << 20, 0).decode(errors="replace")
        return ""

    def ended(self) -> bool:
        """The debugger has ended (its janitor may still keep the copy for the job)."""
        return self.proc.poll() is not None or ENDED in self.text()

    def stop(self) -> bool:
        """Stop it if it may be stopped, at once and without waiting: whether it was. gdb before its claim
        (won here) is interrupted; gdb past it, and lldb, are left to finish."""
        if self.plan.mechanism == "lldb" or self.ended():
            return False
        if not self.stopped:
            try:
                os.rename(self.root / GO, self.root / STOP)
            except OSError:  # gdb took it (or the copy is gone): it is queueing the bootstrap
                return False
            self.stopped = True
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGINT)
        return True


def start(plan: Plan, boot: Path, timeout: float) -> Session | str:
    """The debugger started on `plan`'s target under its janitor, or why not (one line)."""
    line = command(plan, boot, timeout)
    root = copy_root(boot)
    sockets = [str(protocol.socket_path(plan.pid, d)) for d in protocol.candidate_dirs(plan.uid)]
    janitor = [sys.executable, "-I", "-S", "-c", JANITOR, str(root), str(plan.pid), str(KEEP_S)]
    # Its output goes to a file, not a pipe: should gputui end first, the debugger's last words get no
    # SIGPIPE (which would kill it in the middle of its call).
    output = tempfile.TemporaryFile()  # noqa: SIM115 (the Session owns it; run_debugger closes it)
    env = {**os.environ, "SHELL": "/bin/sh"}  # gdb's `shell` (the claim): never the user's login shell
    try:
        proc = subprocess.Popen(
            [*janitor, *sockets, "--", *line],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    except OSError as err:
        output.close()
        return f"cannot run {plan.mechanism}: {printable(err.strerror or str(err))}: {GDB_INSTALL}"
    return Session(plan, root, proc, output)


def queued(out: str) -> bool:
    return f"{QUEUED} 0" in out or "$gputui_rc = 0" in out


def failure(pid: int, name: str, out: str) -> str:
    """The debugger's complaint, in one line with the fix."""
    text = out.lower()
    if "operation not permitted" in text:
        return (
            f"the kernel refused to let {name} attach to pid {pid} (ptrace: operation not permitted): run as "
            "root, or check kernel.yama.ptrace_scope and the container's CAP_SYS_PTRACE"
        )
    if "py_addpendingcall" in text and ("no symbol" in text or "undeclared" in text):
        return (
            f"pid {pid}'s Python has no Py_AddPendingCall symbol {name} can find (a Python built without the "
            "symbols a debugger needs, or statically linked without exporting them)"
        )
    if QUEUED in out or "$gputui_rc = " in out:
        return f"pid {pid}'s Python refused the bootstrap (its queue of pending calls is full): try again"
    if GAVE_UP in out:
        return f"{name} stopped before it queued the bootstrap in pid {pid} (nothing was run in it)"
    if "cannot run" in text and ENDED in out:
        return f"{printable(out.splitlines()[0])[:160]}: {GDB_INSTALL}"
    last = [line for line in out.splitlines() if line.strip() and ENDED not in line][-1:] or ["no output"]
    return f"{name} could not attach to pid {pid}: {printable(last[0])[:160]}"
