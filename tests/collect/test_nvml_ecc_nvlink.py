"""ECC errors and NVLink throughput from NVML, against the fake NVML (tests/collect/fake_nvml.py).

Both ride in the one nvmlDeviceGetFieldValues call of every tick; the ECC mode and whether NVLink exists
are asked on the settings tier, so a fast tick makes no extra NVML call for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from gputui.collect.sources.nvml import SETTINGS_EVERY, NvmlSource
from gputui.model import GpuHealth
from tests.collect.fake_nvml import ALL_LINKS, FakeNvml
from tests.collect.test_nvml import calls, expected_sample, tick

# The fixtures of test_nvml.py, re-exported here so that pytest finds them.
from tests.collect.test_nvml import fake as fake
from tests.collect.test_nvml import make_source as make_source
from tests.collect.test_nvml import source as source

F_ECC = pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL
F_NVLINK_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
F_NVLINK_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
ECC_ON, ECC_OFF = (1, 1), (0, 0)
LINKS = 18  # an H100 SXM's NVLink 4 links


def with_nvlink(fake: FakeNvml, gpu: int = 0) -> None:
    g = fake.gpus[gpu]
    g.nvlink_tx_kib = [1_000_000 + link for link in range(LINKS)]
    g.nvlink_rx_kib = [2_000_000 + 7 * link for link in range(LINKS)]


class FieldLog:
    """Wraps the fake's nvmlDeviceGetFieldValues: records what each call asked for and can shift the
    timestamps the driver stamps on the values."""

    def __init__(self, fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: list[list[Any]] = []  # GPU 0's calls only
        self.shift_us = 0  # added to every timestamp of the next answers
        self.timestamp: int | None = None  # if set: every value carries this timestamp
        inner = fake.nvmlDeviceGetFieldValues

        def wrapped(handle: Any, field_ids: list[Any]) -> Any:
            values = inner(handle, field_ids)
            if handle.index == 0:
                self.asked.append(list(field_ids))
            for fv in values:
                fv.timestamp = self.timestamp if self.timestamp is not None else fv.timestamp + self.shift_us
            return values

        monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", wrapped)

    def ids(self, call: int = -1) -> list[int]:
        return [f[0] if isinstance(f, tuple) else f for f in self.asked[call]]


@pytest.fixture
def log(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> Iterator[FieldLog]:
    yield FieldLog(fake, monkeypatch)


# -- ECC --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("errors", [0, 3])
def test_ecc_on_reports_volatile_uncorrected_errors(
    fake: FakeNvml, make_source: Any, log: FieldLog, errors: int
) -> None:
    fake.gpus[0].ecc_mode = ECC_ON
    fake.gpus[0].ecc_uncorrected = errors
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False, False)]
    assert [r.gpus[0].ecc_errors for r in readings] == [errors] * 3  # from the first tick on
    assert readings[-1].gpus[1].ecc_errors is None  # GPU 1 has no ECC: no mix-up
    assert all(F_ECC in log.ids(i) for i in range(3))
    # ECC on: health too (issue 19), from the slow tick's batched read; an H100 remaps rows, retires no pages
    health = GpuHealth(
        ecc_corrected_volatile=0,
        ecc_uncorrected_volatile=errors,
        ecc_corrected_aggregate=0,
        ecc_uncorrected_aggregate=0,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        remap_pending=False,
        remap_failed=False,
    )
    assert readings[-1].gpus[0] == expected_sample(fake, 0, ecc_errors=errors, health=health)


def test_new_ecc_errors_show_on_the_next_fast_tick(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].ecc_mode = ECC_ON
    tick(source, fake)
    fake.gpus[0].ecc_uncorrected = 2
    assert tick(source, fake, slow=False).gpus[0].ecc_errors == 2


def test_ecc_off_gives_none_and_the_field_is_not_asked(
    fake: FakeNvml, make_source: Any, log: FieldLog
) -> None:
    fake.gpus[0].ecc_mode = ECC_OFF
    fake.gpus[0].ecc_uncorrected = 5  # a stale count from when it was on: not shown
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False)]
    assert [r.gpus[0].ecc_errors for r in readings] == [None, None]
    assert all(F_ECC not in log.ids(i) for i in range(2))


def test_ecc_mode_is_a_setting_asked_only_on_settings_ticks(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].ecc_mode = ECC_OFF
    tick(source, fake)
    for _ in range(5):
        tick(source, fake, slow=False)
    assert calls(fake, 0, "nvmlDeviceGetEccMode") == 1
    fake.gpus[0].ecc_mode = ECC_ON  # an admin enabled it and reset the GPU
    seen = [tick(source, fake, slow=True).gpus[0].ecc_errors for _ in range(SETTINGS_EVERY)]
    assert seen == [None] * (SETTINGS_EVERY - 1) + [0]
    assert calls(fake, 0, "nvmlDeviceGetEccMode") == 2


def test_ecc_not_supported_is_none_and_never_asked_again(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].ecc_mode = None  # a consumer board: NotSupported
    readings = [tick(source, fake, slow=True) for _ in range(2 * SETTINGS_EVERY + 1)]
    assert all(r.gpus[0].ecc_errors is None for r in readings)
    assert calls(fake, 0, "nvmlDeviceGetEccMode") == 1


def test_ecc_mode_unreadable_for_now_is_asked_again(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].ecc_mode = ECC_ON
    fake.fail(0, "nvmlDeviceGetEccMode", pynvml.NVML_ERROR_UNKNOWN, times=1)
    assert tick(source, fake).gpus[0].ecc_errors is None
    for _ in range(SETTINGS_EVERY - 1):
        assert tick(source, fake).gpus[0].ecc_errors is None
    assert tick(source, fake).gpus[0].ecc_errors == 0  # the next settings tick
    assert calls(fake, 0, "nvmlDeviceGetEccMode") == 2


def test_ecc_field_not_supported_is_none_and_not_asked_again(
    fake: FakeNvml, make_source: Any, log: FieldLog
) -> None:
    fake.gpus[0].ecc_mode = ECC_ON
    fake.gpus[0].field_returns[F_ECC] = pynvml.NVML_ERROR_NOT_SUPPORTED
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False, True)]
    assert [r.gpus[0].ecc_errors for r in readings] == [None] * 3
    assert [F_ECC in log.ids(i) for i in range(3)] == [True, False, False]
    assert readings[-1].gpus[0].power == 350.25  # the other fields of the batch are intact


@pytest.mark.parametrize("error", [pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_UNKNOWN])
def test_ecc_field_failing_once_is_none_for_that_tick_only(
    fake: FakeNvml, make_source: Any, log: FieldLog, error: int
) -> None:
    fake.gpus[0].ecc_mode = ECC_ON
    fake.gpus[0].ecc_uncorrected = 3
    fake.gpus[0].field_returns[F_ECC] = error
    src = make_source()
    assert tick(src, fake).gpus[0].ecc_errors is None
    del fake.gpus[0].field_returns[F_ECC]
    assert tick(src, fake, slow=False).gpus[0].ecc_errors == 3
    assert F_ECC in log.ids(-1)


# -- NVLink -----------------------------------------------------------------------------------------------


def test_nvlink_rates_from_two_ticks_summed_over_all_links(
    fake: FakeNvml, make_source: Any, log: FieldLog
) -> None:
    with_nvlink(fake)
    src = make_source()
    first = tick(src, fake).gpus[0]
    assert (first.nvlink_tx, first.nvlink_rx) == (None, None)  # one reading is no rate
    g = fake.gpus[0]
    g.nvlink_tx_kib = [kib + 1000 + link for link, kib in enumerate(g.nvlink_tx_kib or [])]
    g.nvlink_rx_kib = [kib + 250 for kib in g.nvlink_rx_kib or []]
    fake.advance(1.0)  # two seconds between the readings
    s = tick(src, fake, slow=False).gpus[0]
    tx_kib = 1000 * LINKS + sum(range(LINKS))  # every link counts, not link 0 alone
    assert s.nvlink_tx == tx_kib * 1024 / 2.0
    assert s.nvlink_rx == 250 * LINKS * 1024 / 2.0
    assert tick(src, fake, slow=False).gpus[1].nvlink_tx is None  # GPU 1 has no NVLink
    assert (F_NVLINK_TX, ALL_LINKS) in log.asked[-1] and (F_NVLINK_RX, ALL_LINKS) in log.asked[-1]


def test_nvlink_rate_follows_the_counters_through_advance(fake: FakeNvml, source: NvmlSource) -> None:
    with_nvlink(fake)
    fake.gpus[0].nvlink_tx_rate, fake.gpus[0].nvlink_rx_rate = 20 * 2**30, 10 * 2**30  # per link
    tick(source, fake)
    s = tick(source, fake, slow=False).gpus[0]
    assert (s.nvlink_tx, s.nvlink_rx) == (LINKS * 20 * 2**30, LINKS * 10 * 2**30)
    assert s == expected_sample(
        fake, 0, nvlink_tx=float(LINKS * 20 * 2**30), nvlink_rx=float(LINKS * 10 * 2**30)
    )


def test_nvlink_elapsed_time_is_the_values_own_timestamps(
    fake: FakeNvml, make_source: Any, log: FieldLog
) -> None:
    with_nvlink(fake)
    fake.gpus[0].nvlink_tx_rate = 4096  # per link and second of the fake's clock
    src = make_source()
    tick(src, fake)
    log.shift_us = 3_000_000  # the driver stamped the next values 4 s after the first, not 1 s
    s = tick(src, fake, slow=False).gpus[0]
    assert s.nvlink_tx == 4096 * LINKS / 4.0


def test_nvlink_without_timestamps_uses_the_monotonic_clock(
    fake: FakeNvml, make_source: Any, log: FieldLog
) -> None:
    with_nvlink(fake)
    fake.gpus[0].nvlink_tx_rate = 8192
    log.timestamp = 0
    src = make_source()
    tick(src, fake)
    fake.advance(1.0)
    assert tick(src, fake, slow=False).gpus[0].nvlink_tx == 8192 * LINKS


def test_nvlink_same_timestamp_twice_is_no_rate(fake: FakeNvml, make_source: Any, log: FieldLog) -> None:
    with_nvlink(fake)
    log.timestamp = 1_700_000_000_000_000  # a value NVML did not refresh between the reads
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False)]
    assert readings[-1].gpus[0].nvlink_tx is None


def test_nvlink_counter_going_back_is_none_then_rates_again(fake: FakeNvml, source: NvmlSource) -> None:
    with_nvlink(fake)
    fake.gpus[0].nvlink_rx_rate = 1024
    tick(source, fake)
    assert tick(source, fake, slow=False).gpus[0].nvlink_rx == 1024 * LINKS
    fake.gpus[0].nvlink_rx_kib = [0] * LINKS  # the driver was reloaded
    s = tick(source, fake, slow=False).gpus[0]
    assert s.nvlink_rx is None
    assert s.nvlink_tx == 0.0  # the other direction's counter did not go back: idle links are 0, not None
    assert tick(source, fake, slow=False).gpus[0].nvlink_rx == 1024 * LINKS


def test_nvlink_field_failing_once_skips_that_tick_then_spans_both(
    fake: FakeNvml, source: NvmlSource
) -> None:
    with_nvlink(fake)
    fake.gpus[0].nvlink_tx_rate = 2048
    tick(source, fake)
    fake.gpus[0].field_returns[F_NVLINK_TX] = pynvml.NVML_ERROR_UNKNOWN
    s = tick(source, fake, slow=False).gpus[0]
    assert s.nvlink_tx is None and s.nvlink_rx == 0.0
    del fake.gpus[0].field_returns[F_NVLINK_TX]
    assert tick(source, fake, slow=False).gpus[0].nvlink_tx == 2048 * LINKS  # over the two seconds


def test_no_nvlink_is_none_and_asked_once(fake: FakeNvml, make_source: Any, log: FieldLog) -> None:
    src = make_source()  # neither fake GPU has NVLink: nvmlDeviceGetNvLinkState says NotSupported
    readings = [tick(src, fake, slow=True) for _ in range(2 * SETTINGS_EVERY + 1)]
    for r in readings:
        for g in r.gpus:
            assert (g.nvlink_tx, g.nvlink_rx) == (None, None)
    assert calls(fake, 0, "nvmlDeviceGetNvLinkState") == 1
    assert calls(fake, 0, "nvmlDeviceGetNvLinkState", 0) == 1  # link 0 is the one asked
    assert all(F_NVLINK_TX not in log.ids(i) and F_NVLINK_RX not in log.ids(i) for i in range(len(log.asked)))
    assert readings[-1].gpus[0] == expected_sample(fake, 0)


def test_nvlink_fields_not_supported_are_none_and_not_asked_again(
    fake: FakeNvml, make_source: Any, log: FieldLog
) -> None:
    with_nvlink(fake)
    for fid in (F_NVLINK_TX, F_NVLINK_RX):
        fake.gpus[0].field_returns[fid] = pynvml.NVML_ERROR_NOT_SUPPORTED
    src = make_source()
    readings = [tick(src, fake, slow) for slow in (True, False, False)]
    assert all((r.gpus[0].nvlink_tx, r.gpus[0].nvlink_rx) == (None, None) for r in readings)
    assert [F_NVLINK_TX in log.ids(i) for i in range(3)] == [True, False, False]
    assert readings[-1].gpus[0].pcie_tx == 2e9  # the rest of the batch is intact


def test_nvlink_state_unreadable_for_now_is_asked_again(fake: FakeNvml, source: NvmlSource) -> None:
    with_nvlink(fake)
    fake.fail(0, "nvmlDeviceGetNvLinkState", pynvml.NVML_ERROR_UNKNOWN, times=1)
    for _ in range(SETTINGS_EVERY):
        assert tick(source, fake).gpus[0].nvlink_tx is None
    tick(source, fake)  # the next settings tick finds the links: the first reading of the counters
    assert tick(source, fake, slow=False).gpus[0].nvlink_tx == 0.0
    assert calls(fake, 0, "nvmlDeviceGetNvLinkState") == 2
    for _ in range(SETTINGS_EVERY):
        tick(source, fake)
    assert calls(fake, 0, "nvmlDeviceGetNvLinkState") == 2  # known now: never asked again


def test_gpu_lost_in_an_nvlink_field(fake: FakeNvml, source: NvmlSource) -> None:
    with_nvlink(fake)
    tick(source, fake)
    fake.gpus[0].field_returns[F_NVLINK_RX] = pynvml.NVML_ERROR_GPU_IS_LOST
    r = tick(source, fake, slow=False)
    assert r.gpus[0].lost and not r.gpus[1].lost


# -- cost -------------------------------------------------------------------------------------------------


def test_no_extra_call_on_fast_ticks(fake: FakeNvml, source: NvmlSource) -> None:
    fake.gpus[0].ecc_mode = ECC_ON
    with_nvlink(fake)
    tick(source, fake)
    fake.reset_counts()
    for _ in range(4):
        tick(source, fake, slow=False)
    assert calls(fake, 0, "nvmlDeviceGetEccMode") == calls(fake, 0, "nvmlDeviceGetNvLinkState") == 0
    assert calls(fake, 0, "nvmlDeviceGetFieldValues") == 4  # the one batched read, shared
    assert fake.total_calls(0) == fake.total_calls(1)  # as many as GPU 1's, which has neither
