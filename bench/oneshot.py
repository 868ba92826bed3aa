"""oneshot: wall time of `gputui --once` / `--json` on the demo and on a fake NVML."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from bench.shared import ROOT
from gputui.collect.sources.demo import DemoSource

# `gputui --once` on a fake NVML (tests/collect/fake_nvml.py, real pynvml structs): the real one-shot path
# without a driver's own latency, and without the demo's 33 processes to start and reap.
_FAKE_NVML_ONESHOT = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.collect.fake_nvml import FakeNvml, FakeProcess
class Patch:
    def setattr(self, target, name, value, raising=True):
        setattr(target, name, value)
fake = FakeNvml(n_gpus=int(sys.argv[2])).install(Patch())
for i, gpu in enumerate(fake.gpus):
    gpu.processes["C"].append(FakeProcess(100 + i, 10 * 2**30))
    fake.add_util_sample(i, 100 + i, 90, 40)
from gputui.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _median_wall(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 3)


def bench_oneshot(gpus: int = 8, runs: int = 11) -> dict[str, object]:
    """Wall time of `gputui --once` / `--json` (one reading) as a user's shell sees it: on the demo, on a
    fake NVML, and the demo's own start and stop (spawning and reaping its processes) to tell apart."""
    root = str(ROOT)
    demo = [sys.executable, "-m", "gputui", "--demo", "--demo-gpus", str(gpus)]
    fake = [sys.executable, "-c", _FAKE_NVML_ONESHOT, root, str(gpus)]
    starts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        source = DemoSource(gpus=gpus)
        source.open()
        source.close()
        starts.append(time.perf_counter() - t0)
    start_stop = round(statistics.median(starts), 3)
    once = _median_wall([*demo, "--once"], runs)
    return {
        "gpus": gpus,
        "runs": runs,
        "demo_once_wall_s": once,
        "demo_json_wall_s": _median_wall([*demo, "--json"], runs),
        "demo_start_stop_s": start_stop,
        "demo_once_wall_s_less_demo_start_stop": round(once - start_stop, 3),
        "once_wall_s_fake_nvml": _median_wall([*fake, "--once"], runs),
        "json_wall_s_fake_nvml": _median_wall([*fake, "--json"], runs),
        "python_startup_s": _median_wall([sys.executable, "-c", "pass"], runs),
    }
