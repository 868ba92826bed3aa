"""`gputui agent install`: a .pth file in a Python environment's site-packages, so that any Python process
of that environment started with GPUTUI_AGENT=1 runs the agent, whatever launched it (SLURM, a shell
script, a notebook kernel). Without the variable the hook does nothing but read it.

The environment is the training job's, not gputui's (which, under pipx, is a private one): the hook runs
the boot file of this gputui installation by its path, so the job's environment needs nothing else."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

NAME = "gputui-agent.pth"
ONCE = "_gputui_agent_hook"  # a key in sys.modules: the hook has run in this process
BOOT = Path(__file__).resolve().parent / "autostart" / "gputui_boot.py"
ASK_TIMEOUT_S = 30.0
# Standard library only, and the same in Python 3.10 to 3.13: it runs in the *target* interpreter.
_ASK = (
    "import json, sys, sysconfig; print(json.dumps({'purelib': sysconfig.get_paths()['purelib'], "
    "'version': list(sys.version_info[:3]), 'prefix': sys.prefix}))"
)


class HookError(Exception):
    """One line for the user: why the hook could not be read, written or removed."""


@dataclass(frozen=True)
class Environment:
    python: str  # the interpreter, as the user named it or as found on PATH
    purelib: Path
    version: tuple[int, ...]
    prefix: str

    @property
    def hook(self) -> Path:
        return self.purelib / NAME

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


def environment(python: str) -> Environment:
    """Ask `python` where its packages go. -I: neither PYTHONPATH nor the current directory may answer."""
    try:
        out = subprocess.run(
            [python, "-I", "-c", _ASK],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise HookError(f"{python} did not answer within {ASK_TIMEOUT_S:g} s") from None
    except OSError as err:
        raise HookError(f"cannot run {python}: {err.strerror or err}") from None
    try:
        found = json.loads(out.stdout)
        env = Environment(python, Path(found["purelib"]), tuple(found["version"]), str(found["prefix"]))
    except (ValueError, KeyError, TypeError):
        raise HookError(
            f"{python} is not a Python interpreter gputui can use (exit {out.returncode})"
        ) from None
    if env.version < (3, 10):
        raise HookError(f"{env.describe()}: the agent needs Python 3.10 or later")
    return env


def install(env: Environment) -> Path:
    path = env.hook
    tmp = path.with_name(f".{NAME}.{os.getpid()}")
    try:
        tmp.write_text(line())
        os.replace(tmp, path)  # a job starting right now reads the old line or the new one, whole
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise HookError(_cannot("write", path, err)) from None
    return path


def uninstall(env: Environment) -> Path | None:
    path = env.hook
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise HookError(_cannot("remove", path, err)) from None
    return path


def status(env: Environment) -> str:
    """What the hook in `env` does: not installed, runs this gputui's agent, or points somewhere else."""
    try:
        text = env.hook.read_text()
    except FileNotFoundError:
        return "not installed"
    except OSError as err:
        raise HookError(_cannot("read", env.hook, err)) from None
    if text == line():
        return "installed"
    return "installed by another gputui installation (install again to use this one)"


def _cannot(verb: str, path: Path, err: OSError) -> str:
    why = err.strerror or str(err)
    if isinstance(err, PermissionError):
        why += " (run it as the environment's owner, or pick one you own with --python)"
    return f"cannot {verb} {path}: {why}"
