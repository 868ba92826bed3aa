"""The bench's box as a GPU monitor sees it: `python bench/box_world.py PIDS TOOL [ARGS...]` installs a fake
NVML (tests/collect/fake_nvml.py: the binding's real structs) with one GPU per rank of PIDS (a JSON list of
pid lists, the rank's trainer first, then its workers), every pid a compute process on its GPU whose SM %
changes every 0.5 s, and then runs TOOL in this same process:

  gputui ARGS  `gputui ARGS`
  nvitop ARGS  `nvitop ARGS` (when installed): the same box, for the bench's relative budgets
  layout ARGS  `gputui ARGS` headless (Textual's run_test) at $BOX_SIZE (COLSxROWS); after $BOX_SETTLE_S
               seconds, writes to $BOX_LAYOUT the name of the screen's top widget under each cell (JSON
               rows of names), for bench/ptybytes.by_widget

The fake's clock is the real one, so both tools read it as they would a driver's.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

# The checkout, not bench/ (where sampler.py or tui.py would shadow a top-level module of that name).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))  # tests.collect.fake_nvml, gputui

import pynvml  # noqa: E402

from tests.collect.fake_nvml import FakeNvml, FakeProcess, UtilSample  # noqa: E402

STEP_S = 0.5  # how often every process's SM % changes
GIB = 2**30


class LiveNvml(FakeNvml):
    """A fake NVML whose clock runs as time.monotonic() does (from the fake's start value; advance() still
    moves it on, as in the tests)."""

    _offset = 0.0

    @property
    def now(self) -> float:
        return time.monotonic() + self._offset

    @now.setter
    def now(self, value: float) -> None:
        self._offset = value - time.monotonic()

    # nvitop calls these through C function pointers (gputui through the binding's wrappers, which the
    # test fake replaces): emulated here, the C way, so that nvitop sees the same memory and temperature.
    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        c_calls = {
            "nvmlDeviceGetMemoryInfo": self._c_memory,
            "nvmlDeviceGetMemoryInfo_v2": self._c_memory,
            "nvmlDeviceGetTemperatureV": self._c_temperature,
        }
        if name in c_calls:
            return c_calls[name]
        try:
            return super()._nvmlGetFunctionPointer(name)
        except pynvml.NVMLError_Uninitialized:
            self.violations.clear()
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND) from None  # as a driver lacking it

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        try:
            return super().nvmlDeviceGetProcessUtilization(handle, timeStamp)
        finally:
            self.proc_util_args.clear()  # the tests' record of every call: here it would only grow

    def _c_memory(self, handle: Any, ref: Any) -> int:
        gpu, memory = self._gpu_of(handle), ref._obj
        memory.total, memory.used = gpu.mem_total, gpu.mem_used
        memory.free = gpu.mem_total - gpu.mem_used - gpu.mem_reserved
        if hasattr(memory, "reserved"):
            memory.reserved = gpu.mem_reserved
        return int(pynvml.NVML_SUCCESS)

    def _c_temperature(self, handle: Any, ref: Any) -> int:
        ref._obj.temperature = self._gpu_of(handle).temperature or 0
        return int(pynvml.NVML_SUCCESS)


class _Patch:
    """monkeypatch.setattr, for good: this process exists to run on the fake."""

    def setattr(self, target: object, name: str, value: object, raising: bool = True) -> None:
        setattr(target, name, value)


def sm_percent(gpu: int, slot: int, step: int) -> int:
    """Process `slot` of a rank (0: the trainer) at half-second `step`: a trainer 55-99 %, a worker 0-12 %
    (its CUDA context does the odd copy); deterministic, so two runs see the same box. A multiplicative
    hash, not random.Random(seed): seeding one per process per step cost ~0.05 % of a core in the very
    process being measured (both monitors pay it, which drew their CPU toward each other)."""
    h = (gpu << 24 ^ slot << 20 ^ step) & 0xFFFFFFFF
    for _ in range(2):  # an integer mix (two rounds of a 32-bit hash): neighbouring steps look unrelated
        h = ((h >> 16) ^ h) * 0x45D9F3B & 0xFFFFFFFF
    h ^= h >> 16
    return 55 + h % 45 if slot == 0 else h % 13


def build(ranks: list[list[int]], patch: Any = None) -> LiveNvml:
    """The box's NVML, installed in pynvml (by `patch`, a pytest MonkeyPatch in the tests; for good by
    default)."""
    fake = LiveNvml(n_gpus=len(ranks))
    fake.install(patch or _Patch())
    fake.event_wait_cap = 3600.0  # a wait blocks for its whole timeout, as the driver's does
    for gpu, pids in zip(fake.gpus, ranks, strict=True):
        gpu.processes["C"] = [
            FakeProcess(pid, 30 * GIB if slot == 0 else GIB // 2) for slot, pid in enumerate(pids)
        ]
        gpu.mem_used = sum(p.memory or 0 for p in gpu.processes["C"])
        gpu.clock_reasons = 0  # a healthy box: no throttle
    step(fake, ranks, int(time.monotonic() / STEP_S))
    return fake


def step(fake: FakeNvml, ranks: list[list[int]], n: int) -> None:
    """Half-second `n`: a new SM % for every process, and the GPUs' utilization and power with them."""
    stamp = time.time_ns() // 1000  # NVML stamps samples with the CPU's epoch time, in microseconds
    for gpu, pids in zip(fake.gpus, ranks, strict=True):
        sms = [sm_percent(gpu.index, slot, n) for slot in range(len(pids))]
        new = [UtilSample(pid, stamp, sm, sm // 3) for pid, sm in zip(pids, sms, strict=True)]
        gpu.util_samples = [
            *gpu.util_samples[-4 * len(pids) :],
            *new,
        ]  # one assignment: readers see old or new
        gpu.util_gpu = min(100, sum(sms))
        gpu.util_mem = min(100, sum(sms) // 3)
        gpu.power_mw = 90_000 + 6_000 * gpu.util_gpu


def keep_changing(fake: FakeNvml, ranks: list[list[int]]) -> None:
    def run() -> None:
        while True:
            n = int(time.monotonic() / STEP_S) + 1
            time.sleep(max(0.0, n * STEP_S - time.monotonic()))
            step(fake, ranks, n)

    threading.Thread(target=run, name="box", daemon=True).start()


def _top_widget_names(app: Any, cols: int, rows: int) -> list[list[str]]:
    from textual.errors import NoWidget

    grid = []
    for y in range(rows):
        row = []
        for x in range(cols):
            try:
                widget, _ = app.screen.get_widget_at(x, y)
            except NoWidget:
                row.append("")
                continue
            while widget.parent is not None and widget.parent is not app.screen:
                widget = widget.parent
            row.append(widget.id or type(widget).__name__)
        grid.append(row)
    return grid


def headless_layout(out: Path, cols: int, rows: int, settle_s: float) -> None:
    """App.run replaced: the app headless at cols x rows; the widget names of its screen to `out`."""
    import asyncio  # here, not at the top: an asyncio imported before gputui's would bring ssl (~4 MiB) in

    from textual.app import App

    def run(app: Any, *args: object, **kwargs: object) -> int:
        async def go() -> None:
            async with app.run_test(size=(cols, rows)) as pilot:
                await pilot.pause(settle_s)
                out.write_text(json.dumps(_top_widget_names(app, cols, rows)))

        asyncio.run(go())
        return 0

    App.run = run  # type: ignore[method-assign,assignment]


def main(argv: list[str]) -> int:
    ranks: list[list[int]] = json.loads(argv[0])
    tool, args = argv[1], argv[2:]
    fake = build(ranks)
    keep_changing(fake, ranks)
    if tool == "nvitop":
        pynvml.nvmlInitWithFlags = lambda flags: fake.nvmlInit()  # what nvitop calls
        from nvitop.cli import main as nvitop_main  # type: ignore[import-untyped, import-not-found, unused-ignore]

        sys.argv = ["nvitop", *args]
        return int(nvitop_main() or 0)
    if tool == "layout":
        cols, rows = (int(v) for v in os.environ["BOX_SIZE"].split("x"))
        headless_layout(
            Path(os.environ["BOX_LAYOUT"]), cols, rows, float(os.environ.get("BOX_SETTLE_S", "3"))
        )
    from gputui.cli import main as gputui_main

    return gputui_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
