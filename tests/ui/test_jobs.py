"""Whose job each process is, in the UI: the JOB column (only when some process has an owner), the detail,
`job:` / `pod:` filters, `J` (one row per job, its numbers summed) and `k` on a job's row."""

from __future__ import annotations

import dataclasses

import pytest

from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Owner, ProcessRow, Snapshot
from gputui.ui.app import GpuTuiApp
from gputui.ui.screens.detail import DetailScreen, describe_owner, render_detail
from gputui.ui.widgets.dip_groups import RANGE, compact_gpus
from gputui.ui.widgets.process_rows import NO_JOB, View, build_rows, matches
from tests.helpers import until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app, move_to
from tests.ui.test_detail_fields import text_of

SLURM = Owner("slurm", "81234", name="llama-7b", step="0", user="alice")
POD = Owner(
    "kubernetes", "0f1e2d3c-1111-2222-3333-444455556666", "trainer-0", "ml", "ab12cd34ef56", qos="burstable"
)


def owned(snap: Snapshot) -> Snapshot:
    """GPUs 0-1's trainers are SLURM job 81234's; GPU 2's is a pod's; the rest own nothing."""

    def who(r: ProcessRow) -> Owner | None:
        if r.pid in (world.trainer_pid(0), world.trainer_pid(1)):
            return SLURM
        return POD if r.pid == world.trainer_pid(2) else None

    return dataclasses.replace(
        snap, processes=tuple(dataclasses.replace(r, owner=who(r)) for r in snap.processes)
    )


def app_with_owners() -> GpuTuiApp:
    app = make_app(gpus=4, unaccounted=True)
    replay = app.sampler
    assert isinstance(replay, ReplaySampler)
    replay.snapshots = [owned(s) for s in replay.snapshots]
    return app


def header(app: GpuTuiApp) -> str:
    return "".join(ch for ch, _ in app.table.build(app.table.size.width)[0].cells)


def test_filters_by_job_and_pod() -> None:
    snap = owned(world.snapshots(gpus=4, seconds=1)[-1])
    by_pid = {p.pid: p for p in snap.processes}
    trainer = by_pid[world.trainer_pid(0)]
    assert matches(trainer, "job:81234") and matches(trainer, "job:llama") and not matches(trainer, "job:999")
    assert not matches(trainer, "pod:trainer")  # a SLURM job is no pod
    pod = by_pid[world.trainer_pid(2)]
    assert matches(pod, "pod:trainer-") and matches(pod, "pod:ml") and not matches(pod, "job:81234")
    assert matches(pod, "slurm") is False and matches(trainer, "slurm 81234")  # plain text sees the label
    assert not matches(by_pid[world.trainer_pid(3)], "job:")  # nothing after the colon: no owner, no match


def test_the_jobs_view_sums_each_job_and_puts_the_rest_last() -> None:
    snap = owned(world.snapshots(gpus=4, seconds=1)[-1])
    rows = build_rows(snap, View(jobs=True))
    keys = [r.key for r in rows]
    assert keys[-1] == f"job/{NO_JOB}" and set(keys) == {
        "job/slurm/81234",
        f"job/kubernetes/{POD.id}",
        f"job/{NO_JOB}",
    }
    slurm = next(r for r in rows if r.key == "job/slurm/81234")
    members = {p.pid for p in slurm.members}
    assert members == {world.trainer_pid(0), world.trainer_pid(1)}
    text = [c.plain for c in slurm.cells]
    gib = sum(p.used_memory or 0 for p in slurm.members) / (1 << 30)
    assert f"{gib:.1f} GiB" in text and "slurm 81234" in text and text[0] == "0,1"
    cpu = sum(p.cpu_percent or 0 for p in slurm.members)
    assert f"{cpu:.1f}" in text
    assert text[-1] == "llama-7b: 2 processes on GPU 0,1"


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        ([0, 1, 2, 3, 4, 5, 6, 7], f"0{RANGE}7"),
        ([0, 2, 5], "0,2,5"),
        ([0, 1, 2, 3, 6], f"0{RANGE}3,6"),
        ([], ""),
    ],
)
def test_gpu_lists_are_compact(gpus: list[int], said: str) -> None:
    assert compact_gpus(gpus) == said


def test_the_detail_says_whose_job_it_is() -> None:
    assert describe_owner(SLURM) == "SLURM job 81234, step 0: llama-7b (user alice)"
    assert describe_owner(POD) == (
        f"Kubernetes pod ml/trainer-0, UID {POD.id}, QoS burstable, container ab12cd34ef56"
    )
    assert (
        describe_owner(Owner("docker", "f" * 64, name="trainer")) == f"docker container trainer ({'f' * 12})"
    )


async def test_job_column_shows_only_when_some_process_has_an_owner() -> None:
    plain = make_app(gpus=4)
    async with plain.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, plain)
        assert "JOB" not in header(plain)
    app = app_with_owners()
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        assert "JOB" in header(app)
        screen = "\n".join("".join(ch for ch, _ in line.cells) for line in app.table.build(160))
        assert "slurm 81234.0" in screen and "pod ml/trainer-0" in screen


async def test_j_groups_by_job_and_k_on_a_job_offers_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    app = app_with_owners()
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p", "J")  # paused: the rows stay put
        await pilot.pause()
        assert app.view.jobs and app.table.rows[0].key.startswith("job/")
        await move_to(pilot, app, "job/slurm/81234")
        await pilot.press("k")
        await pilot.pause()
        from gputui.ui.screens.kill import KillScreen

        assert isinstance(app.screen, KillScreen)
        offered = {e.target.pid for e in app.screen.entries}
        # bob's trainer is filed under alice's job: a job's kill signals only its user's processes
        assert offered == {world.trainer_pid(0)}
        await pilot.press("escape")
        await pilot.press("J")
        await pilot.pause()
        assert not app.view.jobs


async def test_the_detail_of_an_owned_process_names_its_job() -> None:
    app = app_with_owners()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("p", "enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await until(pilot, lambda: screen.detail is not None, what="the detail's worker")
        assert screen.detail is not None
        text = text_of(render_detail(screen.process, screen.detail))
        assert "SLURM job 81234, step 0: llama-7b (user alice)" in text
