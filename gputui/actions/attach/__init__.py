"""Attach gputui's agent to a Python process that is already running, without a restart.

`check(pid)` says whether it can be done and how, reading only /proc, the system's settings and the
symbol tables of the target's program and libpython (nothing is run or stopped; the doctor asks it too);
`attach(pid)` does it: Python 3.14 and later through `sys.remote_exec` (PEP 768), run by the target's own
program when its symbols show it is CPython's own `python`; otherwise through a debugger (gdb, else
cuda-gdb, else lldb), which queues a short bootstrap with `Py_AddPendingCall` and detaches at once: the
target's main thread runs it at its next bytecode, with its own GIL, traced by nobody. The bootstrap
starts the standard-library agent (the same code as `gputui.agent.start()`): it imports no torch and
initialises no CUDA.
"""

from __future__ import annotations

from gputui.actions.attach.preflight import Plan, Refusal, check
from gputui.actions.attach.run import Outcome, attach

__all__ = ["Outcome", "Plan", "Refusal", "attach", "check"]
