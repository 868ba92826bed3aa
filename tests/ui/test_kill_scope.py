"""What one `k` can reach, through the app: the "no job" row is never signalled as a group; the dialog
counts exactly what the signal would reach (a launcher with its whole tree), lists each PID once and says
which GPUs, how much GPU memory and whose; a job's kill offers only its user's processes and says what
it left out; and every dialog opens on its title and summary, at 120x40 as at 80x24.

The worlds' PIDs are made up: `signals.describe` is stubbed to "no such process" (each one "has exited
since", so it is offered and nothing live is read), so that a real process that happens to hold one of
these PIDs on the test machine cannot change what is offered. The real-process cases are in
tests/ui/test_kill.py; one more is at the end of this file."""

from __future__ import annotations

import io
import re
from collections.abc import Collection, Iterator
from dataclasses import replace

import pytest
from rich.console import Console
from textual.pilot import Pilot

from gputui.actions import signals
from gputui.actions.kill_plan import job_share, plan_kill
from gputui.model import HostProcess, Owner, ProcessRow
from gputui.ui.app import GpuTuiApp
from gputui.ui.kill_flow import KillFlow
from gputui.ui.screens.kill import KillRequest, KillScreen
from gputui.ui.widgets.dip_groups import RANGE
from gputui.units import fmt_bytes
from tests.helpers import Children, screen_text
from tests.ui import world
from tests.ui.conftest import first_frame, make_app, move_to
from tests.ui.test_jobs import SLURM, app_with_owners
from tests.ui.test_kill import (
    WITH_CHILD,
    app_on,
    cursor_to,
    dialog_pids,
    open_dialog,
    press,
    row_of,
    status,
)
from tests.ui.test_kill_plan import GUARD, gpu_row, host, snap

RANKS, WORKERS = 8, 3


@pytest.fixture
def nothing_live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signals, "describe", lambda pid: None)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[KillRequest]]:
    """What the dialog asked the app to send: captured, never sent (the worlds' PIDs are made up)."""
    requests: list[KillRequest] = []
    monkeypatch.setattr(KillFlow, "send", lambda self, request: requests.append(request))
    yield requests


def shown(app: GpuTuiApp) -> list[str]:
    """The terminal as drawn now, one string per row (what a person sees: the modal over the app)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False).splitlines()


def dialog_rows(app: GpuTuiApp) -> list[str]:
    """The rows drawn inside the dialog's border, top to bottom, without the border."""
    rows = shown(app)
    top = next(i for i, row in enumerate(rows) if "╭" in row)
    left = rows[top].index("╭")
    right = rows[top].index("╮", left)
    out = []
    for row in rows[top + 1 :]:
        if "╰" in row[left : right + 1]:
            break
        out.append(row[left + 1 : right].strip())
    return out


def joined(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


# -- the "no job" row --------------------------------------------------------------------------------


async def test_k_on_the_no_job_row_opens_nothing_and_says_why(nothing_live: None) -> None:
    app = make_app(gpus=4, interval=30.0)  # no container, pod or SLURM job here
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "p", "J")
        assert [r.key for r in app.table.rows] == ["job/no job"]
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)
        said = status(app)
        assert '"no job" is not a job: never signalled as a group' in said and "Press J" in said
        assert len(said) <= 80  # one line, whole at 80 columns
        await press(pilot, "space", "home", "k")  # tagged, it is not signalled either
        assert not isinstance(app.screen, KillScreen)
        assert "never signalled as a group" in status(app)
        await press(pilot, "J")  # the processes view: one process is offered as before
        await press(pilot, "home", "k")
        assert isinstance(app.screen, KillScreen)
        assert len(app.screen.entries) == 1


# -- a launcher with its whole tree ------------------------------------------------------------------


def launcher_app() -> GpuTuiApp:
    """torchrun (alice) over 8 ranks, each with 3 data-loader workers that hold its GPU; the odd ranks
    and their workers are bob's."""
    return make_app(gpus=RANKS, workers=WORKERS, holding=True, interval=30.0)


def tree_pids() -> list[int]:
    ranks = [world.trainer_pid(g) for g in range(RANKS)]
    return [world.LAUNCHER] + [pid for r in ranks for pid in (r, *(r + 1 + w for w in range(WORKERS)))]


async def open_on_launcher(pilot: Pilot[int], app: GpuTuiApp) -> KillScreen:
    await first_frame(pilot, app)
    await press(pilot, "p", "t")
    await cursor_to(pilot, app, world.LAUNCHER)
    return await open_dialog(pilot, app)


async def test_a_launcher_s_dialog_counts_lists_and_sends_its_whole_tree_once(
    nothing_live: None, sent: list[KillRequest]
) -> None:
    app = launcher_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await open_on_launcher(pilot, app)
        snapshot = app.snapshot
        assert snapshot is not None
        memory = sum(p.used_memory or 0 for p in snapshot.processes if p.pid in tree_pids() and p.kinds)
        everything = tree_pids()
        assert len(everything) == 1 + RANKS * (1 + WORKERS) == 33
        text = joined(screen_text(app).splitlines())
        assert "Send a signal to 33 processes?" in text
        assert "In all, 33 processes: 8 ranks (GPU processes), 24 workers, 1 other" in text
        assert f"GPUs 0{RANGE}7" in text and f"{fmt_bytes(memory)} of GPU memory" in text
        assert "users alice, bob" in text
        assert "includes 16 processes of bob, not only alice's" in text
        # Each PID once in the whole dialog: in the list, and nowhere else.
        assert dialog_pids(app) == everything
        for pid in everything:
            assert len(re.findall(rf"\b{pid}\b", text)) == 1, pid
        await press(pilot, "y")
    (request,) = sent
    assert sorted(t.pid for t in request.targets) == sorted(everything)
    assert len(request.targets) == 33 and request.targets[-1].pid == world.LAUNCHER  # the launcher last
    assert not request.include_children  # exactly the list: nothing is looked for again at send time
    assert all(t.create_time is not None for t in request.targets)


async def test_unchecking_the_children_counts_the_launcher_alone(
    nothing_live: None, sent: list[KillRequest]
) -> None:
    app = launcher_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_on_launcher(pilot, app)
        screen.box.focus()  # below the list, out of view: the keyboard reaches it
        await press(pilot, "space")
        assert not screen.box.value
        text = joined(screen_text(app).splitlines())
        assert "Send a signal to 1 process?" in text
        assert "In all, 1 process: 1 other · no GPU · no GPU memory · user alice" in text
        assert "includes" not in text
        assert dialog_pids(app) == [world.LAUNCHER]
        assert "not included: its 32 children" in text  # named once, here
        await press(pilot, "y")
    (request,) = sent
    assert [t.pid for t in request.targets] == [world.LAUNCHER]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_dialog_opens_on_its_title_and_summary(nothing_live: None, size: tuple[int, int]) -> None:
    app = launcher_app()
    async with app.run_test(size=size) as pilot:
        screen = await open_on_launcher(pilot, app)
        await pilot.pause()
        rows = dialog_rows(app)
        assert rows[0] == "Send a signal to 33 processes?", rows
        assert rows[1].startswith("In all, 33 processes: 8 ranks (GPU processes), 24 workers"), rows
        assert any("includes 16 processes of bob" in row for row in rows[2:4]), rows
        # The buttons are drawn too, Cancel has the focus, and the list scrolls between them.
        assert "Send (y)" in rows[-2] and "Cancel (Esc)" in rows[-2], rows
        assert screen.focused is screen.cancel
        assert screen.body.scroll_y == 0 and screen.body.max_scroll_y > 0


async def test_a_single_process_dialog_opens_on_its_title_too(nothing_live: None) -> None:
    app = make_app(gpus=4, interval=30.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await first_frame(pilot, app)
        await cursor_to(pilot, app, world.WEIRD_PID)
        await open_dialog(pilot, app)
        rows = dialog_rows(app)
        assert rows[0] == "Send a signal to 1 process?", rows
        summary = "In all, 1 process: 1 rank (GPU process) · GPU 1 · 1.0 GiB of GPU memory · user mallory"
        assert joined(rows[1:3]).startswith(summary), rows


# -- a job's kill: its user's processes only ---------------------------------------------------------


async def test_a_job_kill_leaves_out_another_user_s_process_and_says_so(
    nothing_live: None, sent: list[KillRequest]
) -> None:
    app = app_with_owners()  # SLURM job 81234 of alice: the trainers of GPU 0 (alice) and GPU 1 (bob)
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "p", "J")
        await move_to(pilot, app, "job/slurm/81234")
        await press(pilot, "k")
        screen = app.screen
        assert isinstance(screen, KillScreen)
        assert [e.target.pid for e in screen.entries] == [world.trainer_pid(0)]
        text = joined(screen_text(app).splitlines())
        assert "Send a signal to 1 process?" in text
        bob = world.trainer_pid(1)
        assert f"Left out: 1 process of bob filed under slurm 81234 ({bob})." in text
        assert "A job's kill signals only its user's processes (alice is the SLURM job's user)" in text
        assert bob not in dialog_pids(app)
        await press(pilot, "y")
    (request,) = sent
    assert [t.pid for t in request.targets] == [world.trainer_pid(0)]


def pod_row(pid: int, user: str | None, gpu: int = 0) -> ProcessRow:
    pod = Owner("kubernetes", "0f1e2d3c-1111", "trainer-0", "ml")
    return gpu_row(pid, 1000, user=user, owner=pod, gpu=gpu)


def test_a_pod_s_user_is_who_runs_most_of_its_processes() -> None:
    members = [
        pod_row(10, "alice"),
        pod_row(10, "alice", gpu=1),
        pod_row(11, "alice"),
        pod_row(12, "mallory"),
    ]
    share = job_share(members)
    assert share.user == "alice"
    assert [p.pid for p in share.kept] == [10, 10, 11]  # a process on two GPUs is two rows, both kept
    assert share.note.startswith("Left out: 1 process of mallory filed under pod ml/trainer-0 (12).")
    assert "(alice runs most of its processes)" in share.note


def test_a_slurm_job_s_user_wins_over_the_majority() -> None:
    slurm = replace(SLURM, step=None)
    members = [
        gpu_row(10, 1, user="alice", owner=slurm),
        *(gpu_row(p, 1, user="root", owner=slurm) for p in (11, 12)),
    ]
    share = job_share(members)
    assert share.user == "alice" and [p.pid for p in share.kept] == [10]
    assert "Left out: 2 processes of root filed under slurm 81234 (11, 12)." in share.note


def test_a_job_whose_processes_name_no_user_is_offered_whole() -> None:
    share = job_share([pod_row(10, None), pod_row(11, None)])
    assert share.user is None and len(share.kept) == 2 and share.note == ""


# -- the plan: the live children, each PID once ------------------------------------------------------


def test_live_descendants_are_planned_with_the_snapshot_s() -> None:
    trainer = gpu_row(4242, 1000)
    worker = gpu_row(4243, 4242, kinds="", used_memory=None, category="worker")
    stale = host(4244, 4242)  # in the snapshot, but its PID is another process now
    compile_worker = host(4300, 4243, command="python -c compile")  # not in the snapshot
    live = {4242: host(4242, 1000, create_time=trainer.create_time)}
    now = [
        host(4243, 4242, create_time=worker.create_time),
        replace(stale, create_time=(stale.create_time or 0) + 99, command="python other.py"),
        compile_worker,
    ]
    asked: list[list[int]] = []

    def descendants(pids: Collection[int]) -> list[HostProcess]:
        asked.append(sorted(pids))
        return now

    plan = plan_kill([trainer], snap(trainer, worker, hosts=(stale,)), GUARD, live.get, descendants)
    assert asked == [[4242]]
    assert plan.pids(True) == (4300, 4243, 4244, 4242)
    assert plan.family[4244].target.label == "python other.py"  # the live one, with its start time
    assert plan.family[4300].role == "worker" and plan.family[4300].category == "worker"
    assert [e.target.pid for e in plan.shown(True)] == [4242, 4243, 4300, 4244]


def test_descendants_of_a_reused_pid_are_not_read() -> None:
    trainer = gpu_row(4242, 1000)
    live = {4242: host(4242, 1000, create_time=(trainer.create_time or 0) + 30)}
    plan = plan_kill([trainer], snap(trainer), GUARD, live.get, lambda pids: pytest.fail("read"))
    assert plan.entries == ()


def test_a_descendant_that_is_never_signalled_is_left_out_with_its_subtree() -> None:
    trainer = gpu_row(4242, 1000)
    unknown = host(4243, 4242, create_time=None)
    below = host(4244, 4243)
    plan = plan_kill([trainer], snap(trainer, hosts=(unknown, below)), GUARD)
    assert plan.pids(True) == (4242,)
    assert "4243 is not offered: its start time is unknown" in plan.note


# -- a real child the snapshot does not show ---------------------------------------------------------


async def test_a_real_child_missing_from_the_snapshot_is_listed_and_counted(spawn: Children) -> None:
    parent, line = spawn.start(WITH_CHILD)
    child = spawn.adopt(int(line))
    app = app_on(row_of(parent, "python trainer.py --workers 1"))
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        screen = await open_dialog(pilot, app)
        text = joined(screen_text(app).splitlines())
        assert "Send a signal to 1 process?" in text
        assert f"not included: its 1 child, {child.pid}" in text  # read live: the snapshot has no child
        await pilot.click("#children")
        await pilot.pause()
        text = joined(screen_text(app).splitlines())
        assert "Send a signal to 2 processes?" in text
        assert dialog_pids(app) == [parent.pid, child.pid]
        assert [e.target.pid for e in screen.signalled()] == [child.pid, parent.pid]
        await press(pilot, "escape")
