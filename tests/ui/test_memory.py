"""The real program freezes what exists once its first screen is drawn, then collects what is made
since every few seconds (gputui.ui.memory); an app under a test freezes nothing and keeps Python's
thresholds."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest

from gputui.ui import memory
from tests.ui.conftest import first_frame, make_app

PROGRAM = textwrap.dedent(
    """
    import asyncio, gc, weakref
    from gputui.ui import memory
    from gputui.ui.base_app import BaseApp

    memory.SETTLE_S = memory.TIDY_S = 0.1

    class Cycle:
        pass

    class Watched(BaseApp):
        def on_mount(self):  # (BaseApp.on_mount runs too, after it)
            self.set_timer(0.5, self.make_garbage)

        def make_garbage(self):
            self.frozen = gc.get_freeze_count()
            self.young = gc.get_threshold()[0]
            gc.disable()  # from now on only the app's tidying collects
            cycle = Cycle()
            cycle.me = cycle
            self.ref = weakref.ref(cycle)
            del cycle
            self.set_timer(0.5, self.report)

        def report(self):
            print(self.frozen, self.young, self.ref() is None)
            self.exit(0)

    asyncio.run(Watched().run_async(headless=True))
    """
)


def test_the_program_freezes_its_objects_once_drawn_and_collects_new_cycles_every_few_seconds() -> None:
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    frozen, young, collected = out.stdout.split()
    assert int(frozen) > 10_000  # the modules, the app: everything there was
    assert int(young) == memory.YOUNG_THRESHOLD  # from then on tidy collects, not counts of new objects
    assert collected == "True"  # a cycle made after that was collected with the collector off


async def test_an_app_under_a_test_freezes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "SETTLE_S", 0.05)  # long past by the end, had run_test settled
    app = make_app(interval=0.05)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await first_frame(pilot, app)
            await pilot.pause(0.3)
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold()[0] != memory.YOUNG_THRESHOLD
    finally:
        gc.unfreeze()  # should it fail: this worker's later tests stay collectable
