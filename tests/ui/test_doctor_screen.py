"""The `D` screen: the doctor's checks for this machine and the highlighted process, in the TUI."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import Static

from gputui.doctor import report
from gputui.doctor.facts import SystemFacts
from gputui.model import ProcessRow
from gputui.ui.screens import doctor as doctor_screen
from gputui.ui.screens.doctor import DoctorScreen, view_of
from tests.helpers import until
from tests.ui.conftest import first_frame, make_app
from tests.ui.world import snapshots


def _text(screen: DoctorScreen) -> str:
    """The body as a person reads it: its content printed by Rich, plain."""
    console = Console(width=110, record=True, file=io.StringIO())
    console.print(screen.query_one("#doctor-body", Static).content)
    return console.export_text()


async def test_d_examines_the_machine_and_the_highlighted_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def fake_diagnose(**kw: Any) -> list[report.Check]:
        calls.append(kw)
        return [
            report.ok("driver", "driver 550.54.15, supports CUDA up to 12.4"),
            report.problem("torch", "torch 2.13.0+cpu is a CPU-only build", "pip install torch [cu124]"),
        ]

    monkeypatch.setattr(doctor_screen, "diagnose", fake_diagnose)
    app = make_app(gpus=4, interval=30.0, devices_dir=Path("/tmp/stand-ins"))
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("down")
        chosen = app.table.current
        assert chosen is not None and chosen.process is not None
        await pilot.press("D")
        screen = app.screen
        assert isinstance(screen, DoctorScreen)
        await until(pilot, lambda: screen.checks is not None, 10.0)
        assert screen.pid == chosen.pid
        (kw,) = calls
        assert kw["pid"] == chosen.pid
        view, devices_dir = kw["seen"]
        assert devices_dir == Path("/tmp/stand-ins")  # the app's devices, not the machine's /dev
        process = chosen.process
        assert {p.pid for p in view.processes} >= {chosen.pid} or (
            isinstance(process, ProcessRow) and process.kinds == ""
        )
        shown = _text(screen)
        assert "PROBLEM" in shown and "CPU-only build" in shown and "fix: pip install torch [cu124]" in shown
        assert "1 problem" in shown
        await pilot.press("escape")
        assert not isinstance(app.screen, DoctorScreen)


async def test_a_failing_doctor_is_a_message_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**kw: Any) -> list[report.Check]:
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor_screen, "diagnose", broken)
    app = make_app(gpus=2, interval=30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        await pilot.press("D")
        screen = app.screen
        assert isinstance(screen, DoctorScreen)
        await until(pilot, lambda: screen.error is not None, 10.0)
        assert screen.error is not None and "could not run: RuntimeError: boom" in screen.error
        await pilot.press("escape")
        assert app.is_running


def test_view_of_a_snapshot_keeps_nvmls_processes_and_the_gpus() -> None:
    snap = snapshots(gpus=2, seconds=1)[-1]
    view = view_of(snap)
    assert isinstance(view, SystemFacts)
    assert [g.index for g in view.gpus] == [g.index for g in snap.gpus]
    assert [g.minor for g in view.gpus] == [g.minor for g in snap.gpus]
    listed = {(p.gpu, p.pid) for p in snap.processes if p.kinds and p.gpu is not None}
    assert {(p.gpu, p.pid) for p in view.processes} == listed
    memory = {(r.gpu, r.pid): r.used_memory for r in snap.processes}
    assert all(p.used_memory == memory[(p.gpu, p.pid)] for p in view.processes)
