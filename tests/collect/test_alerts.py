"""Alerts: a process that was filling its GPU or looked hung stays listed, with when it began and ended,
after it stopped doing so or died of it."""

from __future__ import annotations

from dataclasses import replace

from gputui.analyze import alerts as alerts_mod
from gputui.analyze.alerts import FILLING, HUNG, Alerts
from gputui.analyze.forecast import MIB
from gputui.model import ProcessRow, Snapshot
from tests.collect.test_dips import T0, row, snap

LEAK = 120 * MIB / 60  # bytes/s


def leaking(gpu: int, pid: int, full_in: float, created: float = T0 - 900) -> ProcessRow:
    return replace(
        row(gpu, pid), memory_growth=LEAK, full_in=full_in, create_time=created, command="python train.py"
    )


def at(t: float, *procs: ProcessRow) -> Snapshot:
    return snap(t, [95, 95], procs=procs)


def test_a_filling_process_is_one_alert_from_first_to_last_sample_then_ended() -> None:
    a = Alerts()
    a.add(at(0, leaking(0, 11, 900.0)))
    a.add(at(5, leaking(0, 11, 840.0)))
    a.add(at(10, row(0, 11)))  # no longer growing (or the trend is unsure again)
    (alert,) = a.newest_first()
    assert (alert.kind, alert.pid, alert.gpu, alert.first, alert.last) == (FILLING, 11, 0, T0, T0 + 5)
    assert alert.text == "growing 120 MiB/min — this GPU is full in ~14 min"
    assert not alert.ongoing and alert.command == "python train.py"


def test_an_alert_outlives_its_process() -> None:
    a = Alerts()
    a.add(at(0, replace(row(1, 22), hung="possibly hung (collective wait)")))
    a.add(at(1))  # gone: killed, or it died of it
    a.add(at(2))
    (alert,) = a.newest_first()
    assert alert.kind == HUNG and alert.text == "possibly hung (collective wait)" and not alert.ongoing


def test_a_new_process_with_the_old_pid_is_a_new_alert() -> None:
    a = Alerts()
    a.add(at(0, leaking(0, 11, 900.0, created=T0 - 900)))
    a.add(at(5, leaking(0, 11, 600.0, created=T0 + 1)))
    old, new = sorted(a.newest_first(), key=lambda x: x.first)
    assert (old.ongoing, new.ongoing) == (False, True)


def test_ongoing_first_hung_before_filling_then_ended_newest_first() -> None:
    a = Alerts()
    a.add(at(0, leaking(0, 1, 500.0), replace(row(1, 2), hung="stalled")))
    a.add(at(1, leaking(0, 3, 900.0), replace(row(1, 4), hung="stalled again")))
    a.add(at(2, leaking(0, 3, 800.0), replace(row(1, 4), hung="stalled again")))
    assert [(x.pid, x.ongoing) for x in a.newest_first()] == [(4, True), (3, True), (2, False), (1, False)]


def test_bounded() -> None:
    a = Alerts()
    for k in range(alerts_mod.MAX_ALERTS + 30):
        a.add(at(k, leaking(0, 1000 + k, 900.0)))
    listed = a.newest_first()
    assert len(listed) == alerts_mod.MAX_ALERTS
    assert listed[0].pid == 1000 + alerts_mod.MAX_ALERTS + 29 and listed[0].ongoing  # the newest is kept
