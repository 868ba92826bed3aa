"""The kill plan, without Textual: which processes `k` offers, whether "include its children" starts
on, which PIDs would be signalled, what is refused, and how outcomes are told."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from gputui.actions.kill_plan import PARENT, describe_outcomes, plan_kill
from gputui.actions.signals import Outcome, Protected, Result, Target
from gputui.model import HostProcess, ProcessRow, Snapshot
from tests.builders import process_row, snapshot

GIB = 1 << 30
ME, SHELL, SSHD = 900, 800, 700
GUARD = Protected(ME, frozenset({SHELL, SSHD, 1}))
T0 = 1_700_000_000.0


def gpu_row(pid: int, ppid: int, **changes: object) -> ProcessRow:
    row = process_row(
        0,
        pid,
        used_memory=int(68.7 * GIB),
        sm_util=90,
        mem_util=40,
        user="alice",
        name="python",
        command=f"python train.py --rank {pid}",
        create_time=T0 + pid,
        state="sleeping",
        ppid=ppid,
        devices=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"),
        category="ok",
    )
    return replace(row, **changes)  # type: ignore[arg-type]


def worker(pid: int, ppid: int, **changes: object) -> ProcessRow:
    """A data-loader worker: holds the device files (inherited), not in NVML's lists."""
    fields: dict[str, object] = {"kinds": "", "used_memory": None, "sm_util": None, "mem_util": None}
    fields.update(category="worker", command="python train.py (worker)")
    fields.update(changes)
    return gpu_row(pid, ppid, **fields)


def host(pid: int, ppid: int, **changes: object) -> HostProcess:
    proc = HostProcess(
        pid=pid,
        ppid=ppid,
        user="alice",
        name="bash",
        command="bash",
        cpu_percent=None,
        rss=None,
        create_time=T0 + pid,
        state="sleeping",
    )
    return replace(proc, **changes)  # type: ignore[arg-type]


def snap(*rows: ProcessRow, hosts: tuple[HostProcess, ...] = ()) -> Snapshot:
    return snapshot(time=T0 + 10_000, gpus=(), processes=rows, host_processes=hosts)


TRAINER = gpu_row(4242, 1000)
WORKERS = tuple(worker(pid, 4242) for pid in (4243, 4244, 4245))
JOB = snap(TRAINER, *WORKERS)


# -- children --------------------------------------------------------------------------------------


def test_a_trainer_whose_workers_hold_the_gpu_starts_with_its_children() -> None:
    plan = plan_kill([TRAINER], JOB, GUARD)
    assert [e.target for e in plan.entries] == [Target(4242, T0 + 4242, "python train.py --rank 4242")]
    assert plan.include_children
    assert plan.children == {4242: (4243, 4244, 4245)}
    assert plan.gpu_children == (4243, 4244, 4245)
    assert plan.pids(include_children=True) == (4243, 4244, 4245, 4242)
    assert plan.pids(include_children=False) == (4242,)
    assert plan.notes == () and plan.refused == ()


def test_children_that_hold_no_gpu_are_listed_but_do_not_turn_the_box_on() -> None:
    helper = host(5000, 4242, command="python -m tensorboard")
    plan = plan_kill([TRAINER], snap(TRAINER, hosts=(helper,)), GUARD)
    assert plan.children == {4242: (5000,)}
    assert plan.gpu_children == ()
    assert not plan.include_children
    assert plan.pids(include_children=True) == (5000, 4242)


def test_a_process_without_children_starts_alone() -> None:
    plan = plan_kill([TRAINER], snap(TRAINER), GUARD)
    assert not plan.include_children and plan.children == {}
    assert plan.pids(True) == plan.pids(False) == (4242,)


def test_grandchildren_come_first_deepest_first() -> None:
    # torchrun (4000) -> rank (4242) -> workers; a worker's own child (4300) holds the GPU too.
    launcher = host(4000, 1000, command="torchrun --nproc-per-node 1 train.py")
    rank = replace(TRAINER, ppid=4000)
    grandchild = worker(4300, 4243)
    plan = plan_kill([launcher], snap(rank, *WORKERS, grandchild, hosts=(launcher,)), GUARD)
    assert plan.children == {4000: (4300, 4243, 4244, 4245, 4242)}
    assert plan.include_children
    assert set(plan.gpu_children) == {4242, 4243, 4244, 4245, 4300}
    assert plan.pids(True)[-1] == 4000 and plan.pids(True).index(4300) < plan.pids(True).index(4243)


def test_a_zombie_descendant_does_not_turn_the_box_on() -> None:
    zombie = worker(4243, 4242, state="zombie", devices=())
    plan = plan_kill([TRAINER], snap(TRAINER, zombie), GUARD)
    assert plan.children == {}  # it has exited: no signal reaches it
    assert not plan.include_children and plan.pids(True) == (4242,)


def test_a_ppid_cycle_cannot_loop() -> None:
    a, b = gpu_row(10, 11), gpu_row(11, 10)
    plan = plan_kill([a], snap(a, b), GUARD)
    assert plan.children == {10: (11,)}


def test_tagged_rows_share_children_once() -> None:
    plan = plan_kill([TRAINER, WORKERS[0]], JOB, GUARD)
    assert [e.target.pid for e in plan.entries] == [4242, 4243]
    assert plan.pids(True) == (4243, 4244, 4245, 4242)


def test_the_same_process_on_two_gpus_is_offered_once() -> None:
    on_1 = replace(TRAINER, gpu=1)
    plan = plan_kill([TRAINER, on_1], snap(TRAINER, on_1), GUARD)
    assert [e.target.pid for e in plan.entries] == [4242]


def test_no_snapshot_still_offers_the_process() -> None:
    plan = plan_kill([TRAINER], None, GUARD)
    assert [e.target.pid for e in plan.entries] == [4242] and not plan.include_children


# -- what an entry says ------------------------------------------------------------------------------


def test_an_entry_names_user_class_memory_and_a_printable_command() -> None:
    row = replace(TRAINER, command="python \x1b[31mtrain.py\x07", category="orphan")
    (entry,) = plan_kill([row], snap(row), GUARD).entries
    assert (entry.user, entry.category, entry.memory) == ("alice", "orphan", "68.7 GiB")
    assert entry.target.label.isprintable() and "\x1b" not in entry.target.label
    (entry,) = plan_kill([WORKERS[0]], JOB, GUARD).entries
    assert entry.memory == "-"  # it holds the device, NVML does not list it: no memory of its own
    (entry,) = plan_kill([replace(TRAINER, user=None)], JOB, GUARD).entries
    assert entry.user == "n/a"


# -- refusals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pid", "why"),
    [
        (0, "never signals pid 0 or 1"),
        (1, "never signals pid 0 or 1"),
        (ME, "that is gputui itself"),
        (SHELL, "one of gputui's own ancestors"),
        (SSHD, "one of gputui's own ancestors"),
    ],
)
def test_init_gputui_and_its_ancestors_are_never_offered(pid: int, why: str) -> None:
    row = gpu_row(pid, 0)
    plan = plan_kill([row], snap(row), GUARD)
    assert plan.entries == ()
    assert [p for p, _ in plan.refused] == [pid] and why in plan.refused[0][1]
    assert f"{pid} is not offered" in plan.note


def test_an_unknown_start_time_is_refused() -> None:
    row = replace(TRAINER, create_time=None)
    plan = plan_kill([row], snap(row), GUARD)
    assert plan.entries == () and "start time is unknown" in plan.refused[0][1]


def test_an_invisible_process_is_refused() -> None:
    row = replace(TRAINER, visible=False)
    plan = plan_kill([row], snap(row), GUARD)
    assert plan.entries == () and "not visible in this PID namespace" in plan.refused[0][1]


def test_a_changed_start_time_is_refused_and_the_rest_offered() -> None:
    other = gpu_row(5000, 1000)
    live = {4242: host(4242, 1000, create_time=T0 + 4242 + 30.0), 5000: host(5000, 1000)}
    plan = plan_kill([TRAINER, other], snap(TRAINER, other), GUARD, live.get)
    assert [e.target.pid for e in plan.entries] == [5000]
    assert plan.refused == ((4242, "the PID now belongs to another process"),)


def test_psutil_rounding_of_the_start_time_is_the_same_process() -> None:
    live = {4242: host(4242, 1000, create_time=T0 + 4242 + 0.01)}
    plan = plan_kill([TRAINER], snap(TRAINER), GUARD, live.get)
    assert [e.target.pid for e in plan.entries] == [4242]


def test_a_process_that_has_exited_since_is_still_offered() -> None:
    """Sending will say "already gone": that is the news, and no other process can get the signal."""
    plan = plan_kill([TRAINER], JOB, GUARD, lambda pid: None)
    assert [e.target.pid for e in plan.entries] == [4242] and plan.refused == ()


def test_children_of_a_refused_process_are_not_planned() -> None:
    shell_row = gpu_row(SHELL, SSHD)
    child = worker(4243, SHELL)
    plan = plan_kill([shell_row], snap(shell_row, child), GUARD)
    assert plan.entries == () and plan.children == {} and not plan.include_children
    assert plan.pids(True) == ()


# -- defunct rows ------------------------------------------------------------------------------------


def defunct(pid: int, ppid: int | None) -> ProcessRow:
    return worker(pid, ppid or 0, state="zombie", category="defunct", devices=(), command="[python]")


def test_a_defunct_row_offers_its_parent_from_the_snapshot_with_user_and_memory() -> None:
    zombie = defunct(4250, 4242)
    plan = plan_kill([zombie], snap(TRAINER, *WORKERS, zombie), GUARD)
    (entry,) = plan.entries
    assert entry.target == Target(4242, T0 + 4242, "python train.py --rank 4242")
    assert (entry.user, entry.category, entry.memory) == ("alice", PARENT, "68.7 GiB")
    assert "4250 is defunct" in plan.note and "Its parent 4242 is offered instead" in plan.note
    assert plan.include_children  # the parent's workers hold the GPU
    assert 4250 not in plan.children[4242] and set(plan.children[4242]) == {4243, 4244, 4245}


def test_a_defunct_row_s_parent_outside_the_snapshot_is_read_live() -> None:
    zombie = defunct(4250, 6000)
    live = {6000: host(6000, 1000, user="bob", command="python launcher.py")}
    (entry,) = plan_kill([zombie], snap(zombie), GUARD, live.get).entries
    assert (entry.target.pid, entry.user, entry.memory) == (6000, "bob", "-")
    assert entry.target.label == "python launcher.py"


@pytest.mark.parametrize("ppid", [None, 0, 6000])
def test_a_defunct_row_whose_parent_is_gone_offers_nothing(ppid: int | None) -> None:
    zombie = defunct(4250, ppid)
    plan = plan_kill([zombie], snap(zombie), GUARD, lambda pid: None)
    assert plan.entries == () and "Its parent is gone" in plan.note


def test_a_defunct_child_of_gputui_does_not_offer_gputui() -> None:
    # The demo's killed trainer, before gputui reaps it.
    zombie = replace(TRAINER, state="zombie", ppid=ME)
    plan = plan_kill([zombie], snap(zombie), GUARD, lambda pid: host(pid, SHELL))
    assert plan.entries == ()
    assert "Its parent is gputui itself, which reaps it" in plan.note


@pytest.mark.parametrize(("ppid", "why"), [(SHELL, "ancestors"), (1, "pid 0 or 1")])
def test_a_defunct_child_of_an_ancestor_or_init_offers_nothing(ppid: int, why: str) -> None:
    zombie = defunct(4250, ppid)
    plan = plan_kill([zombie], snap(zombie), GUARD, lambda pid: host(pid, 1))
    assert plan.entries == () and why in plan.note


def test_a_tagged_defunct_row_and_its_tagged_parent_list_the_parent_once() -> None:
    zombie = defunct(4250, 4242)
    plan = plan_kill([zombie, TRAINER], snap(TRAINER, zombie), GUARD)
    assert [e.target.pid for e in plan.entries] == [4242]
    assert plan.entries[0].category == "ok"  # tagged itself: its own class, not only "parent"


# -- outcomes ----------------------------------------------------------------------------------------


def outcome(pid: int, result: Result, detail: str = "", signal: str = "SIGTERM") -> Outcome:
    return Outcome(Target(pid, T0, f"python {pid}.py"), signal, result, detail)


def test_one_outcome_reads_as_before() -> None:
    text, bad = describe_outcomes([outcome(4242, "gone")], final=True)
    assert (text, bad) == ("SIGTERM → 4242 (python 4242.py): gone", False)
    text, bad = describe_outcomes([outcome(4242, "still alive", "after 5 s")], final=True)
    assert text == "SIGTERM → 4242 (python 4242.py): still alive — after 5 s — press K to send SIGKILL"
    assert bad


def test_outcomes_name_every_pid() -> None:
    outcomes = [
        outcome(4243, "gone"),
        outcome(4244, "still alive"),
        outcome(4245, "still alive"),
        outcome(4242, "gone"),
        outcome(17, "permission denied"),
        outcome(SHELL, "refused", "that is one of gputui's own ancestors"),
        outcome(50, "already gone"),
    ]
    text, bad = describe_outcomes(outcomes, final=True)
    assert text == (  # what needs the user first, with what to do; then what went as asked
        "SIGTERM → 7 processes: still alive: 4244, 4245 — press K to send SIGKILL; not permitted: 17; "
        f"refused: {SHELL} (that is one of gputui's own ancestors); gone: 4243, 4242; already gone: 50"
    )
    assert bad


def test_outcomes_before_the_wait_do_not_offer_k() -> None:
    text, bad = describe_outcomes([outcome(1, "sent"), outcome(2, "still alive")], final=False)
    assert text == "SIGTERM → 2 processes: still alive: 2; sent: 1" and bad
    assert describe_outcomes([], final=True) == ("", False)


# -- the wall ----------------------------------------------------------------------------------------


def test_the_plan_imports_no_textual_or_rich() -> None:
    source = Path(__file__).parents[2] / "gputui" / "actions" / "kill_plan.py"
    tree = ast.parse(source.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in names if m.split(".")[0] in ("textual", "rich") or m.startswith("gputui.ui.")}
