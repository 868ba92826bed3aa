"""`a` on a Python process that runs no gputui agent: attach one.

The way through: is its agent socket answering already (asked on a worker), the confirmation dialog,
the attach on a worker (gdb may take seconds), its outcome on the status line, then the allocator panel
opens as soon as a snapshot has the new agent (if within AWAIT_AGENT_S).

Quitting during an attach, every way out (q, F10, Ctrl+C, SIGTERM, SIGHUP, the terminal gone), gives it
up at once (gputui.actions.attach.run.abandon: a debugger before the job's GIL is interrupted, one inside
the GIL's calls is left to finish; its wrapper removes the agent's copy) and says so once the terminal is
back: the job lives on.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from textual.timer import Timer

from gputui.model import Snapshot
from gputui.ui.widgets.process_rows import TableRow
from gputui.units import printable

if TYPE_CHECKING:
    from gputui.actions.attach import Outcome, Plan
    from gputui.ui.app import GpuTuiApp

AWAIT_AGENT_S = 10.0  # after an attach, how long its panel waits for the agent's first ◆
HINT = "start it with `gputui run -- python train.py` or `import gputui.agent; gputui.agent.start()`"


class AttachFlow:
    def __init__(self, app: GpuTuiApp) -> None:
        self.app = app
        self.attaching: int | None = None  # the pid an attach is under way for
        self.abandoned: list[str] = []  # what quitting did to the attach under way, said after the app
        self.asking: int | None = None  # the pid whose agent socket is being asked whether it answers
        self.awaiting: tuple[int, Timer] | None = None  # attached: its panel opens when its agent shows

    def allocator(self) -> None:
        """`a`: the highlighted process's allocator panel, or, without an agent, attach one."""
        row, snap = self.app.table.current, self.app.snapshot
        if row is None or snap is None:
            return
        if row.pid in snap.agents:
            self.app.open_allocator(row.pid)
        else:
            self.offer(row)

    def offer(self, row: TableRow) -> None:
        """`a` on a row whose process runs no agent."""
        app = self.app
        if row.process is None:  # a GPU's "unaccounted memory" row, a job's
            app.say(f"this row is not one process: `a` is for a process's row ({HINT})", "warning")
            return
        if app.readonly:  # a replay is read-only too: its pids are the recorded machine's
            mode = "a replay" if app.replay else "read-only (--readonly)"
            app.say(f"{row.pid} runs no gputui agent, and {mode} attaches none: {HINT}", "warning")
            return
        if self.attaching is not None:
            app.say(f"attaching to pid {self.attaching} …: one at a time", "warning")
            return
        if self.awaiting is not None and self.awaiting[0] == row.pid:  # `a a a`: attached already
            app.say(f"attached to pid {row.pid}: the allocator panel opens when its agent answers")
            return
        from gputui.actions import attach as attaching

        # /proc reads only: a fraction of a millisecond (up to 0.1 s for a process seen in state D, which
        # it looks at again: a moment in D is no reason to refuse)
        plan = attaching.check(row.pid)
        if isinstance(plan, attaching.Refusal):
            app.say(f"{row.pid} runs no gputui agent and cannot be attached: {plan.reason}", "warning")
            return
        command = row.process.command or row.process.name or ""
        if plan.already:  # its socket is there: an agent listens only if it answers (a socket file alone
            # may be an earlier process's with this pid, or anyone's of that user): a worker asks it
            if self.asking != row.pid:
                self.asking = row.pid
                ask = partial(self._ask_agent, row.pid, row.create_time, plan, command)
                app.run_worker(ask, thread=True, group="attach", exit_on_error=False)
            return
        self._confirm(row.pid, row.create_time, plan, command)

    def _ask_agent(self, pid: int, started: float | None, plan: Plan, command: str) -> None:
        """On a worker thread."""
        from gputui.actions.attach import run

        try:
            answers = run.answers(pid, 1.0)  # as attach() and the sampler's poller ask it (SO_PEERCRED)
        except Exception:  # never raises; a bug in it is "does not answer", and attach() asks again
            answers = False
        with contextlib.suppress(RuntimeError):  # the app closed meanwhile
            self.app.call_from_thread(self._agent_asked, pid, started, plan, command, answers)

    def _agent_asked(self, pid: int, started: float | None, plan: Plan, command: str, answers: bool) -> None:
        self.asking = None
        if answers:  # the next polls find it (root lists new users' directories slowly)
            self.expect_agent(pid, plan.uid)
            self.app.say(f"{pid}'s gputui agent is listening: its allocator panel opens when it answers")
        elif plan.mechanism == "agent":  # its socket, and no way to attach here (check() said why not)
            self.app.say(
                f"{pid} has a gputui agent socket that does not answer, and cannot be attached", "error"
            )
        else:  # as if there were none: attach, and the new agent takes the socket's place
            self._confirm(pid, started, replace(plan, already=False), command)

    def _confirm(self, pid: int, started: float | None, plan: Plan, command: str) -> None:
        from gputui.ui.screens.attach import AttachScreen

        uid = plan.uid

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.attaching = pid
                self.app.say(f"attaching to pid {pid} …", expire_s=15.0)  # gdb may take 8 s
                run = partial(self._run, pid, started, uid)
                self.app.run_worker(run, thread=True, group="attach", exit_on_error=False)
            else:
                self.app.say(f"cancelled: nothing was attached to pid {pid}")

        self.app.push_screen(AttachScreen(pid, plan.describe(), command), confirmed)

    def _run(self, pid: int, started: float | None, uid: int) -> None:
        """On a worker thread."""
        from gputui.actions import attach as attaching
        from gputui.ui.screens import attach as attach_dialog

        try:
            changed = attach_dialog.another_process(pid, started)
            if changed is not None:  # the dialog stayed open while the job ended and its pid was reused
                outcome = attaching.Outcome(pid, False, f"pid {pid} {changed}: nothing was attached")
            elif self.app.stopping:  # quit came first: no debugger is started on the way out
                outcome = attaching.Outcome(pid, False, "gputui quit: nothing was attached", abandoned=True)
            else:
                outcome = attaching.attach(pid, create_time=started)
        except Exception as err:  # attach() never raises; a bug in it is one line, not a crash
            outcome = attaching.Outcome(
                pid, False, printable(f"attaching failed: {type(err).__name__}: {err}")
            )
        with contextlib.suppress(RuntimeError):  # the app closed meanwhile
            self.app.call_from_thread(self._attached, outcome, uid)

    def _attached(self, outcome: Outcome, uid: int) -> None:
        self.attaching = None
        if outcome.pending:  # its debugger finishes on its own: the agent may yet come
            self.expect_agent(outcome.pid, uid)
            self.app.say(outcome.message, "warning")
            return
        if not outcome.ok:
            self.app.say(outcome.message, "error")
            return
        took = f" in {outcome.seconds:.2f} s" if outcome.seconds is not None else ""
        self.app.say(f"attached to pid {outcome.pid}{took}: the allocator panel opens when its agent answers")
        self.expect_agent(outcome.pid, uid)

    # -- then its agent: the panel opens when it shows -------------------------------------------------

    def expect_agent(self, pid: int, uid: int) -> None:
        """Open `pid`'s panel as soon as a snapshot has its agent, if that is within AWAIT_AGENT_S."""
        app = self.app
        poller = app.sampler.agents  # a recording's sampler has none
        if poller is not None:
            poller.expect(uid)  # root: that user's directories are looked at from the next poll
        if self.awaiting is not None:
            self.awaiting[1].stop()
        self.awaiting = (pid, app.set_timer(AWAIT_AGENT_S, self._never_came))
        app.sample_now()  # not at the end of a long interval

    def _never_came(self) -> None:
        if self.awaiting is not None:
            pid = self.awaiting[0]
            self.awaiting = None
            self.app.say(
                f"pid {pid}'s agent has not shown up in {AWAIT_AGENT_S:g} s: `a` on its row opens the panel "
                "once it has the ◆",
                "warning",
            )

    def follow(self, snap: Snapshot) -> None:
        """Each snapshot: does the awaited agent show in it?"""
        if self.awaiting is None or self.awaiting[0] not in snap.agents:
            return
        pid, timer = self.awaiting
        self.awaiting = None
        timer.stop()
        if len(self.app.screen_stack) == 1:
            self.app.open_allocator(pid)
        else:  # the user went elsewhere meanwhile: a panel popping up over that would be a surprise
            self.app.say(f"pid {pid}'s gputui agent answers (◆): `a` on its row opens the allocator panel")

    # -- quitting: the job lives on ------------------------------------------------------------------

    def abandon(self) -> None:
        """Give up the attach under way, if any (every way out calls this; the second call does nothing)."""
        if self.attaching is not None:
            from gputui.actions.attach import run

            self.abandoned += run.abandon()
            self.attaching = None

    def say_abandoned(self) -> None:
        """After the app: what became of the attach it gave up (the terminal is given back by now)."""
        for line in self.abandoned:
            with contextlib.suppress(OSError, ValueError):  # no terminal any more
                print(f"gputui: {line}", file=sys.stderr)
        self.abandoned = []
