"""The everyday box (tests/ui/everyday.py) as a user sees it at 80x24, 120x40 and 200x60: what explains a
number is on screen, peaks are not erased, leftovers are tied to their memory. Pictures of the three sizes
are tests/ui/__snapshots__/test_everyday/*.svg (`pytest --snapshot-update` rewrites them; look before
committing)."""

from __future__ import annotations

import time

import pytest
from textual.pilot import Pilot

from gputui.ui.screens.detail import DetailScreen, render_detail
from tests.helpers import until
from tests.ui import everyday, world
from tests.ui.conftest import first_frame, move_to
from tests.ui.test_detail_fields import text_of


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")  # the header's clock, in the pictures
    time.tzset()


SIZES = [(80, 24), (120, 40), (200, 60)]
IDS = ["80x24", "120x40", "200x60"]


async def shown(size: tuple[int, int]) -> list[str]:
    app = everyday.app()
    async with app.run_test(size=size) as pilot:
        await first_frame(pilot, app)
        await pilot.pause(0.1)
        return everyday.screen_text(app)


def gpu_line(screen: list[str], gpu: int) -> str:
    """The summary line of `gpu` (its pane's first row, or its one line); in two columns of panes, only
    its own half."""
    for row in screen:
        for half in _halves(row):
            if half.lstrip().startswith(f"{gpu} ") and "H100" in half:
                return half
    raise AssertionError(f"no line for GPU {gpu}:\n" + "\n".join(screen))


def _halves(row: str) -> list[str]:
    """A row of two columns of panes is two GPU lines side by side, each half the width."""
    if row.count(" H100") < 2 and not (row.count(" util ") == 2 or row.count(" mem ") == 2):
        return [row]
    return [row[: len(row) // 2], row[len(row) // 2 :]]


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_the_throttle_reason_is_never_the_part_that_is_cut(size: tuple[int, int]) -> None:
    line = gpu_line(await shown(size), everyday.HOT_GPU)
    assert "thermal" in line, line


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_every_rank_is_on_screen_with_its_local_rank(size: tuple[int, int]) -> None:
    screen = await shown(size)
    for gpu in range(everyday.GPUS):
        pid = str(world.trainer_pid(gpu))
        rows = [row for row in screen if f" {pid} " in row]
        assert rows, f"rank {gpu} (pid {pid}) is not on screen:\n" + "\n".join(screen)
        if size[0] >= 120:
            assert f"--local-rank {gpu}" in rows[0], rows[0]


async def test_ok_is_not_written_on_every_row() -> None:
    screen = await shown((120, 40))
    trainers = [row for row in screen if f" {world.trainer_pid(0)} " in row]
    assert trainers and " ok " not in trainers[0], trainers


async def test_a_memory_spike_stays_on_its_sparkline() -> None:
    """3 s at 96 % every 30 s on a GPU at 56 %: the peak is what runs out of memory, so the cells that hold
    one show it at every zoom."""
    screen = await shown((120, 40))
    title = gpu_line(screen, everyday.SPIKE_GPU)
    row = next(i for i, line in enumerate(screen) if title in line)
    side = _halves(screen[row]).index(title)
    spark = _halves(screen[row + 2])[side]
    assert "mem" in spark, spark
    assert "█" in spark and "▅" in spark, spark


@pytest.mark.parametrize("size", [(120, 40), (200, 60)], ids=["120x40", "200x60"])
async def test_the_leftovers_are_tied_to_their_memory(size: tuple[int, int]) -> None:
    screen = await shown(size)
    orphans = [row for row in screen for pid in everyday.ORPHANS if f" {pid} " in row and "orphan" in row]
    assert len(orphans) == 2 and all("~4.8 GiB?" in row for row in orphans), orphans
    (unaccounted,) = [row for row in screen if "unaccounted" in row]
    assert "9.5 GiB" in unaccounted and "23401, 23402" in unaccounted, unaccounted


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_time_scale_is_under_the_sparklines(size: tuple[int, int]) -> None:
    """Under the panes a scale (`-5m … -1m … now`); one line per GPU has no row to spare, so its first line
    says how far back its sparkline reaches (`-5m`)."""
    screen = await shown(size)
    scale = any("now" in row and "-1m" in row for row in screen)
    span = " -5m " in gpu_line(screen, 0)
    assert scale or span, "\n".join(screen)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_pictures(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    async def settle(pilot: Pilot[object]) -> None:
        await first_frame(pilot, pilot.app)  # type: ignore[arg-type]
        await pilot.pause(0.1)

    assert snap_compare(everyday.app(), terminal_size=size, run_before=settle)


async def test_an_orphan_s_detail_names_its_likely_share() -> None:
    app = everyday.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await first_frame(pilot, app)
        prefix = f"{everyday.ORPHAN_GPU}/{everyday.ORPHANS[0]}/"
        await move_to(pilot, app, next(r.key for r in app.table.rows if r.key.startswith(prefix)))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await until(pilot, lambda: screen.detail is not None, what="the detail's worker")
        assert screen.detail is not None
        text = text_of(render_detail(screen.process, screen.detail, leftover=screen.leftover))
        said = " ".join(text.split())
        assert "likely holds ~4.8 GiB? of GPU 5's 9.5 GiB unaccounted, an estimate" in said, said
