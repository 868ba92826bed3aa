"""gputui.ui.widgets.dip_groups: which GPU processes are one job, and which dips of a job are one row of
the Events pane. Pure functions on hand-made Snapshots and Dips: no Textual."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gputui import cells
from gputui.analyze.dips import Dip
from gputui.model import HostProcess, ProcessRow, Snapshot
from gputui.ui.widgets.dip_groups import (
    JOB_CELLS,
    RANGE,
    DipGroup,
    Jobs,
    compact_gpus,
    group_dips,
    sample_interval,
    short_name,
)
from tests import builders

T0 = 1_795_000_000.0
TORCHRUN = 4242
TORCHRUN_COMMAND = "/usr/bin/python3 /opt/venv/bin/torchrun --nproc-per-node 8 train.py --lr 3e-4"


def rank(
    gpu: int, pid: int, ppid: int | None, command: str = "python train.py", created: float | None = None
) -> ProcessRow:
    return builders.process_row(
        gpu,
        pid,
        name="python",
        command=command,
        ppid=ppid,
        create_time=T0 - 3600 if created is None else created,
    )


def host(pid: int, command: str | None, ppid: int | None = 1, name: str | None = None) -> HostProcess:
    return HostProcess(pid, ppid, "alice", name, command, None, None, T0 - 4000, "sleeping")


def snapshot(rows: Sequence[ProcessRow], hosts: Sequence[HostProcess] = ()) -> Snapshot:
    return builders.snapshot(time=T0 + 600, gpus=(), processes=tuple(rows), host_processes=tuple(hosts))


def torchrun_job(gpus: Sequence[int], launcher: int = TORCHRUN, first_pid: int = 5000) -> list[ProcessRow]:
    return [rank(g, first_pid + g, launcher) for g in gpus]


def dip(gpu: int, start: float, length: float = 4.0, **kw: object) -> Dip:
    return Dip(gpu, T0 + start, T0 + start + length, 95.0, 8.0 + gpu, **kw)  # type: ignore[arg-type]


def grouped(snap: Snapshot, dips: Sequence[Dip], slack: float = 1.0) -> list[DipGroup]:
    jobs = Jobs(snap)
    return group_dips(dips, lambda d: jobs.of(d.gpu, d.start), slack)


# -- the brief's cases ------------------------------------------------------------------------------


def test_eight_gpus_of_one_job_dipping_together_are_one_group_naming_the_launcher() -> None:
    snap = snapshot(torchrun_job(range(8)), [host(TORCHRUN, TORCHRUN_COMMAND, name="torchrun")])
    # Ranks notice the stall a sample apart; newest first, as the Events pane hands them over.
    dips = [dip(g, 10.0 + (g % 2), 4.0 + (g % 3) * 0.5) for g in reversed(range(8))]
    groups = grouped(snap, dips)
    assert len(groups) == 1
    (g,) = groups
    assert g.gpus == tuple(range(8)) and compact_gpus(g.gpus) == f"0{RANGE}7"
    assert g.job is not None
    assert g.job.label == "torchrun pid 4242" and g.job.launcher == TORCHRUN
    assert g.job.gpus == frozenset(range(8))
    assert g.start == T0 + 10.0 and g.end == max(d.end for d in dips)
    assert g.duration == pytest.approx(6.0)
    assert g.kind == "long" and not g.ongoing
    assert g.deepest == dips[-1]  # GPU 0 fell lowest (8 %): its own baseline and lowest are shown
    assert g.dips == tuple(dips)


def test_two_jobs_dipping_at_once_are_two_groups() -> None:
    snap = snapshot(
        [*torchrun_job(range(4), 100, 5000), *torchrun_job(range(4, 8), 200, 6000)],
        [host(100, "torchrun --nproc-per-node 4 a.py"), host(200, "mpirun -np 4 python b.py")],
    )
    dips = [dip(g, 10.0, 3.0) for g in range(8)]
    groups = grouped(snap, dips)
    assert [(compact_gpus(g.gpus), g.job.label if g.job else None) for g in groups] == [
        (f"0{RANGE}3", "torchrun pid 100"),
        (f"4{RANGE}7", "mpirun pid 200"),
    ]
    assert all(g.kind == "stall" for g in groups)


def test_overlapping_dips_of_different_jobs_stay_separate() -> None:
    # Each GPU its own job: two launchers, and an orphan whose parent is init (no launcher at all).
    snap = snapshot([rank(0, 5000, 100), rank(1, 5001, 200), rank(2, 5002, 1), rank(3, 5003, None)])
    dips = [dip(g, 10.0, 6.0) for g in range(4)]
    groups = grouped(snap, dips)
    assert [g.gpus for g in groups] == [(0,), (1,), (2,), (3,)]
    assert all(g.job is None and g.dips == (d,) for g, d in zip(groups, dips, strict=True))


def test_dips_of_one_job_far_apart_in_time_stay_separate() -> None:
    snap = snapshot(torchrun_job(range(2)))
    dips = [dip(1, 30.0), dip(0, 10.0)]  # GPU 0 back long before GPU 1 dips
    groups = grouped(snap, dips)
    assert [(g.gpus, g.job) for g in groups] == [((1,), None), ((0,), None)]


def test_a_single_gpus_dip_is_its_own_unchanged_group() -> None:
    snap = snapshot(torchrun_job([0]))
    d = dip(0, 10.0, 3.0, wait_share=0.7)
    (g,) = grouped(snap, [d])
    assert g.job is None and g.dips == (d,)
    assert (g.gpus, g.start, g.end, g.kind, g.ongoing, g.deepest) == ((0,), d.start, d.end, d.kind, False, d)
    assert g.explanation() == d.explanation() == "input-bound: 70% of step time waiting for data"
    assert compact_gpus(g.gpus) == "0"


# -- time ------------------------------------------------------------------------------------------


def test_dips_that_start_within_one_sample_interval_join_even_without_overlap() -> None:
    snap = snapshot(torchrun_job(range(2)))
    dips = [dip(1, 12.0, 2.0), dip(0, 10.0, 2.0)]  # GPU 0 is back (at 12) as GPU 1 goes down
    assert len(grouped(snap, dips, slack=1.0)) == 2  # back-to-back: no sample in common, 2 s apart
    (g,) = grouped(snap, dips, slack=2.0)  # sampled every 2 s: the same moment
    assert g.gpus == (0, 1) and g.duration == pytest.approx(4.0)


def test_a_group_is_every_dip_linked_by_overlap_and_a_gpu_may_dip_twice_in_it() -> None:
    snap = snapshot(torchrun_job(range(3)))
    # GPU 1 is down from 4 to 14; GPU 0 dips twice meanwhile, GPU 2 once at its end.
    dips = [dip(2, 13.0, 3.0), dip(0, 9.0, 3.0), dip(1, 4.0, 10.0), dip(0, 0.0, 5.0)]
    (g,) = grouped(snap, dips)
    assert g.gpus == (0, 1, 2) and len(g.dips) == 4
    assert (g.start, g.end) == (T0, T0 + 16.0)


def test_an_ongoing_dip_keeps_its_group_open() -> None:
    snap = snapshot(torchrun_job(range(4)))
    dips = [
        Dip(3, T0 + 11.0, T0 + 40.0, 95.0, 5.0, ongoing=True),  # still down at "now" (40)
        dip(0, 10.0, 3.0),
        dip(1, 10.0, 3.0),
        dip(2, 25.0, 3.0),  # GPU 3 is still down: this joins too
    ]
    (g,) = grouped(snap, dips)
    assert g.ongoing and g.end == T0 + 40.0 and g.gpus == (0, 1, 2, 3)
    assert g.kind == "long"  # 30 s as a whole, though three of its dips were stalls


def test_rows_keep_the_order_of_their_newest_dip() -> None:
    snap = snapshot([*torchrun_job([0, 1]), rank(2, 7000, 1)])
    dips = [dip(2, 50.0), dip(1, 40.0), dip(0, 40.5), dip(2, 20.0), dip(1, 10.0), dip(0, 10.0)]
    assert [g.gpus for g in grouped(snap, dips)] == [(2,), (0, 1), (2,), (0, 1)]


# -- what a job is ---------------------------------------------------------------------------------


def test_a_launcher_that_is_rank_0_binds_the_ranks_it_spawned() -> None:
    rows = [
        rank(0, 300, 77, "/home/a/.venv/bin/python -u launch.py --world 4"),  # its parent: a shell
        *[rank(g, 300 + g, 300) for g in range(1, 4)],
    ]
    snap = snapshot(rows, [host(77, "-bash", ppid=70)])
    jobs = Jobs(snap)
    job = jobs.of(2, T0)
    assert job is not None and job.launcher == 300 and job.gpus == frozenset(range(4))
    assert job.label == "python launch.py pid 300"
    assert {jobs.of(g, T0) for g in range(4)} == {job}


def test_one_process_on_several_gpus_is_a_job_of_its_own() -> None:
    snap = snapshot([rank(g, 900, 1, "python -m my.trainer --dp") for g in range(4)])
    (g,) = grouped(snap, [dip(gpu, 5.0) for gpu in range(4)])
    assert g.job is not None and g.job.launcher == 900 and g.job.label == "python -m my.trainer pid 900"


def test_the_launchers_name_needs_the_tree_views_host_processes_and_its_pid_does_not() -> None:
    (g,) = grouped(snapshot(torchrun_job(range(2))), [dip(0, 1.0), dip(1, 1.0)])
    assert g.job is not None and g.job.label == "pid 4242"


def test_a_stray_process_beside_a_rank_does_not_hide_the_job() -> None:
    snap = snapshot([*torchrun_job(range(2)), rank(1, 8000, 1, "python eval.py")])
    (g,) = grouped(snap, [dip(0, 1.0), dip(1, 1.0)])
    assert g.gpus == (0, 1) and g.job is not None and g.job.launcher == TORCHRUN


def test_a_job_started_after_a_dip_did_not_make_it() -> None:
    # Today's job on GPUs 0-1 started at T0 + 100: the dips at T0 + 10 were another job's.
    rows = [rank(g, 5000 + g, TORCHRUN, created=T0 + 100) for g in range(2)]
    snap = snapshot(rows)
    old = [dip(0, 10.0), dip(1, 10.0)]
    assert [g.job for g in grouped(snap, old)] == [None, None]
    (g,) = grouped(snap, [dip(0, 200.0), dip(1, 200.0)])
    assert g.gpus == (0, 1)


def test_gpu_processes_only_no_device_holders_or_unknown_gpus() -> None:
    holder = builders.holder_row(1, 5001, ppid=TORCHRUN)
    unknown = builders.process_row(None, 5002, ppid=TORCHRUN)
    snap = snapshot([rank(0, 5000, TORCHRUN), holder, unknown])
    groups = grouped(snap, [dip(0, 1.0), dip(1, 1.0)])
    assert [(g.gpus, g.job) for g in groups] == [((0,), None), ((1,), None)]


def test_parent_loops_and_unknown_parents_end() -> None:
    # Pid reuse can make a ppid chain loop; a parent may be a pid the snapshot does not know.
    rows = [rank(0, 10, 20), rank(1, 20, 10), rank(2, 30, 999_999)]
    snap = snapshot(rows, [host(999_999, None, ppid=999_999)])
    jobs = Jobs(snap)
    a, b, c = (jobs.of(g, T0) for g in range(3))
    assert a is not None and a is b and a.gpus == frozenset({0, 1})
    assert c is not None and c.gpus == frozenset({2}) and c.label == "python train.py pid 30"


def test_a_hostile_launcher_command_is_printable_and_bounded() -> None:
    evil = "\x1b]0;owned\x07\x1b[31mtorchrun" + "界" * 40 + " --x"
    snap = snapshot(torchrun_job(range(2)), [host(TORCHRUN, evil)])
    (g,) = grouped(snap, [dip(0, 1.0), dip(1, 1.0)])
    assert g.job is not None
    label = g.job.label
    assert label.isprintable() and "\x1b" not in label
    assert cells.width(label) <= JOB_CELLS and label.endswith("… pid 4242")
    huge_pid = snapshot([rank(g, 10**30 + g, 10**30) for g in range(2)])
    (h,) = grouped(huge_pid, [dip(0, 1.0), dip(1, 1.0)])
    assert h.job is not None and cells.width(h.job.label) <= JOB_CELLS


# -- pieces ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "shown"),
    [
        (range(8), f"0{RANGE}7"),
        ([0, 2, 5], "0,2,5"),
        ([0, 1], "0,1"),
        ([7, 6, 0, 1, 2, 3, 3], f"0{RANGE}3,6,7"),
        ([4], "4"),
        ([], ""),
        (range(0, 128, 2), "0,2,4,6,8,10,12,14,16,18,20,22,…"),
    ],
)
def test_compact_gpus(gpus: Sequence[int], shown: str) -> None:
    assert compact_gpus(gpus) == shown


@pytest.mark.parametrize(
    ("command", "name", "short"),
    [
        (TORCHRUN_COMMAND, None, "torchrun"),
        ("/usr/bin/mpirun -np 8 python train.py", None, "mpirun"),
        ("python3 -u -W ignore launch.py --n 8", None, "python3 launch.py"),
        (
            "/usr/bin/python3.11 -m torch.distributed.run --nproc-per-node 8 t.py",
            None,
            "python3.11 -m torch…",
        ),
        (None, "prted", "prted"),
        ("", None, ""),
    ],
)
def test_short_name(command: str | None, name: str | None, short: str) -> None:
    assert short_name(command, name) == short


def test_explanation_of_a_group_when_ranks_disagree() -> None:
    snap = snapshot(torchrun_job(range(3)))
    dips = [dip(0, 1.0, wait_share=0.12), dip(1, 1.0, wait_share=0.71), dip(2, 1.0)]
    (g,) = grouped(snap, dips)
    assert g.explanation() == "input-bound: 71% of step time waiting for data on GPU 1 (12% on GPU 0)"
    (same,) = grouped(snap, [dip(0, 1.0, wait_share=0.3), dip(1, 1.0, wait_share=0.3)])
    assert same.explanation() == "not input-bound: 30% of step time waiting for data"
    (none,) = grouped(snap, [dip(0, 1.0), dip(1, 1.0)])
    assert none.explanation() == ""


def test_sample_interval_is_the_median_recent_gap() -> None:
    assert sample_interval([T0 + k * 2.0 for k in range(100)]) == 2.0
    assert sample_interval([T0, T0 + 1, T0 + 1, T0 + 2, T0 + 60]) == 1.0  # a pause and a repeat
    assert sample_interval([]) == sample_interval([T0]) == 1.0
