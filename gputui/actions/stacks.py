"""A Python process's current stacks, through py-spy (an optional dependency)."""

from __future__ import annotations

import os
import shutil
import subprocess

NOT_INSTALLED = "py-spy is not installed: pip install 'gputui[pyspy]' (or pip install py-spy)"


def is_python(name: str | None, command: str | None) -> bool:
    argv0 = os.path.basename((command or "").split(" ", 1)[0])
    return any(s.startswith("python") for s in (name or "", argv0))


def py_spy_dump(pid: int, timeout: float = 10.0) -> str:
    """The output of `py-spy dump --pid PID`, or one line saying why there is none."""
    exe = shutil.which("py-spy")
    if exe is None:
        return NOT_INSTALLED
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"py-spy did not answer within {timeout:g} s"
    except OSError as err:
        return f"py-spy could not run: {err}"
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.rstrip()
    complaint = (done.stderr or done.stdout).strip()
    if "ermission" in complaint or "ptrace" in complaint.lower():
        return (
            "py-spy was not permitted to read it: run gputui as root, or allow ptrace "
            "(sysctl kernel.yama.ptrace_scope=0)"
        )
    last_line = complaint.splitlines()[-1] if complaint else f"exit status {done.returncode}"
    return "py-spy failed: " + last_line
