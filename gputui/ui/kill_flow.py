"""`k` (F9): signal the highlighted or tagged processes. The way through: the plan read against the live
machine (gputui.ui.screens.kill.plan_rows), the confirmation dialog, the signal sent on a worker, what
became of each process said on the status line, and `K`: SIGKILL to those still alive after
ESCALATE_AFTER_S. Nothing is sent in read-only mode (a replay is read-only too)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from gputui.actions import signals
from gputui.actions.signals import Target
from gputui.ui.widgets.process_rows import AGENT_ONLY, TableRow

if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.screens.kill import KillRequest

ESCALATE_AFTER_S = 5.0
READ_ONLY = "read-only (--readonly): signals are disabled"


class KillFlow:
    def __init__(self, app: GpuTuiApp) -> None:
        self.app = app
        self.escalation: tuple[Target, ...] = ()  # signalled, still alive after ESCALATE_AFTER_S

    def tag(self) -> None:
        """space: tag or untag the highlighted row (a process's, or a job's); the cursor moves on."""
        app, table = self.app, self.app.table
        row = table.current
        if row is None or (row.process is None and not row.members):
            return
        app.tagged.symmetric_difference_update({row.key})
        table.action_move(1)
        app.refresh_table()
        app.say(f"{len(app.tagged)} tagged: k signals them all" if app.tagged else "")

    def kill(self) -> None:
        """`k`: every tagged row, else the highlighted one."""
        table = self.app.table
        current = [table.current] if table.current is not None else []
        self.kill_rows([r for r in table.rows if r.key in self.app.tagged] or current)

    def kill_rows(self, rows: list[TableRow]) -> None:
        from gputui.ui.screens.kill import KillScreen, plan_rows

        app = self.app
        if app.readonly:
            app.say(READ_ONLY, "warning")
            return
        # A job's row (J) stands for its user's processes on this machine; "no job" is never signalled.
        # An unaccounted row stands for its likely holders.
        plan = plan_rows(rows, app.snapshot)
        if plan is None:
            if any(r.kind == AGENT_ONLY for r in rows):
                app.say(
                    "not signalled: gputui has not read that process from /proc, so it cannot check that "
                    "its pid is still the same process",
                    "warning",
                )
            return
        if not plan.entries:
            app.say(plan.note, "warning")
            return
        app.push_screen(KillScreen.for_plan(plan), self._confirmed)

    def _confirmed(self, request: KillRequest | None) -> None:
        if request is None:
            self.app.say("cancelled: nothing was sent")
            return
        self.app.tagged.clear()
        self.send(request)

    def escalate(self) -> None:
        """`K`: SIGKILL what outlived the last signal."""
        if not self.escalation:
            self.app.say("nothing to escalate: no process outlived a signal")
            return
        targets, self.escalation = self.escalation, ()
        from gputui.ui.screens.kill import KillRequest

        self.send(KillRequest(targets, "SIGKILL", False))

    def send(self, request: KillRequest) -> None:
        self.app.run_worker(partial(self._send, request), thread=True, group="signals")

    def _send(self, request: KillRequest) -> None:
        """On a worker thread: the outcome at once, then again once each process ended or outlived it."""
        sent = signals.send(request.targets, request.signal, request.include_children)
        self.app.call_from_thread(self._report, sent, False)
        waited = iter(signals.await_outcome(sent, timeout=ESCALATE_AFTER_S))
        final = [next(waited) if o.result == "sent" else o for o in sent]  # in the order they were sent
        self.app.call_from_thread(self._report, final, True)

    def _report(self, outcomes: list[signals.Outcome], final: bool) -> None:
        if not outcomes:
            return
        from gputui.actions.kill_plan import describe_outcomes

        if final:
            self.escalation = tuple(o.target for o in outcomes if o.result == "still alive")
        text, bad = describe_outcomes(outcomes, final)
        self.app.say(text, "warning" if bad else "information")
        self.app.sample_now()  # the table should show what changed
