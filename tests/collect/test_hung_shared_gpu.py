"""Hung without an agent is judged per process: during a hung collective (8 ranks, their GPUs at 100 % and
idle power), a notebook kernel at 0 % SM on the same GPUs is not "possibly hung"; the ranks are."""

from __future__ import annotations

from pathlib import Path

from gputui.analyze import classify, hung
from gputui.collect.sampler import Sampler
from gputui.collect.sources.base import Reading, SourceInfo
from gputui.model import GpuSample, ProcessRow
from tests.builders import process_row

GIB = 1 << 30
GPUS = 8
NOTEBOOK = 50_000
TICKS = 140  # at 1 Hz: past the two minutes of QUIET_S


class NoSource:
    name = "demo"
    devices_dir = Path("/nonexistent")

    def open(self) -> SourceInfo:
        return SourceInfo(driver_version="1", nvml_version="2", cuda_driver_version="3")

    def read(self, slow: bool) -> Reading:
        return Reading((), ())

    def close(self) -> None:
        pass


def spinning_gpus() -> tuple[GpuSample, ...]:
    """Eight GPUs at 100 % and 110 W of 700 W: a NCCL kernel spinning on each."""
    return tuple(
        GpuSample(
            index=i, util_gpu=100, power=110.0, power_limit=700.0, mem_total=80 * GIB, mem_used=40 * GIB
        )
        for i in range(GPUS)
    )


def row(gpu: int, pid: int, sm: int | None) -> ProcessRow:
    return process_row(
        gpu,
        pid,
        used_memory=GIB,
        sm_util=sm,
        visible=False,
        cpu_percent=0.0,  # every one of them asleep on the host
        create_time=0.0,
    )


def run(
    rank_sm: int | None, notebook_sm: int | None, notebook: bool = True, ticks: int = TICKS
) -> dict[tuple[int, int], ProcessRow]:
    """(gpu, pid) -> its row after `ticks` seconds: rank 1000+i alone on GPU i, or beside the notebook."""
    s = Sampler(NoSource(), clock=lambda: 0.0, monotonic=lambda: 0.0, scan_holders=False)
    now = 1_000_000.0
    out: tuple[ProcessRow, ...] = ()
    for _ in range(ticks):
        rows = [row(i, 1000 + i, rank_sm) for i in range(GPUS)]
        if notebook:
            rows += [row(i, NOTEBOOK, notebook_sm) for i in range(GPUS)]
        out = s._with_trends(tuple(rows), spinning_gpus(), {}, now)
        now += 1.0
    return {(r.gpu or 0, r.pid): r for r in out}


def test_the_ranks_are_hung_the_notebook_on_their_gpus_is_not() -> None:
    """The issue: 8 ranks spinning (their own SM % high), a notebook at 0 % SM on the same GPUs."""
    rows = run(rank_sm=100, notebook_sm=0)
    for i in range(GPUS):
        rank, notebook = rows[(i, 1000 + i)], rows[(i, NOTEBOOK)]
        assert rank.hung is not None and rank.hung.startswith("possibly hung (collective wait)"), rank
        assert rank.category == classify.HUNG
        assert notebook.hung is None and notebook.category == classify.OK, notebook


def test_a_notebook_nvml_reports_no_sm_for_is_not_hung_beside_a_spinning_rank() -> None:
    """NVML lists no utilization sample for a process whose kernels did not run: unknown, and it shares
    its GPU with others, so the GPU's numbers alone do not make it hung."""
    rows = run(rank_sm=97, notebook_sm=None)
    for i in range(GPUS):
        assert rows[(i, 1000 + i)].hung is not None
        assert rows[(i, NOTEBOOK)].hung is None


def test_without_per_process_sm_a_shared_gpu_blames_nobody() -> None:
    """No per-process utilization at all (an old driver): on a shared GPU nobody can be singled out."""
    rows = run(rank_sm=None, notebook_sm=None)
    assert all(r.hung is None for r in rows.values())


def test_a_process_alone_on_its_gpu_is_judged_on_the_gpu_as_before() -> None:
    rows = run(rank_sm=None, notebook_sm=None, notebook=False)
    assert all(r.hung is not None and r.category == classify.HUNG for r in rows.values())
    rows = run(rank_sm=100, notebook_sm=None, notebook=False)
    assert all(r.hung is not None for r in rows.values())


def test_not_before_two_minutes_and_not_when_its_own_sm_said_quiet_in_them() -> None:
    assert all(r.hung is None for r in run(rank_sm=100, notebook_sm=0, ticks=100).values())
    # alone on its GPU, but NVML said its own kernels did not run: whoever spins, it is not this one
    assert all(r.hung is None for r in run(rank_sm=0, notebook_sm=None, notebook=False).values())


def test_the_rule_itself() -> None:
    w = hung.GpuWindow()
    for t in range(200):
        w.add(float(t), GpuSample(index=0, util_gpu=100, power=110.0, power_limit=700.0))
    now = 199.0
    said = "possibly hung (collective wait): GPU 100%+ busy at 110 W (near idle) and 0% CPU for 2 min"
    assert hung.possibly_hung(150.0, w, now) == said  # alone, its own SM unknown: as before
    assert hung.possibly_hung(150.0, w, now, own_sm=None, sharing=0) == said
    assert hung.possibly_hung(150.0, w, now, own_sm=True, sharing=3) == said
    assert hung.possibly_hung(150.0, w, now, own_sm=False, sharing=0) is None
    assert hung.possibly_hung(150.0, w, now, own_sm=False, sharing=1) is None
    assert hung.possibly_hung(150.0, w, now, own_sm=None, sharing=1) is None


def test_own_sm_over_the_window() -> None:
    """True: every report of its own SM % in the span said its kernels ran; False: one said they did
    not; None: NVML reported nothing in the span (unknown)."""
    sm = hung.ProcessSm()
    assert sm.spinning(100.0, 120.0) is None
    for t in range(100):
        sm.add(float(t), None if t % 3 else 100)  # NVML's samples come and go
    assert sm.spinning(99.0, 120.0) is True
    sm.add(100.0, 3)
    assert sm.spinning(100.0, 120.0) is False
    for t in range(101, 221):
        sm.add(float(t), 100)
    assert sm.spinning(220.0, 120.0) is False  # the quiet report is 120 s old: still in the span
    sm.add(221.0, 100)
    assert sm.spinning(221.0, 120.0) is True
    assert sm.spinning(500.0, 120.0) is None  # nothing reported for minutes
    assert hung.OWN_SM_BUSY <= 50  # two ranks sharing a GPU by time slices each show about half
