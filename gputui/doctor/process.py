"""`gputui doctor --pid PID`: one process. Does it hold the GPU at all, with which CUDA_VISIBLE_DEVICES,
how much memory, is it idle there, does its memory grow, is it hung, is it a zombie of some class, is it
waiting for its data loader.

The doctor is one-shot: it keeps no history. A trend comes from the agent's own memory ring (the
`memory_history` op), or inside the TUI from the monitor's rows; a hang from the agent's step times
with a one-second look at the GPU, or from the monitor's verdict.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pynvml

from gputui.actions import attach as attaching
from gputui.agent import protocol
from gputui.analyze import classify, forecast, hung
from gputui.analyze.history import History
from gputui.collect.agents.client import AgentPoller, exchange
from gputui.collect.agents.reply import BadReply, MemoryHistory, parse_memory_history
from gputui.collect.procs.holders import HolderScanner
from gputui.collect.procs.join import ProcessJoiner, device_files
from gputui.doctor import checks_cuda
from gputui.doctor.facts import SystemFacts
from gputui.doctor.report import Check, ok, problem, warning
from gputui.model import AgentReport, GpuSample, ProcessRow
from gputui.units import fmt_bytes, fmt_duration, printable

IDLE_AFTER_S = 120.0  # at 0 % this long while holding memory: idle
INPUT_BOUND = 0.5  # share of step time waiting for data
FULL_SOON_S = 1800.0  # a GPU full sooner than this is a problem, not a warning
HISTORY_DEADLINE_S = 1.0
LOOK_S = 1.0  # how long the doctor looks at a GPU when the agent says no step came for a while
LOOK_READINGS = 3
# hung.py's rules, but the GPU is judged on the doctor's one-second look, not on the monitor's two minutes.
LOOK_RULES = hung.Rules(quiet_s=LOOK_S)


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
    born: float | None = None  # its create time: the forecast skips its warm-up
    agent: AgentReport | None = None  # what its agent said, when it answered
    # Its agent's memory history; a string: why its agent gave none; None: no agent answered.
    history: MemoryHistory | str | None = None
    # The monitor's rows of this process (the TUI's D screen): its trend and hung verdict, from its history.
    watched: tuple[ProcessRow, ...] = ()
    # NVML GPU index -> the doctor's short look at it (only when the agent says no step came for a while).
    looks: dict[int, hung.GpuWindow] = field(default_factory=dict)
    looked_at: float | None = None


def gather(
    pid: int,
    system: SystemFacts,
    devices_dir: Path,
    idle_s: Callable[[dict[int, int | None]], float | None] = lambda _m: None,
    agent: Callable[[int], AgentReport | None] | None = None,
    attachable: Callable[[int], attaching.Plan | attaching.Refusal] | None = None,
    history: Callable[[int], MemoryHistory | str] | None = None,
    look: Callable[[list[int]], dict[int, hung.GpuWindow]] | None = None,
    watched: tuple[ProcessRow, ...] = (),
) -> ProcessFacts:
    """`idle_s` says how long the process's GPUs have been at 0 % (from NVML's samples or the TUI's
    history); `agent` answers its agent's stats, if any, and `history` its memory history; `attachable`
    says whether its agent could be attached (gputui.actions.attach.check: it reads /proc and stops nothing);
    `look` reads the GPUs for a second (NVML); `watched`: the monitor's rows of it (the TUI's)."""
    born: float | None = None
    try:
        proc = psutil.Process(pid)
        born = proc.create_time()
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
    looks: dict[int, hung.GpuWindow] = {}
    if answers and report is not None and not watched and _may_be_stalled(report):
        looks = (look or look_at_gpus)(sorted(gpu for gpu, m in memory.items() if m))
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
        born=born,
        agent=report if answers else None,
        history=(history or agent_history)(pid) if answers else None,
        watched=watched,
        looks=looks,
        looked_at=time.time() if looks else None,
    )


def _agent_stats(pid: int) -> AgentReport | None:
    return AgentPoller().report(pid)  # validated, verified, and bounded in time like every tick's


def agent_history(pid: int, directory: Path | None = None) -> MemoryHistory | str:
    """The memory history of `pid`'s agent (verified like every exchange, then validated), or why there
    is none. `directory`: where its socket is, when not in the usual places (tests)."""
    target = AgentPoller(directory).discover().get(pid)
    if target is None:
        return "its agent no longer listens"
    ex = exchange([target], {"op": "memory_history"}, HISTORY_DEADLINE_S)[pid]
    if ex.refused or ex.reply is None:
        return ex.error or "no reply"
    try:
        return parse_memory_history(protocol.decode(ex.reply, limit=protocol.MAX_REPLY))
    except (protocol.ProtocolError, BadReply) as err:
        return f"bad reply: {err}"
    except (RecursionError, MemoryError):
        return "bad reply: too deeply nested"


def _may_be_stalled(report: AgentReport) -> bool:
    """Worth a look at the GPU: it has stepped, and no step came for at least hung's shortest stall."""
    p = report.progress
    return (p.steps or 0) >= hung.MIN_STEPS and (p.last_step_age_s or 0.0) >= hung.DEFAULT.stall_min_s


def look_at_gpus(gpus: list[int]) -> dict[int, hung.GpuWindow]:
    """LOOK_READINGS readings of each GPU's utilization and power over LOOK_S (NVML): what the doctor,
    which keeps no history, can say of a GPU now. A GPU that cannot be read is left out."""
    windows: dict[int, hung.GpuWindow] = {}
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):
        return windows
    try:
        for k in range(LOOK_READINGS):
            if k:
                time.sleep(LOOK_S / LOOK_READINGS)
            for index in gpus:
                try:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                    sample = GpuSample(
                        index,
                        util_gpu=int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                        power=pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                        power_limit=pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
                    )
                except (pynvml.NVMLError, TypeError, ValueError):
                    continue
                windows.setdefault(index, hung.GpuWindow()).add(time.time(), sample)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return windows


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
    out += trend_checks(p, system) + hung_checks(p)
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


# -- memory trend and hung: from the agent's history, or the monitor's ---------------------------------

_LEAK_FIX = {
    forecast.ALLOCATED: (
        "find what keeps tensors alive across steps (losses kept without .item(), a growing list or cache, "
        "hooks); in gputui's allocator panel (a), h records allocations and s dumps a snapshot to open at "
        "https://pytorch.org/memory_viz"
    ),
    forecast.RESERVED: (
        "the allocator's cache fragments: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or keep "
        "tensor shapes fixed (pad variable-length batches)"
    ),
    None: (
        "run it with gputui's agent (`gputui run -- COMMAND` or `gputui attach {pid}`): it tells leaking "
        "tensors from a growing cache"
    ),
}
_NO_HISTORY = (
    "a one-shot doctor has no memory history: the monitor (`gputui`) shows its trend on the process row "
    "after ~4 minutes; with gputui's agent in it (`gputui run -- COMMAND`, `gputui attach {pid}`) the "
    "doctor reads the agent's own"
)


@dataclass(frozen=True, slots=True)
class DeviceTrend:
    """One CUDA device of the process, from its agent's points."""

    cuda: int  # the process's own device number
    gpu: int | None  # NVML's index, when known
    split: forecast.Split
    total: forecast.Forecast  # reserved: what the GPU sees of it
    full_in: float | None
    have_s: float  # seconds of points
    need_s: float  # seconds of points a trend needs (after the warm-up)
    allocated: int
    reserved: int

    @property
    def growth(self) -> float:
        """What fills the GPU: reserved; allocated when only it grows so far (the cache had room)."""
        return self.total.growth if self.total.growing else self.split.allocated.growth


def trend_checks(p: ProcessFacts, system: SystemFacts) -> list[Check]:
    who = f"pid {p.pid}"
    row = _worst_row(p.watched)
    trends = _device_trends(p, system) if isinstance(p.history, MemoryHistory) else []
    if row is not None and row.memory_growth is not None:
        return [_monitor_trend(row, trends, who)]
    if trends:
        return [_agent_trend(p.pid, trends, who)]
    if not any(p.memory.values()):
        return []  # no GPU memory: nothing to trend
    if row is not None:
        return [ok("process", f"{who} memory trend: not enough history yet (the monitor needs ~4 min)")]
    if isinstance(p.history, str):
        return [ok("process", f"{who} memory trend: its agent gave no memory history ({p.history})")]
    if isinstance(p.history, MemoryHistory):
        return [ok("process", f"{who} memory trend: its agent has no points yet (no CUDA allocation so far)")]
    return [ok("process", f"{who} memory trend: " + _NO_HISTORY.format(pid=p.pid))]


def _worst_row(rows: tuple[ProcessRow, ...]) -> ProcessRow | None:
    """The row that matters most: a hung one, then the GPU full soonest, then the fastest growth."""
    if not rows:
        return None
    inf = float("inf")

    def urgency(r: ProcessRow) -> tuple[bool, float, float]:
        return r.hung is None, r.full_in if r.full_in is not None else inf, -(r.memory_growth or 0.0)

    return min(rows, key=urgency)


def _monitor_trend(row: ProcessRow, trends: list[DeviceTrend], who: str) -> Check:
    growth = row.memory_growth or 0.0
    if growth <= 0.0:
        return ok("process", f"{who} memory trend: steady over the monitor's last 10 min")
    verdict = next((t.split for t in trends if t.split.verdict), None)  # the agent tells which grows
    found = _growing(who, growth, row.gpu, row.full_in, verdict.text if verdict else "")
    return _growth_check(row.pid, found, row.full_in, verdict.verdict if verdict else None)


def _agent_trend(pid: int, trends: list[DeviceTrend], who: str) -> Check:
    growing = [t for t in trends if t.total.growing or t.split.allocated.growing]
    if growing:
        inf = float("inf")
        t = min(growing, key=lambda t: (t.full_in if t.full_in is not None else inf, -t.growth))
        found = _growing(who, t.growth, t.gpu, t.full_in, t.split.text)
        return _growth_check(pid, found, t.full_in, t.split.verdict)
    short = [t for t in trends if not t.total.enough]
    if short:
        t = min(short, key=lambda t: t.have_s)
        need = f"{t.need_s / 60:.0f} min" if t.need_s >= 120 else f"{t.need_s:.0f} s"
        why = f"{t.have_s:.0f} s of {need}" if t.have_s < t.need_s else "its agent's points have gaps"
        return ok("process", f"{who} memory trend: not enough history yet ({why})")
    t = trends[0]
    minutes = min(t.have_s, forecast.WINDOW_S) / 60
    return ok(
        "process",
        f"{who} memory trend: steady over the last {minutes:.0f} min ({t.total.detail}): "
        f"allocated {fmt_bytes(t.allocated)}, reserved {fmt_bytes(t.reserved)}{_on(t.gpu)}",
    )


def _on(gpu: int | None) -> str:
    return f" on GPU {gpu}" if gpu is not None else ""


def _growing(who: str, growth: float, gpu: int | None, full_in: float | None, verdict: str) -> str:
    text = f"{who} memory trend: growing {forecast.rate_text(growth)}"
    if full_in is not None:
        text += f" — {'GPU ' + str(gpu) if gpu is not None else 'its GPU'} is full in "
        text += forecast.duration_text(full_in)
    return text + (f"; {verdict}" if verdict else "")


def _growth_check(pid: int, found: str, full_in: float | None, verdict: str | None) -> Check:
    soon = full_in is not None and full_in < FULL_SOON_S
    return (problem if soon else warning)("process", found, _LEAK_FIX[verdict].format(pid=pid))


def _device_trends(p: ProcessFacts, system: SystemFacts) -> list[DeviceTrend]:
    assert isinstance(p.history, MemoryHistory)
    now = p.history.time
    out = []
    for cuda, points in sorted(p.history.devices.items()):
        if not points:
            continue
        allocated = [(t, float(a)) for t, a, _ in points]
        reserved = [(t, float(r)) for t, _, r in points]
        s = forecast.split(allocated, reserved, now, p.born)
        gpu = _nvml_index(p, system, cuda)
        growth = s.reserved.growth if s.reserved.growing else s.allocated.growth
        first, last = points[0][0], points[-1][0]
        start = max(first, (p.born if p.born is not None else first) + forecast.WARMUP_S)
        out.append(
            DeviceTrend(
                cuda,
                gpu,
                s,
                s.reserved,
                forecast.seconds_until_full(_free(p, system, gpu), growth),
                have_s=last - first,
                need_s=start + forecast.MIN_DATA_S - first,
                allocated=points[-1][1],
                reserved=points[-1][2],
            )
        )
    return out


def _nvml_index(p: ProcessFacts, system: SystemFacts, cuda: int) -> int | None:
    """NVML's index of the process's CUDA device `cuda`: through its CUDA_VISIBLE_DEVICES when readable,
    else the one GPU NVML lists it on."""
    used = sorted(gpu for gpu, m in p.memory.items() if m)
    if p.environ is not None and system.gpus:
        env = p.environ
        order = checks_cuda.cuda_order(system.gpus, env)
        value = env.get("CUDA_VISIBLE_DEVICES")
        selected = tuple(order) if value is None else checks_cuda.parse_visible(value, order).selected
        if cuda < len(selected):
            return selected[cuda].index
    return used[0] if len(used) == 1 else None


def _free(p: ProcessFacts, system: SystemFacts, gpu: int | None) -> int | None:
    """Free memory of NVML GPU `gpu`, or of the process's MIG instance on it."""
    sample = next((g for g in system.samples if g.index == gpu), None)
    if sample is None:
        return None
    instance = next((q.gpu_instance for q in system.processes if q.pid == p.pid and q.gpu == gpu), None)
    return forecast.free_bytes(sample, instance)


def _hung_fix(pid: int) -> str:
    return (
        f"`py-spy dump --pid {pid}` shows where it waits; a NCCL timeout or a dead rank is likely "
        "(NCCL_DEBUG=INFO says which; a timeout in init_process_group turns the hang into an error)"
    )


def hung_checks(p: ProcessFacts) -> list[Check]:
    """The monitor's verdict when the TUI gives its rows; else the agent's step times with the doctor's
    look at the GPU (hung.stalled). Without either the doctor cannot tell: it says nothing."""
    who = f"pid {p.pid}"
    said = next((r.hung for r in p.watched if r.hung), None)
    if said is not None:
        return [problem("process", f"{who} looks hung: {said}", _hung_fix(p.pid))]
    report = p.agent
    if report is None or report.progress.steps is None:
        return []
    if not p.watched and p.looked_at is not None:
        for window in p.looks.values():
            verdict = hung.stalled(report, window, p.looked_at, LOOK_RULES)
            if verdict is not None:
                return [problem("process", f"{who} looks hung: {verdict}", _hung_fix(p.pid))]
    return [_stepping(p, report, who)]


def _stepping(p: ProcessFacts, report: AgentReport, who: str) -> Check:
    g = report.progress
    if g.last_step_age_s is None or g.usual_step_s is None or g.steps is None:
        return ok("process", f"{who} is not hung as far as its agent tells: it has not stepped yet")
    age, usual = g.last_step_age_s, g.usual_step_s
    step = f"step {g.steps:,}, the last {_age(age)} ago (usual step {usual:.2g} s)"
    if age < max(hung.DEFAULT.stall_factor * usual, hung.DEFAULT.stall_min_s):
        return ok("process", f"{who} is stepping: {step}")
    if p.watched:
        why = "the monitor does not see it waiting in a collective"
    elif not p.looks:
        why = "its GPU could not be read to tell whether it waits in a collective"
    else:
        why = "its GPU is not busy at idle power: an eval, a checkpoint or CPU work, not a collective wait"
    return ok("process", f"{who} has made no step for a while: {step}; {why}")


def _age(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else forecast.duration_text(seconds)
