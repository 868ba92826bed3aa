"""`gputui agent install`: a .pth file in this environment's site-packages, so that any Python process
of the environment started with GPUTUI_AGENT=1 runs the agent, whatever launched it (SLURM, a shell
script, a notebook kernel). Without the variable the hook does nothing but read it."""

from __future__ import annotations

import sysconfig
from pathlib import Path

NAME = "gputui-agent.pth"
# A .pth line that starts with "import" is executed at interpreter start-up; keep it one safe line.
LINE = (
    'import os; exec("try:\\n import gputui.agent; gputui.agent.start()\\nexcept Exception: pass") '
    'if os.environ.get("GPUTUI_AGENT") == "1" else None\n'
)


def hook_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / NAME


def install() -> Path:
    path = hook_path()
    path.write_text(LINE)
    return path


def uninstall() -> Path | None:
    path = hook_path()
    if path.exists():
        path.unlink()
        return path
    return None
