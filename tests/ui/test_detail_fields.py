"""The detail shows when a process started, its CPU and RSS, and its training variables (NCCL_*, RANK,
MASTER_ADDR, ...) from its real environment: printable, and nothing else of that environment."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from gputui.collect.procs.join import ProcessJoiner, describe
from gputui.model import GpuProcess, ProcessDetail, ProcessRow
from gputui.ui.screens.detail import render_detail
from gputui.units import NA
from tests.builders import process_row
from tests.collect.test_describe_env import TRAINING, describe_as_another_user, sleeper


def text_of(table: Table, width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text(styles=False)


def row_of(pid: int) -> ProcessRow:
    rows, _ = ProcessJoiner().join([GpuProcess(gpu=0, pid=pid, kinds="C", used_memory=1 << 30)])
    (row,) = rows
    return row


def line(text: str, label: str) -> str:
    (found,) = [ln for ln in text.splitlines() if ln.startswith(label + " ")]
    return found[len(label) :].strip()


def test_a_real_process_shows_start_cpu_rss_and_its_training_variables() -> None:
    with sleeper(TRAINING) as proc:
        row = row_of(proc.pid)
        detail = describe(proc.pid, row.create_time, Path("/dev"))
    assert row.create_time is not None and row.rss is not None
    now = row.create_time + 3 * 3600 + 12 * 60 + 5
    row = replace(row, cpu_percent=12.4, rss=3 * 1024**3 + 200 * 1024**2)
    text = text_of(render_detail(row, detail, now=now))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.create_time))
    assert line(text, "started") == f"{stamp}  (3 h 12 min ago)"
    assert line(text, "CPU") == "12%"
    assert line(text, "RSS") == "3.2 GiB"
    assert "RANK=3" in text and "NCCL_DEBUG=INFO" in text and "MASTER_ADDR=10.0.0.1" in text
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,yyy" in text
    assert "NCCL_SOCKET_IFNAME=eth0?]0;pwned?" in text
    for secret in ("SECRET_TOKEN", "MASTER_PASSWORD", "hunter2", "hunter3"):
        assert secret not in text
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "command " in text  # the full command line is still there
    assert "sleep(60)" in text


def test_the_fields_of_the_row_say_na_when_unknown() -> None:
    with sleeper({}) as proc:
        row = row_of(proc.pid)
        detail = describe(proc.pid, row.create_time, Path("/dev"))
    text = text_of(render_detail(replace(row, cpu_percent=None, rss=None, create_time=None), detail))
    assert line(text, "started") == NA and line(text, "CPU") == NA and line(text, "RSS") == NA
    assert line(text, "training env").startswith("(none set of NCCL_*, ")


def test_ages_read_in_the_largest_units() -> None:
    t = 1_800_000_000.0
    blank = ProcessDetail(
        pid=1,
        command="x",
        cwd=None,
        cuda_visible_devices=None,
        environ_readable=True,
        device_files=(),
        children=(),
    )
    row = process_row(0, 1, create_time=t)
    for age, said in [(42, "(42 s ago)"), (125, "(2 min ago)"), (3 * 86400 + 5 * 3600 + 7, "(3 d 5 h ago)")]:
        assert line(text_of(render_detail(row, blank, now=t + age)), "started").endswith(said)
    # A clock set back since the process started: the date, and no negative age.
    assert "ago" not in line(text_of(render_detail(row, blank, now=t - 600)), "started")


def test_more_variables_than_shown_are_counted() -> None:
    detail = ProcessDetail(
        pid=1,
        command="x",
        cwd=None,
        cuda_visible_devices="0",
        environ_readable=True,
        device_files=(),
        children=(),
        training_env=(("RANK", "0"),),
        training_env_more=70,
        environ_cut=True,
    )
    row = process_row(0, 1)
    text = text_of(render_detail(row, detail))
    assert "… 70 more" in text and "only its first 1 MiB read" in text


def test_an_unreadable_environment_is_said_once() -> None:
    with sleeper(TRAINING) as proc:
        row = row_of(proc.pid)
        detail = describe_as_another_user(proc.pid)
        assert psutil.pid_exists(proc.pid)
    text = text_of(render_detail(row, detail))
    assert line(text, "environment") == "(environment not readable: another user's process)"
    assert text.count("another user's process") == 1  # once, not once a variable
    assert "CUDA_VISIBLE_DEVICES" not in text and "training env" not in text
    assert "RANK" not in text and "NCCL" not in text and "SECRET" not in text
