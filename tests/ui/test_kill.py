"""Signals from the TUI, on real processes: every world here is built around children this file starts
(their pid and create time read with psutil), so `k`, the dialog and `K` are checked by what really
happened to those processes, not only by what is drawn. Every child, and every child of a child, is
killed and waited for at teardown, whatever the test did."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Checkbox, OptionList, RadioSet, Static

from gputui.collect.sources.replay import ReplaySampler
from gputui.model import Category, ProcessRow, Snapshot
from gputui.ui import kill_flow
from gputui.ui.app import GpuTuiApp, SnapshotReady
from gputui.ui.screens.kill import KillScreen
from gputui.ui.widgets.key_bar import KeyBar
from gputui.ui.widgets.status import StatusLine
from tests.builders import holder_row, nvml_only_row, process_row
from tests.helpers import Children, screen_text, static_text, until, wait_until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app
from tests.ui.drawn import body, header_line, lines, shown_pids, table

SIZE = (120, 40)
GIB = 1 << 30

# The children. Each prints one line once it is set up (its signal handlers in place, its own child
# forked), so a test never signals a process that is still starting. Each also ends by itself after a
# minute: a safety net should a teardown ever be skipped.
SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(60)"
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\ntime.sleep(60)"
)
WITH_CHILD = (
    "import os, time\npid = os.fork()\nif pid == 0:\n    time.sleep(60)\n    os._exit(0)\n"
    "print(pid, flush=True)\ntime.sleep(60)"
)
WITH_ZOMBIE = (
    "import os, time\npid = os.fork()\nif pid == 0:\n    os._exit(0)\n"
    "print(pid, flush=True)\ntime.sleep(60)"
)  # never waits for it: a zombie while it lives


# -- processes ---------------------------------------------------------------------------------------


def ended(spawn: Children, proc: psutil.Process) -> bool:
    """One of our children has exited (it is reaped here: a zombie of ours is not "alive")."""
    return spawn.popen(proc).poll() is not None


def gone(proc: psutil.Process) -> bool:
    """A process that is not our child: exited (reaped, or a zombie left for init to reap)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def alive(spawn: Children, proc: psutil.Process) -> bool:
    return not ended(spawn, proc) and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE


# -- worlds ------------------------------------------------------------------------------------------


def _base() -> Snapshot:
    """Two simulated GPUs (the fixed world's), no processes yet."""
    snap = world.snapshots(gpus=2, seconds=0, weird=False)[0]
    return replace(snap, processes=(), unaccounted_memory={}, host_processes=())


BASE = _base()


def row_of(proc: psutil.Process, command: str, gpu: int = 0, **changes: object) -> ProcessRow:
    """A GPU process row for a real process: its pid, create time, user, state and parent as psutil reads
    them; `command` is what the table shows (short, so that it is readable in the drawn lines)."""
    with proc.oneshot():
        row = process_row(
            gpu,
            proc.pid,
            used_memory=2 * GIB,
            sm_util=50,
            mem_util=20,
            user=proc.username(),
            name=proc.name(),
            command=command,
            cpu_percent=0.0,
            rss=proc.memory_info().rss,
            create_time=proc.create_time(),
            state=proc.status(),
            ppid=proc.ppid(),
        )
    return replace(row, **changes)  # type: ignore[arg-type]


def snapshot(*rows: ProcessRow, at: float = 0.0) -> Snapshot:
    return replace(BASE, time=BASE.time + at, processes=tuple(rows))


def app_on(*rows: ProcessRow, readonly: bool = False) -> GpuTuiApp:
    """The app on one snapshot of `rows`, replayed on every tick (a tick comes only when woken: after a
    signal, say)."""
    return GpuTuiApp(
        ReplaySampler([snapshot(*rows)]), interval=30.0, devices_dir=Path("/nonexistent"), readonly=readonly
    )


# -- reading what is drawn (as tests/ui/test_keys.py does) -------------------------------------------


def status(app: GpuTuiApp) -> str:
    return lines(app.query_one(StatusLine))[0].strip()


def dialog_pids(app: GpuTuiApp) -> list[int]:
    """The PID column of the dialog's drawn list (not the note under it, which names PIDs too)."""
    texts = [static_text(s) for s in app.screen.query(Static)]
    grid = next(t for t in texts if t.split()[:2] == ["PID", "USER"])
    return [int(r.split()[0]) for r in grid.splitlines()[1:] if r.split() and r.split()[0].isdigit()]


async def press(pilot: Pilot[int], *keys: str) -> None:
    await pilot.press(*keys)
    await pilot.pause()


async def cursor_to(pilot: Pilot[int], app: GpuTuiApp, pid: int) -> None:
    await press(pilot, "home", *["down"] * shown_pids(app).index(pid))
    current = table(app).current
    assert current is not None and current.pid == pid


async def open_dialog(pilot: Pilot[int], app: GpuTuiApp) -> KillScreen:
    await press(pilot, "k")
    await until(pilot, lambda: isinstance(app.screen, KillScreen))
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, KillScreen)
    return screen


async def said(pilot: Pilot[int], app: GpuTuiApp, *words: str, timeout: float = 7.0) -> str:
    """Wait for the status line to carry every one of `words`; returns it."""
    await until(pilot, lambda: all(w in status(app) for w in words), timeout)
    return status(app)


# -- k, Esc, y ---------------------------------------------------------------------------------------


async def test_k_lists_the_process_and_esc_cancels(spawn: Children) -> None:
    proc, _ = spawn.start(SLEEPER)
    app = app_on(row_of(proc, "python train.py --job esc", category="ok"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert shown_pids(app) == [proc.pid]
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [proc.pid]
        assert screen.entries[0].target.create_time == proc.create_time()
        text = screen_text(app)
        assert "Send a signal to 1 process?" in text
        row = next(line for line in text.splitlines() if line.split()[:1] == [str(proc.pid)])
        assert proc.username()[:8] in row and " ok " in row and "2.0 GiB" in row
        assert "python train.py --job esc" in row
        assert "SIGTERM (T) — ask it to exit" in text and "SIGKILL (K) — end it now" in text
        assert "include its children" in str(screen.query_one("#children", Checkbox).label)
        # Cancel has the focus: a stray Enter must not be the one that kills.
        assert screen.focused is not None and screen.focused.id == "cancel"
        await press(pilot, "escape")
        await until(pilot, lambda: not isinstance(app.screen, KillScreen))
        assert "cancelled" in status(app) and "nothing was sent" in status(app)
        time.sleep(0.2)
        assert alive(spawn, proc)


async def test_enter_on_the_focused_cancel_button_sends_nothing(spawn: Children) -> None:
    proc, _ = spawn.start(SLEEPER)
    app = app_on(row_of(proc, "python train.py --job enter"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await open_dialog(pilot, app)
        await press(pilot, "enter")
        await until(pilot, lambda: not isinstance(app.screen, KillScreen))
        assert "cancelled" in status(app)
        time.sleep(0.2)
        assert alive(spawn, proc)


async def test_y_sends_sigterm_and_the_process_is_gone(spawn: Children) -> None:
    proc, _ = spawn.start(SLEEPER)
    other, _ = spawn.start(SLEEPER)
    app = app_on(row_of(proc, "python train.py --job a"), row_of(other, "python train.py --job b", gpu=1))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await cursor_to(pilot, app, proc.pid)
        screen = await open_dialog(pilot, app)
        assert dialog_pids(app) == [proc.pid]
        assert screen.query_one(RadioSet).pressed_button is not None
        assert screen.query_one(RadioSet).pressed_button.id == "SIGTERM"  # type: ignore[union-attr]
        await press(pilot, "y")
        text = await said(pilot, app, "gone")
        assert text.startswith(f"SIGTERM → {proc.pid} (python train.py --job a): gone"), text
        assert wait_until(lambda: ended(spawn, proc), 3.0)
        assert spawn.popen(proc).returncode == -15  # SIGTERM, not SIGKILL
        assert alive(spawn, other)


# -- SIGKILL and K ---------------------------------------------------------------------------------


async def test_sigkill_chosen_with_the_keyboard_ends_a_process_that_ignores_sigterm(spawn: Children) -> None:
    proc, _ = spawn.start(STUBBORN)
    app = app_on(row_of(proc, "python stubborn.py"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        screen = await open_dialog(pilot, app)
        radios = screen.query_one(RadioSet)
        for _ in range(6):  # back from Cancel: Send, the checkbox, the signals
            if radios.has_focus:
                break
            await press(pilot, "shift+tab")
        assert radios.has_focus
        await press(pilot, "down", "down", "space")
        assert radios.pressed_button is not None and radios.pressed_button.id == "SIGKILL"
        await press(pilot, "y")
        text = await said(pilot, app, "gone")
        assert text.startswith(f"SIGKILL → {proc.pid}"), text
        assert wait_until(lambda: ended(spawn, proc), 3.0)
        assert spawn.popen(proc).returncode == -9


async def test_sigkill_chosen_with_the_mouse(spawn: Children) -> None:
    proc, _ = spawn.start(STUBBORN)
    app = app_on(row_of(proc, "python stubborn.py"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        screen = await open_dialog(pilot, app)
        await pilot.click("#SIGKILL")
        await pilot.pause()
        pressed = screen.query_one(RadioSet).pressed_button
        assert pressed is not None and pressed.id == "SIGKILL"
        await press(pilot, "y")
        await said(pilot, app, f"SIGKILL → {proc.pid}", "gone")
        assert wait_until(lambda: ended(spawn, proc), 3.0)
        assert spawn.popen(proc).returncode == -9


async def test_sigterm_ignored_then_K_sends_sigkill(spawn: Children, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kill_flow, "ESCALATE_AFTER_S", 1.0)
    proc, _ = spawn.start(STUBBORN)
    app = app_on(row_of(proc, "python stubborn.py"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "K")  # nothing signalled yet: nothing to escalate
        assert "nothing to escalate" in status(app)
        await open_dialog(pilot, app)
        await press(pilot, "y")
        text = await said(pilot, app, "still alive", "press K")
        assert text.startswith(f"SIGTERM → {proc.pid} (python stubborn.py): still alive"), text
        assert alive(spawn, proc)
        assert [t.pid for t in app.kills.escalation] == [proc.pid]
        await press(pilot, "K")
        text = await said(pilot, app, "SIGKILL", "gone")
        assert text.startswith(f"SIGKILL → {proc.pid}"), text
        assert wait_until(lambda: ended(spawn, proc), 3.0)
        assert spawn.popen(proc).returncode == -9
        assert app.kills.escalation == ()


# -- tags ------------------------------------------------------------------------------------------


async def test_space_tags_two_rows_and_k_signals_both(spawn: Children) -> None:
    a, _ = spawn.start(SLEEPER)
    b, _ = spawn.start(SLEEPER)
    c, _ = spawn.start(SLEEPER)
    app = app_on(row_of(a, "python a.py"), row_of(b, "python b.py", gpu=1), row_of(c, "python c.py", gpu=1))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert shown_pids(app)[0] == a.pid
        await press(pilot, "home", "space")  # tags a, moves to the next row
        assert "1 tagged" in status(app)
        await cursor_to(pilot, app, c.pid)
        await press(pilot, "space")
        assert "2 tagged" in status(app)
        assert len(app.tagged) == 2
        screen = await open_dialog(pilot, app)
        assert sorted(e.target.pid for e in screen.entries) == sorted([a.pid, c.pid])
        assert sorted(dialog_pids(app)) == sorted([a.pid, c.pid])
        assert "Send a signal to 2 processes?" in screen_text(app)
        await press(pilot, "y")
        text = await said(pilot, app, "2 processes", "gone: ")
        assert text.startswith("SIGTERM → 2 processes: gone: "), text
        assert str(a.pid) in text and str(c.pid) in text and str(b.pid) not in text
        assert wait_until(lambda: ended(spawn, a) and ended(spawn, c), 3.0)
        assert alive(spawn, b)
        assert app.tagged == set()


# -- children ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("children", [True, False], ids=["include-children", "alone"])
async def test_include_children_also_ends_the_childs_child(spawn: Children, children: bool) -> None:
    parent, line = spawn.start(WITH_CHILD)
    child = spawn.adopt(int(line))
    assert child.ppid() == parent.pid
    app = app_on(row_of(parent, "python trainer.py --workers 1"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        screen = await open_dialog(pilot, app)
        box = screen.query_one("#children", Checkbox)
        assert not box.value
        if children:
            await pilot.click("#children")
            await pilot.pause()
            assert box.value
        await press(pilot, "y")
        if children:
            text = await said(pilot, app, "2 processes", f"gone: {child.pid}, {parent.pid}")
        else:
            text = await said(pilot, app, f"SIGTERM → {parent.pid}", "gone")
        assert wait_until(lambda: ended(spawn, parent), 3.0), text
        if children:
            assert wait_until(lambda: gone(child), 3.0)
        else:
            time.sleep(0.2)
            assert not gone(child)  # only the process itself was asked


async def test_a_child_holding_the_gpu_turns_the_box_on_and_both_end(spawn: Children) -> None:
    parent, line = spawn.start(WITH_CHILD)
    child = spawn.adopt(int(line))
    worker = row_of(child, "python trainer.py (worker)", kinds="", used_memory=None, category="worker")
    worker = replace(worker, devices=("/dev/nvidiactl", "/dev/nvidia0"), ppid=parent.pid)
    app = app_on(row_of(parent, "python trainer.py --workers 1"), worker)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await cursor_to(pilot, app, parent.pid)
        screen = await open_dialog(pilot, app)
        assert screen.query_one("#children", Checkbox).value  # on: left alone it would keep the GPU
        assert dialog_pids(app) == [parent.pid, child.pid]  # each once: the child in the list, not in a note
        assert "Send a signal to 2 processes?" in screen_text(app)
        await press(pilot, "y")
        text = await said(pilot, app, f"gone: {child.pid}, {parent.pid}")
        assert wait_until(lambda: ended(spawn, parent) and gone(child), 3.0), text


async def test_shift_k_in_the_dialog_sends_sigkill_at_once(spawn: Children) -> None:
    proc, _ = spawn.start(STUBBORN)
    app = app_on(row_of(proc, "python stubborn.py"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await open_dialog(pilot, app)
        await press(pilot, "K")
        await said(pilot, app, f"SIGKILL → {proc.pid}", "gone")
        assert wait_until(lambda: ended(spawn, proc), 3.0)
        assert spawn.popen(proc).returncode == -9


# -- defunct rows ------------------------------------------------------------------------------------


async def test_a_defunct_row_offers_its_parent(spawn: Children) -> None:
    parent, line = spawn.start(WITH_ZOMBIE)
    zombie = spawn.adopt(int(line))
    assert wait_until(lambda: zombie.status() == psutil.STATUS_ZOMBIE, 3.0)
    row = row_of(
        zombie,
        "[python]",
        kinds="",
        used_memory=None,
        sm_util=None,
        mem_util=None,
        category="defunct",
        reason=f"defunct: its parent {parent.pid} has not reaped it",
    )
    assert row.state == "zombie" and row.ppid == parent.pid and row.create_time is not None
    app = app_on(row)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [parent.pid]
        assert screen.entries[0].target.create_time == parent.create_time()
        assert screen.entries[0].category == "parent"
        assert screen.entries[0].user == parent.username()  # read live: it is not in the snapshot
        text = " ".join(screen_text(app).split())
        assert f"{zombie.pid} is defunct" in text
        assert "no signal can end it" in text
        assert f"Its parent {parent.pid} is offered instead" in text
        assert dialog_pids(app) == [parent.pid]
        await press(pilot, "y")
        text = await said(pilot, app, f"SIGTERM → {parent.pid}", "gone")
        assert wait_until(lambda: ended(spawn, parent), 3.0), text
        # With its parent gone, init reaps the zombie.
        assert wait_until(lambda: not zombie.is_running(), 5.0)


async def test_the_offered_parent_s_command_line_is_drawn_printable(spawn: Children) -> None:
    # A multi-line `python -c` program is an ordinary command line; an escape sequence is a hostile one.
    parent, line = spawn.start("\n" + WITH_ZOMBIE, "\x1b[31mred\x07")
    zombie = spawn.adopt(int(line))
    assert wait_until(lambda: zombie.status() == psutil.STATUS_ZOMBIE, 3.0)
    app = app_on(row_of(zombie, "[python]", kinds="", category="defunct"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [parent.pid]
        grid = next(t for t in (static_text(s) for s in screen.query(Static)) if t.startswith("PID"))
        try:
            # The header, then the parent's command line: wrapped in full (its newlines are not line
            # breaks), each continuation line under the COMMAND column.
            head, first, *more = grid.splitlines()
            assert first.split()[0] == str(parent.pid)
            command_at = head.index("COMMAND")
            assert all(line[:command_at].isspace() for line in more), grid
            whole = " ".join([first[command_at:], *(line[command_at:] for line in more)])
            assert "time.sleep(60)" in whole and "[31mred" in whole, grid
            assert "\x1b" not in grid and "\x07" not in grid
            assert screen.entries[0].target.label.isprintable(), screen.entries[0].target.label
        finally:
            await press(pilot, "escape")


async def test_a_defunct_row_whose_parent_is_gone_opens_nothing(spawn: Children) -> None:
    parent, line = spawn.start(WITH_ZOMBIE)
    zombie = spawn.adopt(int(line))
    assert wait_until(lambda: zombie.status() == psutil.STATUS_ZOMBIE, 3.0)
    row = row_of(zombie, "[python]", kinds="", category="defunct", ppid=4194303)  # no such parent
    app = app_on(row)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)
        assert f"{zombie.pid} is defunct" in status(app) and "Its parent is gone" in status(app)
        assert alive(spawn, parent)


async def test_a_tagged_defunct_row_and_its_tagged_parent_list_the_parent_once(spawn: Children) -> None:
    parent, line = spawn.start(WITH_ZOMBIE)
    zombie = spawn.adopt(int(line))
    assert wait_until(lambda: zombie.status() == psutil.STATUS_ZOMBIE, 3.0)
    # The zombie on GPU 0 is drawn above its parent on GPU 1.
    app = app_on(
        row_of(zombie, "[python]", gpu=0, kinds="", category="defunct"),
        row_of(parent, "python trainer.py", gpu=1),
    )
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert shown_pids(app) == [zombie.pid, parent.pid]
        await press(pilot, "home", "space", "space")
        assert len(app.tagged) == 2
        screen = await open_dialog(pilot, app)
        try:
            assert [e.target.pid for e in screen.entries] == [parent.pid]
            assert "Send a signal to 1 process?" in screen_text(app)
        finally:
            await press(pilot, "escape")


async def test_a_process_that_ended_while_the_dialog_was_open_is_already_gone(spawn: Children) -> None:
    proc, _ = spawn.start(SLEEPER)
    app = app_on(row_of(proc, "python done.py"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await open_dialog(pilot, app)
        spawn.popen(proc).kill()
        spawn.popen(proc).wait(timeout=5)
        await press(pilot, "y")
        text = await said(pilot, app, "already gone")
        assert text.startswith(f"SIGTERM → {proc.pid} (python done.py): already gone"), text
        assert "press K" not in text and app.kills.escalation == ()


# -- the dialog is bound to its processes ------------------------------------------------------------


async def test_the_dialog_signals_the_process_it_was_opened_for(spawn: Children) -> None:
    a, _ = spawn.start(SLEEPER)
    b, _ = spawn.start(SLEEPER)
    first = snapshot(row_of(a, "python a.py", gpu=0), row_of(b, "python b.py", gpu=1))
    app = GpuTuiApp(ReplaySampler([first]), interval=30.0, devices_dir=Path("/nonexistent"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert shown_pids(app) == [a.pid, b.pid]
        assert table(app).cursor == 0
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [a.pid]
        # The processes swap GPUs behind the dialog: the row under the cursor is now b's.
        second = snapshot(row_of(a, "python a.py", gpu=1), row_of(b, "python b.py", gpu=0), at=1.0)
        assert isinstance(app.sampler, ReplaySampler)
        app.sampler.snapshots = [second]  # and on any later tick
        frames = app.frames
        app.post_message(SnapshotReady(second))
        await until(pilot, lambda: app.frames > frames)
        await pilot.pause()
        assert app.screen is screen
        current = table(app).current
        assert current is not None and current.pid == b.pid
        assert shown_pids(app) == [b.pid, a.pid]
        assert [e.target.pid for e in screen.entries] == [a.pid]
        await press(pilot, "y")
        await said(pilot, app, f"SIGTERM → {a.pid}", "gone")
        assert wait_until(lambda: ended(spawn, a), 3.0)
        time.sleep(0.2)
        assert alive(spawn, b)


# -- refusals ----------------------------------------------------------------------------------------


async def test_a_reused_pid_is_refused(spawn: Children) -> None:
    proc, _ = spawn.start(SLEEPER)
    # The row saw another process with this PID: it started 1000 s before this one.
    app = app_on(row_of(proc, "python old-job.py", create_time=proc.create_time() - 1000.0))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)  # refused before a dialog offers it
        text = status(app)
        assert text.startswith(f"{proc.pid} is not offered: the PID now belongs to another process"), text
        await pilot.pause(0.3)
        assert alive(spawn, proc)


async def test_an_unknown_start_time_is_refused(spawn: Children) -> None:
    proc, _ = spawn.start(SLEEPER)
    app = app_on(row_of(proc, "python unknown.py", create_time=None))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)
        assert f"{proc.pid} is not offered: its start time is unknown" in status(app)
        await pilot.pause(0.3)
        assert alive(spawn, proc)


@pytest.mark.parametrize(
    ("who", "why"), [("self", "that is gputui itself"), ("parent", "one of gputui's own ancestors")]
)
async def test_gputui_and_its_ancestors_are_refused(
    monkeypatch: pytest.MonkeyPatch, who: str, why: str
) -> None:
    me = psutil.Process()
    target = me if who == "self" else me.parent()
    assert target is not None
    real_kill = os.kill
    kills: list[tuple[int, int]] = []

    def guarded_kill(pid: int, sig: int) -> None:  # a regression must not end the test run itself
        kills.append((pid, sig))
        if pid != target.pid:
            real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", guarded_kill)
    app = app_on(row_of(target, "pytest" if who == "self" else "the shell"))
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)  # never offered, so never sent
        text = status(app)
        assert text.startswith(f"{target.pid} is not offered"), text
        assert why in text
    assert all(pid != target.pid for pid, _ in kills), kills


# -- read-only ---------------------------------------------------------------------------------------


def footer_descriptions(app: GpuTuiApp) -> list[str]:
    return [description for _, _, description, _ in app.query_one(KeyBar).hints]


async def palette_titles(pilot: Pilot[int], app: GpuTuiApp) -> list[str]:
    """The command palette's list before anything is typed: every command, by title."""
    await press(pilot, "ctrl+p")
    await until(pilot, lambda: isinstance(app.screen, CommandPalette))

    def titles() -> list[str]:
        return [str(o.prompt).split("\n")[0] for ol in app.screen.query(OptionList) for o in ol.options]

    await until(pilot, lambda: "Zombies" in titles())  # the last of the app's commands
    await pilot.pause()
    return titles()


async def test_without_readonly_the_footer_and_the_palette_offer_kill() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert "Kill" in footer_descriptions(app)
        assert "Kill" in await palette_titles(pilot, app)


async def test_readonly_k_opens_nothing_and_nothing_offers_kill() -> None:
    app = make_app(readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert "Kill" not in footer_descriptions(app) and "Zombies" in footer_descriptions(app)
        for key in ("k", "f9", "space", "K"):
            await press(pilot, key)
            assert not isinstance(app.screen, KillScreen), key
        assert app.tagged == set()
        titles = await palette_titles(pilot, app)
        assert "Kill" not in titles and "Tree view" in titles


async def test_readonly_k_says_read_only() -> None:
    app = make_app(readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)
        assert "read-only" in status(app)


# -- rows that are not signalled ---------------------------------------------------------------------


async def test_an_invisible_row_cannot_be_signalled_from_here() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await cursor_to(pilot, app, world.GHOST)
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)
        text = status(app)
        assert f"{world.GHOST} is not offered" in text and "not visible in this PID namespace" in text
        assert "cannot be signalled from here" in text


async def test_the_unaccounted_row_is_shown_and_k_on_it_says_why_nothing_is_signalled() -> None:
    """No orphan holds GPU 0 here: k on its unaccounted row opens no dialog and says so in one line."""
    app = make_app(unaccounted=True)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        rows = [line for line in body(app) if "unaccounted" in line]
        assert len(rows) == 1, body(app)
        assert rows[0].split()[:3] == ["0", "-", "1.5"] and "1.5 GiB" in rows[0]
        assert "no listed process accounts for it" in rows[0]
        await press(pilot, "end")
        current = table(app).current
        assert current is not None and current.process is None and current.key == "0/unaccounted"
        await press(pilot, "space")  # not taggable either
        assert app.tagged == set()
        await press(pilot, "k")
        assert not isinstance(app.screen, KillScreen)
        assert "no likely holder to signal" in status(app)
        assert app.is_running


# -- z: the zombies view -----------------------------------------------------------------------------


def _fake(pid: int, category: Category, reason: str, command: str, **changes: object) -> ProcessRow:
    row = holder_row(
        0,
        pid,
        user="alice",
        name="python",
        command=command,
        cpu_percent=0.0,
        rss=GIB,
        create_time=world.START - 600,
        state="sleeping",
        ppid=5100,
        category=category,
        reason=reason,
    )
    return replace(row, **changes)  # type: ignore[arg-type]


# The demo world's classes, as gputui.analyze.classify words them.
SUSPECTS = {
    5103: _fake(5103, "defunct", "defunct: its parent 5101 has not reaped it", "[python]", state="zombie"),
    5104: _fake(5104, "orphan", "holds /dev/nvidia0; parent gone (now 1 init)", "python worker.py", ppid=1),
    5105: _fake(5105, "unseen", "holds /dev/nvidia1; not in NVML's list", "python leak.py", gpu=1),
    world.GHOST: nvml_only_row(1, world.GHOST, used_memory=GIB, sm_util=0, mem_util=0),
}
INNOCENT = {
    5101: _fake(5101, "ok", "", "python train.py --rank 0", kinds="C", used_memory=40 * GIB),
    5102: _fake(
        5102, "worker", "holds /dev/nvidia0; child of a GPU process", "python train.py --worker", ppid=5101
    ),
}

# What the table shows: the worker 5102 is folded under its rank 5101 (by default).
UNFOLDED = sorted({*INNOCENT, *SUSPECTS} - {5102})


async def test_z_shows_only_suspicious_rows_with_their_reasons() -> None:
    app = app_on(*INNOCENT.values(), *SUSPECTS.values())
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        assert sorted(shown_pids(app)) == sorted(UNFOLDED)
        assert "REASON" not in header_line(app)
        await press(pilot, "z")
        assert app.view.zombies
        assert header_line(app).rstrip().endswith("REASON · COMMAND")
        assert sorted(shown_pids(app)) == sorted(SUSPECTS)
        assert "zombies" in status(app)
        for line in body(app):
            row = SUSPECTS[int(line.split()[1])]
            assert f"{row.reason} · " in line, line
            assert row.category in line
        await press(pilot, "z")
        assert not app.view.zombies
        assert header_line(app).rstrip().endswith("COMMAND") and "REASON" not in header_line(app)
        assert sorted(shown_pids(app)) == sorted(UNFOLDED)
        assert not any(" · " in line for line in body(app))
        assert status(app) == ""


async def test_z_with_nothing_suspicious_says_so() -> None:
    app = app_on(*INNOCENT.values())
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "z")
        assert body(app) == [" no suspicious process: nothing defunct, orphaned, stuck or unseen by NVML"]
        assert table(app).current is None
        await press(pilot, "k")  # nothing under the cursor: nothing to open
        assert not isinstance(app.screen, KillScreen)
        await press(pilot, "z")
        assert shown_pids(app) == [5101]  # its worker 5102 is folded under it


async def test_k_in_the_zombies_view_signals_a_real_orphan(spawn: Children) -> None:
    ok, _ = spawn.start(SLEEPER)
    orphan, _ = spawn.start(SLEEPER)
    app = app_on(
        row_of(ok, "python train.py", category="ok"),
        row_of(
            orphan,
            "python worker.py",
            gpu=1,
            kinds="",
            category="orphan",
            reason="holds /dev/nvidia1; parent gone (now 1 init)",
        ),
    )
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        await press(pilot, "z")
        assert shown_pids(app) == [orphan.pid]
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [orphan.pid]
        assert screen.entries[0].category == "orphan" and screen.entries[0].memory == "-"
        await press(pilot, "y")
        await said(pilot, app, f"SIGTERM → {orphan.pid}", "gone")
        assert wait_until(lambda: ended(spawn, orphan), 3.0)
        assert alive(spawn, ok)


# -- the demo, end to end ----------------------------------------------------------------------------


async def test_the_demo_trainer_killed_from_the_ui_takes_its_workers_and_frees_its_gpu() -> None:
    from gputui.collect.sampler import Sampler
    from gputui.collect.sources.demo import DemoSource

    sampler = Sampler(DemoSource(gpus=2, workers=3, start_at=120.0))
    app = GpuTuiApp(sampler, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)

        def trainer_and_workers() -> tuple[ProcessRow | None, list[int]]:
            procs = app.snapshot.processes if app.snapshot else ()
            trainer = next((p for p in procs if p.gpu == 0 and p.kinds == "C" and p.visible), None)
            kids = [p.pid for p in procs if trainer and p.ppid == trainer.pid and p.state != "zombie"]
            return trainer, kids

        await until(pilot, lambda: len(trainer_and_workers()[1]) == 3, 5.0)
        trainer, workers = trainer_and_workers()
        assert trainer is not None
        await cursor_to(pilot, app, trainer.pid)
        screen = await open_dialog(pilot, app)
        assert [e.target.pid for e in screen.entries] == [trainer.pid]
        assert screen.entries[0].user == psutil.Process().username()
        assert screen.query_one("#children", Checkbox).value  # its workers hold GPU 0
        await press(pilot, "T")
        text = await said(pilot, app, "gone: ")
        assert all(str(pid) in text for pid in (*workers, trainer.pid)), text
        assert "still alive" not in text
        await until(pilot, lambda: trainer.pid not in shown_pids(app), 5.0)
        assert not psutil.pid_exists(trainer.pid), "a zombie of gputui is left"
        snap = app.snapshot
        assert snap is not None and snap.gpus[0].util_gpu == 0
        assert snap.gpus[0].mem_used == GIB + GIB // 2  # the orphan's: not the trainer's 68.7 GiB
        assert not any(pid in shown_pids(app) for pid in workers)
