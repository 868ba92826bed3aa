"""Recordings to FILE.gz: one gzip stream, readable record by record; old and foreign files still read;
a truncated, corrupt or inflating file is read as far as it is whole, with one line saying why it stopped."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

import pytest

from gputui.output import record
from gputui.output.jsonout import snapshot_to_dict
from gputui.output.record import Recorder, load_recording
from tests.test_record import gputui, without_hosts, world_snaps


def _write(path: Path, snaps: list, close: bool = True) -> Recorder:  # type: ignore[type-arg]
    rec = Recorder(path)
    for s in snaps:
        rec.write(s)
    if close:
        rec.close()
    return rec


def _killed(rec: Recorder) -> None:
    """The file as a recorder killed between two records leaves it: no end block, no trailer."""
    assert rec._fd is not None
    os.close(rec._fd)
    rec._fd, rec._z = None, None


def test_gz_recording_round_trips_and_is_far_smaller(tmp_path: Path) -> None:
    snaps = world_snaps(12)
    gz, plain = tmp_path / "rec.jsonl.gz", tmp_path / "rec.jsonl"
    _write(gz, snaps)
    _write(plain, snaps)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(gz.read_bytes()) == plain.read_bytes()  # any gzip tool reads it
    assert gz.stat().st_size * 8 < plain.stat().st_size
    found = load_recording(gz)
    assert found.snapshots == [without_hosts(s) for s in snaps] and not found.bad and not found.stopped


def test_each_record_is_readable_at_once_and_a_killed_recording_is_continued(tmp_path: Path) -> None:
    snaps = world_snaps(6)
    path = tmp_path / "rec.jsonl.gz"
    rec = _write(path, snaps[:3], close=False)
    assert len(load_recording(path).snapshots) == 3  # flushed record by record, while it runs
    _killed(rec)
    _write(path, snaps[3:])  # the next recorder ends the open member, then starts its own
    found = load_recording(path)
    assert found.snapshots == [without_hosts(s) for s in snaps] and not found.stopped
    # A CSV recording compresses the same way.
    csv_path = tmp_path / "rec.csv.gz"
    rec = Recorder(csv_path, as_csv=True)
    rec.write(snaps[0])
    rec.close()
    assert gzip.decompress(csv_path.read_bytes()).startswith(b"timestamp,index,name")


def test_plain_and_foreign_gzip_recordings_still_read(tmp_path: Path) -> None:
    snaps = world_snaps(4)
    plain = tmp_path / "old.jsonl"
    _write(plain, snaps)
    assert load_recording(plain).snapshots == [without_hosts(s) for s in snaps]
    # `gzip old.jsonl`: a header with the file's name, one member; any name at all.
    foreign = tmp_path / "renamed"
    with gzip.GzipFile(filename="old.jsonl", mode="wb", fileobj=foreign.open("wb")) as f:
        f.write(plain.read_bytes())
    assert load_recording(foreign).snapshots == [without_hosts(s) for s in snaps]


def test_a_truncated_gzip_recording_gives_what_it_holds(tmp_path: Path) -> None:
    snaps = world_snaps(8)
    path = tmp_path / "rec.jsonl.gz"
    _write(path, snaps)
    data = path.read_bytes()
    for cut in (len(data) - 3, len(data) // 2, 12, 5):
        path.write_bytes(data[:cut])
        found = load_recording(path)
        assert found.snapshots == [without_hosts(s) for s in snaps[: len(found.snapshots)]]
        assert "\n" not in found.stopped


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:200] + bytes(b ^ 0x5A for b in d[200:260]) + d[260:],  # flipped bits mid-stream
        lambda d: d + b"not gzip at all, appended",  # garbage after the last member
        lambda d: b"\x1f\x8b\x09" + d[3:],  # not deflate
    ],
    ids=["flipped", "trailing-garbage", "method"],
)
def test_a_corrupt_gzip_recording_stops_with_one_line(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "rec.jsonl.gz"
    _write(path, world_snaps(6))
    path.write_bytes(damage(path.read_bytes()))
    found = load_recording(path)  # never an exception
    assert found.stopped.startswith("stopped at a corrupt gzip stream") or found.bad
    assert "\n" not in found.stopped and "\n" not in found.first_bad


def test_a_zip_bomb_is_read_no_further_than_max_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record, "MAX_READ", 4 << 20)
    line = json.dumps(snapshot_to_dict(world_snaps(3)[0]), separators=(",", ":")).encode() + b"\n"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = z.compress(line) + b"".join(z.compress(bytes(1 << 20)) for _ in range(64)) + z.flush()
    assert len(bomb) < (1 << 20)  # 64 MiB of zeros in ~64 KiB
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(bomb)
    found = load_recording(path)
    assert len(found.snapshots) == 1 and found.stopped == "stopped after reading 4.0 MiB"
    reader = record._Gunzip(path.open("rb"))
    assert all(len(reader.read(1000)) <= 1000 for _ in range(50))  # never more than asked for


def test_replay_of_a_corrupt_gz_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + bytes(6) + b"\xff" * 64)
    result = gputui("replay", path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "corrupt gzip stream" in result.stderr
    assert "Traceback" not in result.stderr


def test_record_command_writes_gzip_by_name(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl.gz"
    result = gputui("record", "--demo", "--demo-gpus", "1", "--interval", "0.2", "--duration", "0.5", path)
    assert result.returncode == 0, result.stderr
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    found = load_recording(path)
    assert found.snapshots and not found.bad and not found.stopped
