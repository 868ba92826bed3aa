"""`gputui --once` on GPUs with GPM (issue 27): SM and tensor activity beside NVML's utilization on each
GPU line, `busy but starved` where NVML says busy and the SMs are nearly empty, a table of every GPM metric
per GPU and MIG instance (`n/a` for one that failed, never 0), the one line that says why GPM is off; and
nothing of it on a box without GPM."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import STARVED_GPU, DemoSource
from gputui.model import GPM_RATES, GPM_RATIOS, Snapshot
from gputui.output.oneshot import GPM_LABELS, GPM_LEGEND, ONE_READING_LEGEND, gpm_value, render
from gputui.units import fmt_pct

NOTE = "GPM not armed: DCGM is running (nv-hostengine (pid 812)) and reads the same counters"


@pytest.fixture(scope="module")
def snap() -> Snapshot:
    with Sampler(DemoSource(gpus=4, workers=0, start_at=120.0)) as sampler:
        return sampler.tick()


def gpu_line(text: str, gpu: int) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"{gpu:<3} ") and "H100" in ln]
    return line


def columns(header: str, line: str, *names: str) -> list[str]:
    """The words of `line` under the header's `names` (right-aligned: a column ends where its header does)."""
    out = []
    for name in names:
        end = re.search(rf"\b{re.escape(name)}\b", header)
        assert end is not None, (name, header)
        out.append(line[: end.end()].split()[-1])
    return out


def test_each_gpu_line_has_sm_and_tc_beside_util(snap: Snapshot) -> None:
    text = render(snap)
    header = text.splitlines()[1]
    assert re.search(r"UTIL\s+SM\s+TC\s+MEMORY", header), header
    for g in snap.gpus:
        assert g.gpm is not None
        line = gpu_line(text, g.index)
        assert columns(header, line, "UTIL", "SM", "TC") == [
            fmt_pct(g.util_gpu),
            fmt_pct(g.gpm.sm_active),
            fmt_pct(g.gpm.tensor),
        ]


def test_the_starved_gpu_is_called_out_on_its_line(snap: Snapshot) -> None:
    starved = snap.gpus[STARVED_GPU]
    assert starved.gpm is not None and starved.gpm.sm_active is not None
    said = f"busy but starved: SM {starved.gpm.sm_active:.0f}% while util {starved.util_gpu}%"
    for width in (None, 80):  # on a line of its own under the GPU's: a narrow terminal keeps it
        lines = render(snap, width=width).splitlines()
        at = lines.index(gpu_line("\n".join(lines), STARVED_GPU))
        assert lines[at + 1].lstrip().startswith(said), lines[at + 1]
        assert sum("starved" in ln for ln in lines) == 1  # no other GPU is


def test_a_table_lists_every_metric_of_every_gpu(snap: Snapshot) -> None:
    lines = render(snap).splitlines()
    (at,) = [k for k, ln in enumerate(lines) if ln.startswith("GPM ")]
    header = lines[at]
    names = [GPM_LABELS[n][0] for n in (*GPM_RATIOS, *GPM_RATES)]
    assert header.split()[3:] == " ".join(names).split(), header  # after `GPM 0.1 s`
    assert "GPM 0.1 s" in header  # the interval it measured over
    for g in snap.gpus:
        row = lines[at + 1 + g.index]
        assert row.split()[0] == str(g.index)
        assert g.gpm is not None
        cells = row.split()[1:]
        ratios = cells[: len(GPM_RATIOS)]
        assert ratios == [gpm_value(g.gpm, n) for n in GPM_RATIOS]
        rates = " ".join(cells[len(GPM_RATIOS) :])
        assert rates == " ".join(gpm_value(g.gpm, n) for n in GPM_RATES)
    assert GPM_LEGEND in lines


def test_a_metric_that_failed_is_n_a_not_0(snap: Snapshot) -> None:
    g = snap.gpus[0]
    assert g.gpm is not None
    broken = dataclasses.replace(g, gpm=dataclasses.replace(g.gpm, tensor=None, pcie_rx=None))
    lines = render(dataclasses.replace(snap, gpus=(broken, *snap.gpus[1:]))).splitlines()
    (at,) = [k for k, ln in enumerate(lines) if ln.startswith("GPM ")]
    cells = lines[at + 1].split()
    assert cells[1 + GPM_RATIOS.index("tensor")] == "n/a"
    assert "n/a" in lines[at + 1][lines[at].index("PCIe rx") - 3 : lines[at].index("PCIe rx") + 7]
    header = lines[1]
    assert columns(header, gpu_line("\n".join(lines), 0), "TC") == ["n/a"]


def test_a_mig_gpu_lists_each_instance_s_gpm() -> None:
    with Sampler(DemoSource(gpus=1, workers=0, start_at=120.0, mig=True)) as sampler:
        snap = sampler.tick()
    lines = render(snap).splitlines()
    (g,) = snap.gpus
    for m in g.mig:
        assert m.gpm is not None
        (row,) = [ln for ln in lines if ln.startswith(f"0 MIG {m.gpu_instance}/{m.compute_instance} ")]
        assert row.split()[3 : 3 + len(GPM_RATIOS)] == [gpm_value(m.gpm, n) for n in GPM_RATIOS]
        (under,) = [ln for ln in lines if ln.lstrip().startswith(f"MIG {m.gpu_instance}/")]
        assert f"SM {fmt_pct(m.gpm.sm_active)} TC {fmt_pct(m.gpm.tensor)}" in under


def test_a_box_without_gpm_shows_none_of_it(snap: Snapshot) -> None:
    old = dataclasses.replace(snap, gpus=tuple(dataclasses.replace(g, gpm=None) for g in snap.gpus))
    text = render(old)
    assert not re.search(r"\bTC\b", text) and "GPM" not in text and "starved" not in text
    assert "UTIL  " in text.splitlines()[1] and " SM " not in text.splitlines()[1].split("MEMORY")[0]


def test_gpm_not_armed_says_why_in_one_line(snap: Snapshot) -> None:
    off = dataclasses.replace(
        snap, gpus=tuple(dataclasses.replace(g, gpm=None) for g in snap.gpus), gpm_note=NOTE + "\x1b[31m"
    )
    lines = render(off).splitlines()
    said = [ln for ln in lines if "DCGM" in ln]
    assert len(said) == 1 and said[0].startswith(NOTE) and "\x1b" not in said[0]  # hostile text: printable


def test_the_one_reading_legend_stays_last(snap: Snapshot) -> None:
    lines = render(snap, one_reading=True).splitlines()
    assert lines[-1] == ONE_READING_LEGEND


def test_a_narrow_terminal_keeps_sm_and_tc(snap: Snapshot) -> None:
    text = render(snap, width=80)
    assert all(len(ln) <= 80 for ln in text.splitlines())
    header = text.splitlines()[1]
    assert re.search(r"UTIL\s+SM\s+TC", header), header
    g = snap.gpus[0]
    assert g.gpm is not None
    assert columns(header, gpu_line(text, 0), "SM", "TC") == [fmt_pct(g.gpm.sm_active), fmt_pct(g.gpm.tensor)]


def test_once_on_the_demo_without_textual() -> None:
    code = (
        "import sys, gputui.cli\n"
        "rc = gputui.cli.main(['--demo', '--demo-gpus', '3', '--once'])\n"
        "assert 'textual' not in sys.modules, 'textual imported'\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "busy but starved: SM" in done.stdout
    assert any(ln.startswith("GPM 0.1 s") for ln in done.stdout.splitlines())
