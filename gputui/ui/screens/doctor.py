"""The `D` screen: `gputui doctor` inside the TUI, for the machine and the highlighted process."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from gputui.analyze.history import History
from gputui.doctor import report
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.process import NoSuchProcess, idle_from_history
from gputui.doctor.report import Check
from gputui.doctor.run import diagnose
from gputui.model import GpuProcess, ProcessRow, Snapshot
from gputui.ui.screens.detail import MODAL_CSS, Modal
from gputui.units import printable


def view_of(snap: Snapshot) -> SystemFacts:
    """What the app sees (NVML's, or the demo's simulated GPUs) as the doctor's process checks want it."""
    gpus = tuple(
        GpuFact(g.index, g.name, g.uuid, g.pci_bus_id, g.minor, g.lost, g.mig_mode, mig_instances=g.mig)
        for g in snap.gpus
    )
    procs = tuple(
        GpuProcess(p.gpu, p.pid, p.kinds, p.used_memory)
        for p in snap.processes
        if p.kinds and p.gpu is not None
    )
    # The samples carry each GPU's memory: the process checks' time until it is full.
    return SystemFacts(gpus=gpus, processes=procs, samples=snap.gpus, gpm_note=snap.gpm_note)


def watched_rows(snap: Snapshot | None, pid: int | None) -> tuple[ProcessRow, ...]:
    """The monitor's GPU rows of `pid`: their memory trend and hung verdict come from its own history,
    which the one-shot doctor has not."""
    if snap is None or pid is None:
        return ()
    return tuple(r for r in snap.processes if r.pid == pid and r.gpu is not None)


STYLES = {report.OK: "green", report.WARNING: "yellow", report.PROBLEM: "bold red"}


class DoctorScreen(Modal[None]):
    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,D", "dismiss", "Close"), Binding("r", "again", "Again")]

    def __init__(
        self, pid: int | None, history: History, snapshot: Snapshot | None, devices_dir: Path
    ) -> None:
        super().__init__()
        self.pid = pid  # the process highlighted when the screen opened (never the cursor's now)
        self.history = history
        self.snapshot = snapshot
        self.devices_dir = devices_dir
        self.checks: list[Check] | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        about = f" and pid {self.pid}" if self.pid is not None else ""
        with VerticalScroll():
            yield Static(Text(f"gputui doctor: this machine{about}", style="bold"), markup=False)
            yield Static(
                Text("examining … (asking PyTorch takes a few seconds)", style="dim"),
                id="doctor-body",
                markup=False,
            )

    def on_mount(self) -> None:
        self._run()

    def action_again(self) -> None:
        self.query_one("#doctor-body", Static).update(Text("examining …", style="dim"))
        self._run()

    @work(thread=True, exclusive=True)
    def _run(self) -> None:
        seen = (view_of(self.snapshot), self.devices_dir) if self.snapshot is not None else None
        try:
            checks = diagnose(
                pid=self.pid,
                seen=seen,
                idle_s=lambda memory: idle_from_history(self.history, sorted(memory)),
                watched=watched_rows(self.snapshot, self.pid),
            )
        except NoSuchProcess as err:  # it exited since: the machine's checks still help
            checks = diagnose()
            checks.append(report.warning("process", str(err), "it exited; pick another process"))
        except Exception as err:  # never take the app down: say what broke
            self.app.call_from_thread(self._failed, f"the doctor could not run: {type(err).__name__}: {err}")
            return
        self.app.call_from_thread(self._show, checks)

    def _failed(self, message: str) -> None:
        self.error = printable(message)  # an exception may quote a process's name
        self.query_one("#doctor-body", Static).update(Text(self.error, style="red"))

    def _show(self, checks: list[Check]) -> None:
        self.checks = checks
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column()
        for c in checks:
            body = Text(printable(c.found))
            if c.fix:
                body.append("\nfix: " + printable(c.fix), style="dim")
            grid.add_row(
                Text(c.status.upper() if c.status != report.OK else "ok", style=STYLES[c.status]),
                Text(c.area),
                body,
            )
        grid.add_row(Text(""), Text(""), Text(report.summary(checks), style="bold"))
        self.query_one("#doctor-body", Static).update(grid)
