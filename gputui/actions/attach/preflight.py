"""Can this process be attached, and how? Only /proc, the kernel's settings and the symbol tables of the
process's program and libpython (elf.py) are read: nothing is run, stopped or traced here, so the doctor
and the UI may ask as often as they like.

Every refusal is one line that says why and what to do about it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from gputui.actions.attach import elf
from gputui.agent import protocol
from gputui.units import printable

MIN_PYTHON = (3, 10)  # as the agent needs
REMOTE_EXEC_PYTHON = (3, 14)  # sys.remote_exec (PEP 768)
CAP_SYS_PTRACE = 19
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")
# A Python interpreter's file name: python, python3, python3.11, python3.13t (free-threaded), pypy is not
# one (no Py_AddPendingCall to call the same way). A name is a hint, never a proof: which Python a process
# runs, and whether its program is CPython's own (which sys.remote_exec runs), come from the symbols of its
# files (elf.py); a name says a version only where the symbols cannot (3.10, which has no Py_Version).
_EXE = re.compile(r"python(?:(\d+)(?:\.(\d+))?[a-z]*)?")
_LIBPYTHON = re.compile(r"/libpython(\d+)\.(\d+)[a-z]*\.so[^/]*$")
# What the interpreter's files define: the functions gdb calls, its version, and the command line's main.
RUNTIME = "Py_AddPendingCall"  # what a debugger calls to queue the bootstrap
VERSION = "Py_Version"  # PY_VERSION_HEX, since Python 3.11
COMMAND_LINE = "Py_BytesMain"  # what CPython's own `python` program calls from its main(), and only it
_SYMBOLS = frozenset({RUNTIME, "PyRun_SimpleString", VERSION, COMMAND_LINE})
DEBUGGERS = ("gdb", "cuda-gdb", "lldb")  # in this order; cuda-gdb is gdb, as CUDA installs it
CUDA_BIN = "/usr/local/cuda/bin"  # where cuda-gdb lives when CUDA's directory is not on PATH
GDB_INSTALL = "install gdb (apt install gdb, or dnf install gdb)"


@dataclass(frozen=True)
class Interpreter:
    """What a process's files say of the Python it runs."""

    version: tuple[int, int] | None  # None: a Python whose version neither its symbols nor its name say
    command_line: bool  # its program is CPython's own `python`, proven by its symbols: it may run -c CODE


@dataclass(frozen=True)
class Plan:
    """How `attach` would go about it."""

    pid: int
    uid: int
    user: str
    exe: str  # the interpreter's file, as /proc/PID/exe resolves it
    python: tuple[int, int] | None  # None: a Python whose version neither its symbols nor its name say
    mechanism: str  # "remote_exec", "gdb" or "lldb" ("agent": it runs one already)
    tool: str  # the interpreter that runs sys.remote_exec, or the debugger
    already: bool = False  # its agent already listens: attaching is a no-op

    @property
    def version(self) -> str:
        return "Python " + (".".join(map(str, self.python)) if self.python else "of unknown version")

    def describe(self) -> str:
        """What will happen, in one line (the confirmation dialog and `gputui attach` say it)."""
        if self.already:
            return f"pid {self.pid} already runs gputui's agent: nothing to do"
        if self.mechanism == "remote_exec":
            how = "sys.remote_exec runs a two-line bootstrap at its next safe point (no pause)"
        else:
            how = f"{self.mechanism} pauses it for a moment to start the agent's thread, then detaches"
        return (
            f"attach gputui's agent to pid {self.pid} ({self.version}, user {self.user}): {how}; "
            "the job keeps running, torch is not imported and CUDA is not touched"
        )


@dataclass(frozen=True)
class Refusal:
    pid: int
    reason: str  # one line: why, and what to do
    applies: bool = True  # False: not a Python process, so no allocator panel to want (the doctor is quiet)


def check(pid: int, proc: Path = Path("/proc")) -> Plan | Refusal:
    """Whether `pid` can be attached, and how; never raises."""
    try:
        return _check(pid, proc)
    except OSError as err:  # gone between two reads, or a /proc file we could not read
        if not (proc / str(pid)).exists():
            return Refusal(pid, f"no process with pid {pid}")
        return Refusal(pid, f"pid {pid}: cannot read it: {printable(err.strerror or str(err))}")


def _check(pid: int, proc: Path) -> Plan | Refusal:
    def no(reason: str, applies: bool = True) -> Refusal:
        return Refusal(pid, reason, applies)

    if pid <= 1:
        return no(f"pid {pid} is the system's init: gputui never attaches to it")
    if pid == os.getpid():
        return no(f"pid {pid} is gputui itself")
    base = proc / str(pid)
    if not base.exists():
        return no(f"no process with pid {pid}")
    status = _status(base / "status")
    state = status.get("State", "?")[:1]
    if state == "Z":
        return no(f"pid {pid} is defunct (a zombie): nothing runs in it any more")
    uid = _int(status.get("Uid", "-1").split()[0])
    user = _user(uid)
    me = os.geteuid()
    if me != 0 and uid != me:
        return no(f"pid {pid} belongs to {user}: only {user} or root can attach to it (sudo gputui attach)")
    if me == 0 and not _has_cap(Path("/proc/self/status"), CAP_SYS_PTRACE) and uid != 0:
        return no(
            "gputui runs without CAP_SYS_PTRACE (a container started without --cap-add SYS_PTRACE): "
            "it cannot attach to another user's process"
        )
    if (why := _container_boundary(base, proc / "self")) is not None:
        return no(f"pid {pid} {why}: run `gputui attach` inside it (docker exec / kubectl exec)")
    exe = os.readlink(base / "exe").removesuffix(" (deleted)")
    python = _interpreter(base / "exe", exe, base / "maps")
    if python is None:
        program = printable(exe)[:80]
        return no(f"pid {pid} is not a Python process ({program}): the agent runs in a Python", applies=False)
    version = python.version
    if version is not None and version < MIN_PYTHON:
        return no(f"pid {pid} runs Python {version[0]}.{version[1]}: the agent needs Python 3.10 or later")
    # What passes (stopped, in the kernel, traced) comes after what lasts: a program that is no Python is
    # refused as such even while it pages itself in (state D just after exec), never with "try again".
    if state in "Tt":
        return no(f"pid {pid} is stopped (state {state}): resume it first (kill -CONT {pid})")
    if state == "D" and _stays_in_disk_sleep(base / "status"):
        return no(
            f"pid {pid} is in uninterruptible sleep (state D, waiting on the driver or a disk): a debugger "
            "would wait with it; try again when it runs"
        )
    tracer = _int(status.get("TracerPid", "0"))
    if tracer:
        return no(f"pid {pid} is already traced by pid {tracer} (a debugger, py-spy): one tracer at a time")
    how = _mechanism(pid, me, uid, user, exe, python)
    # Its socket is there: most likely its agent runs (attach() asks it). A socket left by an earlier process
    # with this pid answers nothing: then attaching goes ahead, and the new agent replaces it.
    already = protocol.socket_path(pid, protocol.runtime_dir(uid)).exists()
    if isinstance(how, str):
        return Plan(pid, uid, user, exe, version, "agent", "", already=True) if already else no(how)
    mechanism, tool = how
    return Plan(pid, uid, user, exe, version, mechanism, tool, already=already)


def _mechanism(
    pid: int, me: int, uid: int, user: str, exe: str, python: Interpreter
) -> tuple[str, str] | str:
    """(mechanism, the program that does it), or why none may."""
    if (why := _ptrace_forbidden(pid, me)) is not None:
        return why
    version = python.version
    # sys.remote_exec runs in the target's own program, which gputui runs: only one its symbols prove to be
    # CPython's command line (a version a file's name said, or a libpython another program maps, never).
    if version is not None and version >= REMOTE_EXEC_PYTHON and python.command_line:
        if me == 0 and uid != 0 and not _root_only(Path(exe)):
            return (
                f"pid {pid}'s Python ({printable(exe)[:80]}) is writable by others: gputui will not run it "
                f"as root; run `gputui attach {pid}` as {user}"
            )
        return "remote_exec", exe
    if found := debugger(me):
        return found
    why = "its Python is older than 3.14" if version is not None and version < REMOTE_EXEC_PYTHON else ""
    why = why or ("its program is not CPython's own `python`" if not python.command_line else "")
    return (
        f"attaching to pid {pid}{f' ({why})' if why else ''} needs a debugger (gdb, cuda-gdb or lldb): "
        f"{GDB_INSTALL}"
    )


def debugger(me: int | None = None) -> tuple[str, str] | None:
    """(name, path) of the first debugger there is: gdb, cuda-gdb (on PATH, or in CUDA's own directory),
    lldb. As root, a cuda-gdb found outside PATH only where nobody else may write it."""
    me = os.geteuid() if me is None else me
    for name in DEBUGGERS:
        if tool := shutil.which(name):
            return name, tool
        outside = shutil.which(name, path=CUDA_BIN) if name == "cuda-gdb" else None
        if outside and (me != 0 or (_root_only(Path(outside)) and _root_only(Path(outside).resolve()))):
            return name, outside
    return None


# -- reading /proc -----------------------------------------------------------------------------------


def _status(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


D_LOOKS = 5  # a job reading its data is in D for moments: refuse only one that stays there
D_PAUSE = 0.02


def _stays_in_disk_sleep(status: Path) -> bool:
    """Whether the process is still in state D after D_LOOKS more looks, D_PAUSE apart (~0.1 s at most, and
    only for a process seen in D)."""
    for _ in range(D_LOOKS):
        time.sleep(D_PAUSE)
        if _status(status).get("State", "?")[:1] != "D":
            return False
    return True


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _user(uid: int) -> str:
    try:
        return printable(pwd.getpwuid(uid).pw_name)
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _has_cap(status: Path, cap: int) -> bool:
    try:
        return bool(int(_status(status).get("CapEff", "0"), 16) >> cap & 1)
    except (OSError, ValueError):
        return False


def _container_boundary(target: Path, me: Path) -> str | None:
    """The agent's files are put where this process sees them, and its socket is named after the pid this
    process sees: a target in another mount or PID namespace sees neither."""
    for ns, what in (("mnt", "another mount namespace"), ("pid", "another PID namespace")):
        try:
            if os.stat(target / "ns" / ns).st_ino != os.stat(me / "ns" / ns).st_ino:
                return f"is in {what} (a container)"
        except OSError:
            continue  # a kernel without that namespace
    return None


def _interpreter(program: Path, exe: str, maps: Path) -> Interpreter | None:
    """The Python that the process runs, from the symbols of its program (`program`: /proc/PID/exe) and of the
    libpython it maps; None when it is not a Python at all. A file's name gives a version only where the
    symbols cannot (Python 3.10 has no Py_Version), and never makes a program a Python."""
    named = _EXE.fullmatch(Path(exe).name)
    own = elf.symbols(program, _SYMBOLS, (VERSION,))
    runtime, name_of_runtime = (own, "") if own is not None and RUNTIME in own.defined else (None, "")
    if runtime is None:
        for path in _libpythons(maps):
            found = elf.symbols(path, _SYMBOLS, (VERSION,))
            if found is not None and RUNTIME in found.defined:
                runtime, name_of_runtime = found, path
                break
    if runtime is None:
        # No file of it that could be read holds an interpreter: a Python only if its name says so, and then
        # one that only a debugger enters (which finds Py_AddPendingCall or says it cannot).
        if not named:
            return None
        return Interpreter(_named(named), command_line=False)
    version = _hex_version(runtime.number(VERSION))
    if version is None:  # before 3.11: the name, where it says a version that had no Py_Version
        lib = _LIBPYTHON.search(name_of_runtime)
        said = (int(lib.group(1)), int(lib.group(2))) if lib else _named(named)
        version = said if said is not None and said < (3, 11) else None
    # The file at `exe` is what sys.remote_exec would run: it must be the one whose symbols were read (not a
    # program put there since, nor one that a process in another root names by the same path).
    command_line = own is not None and own.has(COMMAND_LINE) and _same_file(Path(exe), program)
    return Interpreter(version, command_line=command_line)


def _same_file(a: Path, b: Path) -> bool:
    try:
        one, other = a.stat(), b.stat()
    except OSError:
        return False
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def _libpythons(maps: Path) -> list[str]:
    """The files named like a libpython that the process maps, in the order it maps them."""
    out: list[str] = []
    try:
        with open(maps, errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(maxsplit=5)
                path = parts[5].removesuffix(" (deleted)") if len(parts) == 6 else ""
                if _LIBPYTHON.search(path) and path not in out:
                    out.append(path)
    except OSError:
        pass
    return out


def _named(m: re.Match[str] | None) -> tuple[int, int] | None:
    """The version an interpreter's file name says (python3.11), if it says one."""
    return (int(m.group(1)), int(m.group(2))) if m and m.group(1) and m.group(2) else None


def _hex_version(number: int | None) -> tuple[int, int] | None:
    """(major, minor) of a PY_VERSION_HEX (0x030E00F0: 3.14.0 final)."""
    if number is None or number >> 24 != 3:
        return None
    return 3, number >> 16 & 0xFF


def _ptrace_forbidden(pid: int, me: int) -> str | None:
    """Yama's ptrace_scope: 0 classic, 1 only a descendant (or root), 2 only root, 3 nobody."""
    try:
        scope = int(YAMA.read_text().strip())
    except (OSError, ValueError):
        return None  # no Yama: classic rules, which the uid check above covers
    if scope >= 3:
        return "kernel.yama.ptrace_scope is 3: no process may be attached to until the next reboot"
    if me == 0 or scope == 0:
        return None
    # (1 allows a tracer's own descendants: the tracer is gdb, which the target never descends from.)
    return (
        f"kernel.yama.ptrace_scope is {scope}: only root may attach to a process it did not start; run "
        f"`sudo gputui attach {pid}`"
        + (", or allow it with `sudo sysctl kernel.yama.ptrace_scope=0`" if scope == 1 else "")
    )


def _root_only(path: Path) -> bool:
    """The file and every directory above it are root's and nobody else may write them: root may run it."""
    try:
        for p in (path, *path.parents):
            info = p.stat()
            if info.st_uid != 0 or info.st_mode & 0o022:
                return False
    except OSError:
        return False
    return True
