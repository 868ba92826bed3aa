"""Enter on a row of the process table (or the palette's `Process detail`): a process's detail, with its
memory history and its agent's allocated/reserved split; an `unaccounted` row's likely holders (k there
offers to signal them); an agent-only row says why it has none."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from gputui.analyze.classify import leftovers
from gputui.model import HostProcess, ProcessRow
from gputui.ui.widgets.process_rows import AGENT_ONLY, UNACCOUNTED, TableRow

if TYPE_CHECKING:
    from gputui.ui.app import GpuTuiApp
    from gputui.ui.screens.detail import DetailScreen


def choose(app: GpuTuiApp, row: TableRow) -> None:
    if row.process is not None:
        app.push_screen(detail_screen(app, row.process))
    elif row.kind == UNACCOUNTED and row.leftover is not None:
        from gputui.ui.screens.leftovers import LeftoverScreen

        now = app.snapshot.time if app.snapshot is not None else None
        app.push_screen(LeftoverScreen(row.leftover, app.readonly, now), _leftover_closed(app, row.key))
    elif row.kind == AGENT_ONLY:
        app.say(
            f"pid {row.pid} runs the gputui agent and holds no GPU; gputui has not read it from /proc "
            "this tick, so it has no detail: `a` opens its allocator panel",
            "warning",
        )


def _leftover_closed(app: GpuTuiApp, key: str) -> Callable[[bool | None], None]:
    def closed(kill: bool | None) -> None:
        if not kill:
            return
        row = next((r for r in app.table.rows if r.key == key), None)  # as it is now, not at Enter
        if row is None:
            app.say("that unaccounted memory is gone: nothing to signal")
        else:
            app.kills.kill_rows([row])

    return closed


def detail_screen(app: GpuTuiApp, process: ProcessRow | HostProcess) -> DetailScreen:
    from gputui.ui.screens.detail import DetailScreen

    snap = app.snapshot
    # A replay's pids are the recorded machine's: what has that pid here now is another process.
    recorded_at = snap.time if app.replay and snap is not None else None
    memory: list[tuple[float, float]] = []
    split = None
    # Its memory history (each 5 s stretch's low and high, so its max is the true one; replays too)
    # and, with an agent, allocated vs reserved: a live sampler's. The sampler's thread goes on
    # adding points: a split that meets a deque changed under it is left out rather than crash Enter.
    leftover = None
    if isinstance(process, ProcessRow) and snap is not None and process.gpu is not None:
        leftover = leftovers(snap).get(process.gpu)
    if isinstance(process, ProcessRow):
        memory = app.history.memory_points(process.pid, process.create_time, process.gpu)
        with contextlib.suppress(RuntimeError):
            split = app.sampler.memory_split(process.pid, process.create_time)
    return DetailScreen(
        process,
        app.devices_dir,
        recorded_at=recorded_at,
        stacks=not (app.readonly or app.replay),
        gpus=snap.gpus if snap is not None else (),
        memory=memory,
        split=split,
        leftover=leftover,
        gpm_note=snap.gpm_note if snap is not None else None,
    )
