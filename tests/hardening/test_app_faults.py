"""Fault injection into the running app (Textual pilot): every fault a snapshot or the sampler can carry,
with the app still drawing, the failure shown as "n/a" or a badge, never a traceback, and the app back to
normal once the fault clears.

Each test asserts what is drawn (the cells of the CellCanvas widgets, the text of the modal screens) and
the app's state; waits poll `app.frames` (or another condition) against a deadline, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pynvml
import pytest
from textual.events import Resize
from textual.geometry import Size
from textual.pilot import Pilot

import gputui.collect.procs.join as procs_module
from gputui.collect.agents.client import AgentPoller
from gputui.collect.pace import Pacer
from gputui.collect.sampler import Sampler
from gputui.collect.sources.nvml import NvmlSource
from gputui.collect.sources.replay import ReplaySampler
from gputui.model import GpuSample, HostProcess, Snapshot
from gputui.ui import sampling
from gputui.ui.app import SORT_CYCLE, GpuTuiApp, SnapshotReady
from gputui.ui.screens.detail import DetailScreen
from gputui.ui.widgets.layout import MIN_TABLE_ROWS
from gputui.ui.widgets.spark import DIP_GLYPH
from gputui.units import NA
from tests.builders import nvml_only_row, process_row
from tests.collect.fake_nvml import FakeNvml, FakeProcess
from tests.helpers import screen_text, until
from tests.ui import world
from tests.ui.conftest import first_frame, make_app, post
from tests.ui.drawn import body, lines, shown_pids

SIZE = (120, 40)
GIB = 1 << 30
SPARK = set("▁▂▃▄▅▆▇█" + DIP_GLYPH)  # a drawn bucket (a dip's first one shows the glyph)
NO_SUCH_PID = 4194301  # near the largest pid_max (4194304): no such process here


# -- waiting and reading -------------------------------------------------------------------------------


def quiet_app(gpus: int = 4) -> GpuTuiApp:
    """The fixed world; its sampler ticks once, then sleeps 30 s: the snapshots a test posts stay shown."""
    return make_app(gpus=gpus, interval=30.0)


def header(app: GpuTuiApp) -> str:
    return lines(app.header)[0]


def pane_rows(app: GpuTuiApp) -> list[str]:
    """The GPU area's drawn rows, not stripped: two columns of panes are cut apart by cell position."""
    return ["".join(ch for ch, _ in line) for line in app.panes._lines]


def panes(app: GpuTuiApp) -> list[list[str]]:
    """Each GPU's pane (summary line, util rows, mem rows) as text, in GPU order: two columns are filled
    left column first."""
    lay = app.panes.gpu_layout
    assert lay.kind in ("panes", "columns"), lay
    rows = pane_rows(app)
    rows = rows[: len(rows) - lay.axis_rows]  # (the last: the time scale under the panes)
    slots = [rows[k : k + lay.rows_per_gpu] for k in range(0, len(rows), lay.rows_per_gpu)]
    if lay.columns == 1:
        return [[r.rstrip() for r in slot] for slot in slots]
    w = lay.column_widths[0]
    left = [[r[:w].rstrip() for r in slot] for slot in slots]
    right = [[r[w:].rstrip() for r in slot] for slot in slots if any(r[w:].strip() for r in slot)]
    return left + right


def sparklines(app: GpuTuiApp, pane: list[str]) -> tuple[str, str]:
    """A pane's util and mem sparklines, their rows joined."""
    n = app.panes.gpu_layout.spark_rows
    return "".join(pane[1 : 1 + n]), "".join(pane[1 + n : 1 + 2 * n])


def sparklines_drawn(app: GpuTuiApp) -> list[tuple[bool, bool]]:
    """For each GPU's pane: whether its util and its mem sparkline show any bucket."""
    return [
        (bool(SPARK & set(util)), bool(SPARK & set(mem)))
        for util, mem in (sparklines(app, p) for p in panes(app))
    ]


def mem_value(head: str) -> str:
    """The memory value of a summary line, with the spaces that right-align it."""
    m = re.search(r"MEM( +\S+)", head)
    assert m is not None, head
    return m[1]


def unspark(line: str) -> str:
    return "".join(" " if ch in SPARK else ch for ch in line)


def heads(app: GpuTuiApp) -> list[str]:
    """Every GPU's summary line (its whole line when the layout is one line per GPU)."""
    if app.panes.gpu_layout.kind == "lines":
        return [r.rstrip() for r in pane_rows(app)]
    return [pane[0] for pane in panes(app)]


def drawn_text(app: GpuTuiApp) -> str:
    """Everything the main screen's canvases drew."""
    return "\n".join("\n".join(lines(w)) for w in (app.header, app.panes, app.table, app.status))


def frame_text(app: GpuTuiApp) -> str:
    """What the last snapshot drew: the header, the GPU panes, the table (not the status line)."""
    return "\n".join("\n".join(lines(w)) for w in (app.header, app.panes, app.table))


def assert_clean(text: str) -> None:
    """Nothing a terminal would act on, and nothing a UTF-8 terminal writer would choke on."""
    for ch in ("\x1b", "\x07", "\r", "\x08", "\t", "\x00", "\x9b"):
        assert ch not in text, repr(ch)
    bad = [ch for line in text.split("\n") for ch in line if not ch.isprintable()]
    assert not bad, repr(bad[:5])
    text.encode("utf-8")  # a lone surrogate raises here (and would in the terminal's writer)


def canvas_cells_printable(app: GpuTuiApp) -> None:
    for widget in (app.header, app.panes, app.table, app.status):
        for line in widget._lines:
            assert all(ch.isprintable() for ch, _ in line), widget


def row_line(app: GpuTuiApp, pid: int) -> str:
    pids = shown_pids(app)
    assert pid in pids, (pid, pids)
    return body(app)[pids.index(pid)]


def status_line(app: GpuTuiApp) -> str:
    return "\n".join(lines(app.status))


def notifications(app: GpuTuiApp) -> list[str]:
    return [n.message for n in app._notifications]


async def open_detail(pilot: Pilot[int], app: GpuTuiApp, pid: int) -> DetailScreen:
    await pilot.press("home", *["down"] * shown_pids(app).index(pid))
    await pilot.pause()
    assert app.table.current is not None and app.table.current.pid == pid
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the detail screen")
    screen = app.screen
    assert isinstance(screen, DetailScreen)
    await until(pilot, lambda: screen.detail is not None, what="the detail's /proc read")
    await pilot.pause()
    return screen


async def close_detail(pilot: Pilot[int], app: GpuTuiApp) -> None:
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, DetailScreen), what="the detail to close")


# -- 1. per-field and per-GPU NVML errors that appear mid-run and clear again --------------------------


async def test_per_field_errors_show_na_in_that_pane_only_and_clear_again() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        before = heads(app)
        assert len(before) == 4 and not any(NA in h for h in before), before
        rows_before = body(app)

        # Temperature, power, memory, utilization (and clocks) unavailable on GPU 2 for three ticks.
        g2 = replace(
            base.gpus[2],
            util_gpu=None,
            util_mem=None,
            mem_used=None,
            mem_total=None,
            temperature=None,
            power=None,
            sm_clock=None,
            pstate=None,
        )
        faulty = replace(base, gpus=(*base.gpus[:2], g2, *base.gpus[3:]))
        frames = app.frames
        for k in range(1, 4):
            await post(pilot, app, replace(faulty, time=base.time + k))
        assert app.frames == frames + 3
        now = heads(app)
        # (GPM reads on: its SM and TC activity, between UTIL and MEM)
        assert now[2].startswith("  2 H100") and re.search(r"UTIL  n/a  (SM +\d+% TC +\d+%  )?MEM ", now[2])
        assert now[2].count(NA) == 6, now[2]  # util, memory, temperature, power, SM clock, P-state
        assert (
            "°C" not in now[2]
            and not re.search(r"\dW", now[2])
            and "GiB" not in now[2]
            and "MHz" not in now[2]
        )
        assert [h for i, h in enumerate(now) if i != 2] == [h for i, h in enumerate(before) if i != 2]
        util2, mem2 = sparklines(app, panes(app)[2])
        # the demo's H100s have GPM: the busy sparkline is SM activity's
        assert util2.lstrip().startswith("SM act") and mem2.lstrip().startswith("mem")
        assert body(app) == rows_before  # the processes do not depend on the GPU's fields
        assert "⚠" not in header(app)

        # The whole of GPU 1 unreadable this tick, with the source's error: a badge in the header.
        g1 = GpuSample(index=1, name=base.gpus[1].name)
        err = "GPU 1: NVMLError_Unknown: Unknown Error"
        await post(
            pilot,
            app,
            replace(base, time=base.time + 4, gpus=(base.gpus[0], g1, *base.gpus[2:]), errors=(err,)),
        )
        assert "⚠ GPU 1: NVMLError_Unknown" in header(app)  # cut to the width: the rest is in the pane
        now = heads(app)
        assert now[1].count(NA) == 6 and now[2] == before[2] and now[0] == before[0]

        # The faults clear: every pane as before, no badge.
        await post(pilot, app, replace(base, time=base.time + 5))
        assert heads(app) == before
        assert "⚠" not in header(app)
        assert app.frames == frames + 5 and app.is_running


# -- 2. GpuIsLost on one of 8 GPUs ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["full", "compact"])
async def test_one_lost_gpu_of_8_is_a_badge_and_the_7_others_keep_drawing(size: tuple[int, int]) -> None:
    app = quiet_app(gpus=8)
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None and len(base.gpus) == 8
        compact = size[0] < 100
        assert app.panes.compact == compact
        before = heads(app)
        lost = 5
        gpus = tuple(
            GpuSample(
                index=g.index, name=g.name, uuid=g.uuid, pci_bus_id=g.pci_bus_id, minor=g.minor, lost=True
            )
            if g.index == lost
            else g
            for g in base.gpus
        )
        err = f"GPU {lost} is lost (it needs a reset or a reboot)"
        others = tuple(p for p in base.processes if p.gpu != lost)  # NVML lists nothing on a lost GPU
        frames = app.frames
        for k in range(1, 4):  # it stays lost, tick after tick
            await post(
                pilot,
                app,
                replace(
                    base, time=base.time + k, gpus=gpus, processes=others, errors=(err,) if k == 1 else ()
                ),
            )
        assert app.frames == frames + 3
        now = heads(app)
        assert len(now) == 8
        assert "LOST" in now[lost] and "needs a reset" in now[lost]
        assert "UTIL" not in now[lost] and "%" not in now[lost]
        for i, h in enumerate(now):
            if i != lost:
                assert "LOST" not in h and NA not in h, h
                # The same numbers as before the loss (a one-line GPU's sparklines take the new samples
                # into their newest bucket's mean: its last cell may move).
                assert unspark(h) == unspark(before[i])
                assert "%" in h and "°C" in h
        if not compact:
            assert app.panes.gpu_layout.kind == "columns"  # 8 panes at 120x40: two columns
            assert all(line == "" for line in panes(app)[lost][1:])  # no sparklines for a lost GPU
            # The 7 others draw both their sparklines.
            assert sparklines_drawn(app) == [(i != lost, i != lost) for i in range(8)]
        pids = shown_pids(app)
        assert world.trainer_pid(lost) not in pids
        for g in range(8):
            if g != lost:
                assert world.trainer_pid(g) in pids
        # The error was in the first lost tick only: the header's badge follows the snapshot.
        assert "⚠" not in header(app)
        await post(pilot, app, replace(base, time=base.time + 4, gpus=gpus, processes=others, errors=(err,)))
        if size[0] >= 120:  # at 80 columns the header has no room left for it; the pane says LOST
            assert "⚠ GPU 5 is lost" in header(app)
        # Reset: the GPU comes back with its numbers.
        await post(pilot, app, replace(base, time=base.time + 5))
        assert [unspark(h) for h in heads(app)] == [unspark(h) for h in before]
        assert world.trainer_pid(lost) in shown_pids(app)
        assert app.is_running


# -- 3. the sampler fails underneath (NVML shut down), then recovers -----------------------------------


class FlakySampler(ReplaySampler):
    """The fixed world's last snapshot, one second later every tick; while `failing`, tick() raises what
    NVML raises once it was shut down underneath the app."""

    def __init__(self, snapshots: list[Snapshot]) -> None:
        super().__init__(snapshots[-1:])
        self.lock = threading.Lock()
        self.failing = False
        self.raised = 0
        self.time = snapshots[-1].time

    def tick(self) -> Snapshot:
        with self.lock:
            if self.failing:
                self.raised += 1
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            self.time += 1
            return replace(super().tick(), time=self.time)


class NeverLate(Pacer):
    """A pacer that never calls a sample late: on a loaded machine a 0.05 s interval is often overrun, and
    the late warning then takes the header and the status line the failure tests read (the pacer's own
    tests and tests/ui/test_sampling_pace.py cover lateness)."""

    def delay_after_sample(self) -> float:
        delay = super().delay_after_sample()
        self.last_late = False
        return delay


async def test_sampler_errors_keep_the_last_frame_and_say_so_then_new_data_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sampling, "Pacer", NeverLate)
    snaps = world.snapshots(gpus=4, seconds=60)
    sampler = FlakySampler(snaps)
    app = GpuTuiApp(sampler, interval=0.05, devices_dir=Path("/nonexistent"))
    for snap in snaps[:-1]:
        app.ingest(snap)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app, frames=3)
        with sampler.lock:
            sampler.failing = True
            last_good = sampler.time
        message = "sampling failed: NVMLError_Uninitialized: Uninitialized"
        await until(
            pilot,
            lambda: sampler.raised >= 3 and message in notifications(app),
            what="the sampler's failure to be shown",
        )
        await pilot.pause()
        assert app.snapshot is not None and app.snapshot.time == last_good  # the last good frame stays
        frames, drawn, raised = app.frames, frame_text(app), sampler.raised
        await until(pilot, lambda: sampler.raised >= raised + 5, what="more failing ticks")
        await pilot.pause()
        assert app.frames == frames and frame_text(app) == drawn  # still drawn, unchanged
        assert len(heads(app)) == 4 and all("UTIL" in h for h in heads(app))
        assert len(shown_pids(app)) == len(snaps[-1].processes)
        errors = [n for n in app._notifications if n.message == message]
        assert len(errors) == 1 and errors[0].severity == "error"  # once, not once per failing tick
        assert message in status_line(app) and "ticks in a row" in status_line(app)
        assert app.is_running and app.return_code is None and app.error is None

        with sampler.lock:
            sampler.failing = False
        await until(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.time > last_good + 2,
            what="new data after the failures",
        )
        assert app.frames > frames and len(heads(app)) == 4
        assert "sampling works again, after" in status_line(app) and message not in status_line(app)
        assert _clock(app.snapshot.time) in header(app)  # (the same _show() drew both: no await between)
        assert app.is_running and app.return_code is None


async def test_a_sampler_failing_before_the_first_frame_ends_the_app_with_its_reason() -> None:
    """Nothing to keep drawing yet: the app exits with status 2 and the reason, which the command line
    prints (gputui/cli.py); no traceback."""
    sampler = FlakySampler(world.snapshots(gpus=2, seconds=0))
    sampler.failing = True
    app = GpuTuiApp(sampler, interval=0.05, devices_dir=Path("/nonexistent"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.return_value is not None, what="the app to give up")
    assert app.return_value == 2 and app.frames == 0  # App[int]: the result is the exit status
    assert app.error == "sampling failed: NVMLError_Uninitialized: Uninitialized"


class FencedSampler(Sampler):
    """A Sampler that can be fenced off: once `fence()` returns, no tick runs or will run (the fake NVML
    is uninstalled after the test, and the app's sampler thread may still be finishing its last tick)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._running = threading.Lock()
        self._fenced = False

    def tick(self) -> Snapshot:
        with self._running:
            if self._fenced:
                raise RuntimeError("the test is over")
            return super().tick()

    def fence(self) -> None:
        with self._running:
            self._fenced = True


async def test_nvml_shut_down_underneath_is_drawn_as_na_then_initialized_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real Sampler over the fake NVML, ticked one tick at a time (interval 30 s; the app's wake event
    asks for each tick, as `t` and `+` do)."""
    fake = FakeNvml(n_gpus=2).install(monkeypatch)
    fake.gpus[0].processes["C"].append(FakeProcess(pid=os.getpid(), memory=2 * GIB))
    sampler = FencedSampler(
        NvmlSource(devices_dir=tmp_path), scan_holders=False, agents=AgentPoller(tmp_path / "agents")
    )
    app = GpuTuiApp(sampler, interval=30.0, devices_dir=tmp_path)
    try:
        async with app.run_test(size=(200, 40)) as pilot:

            async def tick() -> None:
                frames = app.frames
                app._wake.set()
                await until(pilot, lambda: app.frames > frames, what="the next tick's frame")
                await pilot.pause()

            await first_frame(pilot, app)
            await tick()
            before = heads(app)
            assert all(" 57%" in h and "61°C" in h and "350/700W" in h for h in before), before
            assert shown_pids(app) == [os.getpid()] and "⚠" not in header(app)

            fake.initialized = 0  # someone called nvmlShutdown() underneath the app
            await tick()
            # Every value read this tick is unavailable, drawn as n/a (the slow fields, temperature and
            # clocks, are read every 5 s: still the last ones); NVML lists no process this tick.
            for h, was in zip(heads(app), before, strict=True):
                assert "UTIL  n/a  MEM " in h, h
                # n/a in the memory value's place, right-aligned: the fields after it do not move.
                assert mem_value(h).strip() == NA and len(mem_value(h)) == len(mem_value(was)), (h, was)
                assert h.split("°C")[1].split()[0] == NA, h  # power
            assert body(app) == [" no GPU processes"]
            canvas_cells_printable(app)

            await tick()  # the source initializes NVML again, and says so
            assert heads(app) == before
            assert shown_pids(app) == [os.getpid()]
            assert "⚠ NVML was shut down underneath gputui: it was initialized again" in header(app)
            assert fake.initialized == 1
            await tick()
            assert heads(app) == before and "⚠" not in header(app)
            assert app.is_running
    finally:
        sampler.fence()


# -- 4. vanished processes and AccessDenied on every /proc read ----------------------------------------

VANISHED = nvml_only_row(0, NO_SUCH_PID, used_memory=GIB)
DENIED = process_row(
    1,
    NO_SUCH_PID + 1,
    used_memory=2 * GIB,
    sm_util=7,
    mem_util=1,
    user=None,
    name=None,
    command=None,
    cpu_percent=None,
    rss=None,
    create_time=None,
    state=None,
    ppid=None,
    devices=None,
    category="no-permission",
    reason="its /proc/PID/fd is not readable",
)


class DeniedProcess:
    """psutil.Process where every read raises AccessDenied (another user's process; hidepid)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __getattr__(self, name: str) -> Any:
        def denied(*args: object, **kwargs: object) -> Any:
            raise psutil.AccessDenied(self.pid)

        return denied


class DeniedOs:
    """The os module as gputui.collect.procs.join sees it, with every listing under /proc refused."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def listdir(path: Any) -> list[str]:
        if str(path).startswith("/proc"):
            raise PermissionError(13, "Permission denied", str(path))
        return os.listdir(path)


def deny_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psutil, "Process", DeniedProcess)  # the one join reads
    monkeypatch.setattr(procs_module, "os", DeniedOs())


async def test_vanished_and_unreadable_processes_draw_na_and_their_detail_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = quiet_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        snap = replace(base, time=base.time + 1, processes=(*base.processes, VANISHED, DENIED))
        await post(pilot, app, snap)
        gone = row_line(app, VANISHED.pid)
        assert "(not visible here: another PID namespace, or gone)" in gone
        assert gone.split()[2] == "-" and "nvml-only" in gone and "1.0 GiB" in gone
        denied = row_line(app, DENIED.pid)
        cells = denied.split()
        assert cells[0] == "1" and cells[2] == NA  # GPU, PID, USER
        assert denied.count(NA) >= 6, denied  # user, CPU%, RSS, TIME, STATE, COMMAND
        assert "no-permiss…" in denied and "2.0 GiB" in denied and "7%" in denied
        canvas_cells_printable(app)

        # Every sort column, the zombies view, the tree and a filter cope with the unknowns.
        for _ in SORT_CYCLE:
            await pilot.press("s")
            await pilot.pause()
            assert {VANISHED.pid, DENIED.pid} <= set(shown_pids(app)), app.view.sort
        await pilot.press("S", "z")
        await pilot.pause()
        assert {VANISHED.pid, DENIED.pid} <= set(shown_pids(app))  # both are suspicious
        await pilot.press("z")
        # (not `t`: that wakes the sampler, whose snapshot would replace ours)
        app._set_view(replace(app.view, tree=True))
        await pilot.pause()
        assert {VANISHED.pid, DENIED.pid} <= set(shown_pids(app))
        app._set_view(replace(app.view, tree=False))
        await pilot.press("slash", *str(NO_SUCH_PID)[:-1], "enter")
        await pilot.pause()
        assert sorted(shown_pids(app)) == [VANISHED.pid, DENIED.pid]

        # The detail of the vanished process: it is gone, said so, no traceback.
        screen = await open_detail(pilot, app, VANISHED.pid)
        text = screen_text(app)
        assert screen.detail is not None and screen.detail.error == "the process is gone"
        assert "the process is gone" in text and f"process {VANISHED.pid}" in text
        await close_detail(pilot, app)

        # Every /proc read refused while the detail reads: "not readable", n/a, no traceback.
        deny_proc(monkeypatch)
        screen = await open_detail(pilot, app, DENIED.pid)
        text = screen_text(app)
        assert screen.detail is not None and screen.detail.error is None
        assert "(environment not readable" in text and "(not readable: run as root" in text
        assert "command" in text and NA in text
        await close_detail(pilot, app)
        await post(pilot, app, replace(snap, time=snap.time + 1))
        assert app.is_running and DENIED.pid in shown_pids(app)


async def test_detail_of_a_known_process_when_every_proc_read_is_denied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = quiet_app()
    row = replace(
        DENIED,
        create_time=world.START - 100,
        user="carol",
        command="python serve.py",
        state="sleeping",
        category="ok",
        reason="",
    )
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        await post(pilot, app, replace(base, time=base.time + 1, processes=(row,)))
        deny_proc(monkeypatch)  # readable when sampled, refused when the detail asks (hidepid, setuid)
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (
                not app.is_running or (isinstance(app.screen, DetailScreen) and app.screen.detail is not None)
            ),
            what="the detail's /proc read",
        )
        assert app.is_running
        await pilot.pause()
        text = screen_text(app)
        assert "not readable" in text and "python serve.py" in text
        assert app.is_running


# -- 5. the terminal resized 50 times a second for 5 s while snapshots keep arriving -------------------


def resize_now(app: GpuTuiApp, width: int, height: int) -> None:
    size = Size(width, height)
    app._driver._size = size  # type: ignore[union-attr]  # the headless driver's terminal size
    app.post_message(Resize(size, size))


def storm_sizes() -> list[tuple[int, int]]:
    """60x15 ... 220x70 and back, in uneven steps (each size differs from the one before), and now and
    then a terminal dragged down to nothing or up to a wall of a screen."""
    widths = [60 + (k * 37) % 161 for k in range(50)]
    heights = [15 + (k * 13) % 56 for k in range(50)]
    sizes = list(zip(widths, heights, strict=True))
    for k, extreme in zip((10, 23, 36, 49), ((1, 1), (10, 3), (400, 150), (30, 8)), strict=True):
        sizes[k] = extreme
    return sizes


@pytest.mark.slow
async def test_resized_50_times_a_second_for_5_s_while_snapshots_arrive() -> None:
    app = quiet_app(gpus=8)
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        sizes = storm_sizes()
        frames = app.frames
        start = time.monotonic()
        resizes = posted = 0
        laid_out: set[tuple[int, int]] = set()  # the table sizes the app got to lay out meanwhile
        while resizes < 250:  # 50 a second for 5 s
            # What pilot.resize_terminal() does, without its wait for idle (60-120 ms here): a terminal
            # being dragged sends SIGWINCH whether or not the app has drawn the last size. Resizes that
            # fell due while the app held the loop are sent at once, as a terminal queues them.
            due = min(250, int((time.monotonic() - start) / 0.02) + 1)
            while resizes < due:
                resize_now(app, *sizes[resizes % len(sizes)])
                resizes += 1
                if resizes % 5 == 0:  # a snapshot every 100 ms (10 Hz sampling) meanwhile
                    posted += 1
                    app.post_message(SnapshotReady(replace(base, time=base.time + posted)))
            await asyncio.sleep(max(0.0, resizes * 0.02 - (time.monotonic() - start)))
            laid_out.add((app.table.size.width, app.table.size.height))
        storm = time.monotonic() - start
        drawn_meanwhile = app.frames - frames
        assert posted == 50 and storm >= 4.98, storm
        # The app kept up while it was going on (it did not just queue everything for later).
        assert len(laid_out) >= 5 and drawn_meanwhile >= 5, (len(laid_out), drawn_meanwhile)
        # It settles at the last size it is given: compact there (under 100 columns), fully drawn.
        final = (97, 33)
        await pilot.resize_terminal(*final)
        await until(pilot, lambda: app.frames >= frames + posted, timeout=15.0, what="every posted frame")
        await post(pilot, app, replace(base, time=base.time + posted + 1))
        await until(pilot, lambda: app.table.size.width == final[0] and len(app.header._lines[0]) == final[0])
        await pilot.pause()
        total = time.monotonic() - start
        print(
            f"storm: {resizes} resizes and {posted} snapshots in {storm:.1f} s; {len(laid_out)} sizes laid "
            f"out and {drawn_meanwhile} frames drawn meanwhile; settled {total - storm:.1f} s later"
        )
        assert total < 30.0, f"the storm took {storm:.1f} s, recovering from it {total - storm:.1f} s"
        assert app.is_running and app.size == final
        pids = sorted(p.pid for p in base.processes)

        def fully_drawn(width: int, kind: str) -> None:
            assert header(app).startswith(" gputui ") and "train-box-01" in header(app)
            assert app.panes.gpu_layout.kind == kind
            assert app.panes.compact == (kind == "lines")
            assert len(lines(app.panes)) == app.panes.gpu_layout.height
            heads_now = heads(app)
            assert len(heads_now) == 8
            assert all(h.startswith(f" {g:>2} H100") and "%" in h for g, h in enumerate(heads_now))
            if kind == "lines":  # the inline sparklines
                assert all(SPARK & set(h) for h in heads_now)
            else:
                assert sparklines_drawn(app) == [(True, True)] * 8
            assert all(len(line) == width for w in (app.header, app.panes, app.table) for line in w._lines)
            assert lines(app.table)[0].startswith("GPU")
            assert sorted(shown_pids(app)) == pids

        fully_drawn(final[0], "lines")
        # And a plain resize after it still switches the layout: 8 panes fit in two columns of 66 cells,
        # and the table keeps its rows.
        await pilot.resize_terminal(133, 41)
        await until(pilot, lambda: app.table.size.width == 133)
        await post(pilot, app, replace(base, time=base.time + posted + 2))
        fully_drawn(133, "columns")
        assert app.table.size.height > MIN_TABLE_ROWS  # its header and at least 10 rows


# -- 6. hostile command lines --------------------------------------------------------------------------

NASTY = ("\x1b[2J", "\x1b]0;title\x07", "\r", "\x08", "\t", "\n", "\udcff", "\x00", "\x9b31m")


def hostile_command() -> str:
    """10,000 characters: control characters, escape sequences, invalid UTF-8 (as surrogateescape
    decodes it: b"\\xff" -> "\\udcff") and things that look like Rich markup."""
    head = "python evil.py [bold red]x[/] [/] " + "".join(f"<{s}>" for s in NASTY) + " "
    argv = bytes(range(0x80, 0x100)).decode("utf-8", "surrogateescape")
    filler = "".join(f"arg{k}{NASTY[k % len(NASTY)]} " for k in range(400)) + argv
    command = head + filler
    return (command + "y" * 10_000)[:10_000]


async def test_hostile_command_lines_are_drawn_inert_in_the_table_and_the_detail() -> None:
    command = hostile_command()
    assert len(command) == 10_000 and "\udcff" in command and "\x1b" in command
    rows = (
        replace(
            DENIED,
            pid=NO_SUCH_PID,
            user="eve\x1b[31m",
            name="python",
            command=command,
            create_time=None,
            state="running",
            category="ok",
            reason="",
        ),
        replace(DENIED, pid=NO_SUCH_PID + 1, user="[/]", name="x", command="[/]", category="ok", reason=""),
        replace(
            DENIED,
            pid=NO_SUCH_PID + 2,
            user="\udcff\udcfe",
            name="x",
            command="[bold red]x[/]",
            category="ok",
            reason="",
        ),
    )
    app = quiet_app()
    async with app.run_test(size=(200, 40)) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        gpus = (replace(base.gpus[0], name="H100\x1b[2J\udcff\r"), *base.gpus[1:])
        await post(
            pilot,
            app,
            replace(
                base,
                time=base.time + 1,
                gpus=gpus,
                processes=rows,
                errors=("GPU 0: \x1b]0;pwned\x07 \udcff",),
            ),
        )
        text = drawn_text(app)
        assert_clean(text)
        canvas_cells_printable(app)
        evil = row_line(app, NO_SUCH_PID)
        assert "python evil.py [bold red]x[/] [/] <?[2J><?]0;title?><?><?><?><?><?><?><?31m>" in evil
        assert "eve?[31m" in evil
        assert row_line(app, NO_SUCH_PID + 1).rstrip().endswith("[/]")
        assert row_line(app, NO_SUCH_PID + 2).rstrip().endswith("[bold red]x[/]")
        y = 1 + shown_pids(app).index(NO_SUCH_PID + 2)
        x = lines(app.table)[y].index("[bold red]x[/]")
        assert not any(style.bold for _, style in app.table._lines[y][x : x + 14])  # not read as markup
        assert "H100?[2J??" in heads(app)[0]
        assert "⚠ GPU 0: ?]0;pwned? ?" in header(app)

        await open_detail(pilot, app, NO_SUCH_PID)
        detail = screen_text(app)
        assert_clean(detail)
        assert "python evil.py [bold red]x[/] [/] <?[2J><?]0;title?><?><?>" in detail.replace("\n", "")
        assert "eve?[31m" in detail
        await close_detail(pilot, app)
        await open_detail(pilot, app, NO_SUCH_PID + 2)
        detail = screen_text(app)
        assert_clean(detail)
        assert "[bold red]x[/]" in detail and "??" in detail  # the user's two lone surrogates
        await close_detail(pilot, app)
        assert app.is_running


# -- 7. user names that do not resolve -----------------------------------------------------------------


async def test_unresolved_user_names_are_drawn_sorted_and_filtered() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        ok = base.processes[0]
        # psutil gives the numeric uid as the name when it does not resolve; None when unreadable.
        numeric = replace(ok, pid=7001, user="54321", command="python numeric.py", create_time=1.0)
        unknown = replace(ok, pid=7002, user=None, command="python unknown.py", create_time=2.0)
        snap = replace(base, time=base.time + 1, processes=(*base.processes, numeric, unknown))
        await post(pilot, app, snap)
        assert row_line(app, 7001).split()[2] == "54321"
        assert row_line(app, 7002).split()[2] == NA

        for _ in range(20):  # s cycles through the sort keys: user is among the first few
            if app.view.sort == "user":
                break
            await pilot.press("s")
            await pilot.pause()
        assert "USER▲" in lines(app.table)[0]
        users = [line.split()[2] for line in body(app)]
        procs = {p.pid: p for p in snap.processes}
        keys = [procs[pid].user or "" for pid in shown_pids(app)]
        assert keys == sorted(keys)  # None sorts as "" (first ascending), numeric names as text
        # What is drawn: the unknowns (invisible "-", unreadable "n/a") first, then "54321" before names.
        assert users.index("54321") < users.index("alice") and users.index(NA) < users.index("54321")
        await pilot.press("S")
        await pilot.pause()
        keys = [procs[pid].user or "" for pid in shown_pids(app)]
        assert keys == sorted(keys, reverse=True)

        await pilot.press("slash", *"5432")
        await pilot.pause()
        assert shown_pids(app) == [7001]
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("slash", *"unknown.py", "enter")
        await pilot.pause()
        assert shown_pids(app) == [7002] and row_line(app, 7002).split()[2] == NA
        await post(pilot, app, replace(snap, time=snap.time + 1))  # the filter holds across frames
        assert shown_pids(app) == [7002]
        screen = await open_detail(pilot, app, 7002)
        assert screen.detail is not None
        assert "user" in screen_text(app) and NA in screen_text(app)
        await close_detail(pilot, app)
        await pilot.press("escape", "slash", *NA, "enter")  # what is drawn for them can be typed
        await pilot.pause()
        assert 7002 in shown_pids(app) and all(procs[pid].user is None for pid in shown_pids(app))
        assert app.is_running


# -- 8. the wall clock jumps back an hour --------------------------------------------------------------


def _util(snap: Snapshot, gpu: int, util: int) -> Snapshot:
    gpus = tuple(replace(g, util_gpu=util) if g.index == gpu else g for g in snap.gpus)
    return replace(snap, gpus=gpus)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


async def test_wall_clock_jumping_back_an_hour_keeps_drawing() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        t = base.time
        for k in range(1, 4):
            await post(pilot, app, replace(base, time=t + k))
        assert _clock(t + 3) in header(app)
        frames = app.frames
        for k in range(10):  # NTP steps the clock back an hour
            await post(pilot, app, _util(replace(base, time=t - 3600 + k), 0, 40 + k))
        assert app.frames == frames + 10
        assert _clock(t - 3600 + 9) in header(app) and _clock(t + 3) not in header(app)
        assert heads(app)[0].split("UTIL")[1].split()[0] == "49%"  # the numbers are this tick's
        assert sparklines_drawn(app) == [(True, True)] * 4  # still drawn
        # The history keeps every sample, in arrival order (not sorted): the jump is visible in it.
        times = list(app.history.gpus[0].times)
        assert times[-14:] == [t, t + 1, t + 2, t + 3, *(t - 3600 + k for k in range(10))]
        # A resize rebuilds the sparklines from that history: no crash, still drawn.
        await pilot.resize_terminal(100, 40)
        await until(pilot, lambda: app.table.size.width == 100)
        await pilot.resize_terminal(*SIZE)
        await until(pilot, lambda: app.table.size.width == SIZE[0])
        await post(pilot, app, replace(base, time=t - 3600 + 10))
        assert sparklines_drawn(app) == [(True, True)] * 4
        assert app.is_running


async def test_sparklines_show_new_samples_after_the_clock_jumps_back() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        t = base.time
        # GPU 3 has been mostly idle (low glyphs); 8 sparkline cells' worth of samples at 100 % after the
        # jump must show as full cells.
        bucket = app.panes._bucket_s
        assert bucket > 0
        spark_before = sparklines(app, panes(app)[3])[0]
        for k in range(8):
            await post(pilot, app, _util(replace(base, time=t - 3600 + k * bucket), 3, 100))
        assert heads(app)[3].split("UTIL")[1].split()[0] == "100%"
        spark = sparklines(app, panes(app)[3])[0]
        assert spark.count("█") >= spark_before.count("█") + 5, (spark_before, spark)


# -- 9. a burst of snapshots ---------------------------------------------------------------------------


async def test_a_burst_of_200_snapshots_is_drawn_and_keys_still_work() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        frames = app.frames
        start = time.monotonic()
        for k in range(1, 201):  # a sampler thread that fell behind and then caught up, all at once
            app.post_message(SnapshotReady(_util(replace(base, time=base.time + k), 0, k % 101)))
        await pilot.press("s")  # queued behind the burst
        await until(pilot, lambda: app.frames >= frames + 200, timeout=30.0, what="the 200 frames")
        await pilot.pause()
        took = time.monotonic() - start
        assert app.frames == frames + 200 and took < 20.0, took
        assert app.snapshot is not None and app.snapshot.time == base.time + 200
        assert _clock(base.time + 200) in header(app)
        assert heads(app)[0].split("UTIL")[1].split()[0] == f"{200 % 101}%"
        assert app.view.sort == "gpu_mem" and "GPU MEM▼" in lines(app.table)[0]
        await pilot.press("s")
        await pilot.pause()
        sort: str = app.view.sort  # not the expression: mypy keeps the narrowing of the assert above
        assert sort == "sm" and "SM%▼" in lines(app.table)[0]
        assert app.is_running


# -- 50 device holders with 5,000 processes under them -------------------------------------------------


async def test_50_holders_with_5000_host_processes_in_the_tree() -> None:
    app = quiet_app()
    async with app.run_test(size=SIZE) as pilot:
        await first_frame(pilot, app)
        base = app.snapshot
        assert base is not None
        holders = tuple(
            process_row(
                i % 4,
                100_000 + i,
                kinds="C" if i % 5 == 0 else "",
                used_memory=GIB,
                user="dave",
                name="python",
                command=f"python worker.py --shard {i}",
                cpu_percent=1.0,
                rss=GIB,
                create_time=world.START - i,
                state="sleeping",
                ppid=world.LAUNCHER,
            )
            for i in range(50)
        )
        hosts = (
            base.host_processes[0],
            *(
                HostProcess(
                    pid=200_000 + k,
                    ppid=100_000 + k % 50,
                    user="dave",
                    name="loader",
                    command=f"loader {k}",
                    cpu_percent=None,
                    rss=None,
                    create_time=None,
                    state="sleeping",
                )
                for k in range(5000)
            ),
        )
        snap = replace(base, time=base.time + 1, processes=holders, host_processes=hosts)
        start = time.monotonic()
        await post(pilot, app, snap)
        assert len(shown_pids(app)) == app.table.size.height - 1 and len(app.table.rows) == 50
        # (not `t`: that wakes the sampler, whose snapshot would replace ours)
        app._set_view(replace(app.view, tree=True))
        await pilot.pause()
        assert len(app.table.rows) == 1 + 50 + 5000  # the launcher, its 50 children, their 5,000
        await post(pilot, app, replace(snap, time=snap.time + 1))
        await pilot.press("end")
        await pilot.pause()
        # Sorted by GPU: the last holder is the highest pid on GPU 3 (shard 47), its last child 4997.
        assert app.table.current is not None and app.table.current.pid == 200_000 + 4997
        assert body(app)[-1].endswith("   └─ loader 4997") and str(200_000 + 4997) in body(app)[-1]
        assert time.monotonic() - start < 10.0
        assert app.is_running
