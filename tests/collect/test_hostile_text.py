"""Strings other users control (argv, process names, cwd, environment) are made safe once, in collect/."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.collect.procs.join import MAX_COMMAND, ProcessJoiner, describe
from gputui.model import GpuProcess

HOSTILE = b"\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\xff\xfe\x9b"


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    cwd = tmp_path / "dir\x1b[31m"
    cwd.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0\x1b]52;c;cHduZWQ=\x07"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", HOSTILE, b"x" * 10_000], cwd=cwd, env=env
    )
    time.sleep(0.2)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _safe(text: str | None) -> bool:
    return text is not None and text.isprintable() and "\x1b" not in text


def test_a_row_carries_a_printable_bounded_command(hostile: subprocess.Popen[bytes]) -> None:
    rows, _ = ProcessJoiner().join([GpuProcess(gpu=0, pid=hostile.pid, kinds="C", used_memory=1)])
    (row,) = rows
    assert _safe(row.command) and _safe(row.name) and _safe(row.user)
    assert row.command is not None and "?]0;pwned?" in row.command
    assert len(row.command) == MAX_COMMAND  # a 10,000-character argument is cut
    row.command.encode("utf-8")  # the undecodable bytes are gone, not kept as surrogates


def test_the_detail_is_printable_too(hostile: subprocess.Popen[bytes]) -> None:
    detail = describe(hostile.pid, None, Path("/dev"))
    assert _safe(detail.command) and _safe(detail.cwd) and _safe(detail.cuda_visible_devices)
    assert detail.cuda_visible_devices == "0?]52;c;cHduZWQ=?"
