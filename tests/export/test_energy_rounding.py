"""DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in whole millijoules: NVML's joules times 1000 left float noise
in the exposition (`1.0500837760000001e+09`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gputui.export.metrics import DipCounters, families
from gputui.model import GpuSample, Snapshot
from tests.builders import snapshot

NAME = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


class _Once:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Any]:
        return families(self.snap, DipCounters())


def energy_line(joules: float) -> str:
    gpu = GpuSample(index=0, name="GPU", uuid="GPU-0", minor=0, energy=joules)
    snap = snapshot(time=0.0, hostname="h", source="nvml", gpus=(gpu,), processes=())
    registry = CollectorRegistry()
    registry.register(_Once(snap))
    (line,) = [ln for ln in generate_latest(registry).decode().splitlines() if ln.startswith(NAME + "{")]
    return line.rsplit(" ", 1)[1]


@pytest.mark.parametrize(
    ("joules", "exposed"),
    [
        (1_050_083.776, "1.050083776e+09"),  # 1050083.776 * 1000 == 1050083776.0000001
        (0.0016, "2.0"),  # to the millijoule (joules to 3 decimals)
        (0.5, "500.0"),
        (0.0, "0.0"),
    ],
)
def test_energy_is_whole_millijoules(joules: float, exposed: str) -> None:
    assert energy_line(joules) == exposed
