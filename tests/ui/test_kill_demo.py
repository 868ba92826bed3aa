"""The demo's kill story, end to end on its real processes: the plan on a real snapshot, the signals
sent as the app sends them, and what the next snapshot shows. This test process plays gputui (the
demo's trainers are its children)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import psutil
import pytest

from gputui.actions import signals
from gputui.actions.kill_plan import PARENT, describe_outcomes, plan_kill
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource
from gputui.model import ProcessRow, Snapshot
from tests.builders import process_row
from tests.helpers import wait_until

GIB = 1 << 30


@pytest.fixture
def demo() -> Iterator[Sampler]:
    sampler = Sampler(DemoSource(gpus=2, workers=3, start_at=120.0))
    with sampler:
        yield sampler


def trainer_row(snap: Snapshot, gpu: int) -> ProcessRow:
    return next(p for p in snap.processes if p.gpu == gpu and p.kinds == "C" and p.visible)


def rows_of(snap: Snapshot, parent: int) -> list[ProcessRow]:
    return [p for p in snap.processes if p.ppid == parent]


def test_killing_the_trainer_takes_its_workers_and_frees_the_gpu(demo: Sampler) -> None:
    demo.tick()
    snap = demo.tick()
    trainer = trainer_row(snap, 0)
    workers = [p.pid for p in rows_of(snap, trainer.pid) if p.state != "zombie"]
    assert len(workers) == 3 and snap.gpus[0].util_gpu and snap.gpus[0].util_gpu > 10

    plan = plan_kill([trainer], snap, signals.protected(), signals.describe)
    assert plan.include_children, plan  # its workers hold /dev/nvidia0: on by default
    assert set(workers) <= set(plan.gpu_children)
    assert set(workers) | {trainer.pid} <= set(plan.pids(plan.include_children))

    sent = signals.send([e.target for e in plan.entries], "SIGTERM", plan.include_children)
    outcomes = signals.await_outcome(sent, timeout=5.0)
    text, bad = describe_outcomes(outcomes, final=True)
    assert not bad, text
    for pid in (*workers, trainer.pid):
        assert str(pid) in text

    after = demo.tick()
    assert wait_until(lambda: not psutil.pid_exists(trainer.pid), 3.0), "a zombie of gputui is left"
    assert all(p.pid not in (trainer.pid, *workers) for p in after.processes)
    gpu = after.gpus[0]
    assert gpu.util_gpu == 0
    assert gpu.mem_used == GIB + GIB // 2  # what the orphan holds: not 68.7 GiB any more
    assert after.gpus[1].util_gpu and after.gpus[1].util_gpu > 10  # the other trainer runs on


def test_a_defunct_child_offers_its_trainer_with_user_and_memory(demo: Sampler) -> None:
    demo.tick()
    snap = demo.tick()
    trainer = trainer_row(snap, 0)
    zombie = next(p for p in rows_of(snap, trainer.pid) if p.state == "zombie")
    plan = plan_kill([zombie], snap, signals.protected(), signals.describe)
    (entry,) = plan.entries
    assert entry.target.pid == trainer.pid and entry.category == PARENT
    assert entry.user == psutil.Process().username()
    assert entry.memory.endswith("GiB") and float(entry.memory.split()[0]) > 30
    assert "demo_train.py" in entry.target.label
    assert plan.include_children


def test_a_killed_trainer_never_offers_gputui_as_the_parent(demo: Sampler) -> None:
    demo.tick()
    snap = demo.tick()
    trainer = trainer_row(snap, 1)
    os.kill(trainer.pid, signal.SIGKILL)
    proc = psutil.Process(trainer.pid)
    assert wait_until(lambda: proc.status() == psutil.STATUS_ZOMBIE, 3.0)
    # Between the signal and the next tick it is a zombie whose parent is gputui.
    live = signals.describe(trainer.pid)
    assert live is not None and live.ppid == os.getpid()
    row = process_row(
        1,
        trainer.pid,
        used_memory=trainer.used_memory,
        user=live.user,
        command=live.command,
        create_time=live.create_time,
        state="zombie",
        ppid=live.ppid,
        category="defunct",
    )
    plan = plan_kill([row], snap, signals.protected(), signals.describe)
    assert plan.entries == ()
    assert "Its parent is gputui itself, which reaps it" in plan.note
    after = demo.tick()  # and it does
    assert not psutil.pid_exists(trainer.pid)
    assert all(p.pid != trainer.pid for p in after.processes)
    assert after.gpus[1].util_gpu == 0
