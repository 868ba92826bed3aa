"""The whole examination: gather the facts, judge them, in the order a person would check."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gputui.doctor import checks_cuda, checks_gpm, checks_system, checks_torch, facts, process, torch_probe
from gputui.doctor.report import Check
from gputui.model import ProcessRow


def diagnose(
    pid: int | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    root: Path = Path("/"),
    system: facts.SystemFacts | None = None,
    idle_s: Callable[[dict[int, int | None]], float | None] | None = None,
    seen: tuple[facts.SystemFacts, Path] | None = None,
    devices_dir: Path | None = None,
    watched: tuple[ProcessRow, ...] = (),
    gpm: str = "auto",
) -> list[Check]:
    """Every check; raises process.NoSuchProcess when `pid` names no process. The TUI passes what it
    already knows: `idle_s` from its history, and in `seen` its own view of the GPUs and processes with
    their device directory (the demo's, when it runs on simulated GPUs), for the process checks.
    `devices_dir`: where the nvidia device files are (doctor --devices-dir); root/dev by default.
    `watched`: the TUI's rows of `pid`, with the memory trend and hung verdict of the monitor's history.
    `gpm`: "auto", "on" or "off", as the monitor's --gpm (SM and tensor activity; not behind DCGM in auto).
    In the TUI the GPM verdicts judge the monitor's own reading (`seen`), measured over a whole tick."""
    env = dict(os.environ if env is None else env)
    if system is None:
        if gpm != "auto":
            system = facts.gather(root, devices_dir=devices_dir, gpm=gpm)
        else:  # the plain calls, as before (tests stand a narrower gather in)
            system = facts.gather(root, devices_dir=devices_dir) if devices_dir else facts.gather(root)
    out = checks_system.driver(system) + checks_system.gpus(system) + checks_system.health(system)
    out += checks_gpm.checks(seen[0], system) if seen is not None else checks_gpm.checks(system)
    seen_by_cuda: tuple[facts.GpuFact, ...] = ()
    if system.gpus:
        out.append(checks_cuda.visible_devices(env, system.gpus))
        out.append(checks_cuda.device_order(env, system.gpus))
        value = env.get("CUDA_VISIBLE_DEVICES")
        order = checks_cuda.cuda_order(system.gpus, env)
        seen_by_cuda = tuple(order) if value is None else checks_cuda.parse_visible(value, order).selected
    out += checks_torch.checks(torch_probe.probe(python or sys.executable, env), system, seen_by_cuda)
    if pid is not None:
        if idle_s is None:

            def idle_s(memory: dict[int, int | None]) -> float | None:
                return facts.idle_seconds(sorted(memory), time.time())

        view, where = seen or (system, devices_dir or root / "dev")
        p = process.gather(pid, view, where, idle_s=idle_s, watched=watched)
        out += process.checks(p, view)
    return out
