"""classify(Facts): every process class, the facts its one-line reason names, and which class wins."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputui.analyze.classify import (
    DEFUNCT,
    NO_PERMISSION,
    NVML_ONLY,
    OK,
    ORPHAN,
    STUCK,
    SUBREAPERS,
    SUSPICIOUS,
    UNSEEN,
    WORKER,
    Facts,
    classify,
)

CTL, UVM = "/dev/nvidiactl", "/dev/nvidia-uvm"
GPU0 = (CTL, UVM, "/dev/nvidia0")


def facts(**kw: object) -> Facts:
    """A live, sleeping device holder that NVML does not list, whose parent (4121, python) is alive and not
    on a GPU; each test changes what it is about."""
    base = Facts(
        visible=True,
        state="sleeping",
        on_nvml=False,
        devices=GPU0,
        ppid=4121,
        parent_name="python",
        parent_on_gpu=False,
        idle_s=None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def nvml(**kw: object) -> Facts:
    """A process in NVML's list, holding its devices, as a training process does."""
    return facts(on_nvml=True, **kw)


# -- each class --------------------------------------------------------------------------------------


def test_ok_a_listed_gpu_process() -> None:
    category, reason = classify(nvml())
    assert category == OK
    assert reason == "holds /dev/nvidia0"


def test_ok_without_device_files() -> None:
    assert classify(nvml(devices=())) == (OK, "")


def test_worker() -> None:
    category, reason = classify(facts(parent_on_gpu=True))
    assert category == WORKER
    assert "holds /dev/nvidia0" in reason
    assert "not in NVML's list" in reason
    assert "child of a GPU process" in reason
    assert "parent gone" not in reason


def test_defunct() -> None:
    category, reason = classify(facts(state="zombie", devices=(), ppid=4121))
    assert category == DEFUNCT
    assert reason.startswith("defunct: its parent 4121 has not reaped it")


@pytest.mark.parametrize(
    ("state", "telling"),
    [
        ("disk-sleep", "uninterruptible sleep (D)"),
        ("stopped", "stopped (T)"),
        ("tracing-stop", "stopped (T)"),
    ],
)
def test_stuck(state: str, telling: str) -> None:
    category, reason = classify(nvml(state=state))
    assert category == STUCK
    assert reason.startswith(telling)
    assert "holds /dev/nvidia0" in reason


def test_stuck_in_the_driver_says_so() -> None:
    assert "often stuck in the driver" in classify(nvml(state="disk-sleep"))[1]


@pytest.mark.parametrize("parent_name", [None, "systemd", "init", "process_api"])
def test_orphan_adopted_by_init(parent_name: str | None) -> None:
    category, reason = classify(facts(ppid=1, parent_name=parent_name))
    assert category == ORPHAN
    assert "holds /dev/nvidia0" in reason
    assert "parent gone (now 1" in reason
    assert "not in NVML's list" in reason
    if parent_name:
        assert f"(now 1 {parent_name})" in reason


@pytest.mark.parametrize("subreaper", sorted(SUBREAPERS))
def test_orphan_adopted_by_a_subreaper(subreaper: str) -> None:
    category, reason = classify(facts(ppid=777, parent_name=subreaper))
    assert category == ORPHAN
    assert f"parent gone (now 777 {subreaper})" in reason
    assert "not in NVML's list" in reason


def test_orphan_whose_parent_is_not_visible() -> None:
    # ppid 0: the parent is outside this PID namespace; or the parent's name could not be read.
    assert classify(facts(ppid=0, parent_name=None))[0] == ORPHAN
    category, reason = classify(facts(ppid=4121, parent_name=None))
    assert category == ORPHAN
    assert "parent gone (now 4121)" in reason


def test_unseen() -> None:
    category, reason = classify(facts(devices=(CTL, "/dev/nvidia1"), parent_name="bash"))
    assert category == UNSEEN
    assert reason == "holds /dev/nvidia1; not in NVML's list"


def test_nvml_only() -> None:
    category, reason = classify(
        Facts(
            visible=False,
            state=None,
            on_nvml=True,
            devices=None,
            ppid=None,
            parent_name=None,
            parent_on_gpu=False,
            idle_s=None,
        )
    )
    assert category == NVML_ONLY
    assert "in NVML's list but not visible here" in reason
    assert "another PID namespace" in reason


def test_no_permission() -> None:
    category, reason = classify(nvml(devices=None))
    assert category == NO_PERMISSION
    assert "cannot read /proc/PID/fd" in reason


# -- the facts in the reason -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle_s", "note"),
    [
        (None, None),
        (0.0, None),
        (59.9, None),
        (60.0, "0% CPU for 1 min"),
        (600.0, "0% CPU for 10 min"),
        (659.0, "0% CPU for 10 min"),
        (7200.0, "0% CPU for 120 min"),
    ],
)
def test_idle_note(idle_s: float | None, note: str | None) -> None:
    _, reason = classify(facts(ppid=1, idle_s=idle_s))
    if note is None:
        assert "CPU" not in reason
    else:
        assert note in reason


def test_an_idle_orphan_names_every_telling_fact_most_telling_first() -> None:
    category, reason = classify(facts(ppid=1, parent_name="systemd", idle_s=600.0))
    assert category == ORPHAN
    assert reason == "holds /dev/nvidia0; parent gone (now 1 systemd); not in NVML's list; 0% CPU for 10 min"


def test_held_devices_are_named_by_gpu() -> None:
    _, reason = classify(nvml(devices=(CTL, UVM, "/dev/nvidia0", "/dev/nvidia2")))
    assert reason == "holds /dev/nvidia0, /dev/nvidia2"


def test_only_the_control_devices() -> None:
    category, reason = classify(facts(devices=(CTL, UVM)))
    assert category == UNSEEN
    assert "holds /dev/nvidiactl, /dev/nvidia-uvm" in reason


def test_stand_in_device_files_are_named_as_dev() -> None:
    _, reason = classify(facts(devices=("/tmp/gputui-demo-x/nvidiactl", "/tmp/gputui-demo-x/nvidia3")))
    assert reason.startswith("holds /dev/nvidia3;")


# -- precedence --------------------------------------------------------------------------------------


def test_a_zombie_holder_is_defunct() -> None:
    category, reason = classify(facts(state="zombie", ppid=1, parent_name="systemd"))
    assert category == DEFUNCT
    assert reason.startswith("defunct: its parent 1 has not reaped it")
    assert "parent gone" in reason  # the other facts follow


def test_a_zombie_on_nvml_is_defunct() -> None:
    assert classify(nvml(state="zombie", devices=()))[0] == DEFUNCT


@pytest.mark.parametrize("parent_name", ["systemd", "tini", None])
def test_an_nvml_process_adopted_by_init_is_not_an_orphan(parent_name: str | None) -> None:
    # A GPU process whose parent is init is usually just detached (nohup, a service).
    category, reason = classify(nvml(ppid=1, parent_name=parent_name))
    assert category == OK
    assert "parent gone" not in reason


def test_stuck_wins_over_orphan() -> None:
    category, reason = classify(facts(state="disk-sleep", ppid=1))
    assert category == STUCK
    assert "parent gone" in reason


def test_defunct_wins_over_no_permission() -> None:
    assert classify(nvml(state="zombie", devices=None))[0] == DEFUNCT


def test_orphan_wins_over_worker() -> None:
    assert classify(facts(ppid=1, parent_name="systemd", parent_on_gpu=True))[0] == ORPHAN


def test_a_process_holding_nothing_and_unlisted_is_not_suspicious() -> None:
    assert classify(facts(devices=()))[0] == OK
    assert classify(facts(devices=(), ppid=1, parent_name="systemd"))[0] == OK


def test_invisible_wins_over_everything() -> None:
    f = Facts(
        visible=False,
        state="zombie",
        on_nvml=True,
        devices=None,
        ppid=None,
        parent_name=None,
        parent_on_gpu=False,
        idle_s=None,
    )
    assert classify(f)[0] == NVML_ONLY


def test_suspicious_classes() -> None:
    assert {OK, WORKER}.isdisjoint(SUSPICIOUS)
    assert {DEFUNCT, STUCK, ORPHAN, UNSEEN, NVML_ONLY, NO_PERMISSION, "hung"} == SUSPICIOUS
