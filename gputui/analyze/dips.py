"""Utilization dips: the GPU waiting (for data, for evaluation, for a checkpoint) while a job is on it.

A sample is "in a dip" when utilization is under half the rolling median of the recent busy samples
and at least 20 points below it, while a process is on the GPU. A dip is a run of such samples lasting
MIN_DIP_S or more; a short one is a *stall* (typically the data loader), a long one a *long* dip (end
of epoch, evaluation, a checkpoint). Steady noise (95 ± 3 %) never qualifies.

Which number: on a GPU with GPM (Hopper and newer) the dip is measured on SM activity, not NVML's
utilization. Utilization is "a kernel ran": a data-starved loop of tiny kernels keeps it near 100 % while
SM activity falls to a few percent. A GPU's track keeps one signal (Dip.signal "sm" or "util"): GPM may
appear after the first tick and disappear when DCGM takes the counters, and the two numbers have different
busy levels, so a switch ends the dip in progress and learns the busy level afresh. A tick without SM
activity on a track measured on it is a hole (not a dip, not an end) until SIGNAL_GRACE such ticks in a
row say GPM is gone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gputui.analyze import dip_causes
from gputui.analyze.dip_causes import Cause
from gputui.model import GpuSample, Snapshot, XidEvent

MIN_DIP_S = 2.0
LONG_DIP_S = 5.0  # at least this long: an end-of-epoch / evaluation / checkpoint dip
BUSY_WINDOW = 120  # recent busy samples the median is taken over
MIN_BUSY_SAMPLES = 10  # no verdict before the GPU has shown what "busy" means
MIN_DROP = 20.0
MAX_DIPS = 500
SM, UTIL = "sm", "util"  # what a dip was measured on: GPM's SM activity, or NVML's utilization
# Ticks in a row without SM activity before a track measured on it falls back to utilization: one GPM
# reading may fail or come too soon after the last (gputui.model.GPM_MIN_INTERVAL_S); DCGM taking the
# counters is every tick from then on.
SIGNAL_GRACE = 3
TENSOR_WINDOW = 30  # recent busy tensor-activity readings: were the tensor cores in use before a dip


def _median(values: Iterable[float]) -> float:
    """statistics.median, here: that module (with fractions and decimal behind it) is ~0.1 MiB of every
    start of the monitor, for this one use."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no median for empty data")
    half = n // 2
    return ordered[half] if n % 2 else (ordered[half - 1] + ordered[half]) / 2


@dataclass(frozen=True, slots=True)
class Dip:
    gpu: int
    start: float
    end: float
    baseline: float  # the busy median it fell from
    lowest: float
    ongoing: bool = False
    wait_share: float | None = None  # data-loader wait share reported by an agent on that GPU
    last: float | None = None  # time of the last sample inside the dip (end is the first one back)
    causes: tuple[Cause, ...] = ()  # what else was true meanwhile: an Xid, a stall, busy host CPUs, ...
    signal: str = UTIL  # what baseline and lowest are: SM activity (GPM) or NVML's utilization, percent

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def depth(self) -> float:
        return self.baseline - self.lowest

    @property
    def kind(self) -> str:
        return "long" if self.duration >= LONG_DIP_S else "stall"

    def fell(self) -> str:
        """`95→5%` on utilization, `SM 88→6%` on SM activity."""
        return f"{'SM ' if self.signal == SM else ''}{self.baseline:.0f}→{self.lowest:.0f}%"

    def wait_text(self) -> str:
        """The data loader's verdict, from the agent's share of step time spent waiting for data."""
        if self.wait_share is None:
            return ""
        share = round(100 * self.wait_share)
        verdict = "input-bound" if self.wait_share >= 0.5 else "not input-bound"
        return f"{verdict}: {share}% of step time waiting for data"

    def explanation(self, extra: tuple[Cause, ...] = ()) -> str:
        """Everything known about why, in one line; `extra`: what only the caller knows (a profile)."""
        return dip_causes.combine((*self.causes, *extra), self.wait_text())


class _GpuTrack:
    def __init__(self) -> None:
        self.busy: deque[float] = deque(maxlen=BUSY_WINDOW)
        self.start: float | None = None
        self.last: float | None = None  # time of the last sample in the current dip
        self.lowest = 100.0
        self.baseline = 0.0
        self.wait_share: float | None = None
        self.causes: dict[str, Cause] = {}
        self.job: frozenset[int] = frozenset()  # the GPU processes the busy level belongs to
        self.signal: str | None = None  # SM or UTIL: what `busy` holds; None until the first reading
        self.missing = 0  # ticks in a row without SM activity on a track measured on it
        self.tensor: deque[float] = deque(maxlen=TENSOR_WINDOW)  # tensor activity while busy (GPM)

    def restart(self) -> None:
        """Another job, or another signal: the busy level is learnt afresh."""
        self.busy.clear()
        self.tensor.clear()

    def tensor_before(self) -> float | None:
        return _median(self.tensor) if len(self.tensor) >= MIN_BUSY_SAMPLES // 2 else None


class DipDetector:
    """Fed one snapshot at a time (live or replayed); keeps the last MAX_DIPS dips per host."""

    def __init__(self) -> None:
        self.tracks: dict[int, _GpuTrack] = {}
        self.dips: deque[Dip] = deque(maxlen=MAX_DIPS)
        self.xids: deque[XidEvent] = deque(maxlen=MAX_DIPS)  # those of the last XID_NEAR_S

    def add(self, snap: Snapshot) -> list[Dip]:
        """The dips that ended with this snapshot."""
        ended = []
        while self.xids and self.xids[0].time < snap.time - dip_causes.XID_NEAR_S:
            self.xids.popleft()
        jobs: dict[int, set[int]] = {}
        for p in snap.processes:
            if p.kinds and p.gpu is not None:
                jobs.setdefault(p.gpu, set()).add(p.pid)
        for g in snap.gpus:
            track = self.tracks.setdefault(g.index, _GpuTrack())
            job = frozenset(jobs.get(g.index, ()))
            if job and not job & track.job:  # another job: its busy level is its own, learnt afresh
                track.restart()
            if job:
                track.job = job
            found: list[Dip] = []
            signal, value = _reading(g)
            if track.signal == SM and signal != SM and not g.lost:
                track.missing += 1
                if track.missing < SIGNAL_GRACE:
                    continue  # a hole in the SM readings: neither low nor back
                # GPM is gone (DCGM took the counters, --gpm off): utilization from now on.
                signal, value = UTIL, None if g.util_gpu is None else float(g.util_gpu)
            if signal == SM:
                track.missing = 0
            if signal is not None and signal != track.signal:
                if track.signal is not None:  # the old number's dip ends here; its busy level is no use now
                    found += filter(None, [self._close(track, g.index, snap.time)])
                    track.restart()
                track.signal = signal
            found += filter(None, [self._step(track, g.index, snap, value, bool(job), g)])
            ended += found
            self.dips.extend(found)
        self.xids.extend(snap.xids)
        return ended

    def _step(
        self,
        track: _GpuTrack,
        gpu: int,
        snap: Snapshot,
        value: float | None,
        busy_job: bool,
        sample: GpuSample,
    ) -> Dip | None:
        median = _median(track.busy) if len(track.busy) >= MIN_BUSY_SAMPLES else None
        low = (
            value is not None
            and busy_job
            and median is not None
            and value < 0.5 * median
            and value <= median - MIN_DROP
        )
        if low:
            assert value is not None and median is not None
            if track.start is None:
                track.start, track.lowest, track.baseline = snap.time, value, median
            track.lowest = min(track.lowest, value)
            track.last = snap.time
            share = _wait_share(snap, gpu)
            if share is not None:
                track.wait_share = share
            found = dip_causes.observe(snap, gpu, self.xids, tensor_before=track.tensor_before())
            dip_causes.merge(track.causes, found)
            return None
        finished = self._close(track, gpu, snap.time)  # the first sample back above the line closes it
        if value is not None and busy_job:
            track.busy.append(value)
            tensor = sample.gpm.tensor if sample.gpm is not None and track.signal == SM else None
            if tensor is not None:
                track.tensor.append(tensor)
        return finished

    def _close(self, track: _GpuTrack, gpu: int, end: float) -> Dip | None:
        """End the dip in progress at `end`: the Dip when it lasted MIN_DIP_S, else None."""
        finished = None
        if track.start is not None and track.last is not None and end - track.start >= MIN_DIP_S:
            finished = Dip(
                gpu,
                track.start,
                end,
                track.baseline,
                track.lowest,
                wait_share=track.wait_share,
                last=track.last,
                causes=tuple(track.causes.values()),
                signal=track.signal or UTIL,
            )
        track.start = track.last = None
        track.wait_share = None
        track.causes = {}
        return finished

    def ongoing(self, now: float) -> list[Dip]:
        return [
            Dip(
                gpu,
                t.start,
                now,
                t.baseline,
                t.lowest,
                ongoing=True,
                wait_share=t.wait_share,
                last=t.last,
                causes=tuple(t.causes.values()),
                signal=t.signal or UTIL,
            )
            for gpu, t in self.tracks.items()
            if t.start is not None and now - t.start >= MIN_DIP_S
        ]

    def summary(self, gpu: int, since: float, now: float, busy_s: float) -> dict[str, float | int | None]:
        """Over [since, now]: dips per minute and mean dip length; busy_s is the seconds the GPU was
        busy, from the caller's history."""
        dips = [d for d in (*self.dips, *self.ongoing(now)) if d.gpu == gpu and d.end >= since]
        minutes = max(1e-9, (now - since) / 60)
        return {
            "dips": len(dips),
            "dips_per_min": round(len(dips) / minutes, 2),
            "mean_dip_s": round(sum(d.duration for d in dips) / len(dips), 1) if dips else None,
            "busy_percent": round(100 * busy_s / (now - since), 1) if now > since else None,
        }


def _reading(g: GpuSample) -> tuple[str | None, float | None]:
    """The number a dip is measured on: SM activity where GPM has it, else NVML's utilization."""
    if g.lost:
        return None, None
    sm = g.gpm.sm_active if g.gpm is not None else None
    if sm is not None:
        return SM, sm
    return (UTIL, float(g.util_gpu)) if g.util_gpu is not None else (None, None)


def _wait_share(snap: Snapshot, gpu: int) -> float | None:
    """The data-loader wait share of an agent-running process on `gpu`, if any."""
    for p in snap.processes:
        report = snap.agents.get(p.pid) if p.gpu == gpu else None
        if report is not None and report.ok and report.progress.data_wait_share is not None:
            return report.progress.data_wait_share
    return None
