"""The process table's rows for a training job: workers folded under their rank (`+3`, their CPU% and RSS
summed in), shown below it on demand; orphans and defunct processes never folded; COMMAND shortened;
the row cache owned by whoever builds (no module global)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputui.model import Category, ProcessRow, Snapshot
from gputui.ui.widgets import process_rows
from gputui.ui.widgets.process_rows import Folding, RowCache, View, build_rows, row_key
from tests.builders import process_row, snapshot

GIB = 1 << 30
PYTHON = "/root/.pyenv/versions/3.11.7/bin/python3"


def rank_pid(gpu: int) -> int:
    return 5000 + 10 * gpu


def _proc(gpu: int, pid: int, category: Category, ppid: int, **kw: Any) -> ProcessRow:
    """A rank ("ok": in NVML's list, busy) or a process that holds its GPU's device file."""
    fields: dict[str, Any] = dict(
        kinds="",
        user="alice",
        command=f"{PYTHON} -u train.py --lr 3e-4 --rank {gpu}",
        cpu_percent=20.0,
        rss=GIB,
        create_time=1000.0 + pid,
        state="running",
        ppid=ppid,
        category=category,
    )
    if category == "ok":
        fields.update(
            kinds="C", used_memory=60 * GIB, sm_util=90, mem_util=40, cpu_percent=100.0, rss=10 * GIB
        )
    return process_row(gpu, pid, **{**fields, **kw})


def job(ranks: int = 8, workers: int = 3, extra: tuple[ProcessRow, ...] = ()) -> Snapshot:
    """`ranks` trainers under a launcher (pid 4000), each with `workers` data-loader workers that hold
    its GPU."""
    procs = []
    for g in range(ranks):
        procs.append(_proc(g, rank_pid(g), "ok", 4000))
        procs += [_proc(g, rank_pid(g) + 1 + w, "worker", rank_pid(g)) for w in range(workers)]
    return snapshot(time=10_000.0, source="test", gpus=(), processes=(*procs, *extra))


def command(row: process_rows.TableRow) -> str:
    return row.cells[-1].plain


def cell(row: process_rows.TableRow, column: str) -> str:
    return row.cells[process_rows.COLUMN_KEYS.index(column)].plain


def test_workers_are_folded_into_their_rank_by_default() -> None:
    rows = build_rows(job(), View())
    assert [r.pid for r in rows] == [rank_pid(g) for g in range(8)]
    first = rows[0]
    assert first.folded and first.workers == (5001, 5002, 5003)
    assert command(first) == "+3 python3 -u train.py --lr 3e-4 --rank 0"
    assert first.lead == len("+3 ")
    # 100 % of the rank and 3 workers at 20 %; 10 GiB and 3 workers of 1 GiB.
    assert cell(first, "cpu") == "160.0"
    assert cell(first, "rss") == "13.0 GiB"
    assert first.process is not None and first.process.cpu_percent == 100.0  # the process itself: as read


def test_expanding_one_rank_shows_its_workers_below_it_and_its_own_numbers() -> None:
    rank = row_key(job().processes[0])
    rows = build_rows(job(ranks=2), View(), folding=Folding(expanded=frozenset({rank})))
    assert [r.pid for r in rows] == [5000, 5001, 5002, 5003, 5010]
    assert command(rows[0]).startswith("-3 python3 ")
    assert cell(rows[0], "cpu") == "100.0" and not rows[0].folded
    assert [command(r)[:3] for r in rows[1:4]] == ["├─ ", "├─ ", "└─ "]
    assert all(r.rank == rank for r in rows[1:4])
    assert rows[4].folded and command(rows[4]).startswith("+3 ")


def test_expand_all_shows_every_worker() -> None:
    rows = build_rows(job(), View(), folding=Folding(expand_all=True))
    assert len(rows) == 8 * 4
    assert not any(r.folded for r in rows)


def test_orphans_and_defunct_processes_are_never_folded() -> None:
    orphan = _proc(0, 6001, "orphan", 1, command=f"{PYTHON} train.py")
    defunct = _proc(0, 6002, "defunct", rank_pid(0), state="zombie", command="")
    rows = build_rows(job(ranks=1, extra=(orphan, defunct)), View())
    assert sorted(r.pid for r in rows) == [rank_pid(0), 6001, 6002]
    assert rows[0].workers == (5001, 5002, 5003)  # the defunct child is not counted as a worker


def test_a_worker_is_folded_into_its_rank_on_its_own_gpu_and_counted_once() -> None:
    """A rank on two GPUs is two rows; its worker holding both GPUs is two rows, one process."""
    rank0 = _proc(0, 7000, "ok", 4000)
    rank1 = replace(rank0, gpu=1)
    w0 = _proc(0, 7001, "worker", 7000)
    w1 = replace(w0, gpu=1)
    grandchild = _proc(1, 7002, "worker", 7001)  # a worker's own worker: the same rank
    snap = replace(job(ranks=0), processes=(rank0, rank1, w0, w1, grandchild))
    rows = build_rows(snap, View())
    assert [(r.pid, r.workers) for r in rows] == [(7000, (7001,)), (7000, (7001, 7002))]
    assert cell(rows[1], "cpu") == "140.0"  # 100 + 20 + 20: each process once


def test_a_worker_whose_rank_is_filtered_out_is_its_own_row() -> None:
    snap = job(ranks=1)
    rows = build_rows(snap, View(filter="5002"))
    assert [r.pid for r in rows] == [5002]
    assert not rows[0].workers and not command(rows[0]).startswith("+")


def test_folded_ranks_sort_by_what_their_row_shows() -> None:
    busy = [_proc(1, 5100 + w, "worker", rank_pid(1), cpu_percent=90.0) for w in range(3)]
    snap = job(ranks=2, workers=0, extra=tuple(busy))
    rows = build_rows(snap, View(sort="cpu"))
    assert [r.pid for r in rows] == [rank_pid(1), rank_pid(0)]  # 370 % before 100 %


def test_tree_view_folds_workers_too() -> None:
    snap = job(ranks=2)
    rows = build_rows(snap, View(tree=True))
    assert [r.pid for r in rows] == [5000, 5010]
    assert command(rows[0]).startswith("+3 ")
    opened = build_rows(snap, View(tree=True), folding=Folding(expand_all=True))
    assert [r.pid for r in opened] == [5000, 5001, 5002, 5003, 5010, 5011, 5012, 5013]
    assert command(opened[1]).startswith("├─ python3")


def test_command_is_shortened_and_the_process_keeps_the_full_line() -> None:
    row = build_rows(job(ranks=1, workers=0), View())[0]
    assert command(row) == "python3 -u train.py --lr 3e-4 --rank 0"
    assert row.process is not None and row.process.command == f"{PYTHON} -u train.py --lr 3e-4 --rank 0"


def test_the_filter_still_matches_the_full_command_line() -> None:
    assert [r.pid for r in build_rows(job(ranks=1, workers=0), View(filter=".pyenv"))] == [5000]


def test_the_row_cache_belongs_to_the_caller() -> None:
    assert not hasattr(process_rows, "_ROWS")
    snap, cache = job(), RowCache()
    first = build_rows(snap, View(), cache=cache)
    again = build_rows(snap, View(), cache=cache)
    assert all(a is b for a, b in zip(first, again, strict=True))  # nothing changed: the same rows
    other = build_rows(snap, View())  # no cache: built anew, and nobody else's cache is touched
    assert not any(a is b for a, b in zip(first, other, strict=True))
    assert all(a is b for a, b in zip(first, build_rows(snap, View(), cache=cache), strict=True))


def test_the_cache_holds_two_builds_at_most() -> None:
    cache = RowCache()
    for t in range(5):
        build_rows(replace(job(), time=10_000.0 + 100 * t), View(), cache=cache)
    assert len(cache.last) == 8 and not cache.now


def test_a_sum_with_an_unknown_part_is_unknown() -> None:
    """A first sample has no CPU% yet: the rank's row says n/a, not a sum of what happens to be known."""
    snap = job(ranks=1)
    first = replace(snap, processes=(replace(snap.processes[0], cpu_percent=None), *snap.processes[1:]))
    row = build_rows(first, View())[0]
    assert cell(row, "cpu") == "n/a"
    assert cell(row, "rss") == "13.0 GiB"


def test_in_the_tree_the_fold_mark_follows_the_branch() -> None:
    launcher = _proc(
        0, 4000, "ok", 1, command="/usr/bin/python3 /venv/bin/torchrun --nproc-per-node 2 train.py"
    )
    snap = job(ranks=2, extra=(launcher,))
    rows = build_rows(snap, View(tree=True))
    assert [r.pid for r in rows] == [4000, 5000, 5010]
    assert command(rows[0]) == "torchrun --nproc-per-node 2 train.py"
    assert command(rows[1]).startswith("├─ +3 python3")
    assert rows[1].lead == len("├─ +3 ")
