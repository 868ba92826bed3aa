"""The doctor on a real NVIDIA GPU and driver; skipped where NVML cannot start or sees no GPU."""

from __future__ import annotations

import pytest

from bench.gpucheck.__main__ import why_no_nvml as _why_no_gpu
from gputui.doctor import checks_system, facts
from gputui.doctor.report import OK


@pytest.mark.gpu
def test_the_driver_checks_pass_on_a_working_gpu_box() -> None:
    why = _why_no_gpu()
    if why is not None:
        pytest.skip(why)
    f = facts.gather()
    assert f.nvml_error is None and f.gpus
    assert f.library is not None and "libnvidia-ml" in f.library  # the file really loaded
    assert f.driver_version and f.cuda_version
    assert all(g.capability is not None for g in f.gpus if not g.lost)
    driver = checks_system.driver(f)
    assert [c.status for c in driver] == [OK] * len(driver), driver
    assert checks_system.gpus(f)[0].status == OK
