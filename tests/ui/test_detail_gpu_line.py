"""The detail's GPU line says what a device holder is, instead of `GPU 0  ()`."""

from __future__ import annotations

from dataclasses import replace

from gputui.model import ProcessRow
from gputui.ui.screens.detail import _gpu_line
from tests.ui import world


def rows() -> list[ProcessRow]:
    _, past = world.sampler(gpus=4, weird=True)
    return [p for p in past[-1].processes if isinstance(p, ProcessRow)]


def test_a_holder_nvml_does_not_list_says_so() -> None:
    # A data-loader worker holding /dev/nvidia0: on a GPU, in none of NVML's lists.
    holders = [replace(p, kinds="", used_memory=None) for p in rows() if p.gpu is not None]
    assert holders
    for p in holders:
        line = _gpu_line(p)
        assert line is not None and "()" not in line
        assert line.startswith(f"{p.gpu}  (holds its device file; not in NVML's list")


def test_a_listed_process_shows_its_kinds_and_memory() -> None:
    listed = [p for p in rows() if p.gpu is not None and p.kinds]
    assert listed
    for p in listed:
        line = _gpu_line(p)
        assert line is not None and line.startswith(f"{p.gpu}  ({p.kinds})  memory ")
