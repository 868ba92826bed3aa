"""`gputui record` where writing fails: a full disk, a file-size limit, a closed pipe, a read-only file
system, a directory. Each ends with one line on stderr and a non-zero exit, never a traceback, and the
recording always ends on a whole line. `-` is standard output.

The full disk is a 64 KiB tmpfs where we may mount one (root), the size limit RLIMIT_FSIZE with SIGXFSZ
ignored (as a shell does with `ulimit -f`).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gputui.jsonout import snapshot_to_dict
from gputui.record import Recorder, RecordError, read_recording
from tests.test_record import DEMO, assert_valid, finish, gputui, start, without_hosts, world_snaps

TIMEOUT = 60


def mount_tmpfs(where: Path, *options: str) -> bool:
    where.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)],
                          capture_output=True, timeout=10)
    return done.returncode == 0


def unmount(where: Path) -> None:
    subprocess.run(["umount", str(where)], capture_output=True, timeout=10)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a 64 KiB file system: a recording fills it within a few snapshots."""
    where = tmp_path / "small"
    if not mount_tmpfs(where, "size=64k", "mode=0755"):
        pytest.skip("cannot mount a tmpfs here (not root, or no permission)")
    try:
        yield where
    finally:
        unmount(where)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory holding `run.jsonl` (one snapshot) that cannot be written: a read-only file system as
    root (root writes files of any mode), a file of mode 0444 otherwise."""
    where = tmp_path / "ro"
    line = json.dumps(snapshot_to_dict(world_snaps(1)[0])) + "\n"
    if os.geteuid() != 0:
        where.mkdir()
        (where / "run.jsonl").write_text(line)
        (where / "run.jsonl").chmod(0o444)
        yield where
        return
    if not mount_tmpfs(where, "size=1m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        (where / "run.jsonl").write_text(line)
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, timeout=10)
        yield where
    finally:
        unmount(where)


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gputui record: "), result.stderr
    return result.stderr


def whole_lines(path: Path) -> list[dict[str, object]]:
    """Every line of the recording, each a complete snapshot; the file ends with a newline."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), data[-80:]
    records = [json.loads(line) for line in data.splitlines()]
    assert_valid(records)
    return records


# -- a full disk -------------------------------------------------------------------------------------


def test_record_onto_a_full_disk_stops_with_one_line_and_whole_lines(full_disk: Path) -> None:
    path = full_disk / "run.jsonl"
    result = gputui("record", path, *DEMO, "--duration", "30")
    err = one_error_line(result, 1)
    assert f"cannot write {path}: No space left on device" in err, err
    records = whole_lines(path)
    assert records and f"after {len(records)} snapshots" in err, err


def limit_file_size(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, before exec: what `ulimit -f` does in a shell
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_record_past_a_file_size_limit_stops_with_one_line_and_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    command = [sys.executable, "-m", "gputui", "record", str(path), *DEMO, "--duration", "30"]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=limit_file_size(40_000))
    err = one_error_line(finish(proc), 1)
    assert f"cannot write {path}: File too large" in err, err
    assert 0 < path.stat().st_size <= 40_000
    assert whole_lines(path)


def test_recorder_in_process_on_a_full_disk_keeps_the_file_whole(full_disk: Path) -> None:
    path = full_disk / "w.jsonl"
    rec = Recorder(path)
    snaps = world_snaps(8)
    with pytest.raises(RecordError) as caught:
        for _ in range(1000):
            for s in snaps:
                rec.write(s)
    rec.close()
    assert "No space left on device" in str(caught.value)
    back, bad = read_recording(path)
    assert bad == 0 and len(back) == rec.written > 0
    assert path.read_bytes().endswith(b"\n")


# -- standard output and closed pipes --------------------------------------------------------------------


def test_record_to_dash_writes_standard_output_and_no_file(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "gputui", "record", "-", *DEMO, "--duration", "1.5"],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    result = finish(proc)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().startswith("gputui record: ") and "to standard output" in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) >= 3 and result.stdout.endswith("\n")
    assert_valid(records)
    assert not (tmp_path / "-").exists()


def test_record_into_a_closed_pipe_stops_with_one_line() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will ever read: the first write is EPIPE
    try:
        proc = subprocess.Popen([sys.executable, "-m", "gputui", "record", "-", *DEMO, "--duration", "20"],
                                stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    err = one_error_line(finish(proc), 1)
    assert "cannot write to standard output: Broken pipe" in err, err


def test_record_into_a_pipe_whose_reader_goes_away() -> None:
    """`gputui record - | head -n 2`: the reader leaves after two lines."""
    proc = start("record", "-", *DEMO, "--duration", "30")
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()
    assert all(json.loads(line) for line in lines)
    err = one_error_line(finish(proc), 1)
    assert "Broken pipe" in err


def test_record_dash_refuses_max_size() -> None:
    result = gputui("record", "-", "--demo", "--max-size", "1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "--max-size" in result.stderr


# -- files that cannot be written ------------------------------------------------------------------------


def test_record_into_a_read_only_file_exits_2_with_one_line(read_only: Path) -> None:
    path = read_only / "run.jsonl"
    before = path.read_bytes()
    err = one_error_line(gputui("record", path, *DEMO, "--duration", "5"), 2)
    assert f"cannot write {path}: " in err and ("Read-only file system" in err or "Permission denied" in err)
    assert path.read_bytes() == before


def test_record_into_a_directory_exits_2_with_one_line(tmp_path: Path) -> None:
    err = one_error_line(gputui("record", tmp_path, *DEMO, "--duration", "5"), 2)
    assert f"cannot write {tmp_path}: Is a directory" in err


# -- appending after a recorder that was killed mid-line -------------------------------------------------


def test_appending_after_a_cut_line_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    snaps = world_snaps(3)
    whole = json.dumps(snapshot_to_dict(snaps[0]))
    path.write_text(whole + "\n" + whole[:100])  # the last recorder died in the middle of a line
    rec = Recorder(path)
    for s in snaps[1:]:
        rec.write(s)
    rec.close()
    back, bad = read_recording(path)
    assert bad == 1 and len(back) == 3  # only the cut line is lost, not the first new one
    assert back[1:] == [without_hosts(s) for s in snaps[1:]]
