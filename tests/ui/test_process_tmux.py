"""The box gputui is for, in a real terminal: `gputui --demo` with 8 GPUs, a trainer per GPU with its 3
data-loader workers, in a 120x40 tmux pane. Every trainer's pid is on screen with its workers folded into
it (`+3`); `F` shows the workers and folds them again; the right arrow scrolls COMMAND."""

from __future__ import annotations

import re

import psutil
import pytest

from tests.helpers import wait_until as _wait_until
from tests.ui.terminal import WORKERS, Tmux, needs_tmux
from tests.ui.test_terminal import _demo_in_tmux, _quit_with_q, _rows

pytestmark = pytest.mark.terminal

GPUS = 8


@needs_tmux
def test_tmux_120x40_8_ranks_with_workers_all_on_screen(tmux: Tmux) -> None:
    def drawn(screen: str) -> bool:
        return f"+{WORKERS} python" in screen  # the GPU area's layout is not this test's business

    with _demo_in_tmux(tmux, 120, 40, GPUS, drawn) as (demo, screen):
        trainers = [t.pid for t in demo.trainers]

        def all_ranks() -> bool:
            nonlocal screen
            screen = tmux.screen()
            rows = _rows(screen)
            return all(pid in rows and f"+{WORKERS} python" in rows[pid] for pid in trainers)

        assert _wait_until(all_ranks, 10.0), screen
        workers = {c.pid for t in demo.trainers for c in t.children() if c.status() != psutil.STATUS_ZOMBIE}
        assert len(workers) == GPUS * WORKERS
        assert not workers & set(_rows(screen)), screen  # folded: not a row of their own

        tmux.keys("F")
        assert _wait_until(lambda: bool(workers & set(_rows(tmux.screen()))), 5.0), tmux.screen()
        assert f"-{WORKERS} python" in tmux.screen()
        tmux.keys("F")
        assert _wait_until(all_ranks, 5.0), screen

        tmux.keys("Right")
        assert _wait_until(lambda: re.search(r"COMMAND ◂\d+", tmux.screen()) is not None, 5.0), tmux.screen()
        _quit_with_q(tmux, demo)
