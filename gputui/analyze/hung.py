"""Hung jobs: a process that no longer makes progress while its GPU looks busy.

A rank waiting in a collective (an all-reduce whose peer died or diverged) spins a NCCL kernel: the GPU
reports ~100 % utilization, yet draws little more than its idle power, and the host process sleeps.
Two rules, pure functions of what the sampler has:

- With the agent: its last step is older than STALL_FACTOR times its usual (median) step time, and at
  least STALL_MIN_S; while the GPU shows >= BUSY_AGENT % utilization and is not drawing working power.
- Without it: utilization >= BUSY_NO_AGENT % and power near idle on every sample of the last QUIET_S,
  and the process at <= CPU_QUIET % CPU for as long; and the spinning is its own. The GPU's numbers are
  the whole GPU's: a notebook kernel asleep on a GPU where a hung rank spins sees them too. So each
  process is judged by its own SM % as well (NVML's per-process utilization): every report of it over
  the last QUIET_S at >= OWN_SM_BUSY % (a rank spinning alone shows ~100 %, two sharing a GPU by time
  slices about half each), at least one report. One report below that in the window (its kernels did
  not run: a process at 0 % SM on a busy GPU is not the one spinning) and it is not hung. When NVML
  reported none (an idle process often has no sample at all; some drivers give none), the GPU's numbers
  alone decide only for the only process on that GPU in NVML's lists: beside others, nobody is blamed.

"Near idle": at most the GPU's idle level plus NEAR_IDLE_SHARE of its power limit. The idle level is
the lowest power this GPU drew while gputui watched it, but never above IDLE_SHARE of the limit (a GPU
busy since gputui started has not shown its idle level). So an H100 (700 W) is near idle below about
70 + 105 W, while training draws 300-700 W. Without a power limit there is no verdict.

Not hung: a GPU computing at full power (a long step, an eval loop without a DataLoader), an eval or
checkpoint phase (the GPU is idle or the process works on the CPU), a job that has not stepped yet.
"""

from __future__ import annotations

import bisect
import math
from array import array
from dataclasses import dataclass

from gputui.model import AgentReport, GpuSample

STALL_FACTOR = 20.0
STALL_MIN_S = 60.0
BUSY_AGENT = 90
BUSY_NO_AGENT = 95
QUIET_S = 120.0
CPU_QUIET = 2.0
OWN_SM_BUSY = 25  # % of the time its own kernels ran, by NVML's per-process utilization
IDLE_SHARE = 0.2
NEAR_IDLE_SHARE = 0.15
MIN_STEPS = 3  # a job must have stepped before it can stall
KEEP_S = 600.0  # the GPU window the rules look at
NO_UTIL = -1


@dataclass(frozen=True, slots=True)
class Rules:
    """The thresholds, one place; tests shorten the times."""

    stall_factor: float = STALL_FACTOR
    stall_min_s: float = STALL_MIN_S
    quiet_s: float = QUIET_S


DEFAULT = Rules()


class GpuWindow:
    """One GPU's recent (time, util %, watts), and the lowest power it drew since gputui met it. Kept as
    arrays of machine numbers (24 bytes a sample, not ~110 as tuples of Python numbers): KEEP_S of
    every GPU is kept all the time."""

    def __init__(self) -> None:
        self.times = array("d")
        self.utils = array("h")  # NO_UTIL: unknown
        self.watts = array("d")  # NaN: unknown
        self.lowest_power: float | None = None
        self.power_limit: float | None = None

    def add(self, now: float, gpu: GpuSample) -> None:
        power = None if gpu.lost else gpu.power
        util = None if gpu.lost else gpu.util_gpu
        if self.times and now < self.times[-1]:  # the wall clock stepped back: start again
            self.clear()
        self.times.append(now)
        self.utils.append(NO_UTIL if util is None else max(0, min(100, int(util))))
        self.watts.append(math.nan if power is None else power)
        if power is not None and (self.lowest_power is None or power < self.lowest_power):
            self.lowest_power = power
        if gpu.power_limit:
            self.power_limit = gpu.power_limit
        old = bisect.bisect_left(self.times, now - KEEP_S)
        if old:
            del self.times[:old], self.utils[:old], self.watts[:old]

    def near_idle_w(self) -> float | None:
        """The power below which this GPU counts as idle; None: no power limit known."""
        if not self.power_limit:
            return None
        idle = IDLE_SHARE * self.power_limit
        if self.lowest_power is not None:
            idle = min(idle, self.lowest_power)
        return idle + NEAR_IDLE_SHARE * self.power_limit

    def clear(self) -> None:
        del self.times[:], self.utils[:], self.watts[:]

    def since(self, start: float) -> list[tuple[float, int | None, float | None]]:
        """(time, util % or None, watts or None) of the samples from `start` on."""
        first = bisect.bisect_left(self.times, start)
        return [
            (t, None if u == NO_UTIL else u, None if math.isnan(w) else w)
            for t, u, w in zip(self.times[first:], self.utils[first:], self.watts[first:], strict=True)
        ]

    def busy_at_idle_power(self, now: float, span: float, busy: int) -> tuple[bool, int, float] | None:
        """Over the last `span` seconds: (every sample >= `busy` % and near idle power, lowest util, highest
        watts); None: the window does not cover `span`, or util or power is unknown."""
        near = self.near_idle_w()
        if near is None or not self.times or self.times[0] > now - span + 1.0:
            return None
        recent = self.since(now - span)
        utils = [u for _, u, _ in recent if u is not None]
        watts = [w for _, _, w in recent if w is not None]
        if len(utils) < 3 or len(watts) < 3 or len(utils) < len(recent) // 2:
            return None
        low, high = min(utils), max(watts)
        return (low >= busy and high <= near), low, high


class ProcessSm:
    """One process's own SM % over time (NVML's per-process utilization, which comes and goes): when a
    report last said its kernels ran (>= OWN_SM_BUSY) and when one last said they did not."""

    __slots__ = ("busy_at", "quiet_at")

    def __init__(self) -> None:
        self.busy_at: float | None = None
        self.quiet_at: float | None = None

    def add(self, now: float, sm_util: int | None) -> None:
        if sm_util is None:  # no sample this tick: unknown, not quiet
            return
        if sm_util >= OWN_SM_BUSY:
            self.busy_at = now
        else:
            self.quiet_at = now

    def spinning(self, now: float, span: float) -> bool | None:
        """Over the last `span` seconds: True, every report said its kernels ran (at least one did);
        False, a report said they did not; None, NVML reported nothing."""
        if self.quiet_at is not None and self.quiet_at >= now - span:
            return False
        if self.busy_at is not None and self.busy_at >= now - span:
            return True
        return None


def _steps(n: int) -> str:
    return f"{n:,}"


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _step_time(s: float) -> str:
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"


def stalled(report: AgentReport, gpu: GpuWindow | None, now: float, rules: Rules = DEFAULT) -> str | None:
    """The agent's rule: `stalled at step 41,230 for 3 min (usual step 0.4 s); GPU busy: probably
    waiting in a collective`; None: stepping, never stepped, or the GPU does not look busy-waiting."""
    if report.status == "unreadable":
        return None
    p = report.progress
    if p.steps is None or p.steps < MIN_STEPS or p.usual_step_s is None or p.last_step_age_s is None:
        return None
    age = p.last_step_age_s
    if report.time is not None and now > report.time:  # a slow agent's numbers are from then
        age += min(now - report.time, 3600.0)
    if age < max(rules.stall_factor * p.usual_step_s, rules.stall_min_s):
        return None
    if gpu is None:
        return None
    seen = gpu.busy_at_idle_power(now, min(age, rules.quiet_s), BUSY_AGENT)
    if seen is None or not seen[0]:
        return None
    return (
        f"stalled at step {_steps(p.steps)} for {_dur(age)} (usual step {_step_time(p.usual_step_s)}); "
        f"GPU busy ({seen[1]}%+ at {seen[2]:.0f} W): probably waiting in a collective"
    )


def possibly_hung(
    quiet_s: float | None,
    gpu: GpuWindow | None,
    now: float,
    rules: Rules = DEFAULT,
    own_sm: bool | None = None,
    sharing: int = 0,
) -> str | None:
    """The rule without an agent, for a process that has been at ~0 % CPU for `quiet_s` seconds.

    `own_sm`: its own SM % over the last rules.quiet_s (ProcessSm.spinning): True its kernels ran, False
    they did not (then it is never hung), None unknown. `sharing`: how many other processes NVML lists on
    its GPU; with its own SM % unknown, the GPU's numbers alone make only the only process hung."""
    if quiet_s is None or quiet_s < rules.quiet_s or gpu is None:
        return None
    if own_sm is False or (own_sm is None and sharing > 0):
        return None
    seen = gpu.busy_at_idle_power(now, rules.quiet_s, BUSY_NO_AGENT)
    if seen is None or not seen[0]:
        return None
    return (
        f"possibly hung (collective wait): GPU {seen[1]}%+ busy at {seen[2]:.0f} W (near idle) "
        f"and 0% CPU for {_dur(quiet_s)}"
    )
