"""Regressions: a driver without the deprecated nvmlDeviceGetTemperature (temperatures all n/a) and one
without nvmlDeviceGetFieldValues (energy null while power fell back)."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from gputui.collect.sources.base import Reading
from gputui.collect.sources.nvml import NvmlSource
from tests.collect.fake_nvml import FakeNvml
from tests.helpers import known


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    f = FakeNvml(n_gpus=2)
    f.gpus[1].temperature = 44
    f.gpus[1].energy_mj = 5_000_000
    f.install(monkeypatch)
    yield f
    assert f.violations == []


def read(fake: FakeNvml, slows: list[bool]) -> list[Reading]:
    src = NvmlSource()
    src.open()
    try:
        out = []
        for slow in slows:
            fake.advance(1.0)
            out.append(src.read(slow))
        return out
    finally:
        src.close()


def test_temperature_from_the_v_call_when_the_old_one_is_missing(fake: FakeNvml) -> None:
    fake.missing_symbols.add("nvmlDeviceGetTemperature")  # a driver that dropped the deprecated call
    readings = read(fake, [True, False, True])
    assert [[g.temperature for g in r.gpus] for r in readings] == [[61, 44]] * 3
    for i in (0, 1):
        assert fake.calls[i]["nvmlDeviceGetTemperature"] == 1  # FunctionNotFound once, then not again
        assert fake.calls[i]["nvmlDeviceGetTemperatureV"] == 2  # each slow tick


def test_temperature_from_the_v_call_when_the_binding_lacks_the_old_one(
    fake: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(pynvml, "nvmlDeviceGetTemperature")  # a binding for CUDA 14, where it is gone
    (r,) = read(fake, [True])
    assert [g.temperature for g in r.gpus] == [61, 44]


def test_the_old_temperature_call_is_preferred_where_it_exists(fake: FakeNvml) -> None:
    readings = read(fake, [True, True])
    assert [g.temperature for g in readings[-1].gpus] == [61, 44]
    assert fake.calls[0]["nvmlDeviceGetTemperatureV"] == 0


def test_a_sensor_the_old_call_says_is_unsupported_is_not_asked_again(fake: FakeNvml) -> None:
    """NotSupported means no sensor: the V call would say the same, so it is not asked."""
    fake.gpus[0].temperature = None
    readings = read(fake, [True, True])
    assert [g.temperature for g in readings[-1].gpus] == [None, 44]
    assert fake.calls[0]["nvmlDeviceGetTemperature"] == 1
    assert fake.calls[0]["nvmlDeviceGetTemperatureV"] == 0


def test_no_temperature_call_at_all_gives_none(fake: FakeNvml) -> None:
    fake.missing_symbols |= {"nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV"}
    readings = read(fake, [True, True, True])
    assert [g.temperature for g in readings[-1].gpus] == [None, None]
    assert fake.calls[0]["nvmlDeviceGetTemperatureV"] == 1
    assert readings[-1].errors == ()


def test_energy_from_the_single_call_when_field_values_is_missing(fake: FakeNvml) -> None:
    fake.missing_symbols.add("nvmlDeviceGetFieldValues")
    readings = read(fake, [True, False, False])
    assert [r.gpus[0].power for r in readings] == [350.25] * 3  # the fallback that was there already
    # mJ -> J, the counter as it stands at each reading (advance() adds power x time)
    assert readings[-1].gpus[0].energy == fake.gpus[0].energy_mj / 1000
    assert readings[-1].gpus[1].energy == fake.gpus[1].energy_mj / 1000
    assert known(readings[0].gpus[0].energy) < known(readings[-1].gpus[0].energy)
    assert fake.calls[0]["nvmlDeviceGetTotalEnergyConsumption"] == 3


def test_energy_single_call_not_used_while_the_field_answers(fake: FakeNvml) -> None:
    readings = read(fake, [True, False])
    assert readings[-1].gpus[0].energy == fake.gpus[0].energy_mj / 1000
    assert fake.calls[0]["nvmlDeviceGetTotalEnergyConsumption"] == 0


def test_energy_unsupported_by_both_is_none_and_asked_once(fake: FakeNvml) -> None:
    fake.missing_symbols.add("nvmlDeviceGetFieldValues")
    fake.gpus[0].power_mw = None  # no power sensor: no energy counter either
    readings = read(fake, [True, False, False])
    assert (readings[-1].gpus[0].energy, readings[-1].gpus[0].power) == (None, None)
    assert fake.calls[0]["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert readings[-1].gpus[1].energy == fake.gpus[1].energy_mj / 1000
