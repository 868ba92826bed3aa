"""`gputui doctor --pid PID`: one process. Does it hold the GPU at all, with which CUDA_VISIBLE_DEVICES,
how much memory, is it idle there, is it a zombie of some class, is it waiting for its data loader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from gputui import attach as attaching
from gputui.collect import classify
from gputui.collect.agents import AgentPoller
from gputui.collect.history import History
from gputui.collect.holders import HolderScanner
from gputui.collect.procs import ProcessJoiner, device_files
from gputui.doctor import checks_cuda
from gputui.doctor.facts import SystemFacts
from gputui.doctor.report import Check, ok, problem, warning
from gputui.model import AgentReport
from gputui.units import fmt_bytes, fmt_duration, printable

IDLE_AFTER_S = 120.0  # at 0 % this long while holding memory: idle
INPUT_BOUND = 0.5  # share of step time waiting for data


class NoSuchProcess(Exception):
    """--pid names no process: the doctor cannot run (exit 2)."""


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    pid: int
    command: str
    devices: tuple[str, ...] | None  # the nvidia device files it holds; None: not readable
    environ: dict[str, str] | None  # None: not readable
    memory: dict[int, int | None]  # NVML GPU index -> bytes NVML lists for it
    idle_s: float | None = None  # seconds its GPUs have been at 0 % (None: not known)
    category: str = classify.OK
    reason: str = ""
    wait_share: float | None = None  # from the gputui agent in the process, if it runs one
    # Whether gputui could attach its agent (only asked, never done); None: its agent answers already.
    attach: attaching.Plan | attaching.Refusal | None = None
    devices_dir: Path | None = None  # where its device files were looked for


def gather(
    pid: int,
    system: SystemFacts,
    devices_dir: Path,
    idle_s: Callable[[dict[int, int | None]], float | None] = lambda _m: None,
    agent: Callable[[int], AgentReport | None] | None = None,
    attachable: Callable[[int], attaching.Plan | attaching.Refusal] | None = None,
) -> ProcessFacts:
    """`idle_s` says how long the process's GPUs have been at 0 % (from NVML's samples or the TUI's
    history); `agent` answers its agent's stats, if any; `attachable` says whether its agent could be
    attached (gputui.attach.check: it reads /proc and stops nothing)."""
    try:
        proc = psutil.Process(pid)
        command = " ".join(proc.cmdline()) or proc.name()
    except psutil.ZombieProcess:  # exited, not reaped: it has no command line or environment left
        command = ""
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"no process with pid {pid}") from None
    except psutil.AccessDenied:
        command = ""
    try:
        environ: dict[str, str] | None = proc.environ()
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        environ = None
    memory = {p.gpu: p.used_memory for p in system.processes if p.pid == pid}
    minors = {g.minor if g.minor is not None else g.index: g.index for g in system.gpus}
    rows, _ = ProcessJoiner().join(system.processes, HolderScanner(devices_dir).scan(), minors)
    mine = [r for r in rows if r.pid == pid]
    worst = next((r for r in mine if r.category != classify.OK), mine[0] if mine else None)
    report = (agent or _agent_stats)(pid)
    answers = report is not None and report.ok
    return ProcessFacts(
        pid,
        command,
        device_files(pid, devices_dir),
        environ,
        memory,
        idle_s=idle_s(memory) if any(memory.values()) else None,
        category=worst.category if worst else classify.OK,
        reason=worst.reason if worst else "",
        wait_share=report.progress.data_wait_share if report is not None and report.ok else None,
        attach=None if answers else (attachable or attaching.check)(pid),
        devices_dir=devices_dir,
    )


def _agent_stats(pid: int) -> AgentReport | None:
    return AgentPoller().report(pid)  # validated, verified, and bounded in time like every tick's


def checks(p: ProcessFacts, system: SystemFacts) -> list[Check]:
    who = f"pid {p.pid}"
    if p.category == classify.DEFUNCT:  # it has exited: its files and environment are gone with it
        return [_zombie(p, who)]
    out = [_devices(p, who)]
    if p.environ is None:
        out.append(
            warning(
                "process",
                f"{who}: its environment is not readable, so its CUDA_VISIBLE_DEVICES is unknown",
                "run the doctor as its user or as root",
            )
        )
    elif system.gpus:
        verdict = checks_cuda.visible_devices(p.environ, system.gpus, whose=f"{who}: its ")
        out.append(Check("process", verdict.status, verdict.found, verdict.fix))
    used = {gpu: m for gpu, m in p.memory.items() if m}
    if used:
        where = ", ".join(f"{fmt_bytes(m)} on GPU {gpu}" for gpu, m in sorted(used.items()))
        out.append(ok("process", f"{who} uses {where}"))
        if p.idle_s is not None and p.idle_s >= IDLE_AFTER_S:
            out.append(
                warning(
                    "process",
                    f"{who} holds GPU memory but its GPU has been at 0% for {fmt_duration(p.idle_s)}",
                    "it may be stuck (`py-spy dump --pid PID` shows where) or finished but not exited",
                )
            )
    elif p.devices and p.category == classify.WORKER:
        out.append(ok("process", f"{who} is a data-loader worker of a GPU process (it inherited the files)"))
    elif p.devices:
        out.append(
            warning(
                "process",
                f"{who} holds device files but NVML lists no GPU memory for it",
                "it may run in another PID namespace (a container), or be a leftover context",
            )
        )
    if p.category not in (classify.OK, classify.WORKER):
        out.append(_zombie(p, who))
    if p.wait_share is not None:
        share = round(100 * p.wait_share)
        if p.wait_share >= INPUT_BOUND:
            out.append(
                warning(
                    "process",
                    f"{who} is input-bound: {share}% of step time waiting for data",
                    "more DataLoader workers (num_workers), pin_memory=True, faster storage or "
                    "cached/preprocessed data",
                )
            )
        else:
            out.append(ok("process", f"{who} waits for data {share}% of step time"))
    if p.attach is not None and not (isinstance(p.attach, attaching.Refusal) and not p.attach.applies):
        out.append(_attach(p.attach, who))  # (a program that is not Python has no allocator panel to want)
    return out


def _attach(can: attaching.Plan | attaching.Refusal, who: str) -> Check:
    """Whether the allocator panel is a keypress away. Only said: the doctor never attaches by itself."""
    panel = f"{who}: allocator panel:"
    if isinstance(can, attaching.Refusal):
        return warning(
            "process",
            f"{panel} gputui cannot attach its agent to this process: {can.reason}",
            "as said; or start the job with `gputui run -- COMMAND`, which needs no attaching",
        )
    if can.already:  # its agent's socket is there, but the agent did not answer the doctor
        return warning(
            "process",
            f"{panel} it has gputui's agent, but the agent did not answer",
            "ask again in a moment (a process that holds the GIL for long answers late)",
        )
    return ok(
        "process",
        f"{panel} gputui can attach its agent to this process (`gputui attach {can.pid}`, or `a` in the "
        f"monitor): {can.describe()}",
    )


def _zombie(p: ProcessFacts, who: str) -> Check:
    why = p.reason if p.reason.startswith(p.category) else f"{p.category}: {p.reason}"
    return problem("process", f"{who} is {why}", _ZOMBIE_FIX.get(p.category, ""))


def _devices(p: ProcessFacts, who: str) -> Check:
    if p.devices is None:
        return warning(
            "process", f"{who}: its open files are not readable", "run the doctor as its user or root"
        )
    used = sorted(gpu for gpu, m in p.memory.items() if m)
    if not p.devices and used:
        # It has a context: it opened its device files, just not under the directory looked in.
        where = printable(f"{p.devices_dir}/nvidia*") if p.devices_dir is not None else "the device directory"
        return warning(
            "process",
            f"{who} holds no {where} file, yet NVML lists GPU memory for it (GPU "
            f"{', '.join(map(str, used))}): its device files are elsewhere",
            "name where they are with `gputui doctor --devices-dir DIR` (a container's own /dev, "
            "a driver container's /run/nvidia/driver/dev)",
        )
    if not p.devices:
        return problem(
            "process",
            f"{who} holds no /dev/nvidia* file: it never initialized CUDA",
            "check that it moves work to the GPU (.to('cuda')), its CUDA_VISIBLE_DEVICES, and "
            "that its torch is a CUDA build (`gputui doctor --python` with its interpreter)",
        )
    return ok("process", f"{who} holds {', '.join(p.devices)}")


_ZOMBIE_FIX = {
    classify.DEFUNCT: "only its parent can reap it: end or signal the parent",
    classify.ORPHAN: "its parent is gone: kill it (gputui, k) to free the GPU",
    classify.STUCK: "state D/T: a stopped process needs SIGCONT; one in the driver may need a reboot",
    classify.UNSEEN: "it holds the device without NVML listing memory: kill it if it should not be there",
    classify.NVML_ONLY: "run the doctor in its PID namespace (inside its container) to see it",
    classify.NO_PERMISSION: "run the doctor as root to read its open files",
}


def idle_from_history(history: History, gpus: list[int]) -> float | None:
    """Seconds the GPUs have all been at 0 %, from the TUI's own history (the last hour)."""
    last_busy, newest, oldest = None, None, None
    for gpu in gpus:
        h = history.gpus.get(gpu)
        if h is None or not h.times:
            return None
        newest = max(newest or h.times[-1], h.times[-1])
        oldest = min(oldest or h.times[0], h.times[0])
        busy = [t for t, u in zip(h.times, h.util, strict=True) if u]
        if busy:
            last_busy = max(last_busy or busy[-1], busy[-1])
    if newest is None or oldest is None:
        return None
    return newest - (last_busy if last_busy is not None else oldest)
