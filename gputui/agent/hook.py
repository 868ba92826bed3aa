"""`gputui agent install`: a .pth file in a Python environment's site-packages, so that any Python process
of that environment started with GPUTUI_AGENT=1 runs the agent, whatever launched it (SLURM, a shell
script, a notebook kernel). Without the variable the hook does nothing but read it.

The environment is the training job's, not gputui's (which, under pipx, is a private one): the hook runs
the boot file of this gputui installation by its path, so the job's environment needs nothing else.

Run as root (sudo), gputui acts in another user's environment only as that user. Asking the interpreter
where its packages go runs it, and `-I` does not stop `site`: every .pth of its site-packages runs too. So
before it runs, every file and directory on the way to the interpreter and to its pyvenv.cfg (links
resolved here, one component at a time) is looked at: when any belongs to another user, the interpreter
runs as that user (setgroups, setgid, setuid, a minimal environment) and the hook is read, written and
removed by a forked child that has become that user; an environment of two users, or of a user without an
account, is refused in one line. Root's own environment is used only when no one else can write any of
it (a sticky directory such as /tmp may be on the way; it may not be the environment's). What the
interpreter prints is checked: absolute, printable, short paths, its packages inside its environment, and
a venv's environment the directory of its pyvenv.cfg. Files are created and replaced only through a
descriptor of site-packages (O_DIRECTORY|O_NOFOLLOW per component; O_CREAT|O_EXCL|O_NOFOLLOW; a rename
relative to it), never through a path another user controls."""

from __future__ import annotations

import contextlib
import errno
import grp
import json
import os
import pwd
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputui.agent.fdwalk import Seen, walk

NAME = "gputui-agent.pth"
ONCE = "_gputui_agent_hook"  # a key in sys.modules: the hook has run in this process
BOOT = Path(__file__).resolve().parent / "autostart" / "gputui_boot.py"
ASK_TIMEOUT_S = 30.0
# Standard library only, and the same in Python 3.10 to 3.13: it runs in the *target* interpreter.
_ASK = (
    "import json, sys, sysconfig; print(json.dumps({'purelib': sysconfig.get_paths()['purelib'], "
    "'version': list(sys.version_info[:3]), 'prefix': sys.prefix}))"
)
MAX_ANSWER = 64 * 1024  # what the interpreter may print: its answer is a few hundred bytes
MAX_PATH = 4096  # PATH_MAX
MAX_HOOK = 64 * 1024  # a hook file read by `status`: the hook's line is under 1 KiB
_OWNERS_PATH = "/usr/local/bin:/usr/bin:/bin"  # PATH of an interpreter run as its owner


class HookError(Exception):
    """One line for the user: why the hook could not be read, written or removed."""


@dataclass(frozen=True)
class Environment:
    python: str  # the interpreter, as the user named it or as found on PATH
    purelib: Path
    version: tuple[int, ...]
    prefix: str
    # Root acting in another user's environment: that user's uid, as whom the interpreter ran and as whom
    # the hook is read, written and removed. None: this process acts as itself.
    owner: int | None = None

    @property
    def hook(self) -> Path:
        return self.purelib / NAME

    @property
    def owner_name(self) -> str | None:
        return None if self.owner is None else _user(self.owner)

    def describe(self) -> str:
        return f"{self.python} (Python {'.'.join(map(str, self.version))}, environment {self.prefix})"


def line(boot: Path = BOOT) -> str:
    """The .pth line. A line that starts with "import" is executed at interpreter start-up: keep it one
    line that cannot fail the interpreter, and that says so when gputui has gone from where it was.
    site.py may read the same .pth twice (a venv's lib64 is a link to lib): the marker makes it once."""
    code = (
        "import sys\n"
        f"if {ONCE!r} not in sys.modules:\n"
        f" sys.modules[{ONCE!r}] = sys\n"
        " try:\n"
        f"  import runpy; runpy.run_path({str(boot)!r})\n"
        " except Exception as e:\n"
        "  sys.stderr.write(f'gputui agent not started: {e}\\n')\n"
    )
    return f"import os; exec({code!r}) if os.environ.get('GPUTUI_AGENT') == '1' else None\n"


# -- which interpreter, and as whom it runs --------------------------------------------------------------


def environment(python: str) -> Environment:
    """Ask `python` where its packages go. -I: neither PYTHONPATH nor the current directory may answer.
    As root, it runs as the environment's owner when that is another user (see the module's docstring)."""
    path = _locate(python)
    as_root = os.geteuid() == 0
    owner = _owner_before_running(python, path) if as_root else None
    found, returncode = _ask(python, path, owner)
    try:
        purelib, prefix, version = found["purelib"], found["prefix"], found["version"]
        if not (isinstance(purelib, str) and isinstance(prefix, str) and isinstance(version, list)):
            raise TypeError
        if len(version) != 3 or not all(type(part) is int for part in version):
            raise TypeError
    except (KeyError, TypeError):
        raise HookError(f"{python} is not a Python interpreter gputui can use (exit {returncode})") from None
    env = Environment(python, Path(purelib), tuple(version), prefix, owner)
    if env.version < (3, 10):
        raise HookError(f"{env.describe()}: the agent needs Python 3.10 or later")
    _check_paths(env, path)
    if as_root:
        _check_purelib_owner(env)
    return env


def _locate(python: str) -> str:
    """The interpreter's absolute path: its directories are examined by this path, and run as its owner
    it starts in /."""
    if "/" not in python:
        found = shutil.which(python)
        if found is None:
            raise HookError(f"cannot run {python}: not found on PATH")
        python = found
    return python if python.startswith("/") else os.path.join(os.getcwd(), python)


def _owner_before_running(python: str, path: str) -> int | None:
    """As root: the uid to run `path` as (None: root's own environment), from the interpreter and its
    pyvenv.cfg and every directory and link on their way; HookError when it is no single user's."""
    try:
        seen = _walked(path)
        sealed = set()
        # Where Python looks for pyvenv.cfg: beside the interpreter, then one directory up.
        for directory in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
            passed = _walked(directory)
            seen += passed
            sealed.add(passed[-1][0])
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                seen += _walked(os.path.join(directory, "pyvenv.cfg"))
    except OSError as err:
        raise HookError(f"cannot run {python}: {err.strerror or err}") from None
    owner = _single_owner(python, seen)
    if owner is None:
        _check_nobody_else_writes(seen, sealed)
    return owner


def _single_owner(python: str, seen: Seen) -> int | None:
    """The one user other than root who owns something in `seen`; None when root owns it all."""
    owners: dict[int, str] = {}
    for where, st in seen:
        if st.st_uid != 0:
            owners.setdefault(st.st_uid, where)
    if len(owners) > 1:
        names = " and ".join(f"{_user(uid)} ({_shown(where)})" for uid, where in owners.items())
        raise HookError(
            f"{python}: its environment belongs to {names}: root acts for no other user; "
            "run it as the environment's owner"
        )
    if not owners:
        return None
    [(uid, where)] = owners.items()
    try:
        pwd.getpwuid(uid)
    except KeyError:
        raise HookError(
            f"{_shown(where)} belongs to uid {uid}, which has no account here to act as: "
            "root runs no other user's environment; run it as that user"
        ) from None
    return uid


def _check_nobody_else_writes(seen: Seen, sealed: Collection[str]) -> None:
    """Root's own environment: no one else may be able to plant a file in it, or replace one of it. A
    sticky directory (/tmp) on the way is fine: its root-owned entries are root's to replace. The
    directories in `sealed` (where pyvenv.cfg is looked for, site-packages) may not be writable at all."""
    for where, st in seen:
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            continue
        if stat.S_ISDIR(mode) and mode & stat.S_ISVTX and where not in sealed:
            continue
        if mode & stat.S_IWOTH:
            whom = "everyone"
        elif mode & stat.S_IWGRP and st.st_gid != 0:
            whom = f"group {_group(st.st_gid)}"
        else:
            continue
        raise HookError(
            f"{_shown(where)} is writable by {whom}: root runs and writes no environment that another "
            "user can change; make it root's alone, or run it as a user"
        )


def _ask(python: str, path: str, owner: int | None) -> tuple[Any, int | None]:
    """What the interpreter prints, parsed; and its exit status. As `owner` when given (root only): no
    group of root's, a minimal environment, from /. Otherwise from the current directory, with this
    process's environment (a pyenv shim chooses its Python by them)."""
    options: dict[str, Any] = {}
    if owner is not None:
        account = pwd.getpwuid(owner)
        options = {
            "cwd": "/",  # not root's current directory, which the owner may not even reach
            "user": owner,
            "group": account.pw_gid,
            "extra_groups": [],
            "env": {
                "PATH": _OWNERS_PATH,
                "HOME": account.pw_dir,
                "USER": account.pw_name,
                "LOGNAME": account.pw_name,
                "LANG": "C.UTF-8",
            },
        }
    try:
        proc = subprocess.Popen(
            [path, "-I", "-c", _ASK],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # all it starts is stopped with it
            **options,
        )
    except OSError as err:
        raise HookError(f"cannot run {python}: {err.strerror or err}") from None
    try:
        out = _read_answer(python, proc)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:
        return json.loads(out), proc.returncode
    except ValueError:  # not JSON, not UTF-8
        raise HookError(
            f"{python} is not a Python interpreter gputui can use (exit {proc.returncode})"
        ) from None


def _read_answer(python: str, proc: subprocess.Popen[bytes]) -> bytes:
    """At most MAX_ANSWER bytes, within ASK_TIMEOUT_S for the output and the exit together."""
    assert proc.stdout is not None
    deadline = time.monotonic() + ASK_TIMEOUT_S
    late = HookError(f"{python} did not answer within {ASK_TIMEOUT_S:g} s")
    chunks: list[bytes] = []
    size = 0
    with proc.stdout:
        fd = proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise late
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER:
                raise HookError(
                    f"{python} said too much (over {MAX_ANSWER // 1024} KiB): not a Python interpreter"
                )
            chunks.append(chunk)
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        raise late from None
    return b"".join(chunks)


def _check_paths(env: Environment, path: str) -> None:
    """What the interpreter said, believed only when it is plausible: absolute, printable and short paths,
    site-packages inside the environment, and a venv's environment the directory of its pyvenv.cfg."""
    for what, value in (("its packages are in", str(env.purelib)), ("its environment is", env.prefix)):
        if len(value) > MAX_PATH:
            raise HookError(f"{env.python} says {what} a path too long ({len(value)} characters)")
        if not value.isprintable():
            raise HookError(f"{env.python} says {what} {_shown(value)}: not printable")
        if not value.startswith("/"):
            raise HookError(f"{env.python} says {what} {_shown(value)}: not an absolute path")
        if any(part in (".", "..") for part in value.split("/")):
            raise HookError(f"{env.python} says {what} {_shown(value)}: not a plain path (. or ..)")
    if env.purelib == Path(env.prefix) or not env.purelib.is_relative_to(env.prefix):
        raise HookError(
            f"{env.python} says its packages are in {env.purelib}: not in its environment {env.prefix}"
        )
    for directory in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        if os.path.isfile(os.path.join(directory, "pyvenv.cfg")):  # the one Python reads: the first
            try:
                same = os.path.samefile(env.prefix, directory)
            except OSError:
                same = False
            if not same:
                raise HookError(
                    f"{env.python} says its environment is {env.prefix}: not the environment of "
                    f"{directory}/pyvenv.cfg"
                )
            break


def _check_purelib_owner(env: Environment) -> None:
    """As root: site-packages is the environment's owner's (or root's), and for root's own environment no
    one else can write on the way to it. A missing one is said when it is read or written."""
    try:
        seen = _walked(str(env.purelib))
    except OSError:
        return
    _check_seen(env, seen)


def _check_seen(env: Environment, seen: Seen) -> None:
    for where, st in seen:
        if st.st_uid not in (0, env.owner):
            mine = "root" if env.owner is None else env.owner_name
            raise HookError(
                f"{env.python} says its packages are in {env.purelib}, but {_shown(where)} belongs to "
                f"{_user(st.st_uid)}, not to {mine}: run it as the environment's owner"
            )
    if env.owner is None:
        _check_nobody_else_writes(seen, {seen[-1][0]})


# -- every entry on the way, through directory descriptors (fdwalk) --------------------------------------


def _walked(path: str) -> Seen:
    fd, seen = walk(path)
    os.close(fd)
    return seen


def _open_purelib(env: Environment) -> int:
    """A descriptor of site-packages, through no path another user controls: as root for root's own
    environment, checked again on the way (what was checked is what is written into)."""
    fd, seen = walk(str(env.purelib))
    try:
        if not stat.S_ISDIR(seen[-1][1].st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(env.purelib))
        if os.geteuid() == 0:
            _check_seen(env, seen)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- the hook: read, written and removed as the environment's owner ------------------------------------


def install(env: Environment) -> Path:
    return Path(str(_as_owner(env, lambda: _install(env))))


def uninstall(env: Environment) -> Path | None:
    removed = _as_owner(env, lambda: _uninstall(env))
    return None if removed is None else Path(removed)


def status(env: Environment) -> str:
    """What the hook in `env` does: not installed, runs this gputui's agent, or points somewhere else."""
    return str(_as_owner(env, lambda: _status(env)))


def _install(env: Environment) -> str:
    path = env.hook
    try:
        directory = _open_purelib(env)
    except OSError as err:
        raise HookError(_cannot("write", path, err)) from None
    temporary = f".{NAME}.{os.getpid()}.{os.urandom(8).hex()}"  # not *.pth: site.py never reads it
    created = False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o644, dir_fd=directory)
        created = True
        try:
            os.fchmod(fd, 0o644)  # every job of the environment reads it, whatever the umask
            data = line().encode()
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        # A job starting right now reads the old line or the new one, whole; a link at the name is
        # replaced, never followed.
        os.rename(temporary, NAME, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError as err:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=directory)
        raise HookError(_cannot("write", path, err)) from None
    finally:
        os.close(directory)
    return str(path)


def _uninstall(env: Environment) -> str | None:
    path = env.hook
    try:
        directory = _open_purelib(env)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise HookError(_cannot("remove", path, err)) from None
    try:
        os.unlink(NAME, dir_fd=directory)  # a link is removed, not what it points to
    except FileNotFoundError:
        return None
    except OSError as err:
        raise HookError(_cannot("remove", path, err)) from None
    finally:
        os.close(directory)
    return str(path)


def _status(env: Environment) -> str:
    path = env.hook
    try:
        directory = _open_purelib(env)
    except FileNotFoundError:
        return "not installed"
    except OSError as err:
        raise HookError(_cannot("read", path, err)) from None
    try:
        try:
            st = os.stat(NAME, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return "not installed"
        if stat.S_ISLNK(st.st_mode):
            return "not gputui's hook but a symbolic link (install again to replace it)"
        if not stat.S_ISREG(st.st_mode):
            return "not gputui's hook but not a regular file"
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = os.open(NAME, flags, dir_fd=directory)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "not gputui's hook but not a regular file"
            data = os.read(fd, MAX_HOOK)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return "not installed"
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK):  # a link swapped in between the lstat and the open
            return "not gputui's hook but a symbolic link (install again to replace it)"
        raise HookError(_cannot("read", path, err)) from None
    finally:
        os.close(directory)
    if data == line().encode():
        return "installed"
    return "installed by another gputui installation (install again to use this one)"


def _as_owner(env: Environment, work: Callable[[], str | None]) -> str | None:
    """`work()`, by this process when it acts as itself, else by a forked child that has become the
    environment's owner for good (no group of root's): root reads and writes nothing in another user's
    environment. Its answer or its HookError comes back through a pipe."""
    if env.owner is None or env.owner == os.geteuid():
        return work()
    name = env.owner_name
    try:
        gid = pwd.getpwuid(env.owner).pw_gid
    except KeyError:
        raise HookError(f"uid {env.owner} has no account here to act as: run it as that user") from None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its work is covered in the parent's own tests)
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(env.owner)
            try:
                reply: dict[str, str | None] = {"value": work()}
            except HookError as err:
                reply = {"error": str(err)}
            with os.fdopen(write_end, "wb") as out:
                out.write(json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read(MAX_ANSWER)
    os.waitpid(pid, 0)
    try:
        reply = json.loads(said)
        if "error" in reply:
            raise HookError(str(reply["error"]))
        value = reply["value"]
        if value is not None and not isinstance(value, str):
            raise TypeError
        return value
    except (ValueError, KeyError, TypeError):
        raise HookError(f"could not act as {name}, the environment's owner") from None


def _cannot(verb: str, path: Path, err: OSError) -> str:
    why = err.strerror or str(err)
    if isinstance(err, PermissionError):
        why += " (run it as the environment's owner, or pick one you own with --python)"
    return f"cannot {verb} {path}: {why}"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _shown(text: str) -> str:
    """A path from another user's files or interpreter, for one line: printable and short (gputui.units
    is not imported here: the agent's package is copied whole into jobs, standard library only)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= 200 else text[:199] + "…"
