"""`gputui record` (JSON Lines, CSV, rotation, signals, bad flags), reading recordings back, and the command
line of `gputui replay` where it stops before the TUI. The recordings run as `python -m gputui` in
subprocesses on the demo; the file format details run in-process on the fixed world (tests/ui/world.py)."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from jsonschema import Draft202012Validator

from gputui.model import AgentReport, GpmMetrics, GpuSample, ProcessRow, Snapshot, TrainingProgress
from gputui.output.jsonout import record_to_dict, schema, snapshot_to_dict
from gputui.output.record import CSV_COLUMNS, KEEP_ROTATED, NA, Recorder, csv_rows, read_recording
from gputui.units import printable
from tests.ui import world

TIMEOUT = 60
DEMO = ("--demo", "--demo-gpus", "2", "--interval", "0.2")


def gputui(*args: str | Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *map(str, args)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(*args: str | Path, tmpdir: Path | None = None) -> subprocess.Popen[str]:
    """`tmpdir`: the TMPDIR the demo makes its stand-in device directory in."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None
    return subprocess.Popen(
        [sys.executable, "-m", "gputui", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(proc: subprocess.Popen[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def one_line_error(result: subprocess.CompletedProcess[str], prog: str) -> str:
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"{prog}: "), result.stderr
    return result.stderr


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_valid(records: list[dict[str, Any]]) -> None:
    validator = Draft202012Validator(schema())
    for data in records:
        errors = sorted(validator.iter_errors(data), key=str)
        assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def parts(path: Path) -> list[Path]:
    """The rotated parts oldest first, then the file itself: the recording in order."""
    rotated = sorted(path.parent.glob(f"{path.name}.*"), key=lambda p: -int(p.suffix[1:]))
    return [*rotated, *([path] if path.exists() else [])]


def demo_dirs(tmpdir: Path) -> set[str]:
    return {p.name for p in tmpdir.glob("gputui-demo-*")}


# -- three recordings of the demo, made at once ------------------------------------------------------


@dataclasses.dataclass
class Recordings:
    jsonl: Path
    csv: Path
    rotated: Path
    results: dict[str, subprocess.CompletedProcess[str]]
    leftover_dirs: set[str]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    d = tmp_path_factory.mktemp("rec")
    rec = Recordings(d / "run.jsonl", d / "gpus.csv", d / "small" / "run.jsonl", {}, set())
    rec.rotated.parent.mkdir()
    tmp = d / "tmp"
    tmp.mkdir()
    procs = {
        "jsonl": start("record", rec.jsonl, *DEMO, "--duration", "2", tmpdir=tmp),
        "csv": start("record", rec.csv, "--csv", *DEMO, "--duration", "2", tmpdir=tmp),
        "rotated": start("record", rec.rotated, "--max-size", "0.002", *DEMO, "--duration", "2", tmpdir=tmp),
    }
    rec.results = {name: finish(p) for name, p in procs.items()}
    rec.leftover_dirs = demo_dirs(tmp)
    return rec


def written(result: subprocess.CompletedProcess[str]) -> int:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    line = result.stderr.strip()
    assert line.startswith("gputui record: ") and line.count("\n") == 0, result.stderr
    return int(line.split()[2])


def test_record_writes_json_lines_of_valid_snapshots(recordings: Recordings) -> None:
    n = written(recordings.results["jsonl"])
    records = json_lines(recordings.jsonl)
    assert 3 <= n <= 12 and len(records) == n  # 2 s at 0.2 s
    assert_valid(records)
    assert all(r["source"] == "demo" and [g["index"] for g in r["gpus"]] == [0, 1] for r in records)
    times = [r["time"] for r in records]
    assert times == sorted(times) and len(set(times)) == len(times)
    trainers = [p for p in records[-1]["processes"] if p["kinds"]]
    assert sorted(p["gpu"] for p in trainers if "--role trainer" in (p["command"] or "")) == [0, 1]


def test_recording_reads_back_with_the_same_gpu_values(recordings: Recordings) -> None:
    records = json_lines(recordings.jsonl)
    snaps, bad = read_recording(recordings.jsonl)
    assert bad == 0 and len(snaps) == len(records)
    for snap, raw in zip(snaps, records, strict=True):
        assert all(isinstance(g, GpuSample) for g in snap.gpus)
        full = snapshot_to_dict(snap)
        assert record_to_dict(snap) == raw
        assert with_nulls(raw, full) == full  # what the line leaves out is null: every value the same
        assert snap.time == raw["time"]


def with_nulls(line: object, full: object) -> object:
    """`line` with null for each key that `full` has and it lacks, at every depth."""
    if isinstance(line, dict) and isinstance(full, dict):
        return {k: with_nulls(line[k], v) if k in line else None for k, v in full.items()} | {
            k: v for k, v in line.items() if k not in full
        }
    if isinstance(line, list) and isinstance(full, list) and len(line) == len(full):
        return [with_nulls(a, b) for a, b in zip(line, full, strict=True)]
    return line


def test_record_csv_has_nvidia_smi_columns_and_a_row_per_gpu_per_sample(recordings: Recordings) -> None:
    n = written(recordings.results["csv"])
    with open(recordings.csv, newline="") as f:
        header, *rows = list(csv.reader(f))
    assert tuple(header) == CSV_COLUMNS
    for name in (
        "timestamp",
        "index",
        "name",
        "utilization.gpu [%]",
        "memory.used [MiB]",
        "temperature.gpu",
        "power.draw [W]",
        "memory.total [MiB]",
        "pstate",
    ):
        assert name in header
    assert len(rows) == 2 * n
    col = {name: i for i, name in enumerate(header)}
    assert [r[col["index"]] for r in rows] == ["0", "1"] * n
    assert all(len(r) == len(header) for r in rows)
    for r in rows:
        assert time.strptime(r[0][:-4], "%Y/%m/%d %H:%M:%S") and r[0][-4] == "." and r[0][-3:].isdigit()
        assert r[col["name"]] == "NVIDIA H100 80GB HBM3"
        assert 0 <= int(r[col["utilization.gpu [%]"]]) <= 100
        assert int(r[col["memory.total [MiB]"]]) == 81559
        assert 0 < int(r[col["memory.used [MiB]"]]) <= 81559
        assert float(r[col["power.draw [W]"]]) > 0 and r[col["power.draw [W]"]].count(".") == 1
        assert r[col["fan.speed [%]"]] == NA  # the demo's H100s report no fan
        assert r[col["pstate"]] in ("P0", "P8")
    stamps = [r[0] for r in rows[::2]]
    assert stamps == [r[0] for r in rows[1::2]] and stamps == sorted(stamps)  # both GPUs of one sample


def test_record_rotates_at_max_size_and_every_part_is_valid(recordings: Recordings) -> None:
    n = written(recordings.results["rotated"])
    path = recordings.rotated
    assert path.with_name(path.name + ".1").exists()
    files = parts(path)
    assert {p.name for p in files} <= {path.name, *(f"{path.name}.{i}" for i in range(1, KEEP_ROTATED + 1))}
    assert len(files) >= min(n, KEEP_ROTATED)
    records = [r for p in files for r in json_lines(p)]
    assert records and all(p.stat().st_size > 0 for p in files)
    assert_valid(records)
    times = [r["time"] for r in records]
    assert times == sorted(times) and len(set(times)) == len(times)
    for p in files:
        snaps, bad = read_recording(p)
        assert bad == 0 and len(snaps) == len(p.read_text().splitlines())


def test_recordings_leave_no_demo_directory(recordings: Recordings) -> None:
    assert all(r.returncode == 0 for r in recordings.results.values())
    assert recordings.leftover_dirs == set()  # each demo removed its stand-in device files


# -- signals -----------------------------------------------------------------------------------------


def demo_processes(recorder: psutil.Process) -> tuple[list[psutil.Process], Path]:
    """The demo's processes (the recorder's children, and the orphaned worker reparented away) and its
    stand-in device directory."""
    children = recorder.children(recursive=True)
    devices = None
    for child in children:
        with contextlib.suppress(psutil.Error):
            devices = child.environ().get("GPUTUI_DEMO_DEVICES") or devices
    assert devices is not None, children
    mine = {c.pid: c for c in children}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid not in mine and proc.environ().get("GPUTUI_DEMO_DEVICES") == devices:
                mine[proc.pid] = proc
    return list(mine.values()), Path(devices)


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running: a zombie has ended (its reaper, init here, may take its time)."""
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_during_recording_ends_it_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    path = tmp_path / "run.jsonl"
    proc = start("record", path, *DEMO)
    try:
        deadline = time.monotonic() + 30
        while (not path.exists() or path.read_text().count("\n") < 3) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        demo, devices = demo_processes(psutil.Process(proc.pid))
        assert len(demo) >= 2 + 2 * 3  # two trainers with three workers each, and more
        assert devices.is_dir()
        proc.send_signal(sig)
        result = finish(proc, timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert result.returncode == 128 + sig, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    text = path.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]  # every line is whole
    assert len(records) >= 3
    assert_valid(records)
    deadline = time.monotonic() + 5
    while (alive := running(demo)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert alive == [], alive
    assert not devices.exists()


# -- bad flags ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ("--interval", "0"),
        ("--interval", "soon"),
        ("--duration", "-1"),
        ("--duration", "0"),
        ("--max-size", "0"),
        ("--demo-gpus", "99"),
    ],
    ids=lambda f: " ".join(f),
)
def test_record_bad_flags_exit_2_with_one_line(tmp_path: Path, flags: tuple[str, str]) -> None:
    path = tmp_path / "run.jsonl"
    err = one_line_error(gputui("record", path, "--demo", *flags), "gputui record")
    assert "error" in err and flags[1] in err
    assert not path.exists()


def test_record_into_a_missing_directory_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "run.jsonl"
    err = one_line_error(gputui("record", path, "--demo", "--duration", "1"), "gputui record")
    assert "no such directory" in err and str(path.parent) in err
    assert not path.parent.exists()


def test_record_without_a_file_exits_2(tmp_path: Path) -> None:
    one_line_error(gputui("record", "--demo"), "gputui record")


# -- the formats, in-process on the fixed world --------------------------------------------------------


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


_Row = TypeVar("_Row", GpuSample, ProcessRow)


def _printable_fields(item: _Row) -> _Row:
    changes: dict[str, Any] = {
        f.name: printable(v) for f in dataclasses.fields(item) if isinstance(v := getattr(item, f.name), str)
    }
    return dataclasses.replace(item, **changes)


def without_hosts(s: Snapshot) -> Snapshot:
    """`s` as a recording gives it back: without host processes (a UI aid, not recorded), and with the
    control characters of its strings (the world's WEIRD_COMMAND) replaced."""
    return dataclasses.replace(
        s,
        host_processes=(),
        hostname=printable(s.hostname),
        processes=tuple(_printable_fields(p) for p in s.processes),
        gpus=tuple(_printable_fields(g) for g in s.gpus),
    )


def world_snaps(n: int = 8) -> list[Snapshot]:
    snaps = world.snapshots(gpus=4, seconds=max(n, 3) - 1, unaccounted=True)
    # Something of every kind of field: an agent's reply, an error, a lost GPU, a GPU reporting nothing.
    pid = world.trainer_pid(0)
    agents = {pid: AgentReport(pid, progress=TrainingProgress(steps_per_s=2.5, data_wait_share=0.4))}
    snaps[1] = dataclasses.replace(
        snaps[1], agents=agents, errors=("nvmlDeviceGetFanSpeed: Not Supported",), unreadable_fds=3
    )
    gpus = list(snaps[2].gpus)
    gpus[1] = GpuSample(index=1, lost=True)
    gpus[2] = GpuSample(index=2)
    snaps[2] = dataclasses.replace(snaps[2], gpus=tuple(gpus))
    return snaps[:n]


def test_recorder_round_trip_reproduces_every_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    snaps = world_snaps()
    rec = Recorder(path)
    for s in snaps:
        rec.write(s)
    rec.close()
    assert rec.written == len(snaps)
    back, bad = read_recording(path)
    assert bad == 0
    assert back == [without_hosts(s) for s in snaps]
    for a, b in zip(back, snaps, strict=True):
        assert a.gpus == b.gpus
        assert snapshot_to_dict(a)["gpus"] == [
            dataclasses.asdict(g)
            | {"throttle_reasons": None if g.throttle_reasons is None else list(g.throttle_reasons)}
            | {"mig": [dataclasses.asdict(m) for m in g.mig]}
            for g in b.gpus
        ]
    assert back[1].agents == snaps[1].agents
    assert back[1].agents[world.trainer_pid(0)].progress.steps_per_s == 2.5
    assert back[2].gpus[1].lost and back[2].gpus[2] == GpuSample(index=2)
    assert_valid(json_lines(path))


def test_a_recorded_line_leaves_out_the_optional_nulls_and_nothing_else(tmp_path: Path) -> None:
    snap = world_snaps(1)[0]
    proc = dataclasses.replace(snap.processes[0], owner=None, hung=None, full_in=None, ns_pid=None)
    gpu = dataclasses.replace(snap.gpus[0], fan=None, health=None, gpm=GpmMetrics(sm_active=40.0))
    snap = dataclasses.replace(snap, processes=(proc,), gpus=(gpu,), host=None, gpm_note=None)
    path = tmp_path / "one.jsonl"
    rec = Recorder(path)
    rec.write(snap)
    rec.close()
    [line] = json_lines(path)
    p, g = line["processes"][0], line["gpus"][0]
    assert "owner" not in p and "hung" not in p and "full_in" not in p  # optional: left out
    assert p["ns_pid"] is None and g["fan"] is None  # required: null stays
    assert "health" not in g and "host" not in line and "gpm_note" not in line
    assert g["gpm"] == {"sm_active": 40.0}  # every GPM field is optional
    assert p["command"] == proc.command and g["util_gpu"] == gpu.util_gpu
    assert_valid([line])
    assert read_recording(path) == ([without_hosts(snap)], 0)


def test_recorder_appends_to_an_existing_recording(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    snaps = world_snaps(4)
    for chunk in (snaps[:2], snaps[2:]):
        rec = Recorder(path)
        for s in chunk:
            rec.write(s)
        rec.close()
    assert read_recording(path) == ([without_hosts(s) for s in snaps], 0)


def test_read_recording_skips_a_truncated_last_line_and_counts_it(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    snaps = world_snaps(4)
    lines = [json.dumps(snapshot_to_dict(s)) for s in snaps]
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    back, bad = read_recording(path)
    assert back == [without_hosts(s) for s in snaps[:3]] and bad == 1


def test_read_recording_counts_what_is_not_a_snapshot_and_ignores_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    snaps = world_snaps(2)
    good = [json.dumps(snapshot_to_dict(s)) for s in snaps]
    other_version = json.dumps({**snapshot_to_dict(snaps[0]), "schema_version": 2})
    text = "\n".join(["not json", good[0], "", "   ", '{"schema_version": 1}', other_version, good[1], ""])
    path.write_bytes(text.encode() + b"\xff\xfe{\x00 binary\n")
    back, bad = read_recording(path)
    assert back == [without_hosts(s) for s in snaps] and bad == 4


@pytest.mark.parametrize("line", ["[1, 2, 3]", "42", '"text"', "null"])
def test_read_recording_counts_json_that_is_not_an_object(tmp_path: Path, line: str) -> None:
    path = tmp_path / "other.jsonl"
    snap = world_snaps(1)[0]
    path.write_text(json.dumps(snapshot_to_dict(snap)) + "\n" + line + "\n")
    assert read_recording(path) == ([without_hosts(snap)], 1)


def line_bytes(s: Snapshot) -> int:
    return len(json.dumps(record_to_dict(s), separators=(",", ":"))) + 1


def test_rotation_keeps_every_part_in_order_up_to_five(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    snaps = world.snapshots(gpus=2, seconds=29, weird=False)
    size = max(map(line_bytes, snaps))
    rec = Recorder(path, max_bytes=int(size * 2.5))  # three snapshots a part
    for s in snaps[:12]:
        rec.write(s)
    assert [p.name for p in parts(path)] == ["r.jsonl.3", "r.jsonl.2", "r.jsonl.1", "r.jsonl"]
    assert [len(read_recording(p)[0]) for p in parts(path)] == [3, 3, 3, 3]
    back = [s for p in parts(path) for s in read_recording(p)[0]]
    assert back == [without_hosts(s) for s in snaps[:12]]  # nothing lost so far
    for s in snaps[12:]:
        rec.write(s)
    rec.close()
    names = [p.name for p in parts(path)]
    # 30 snapshots = 10 parts: the file itself (the newest) and the five before it are kept.
    assert names == [*(f"r.jsonl.{i}" for i in range(KEEP_ROTATED, 0, -1)), "r.jsonl"]
    back = [s for p in parts(path) for s in read_recording(p)[0]]
    assert back == [without_hosts(s) for s in snaps[-18:]]


def test_the_recording_file_exists_after_rotation(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    snaps = world.snapshots(gpus=2, seconds=3, weird=False)
    rec = Recorder(path, max_bytes=100)  # smaller than one snapshot: every write fills a part
    for s in snaps:
        rec.write(s)
    rec.close()
    assert path.exists()
    assert read_recording(path)[0][-1] == without_hosts(snaps[-1])


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_csv_values_in_nvidia_smi_units(tmp_path: Path, utc: None) -> None:
    path = tmp_path / "w.csv"
    snaps = world_snaps(3)
    snaps[0] = dataclasses.replace(snaps[0], time=world.START + 0.25)
    rec = Recorder(path, as_csv=True)
    for s in snaps:
        rec.write(s)
    rec.close()
    header, *rows = read_csv(path)
    assert tuple(header) == CSV_COLUMNS
    assert len(rows) == 4 * 3
    col = {name: i for i, name in enumerate(header)}
    r = rows[0]
    g = snaps[0].gpus[0]
    assert r[col["timestamp"]] == "2026/11/18 11:06:40.250"
    assert rows[4][col["timestamp"]] == "2026/11/18 11:06:41.000"
    assert assert_row(r, col, g)
    # GPU 1 lost and GPU 2 reporting nothing: every measured field is [N/A].
    for row_, gpu in ((rows[9], 1), (rows[10], 2)):
        assert row_[col["index"]] == str(gpu)
        assert row_[2:] == [NA] * (len(CSV_COLUMNS) - 2), row_


def assert_row(r: list[str], col: dict[str, int], g: GpuSample) -> bool:
    assert g.mem_used is not None and g.mem_total is not None and g.power is not None
    assert g.power_limit is not None
    expect = {
        "index": str(g.index),
        "name": g.name,
        "uuid": g.uuid,
        "pci.bus_id": g.pci_bus_id,
        "utilization.gpu [%]": str(g.util_gpu),
        "utilization.memory [%]": str(g.util_mem),
        "memory.used [MiB]": str(g.mem_used // 2**20),
        "memory.total [MiB]": "81559",
        "temperature.gpu": str(g.temperature),
        "power.draw [W]": f"{g.power:.2f}",
        "power.limit [W]": f"{g.power_limit:.2f}",
        "clocks.sm [MHz]": str(g.sm_clock),
        "clocks.mem [MHz]": str(g.mem_clock),
        "pstate": f"P{g.pstate}",
        "fan.speed [%]": NA,
        "clocks_event_reasons.active": " ".join(g.throttle_reasons or ()) or "none",
    }
    assert {k: r[col[k]] for k in expect} == expect
    return True


def test_csv_throttle_reasons_are_space_separated() -> None:
    snap = world_snaps(1)[0]
    gpus = (dataclasses.replace(snap.gpus[0], throttle_reasons=("sw_power_cap", "sw_thermal")),)
    (row,) = csv_rows(dataclasses.replace(snap, gpus=gpus))
    assert row[CSV_COLUMNS.index("clocks_event_reasons.active")] == "sw_power_cap sw_thermal"


def test_csv_gpm_columns_follow_nvidia_smis_and_say_na_when_unknown() -> None:
    snap = world_snaps(1)[0]
    gpm = GpmMetrics(sm_active=6.25, sm_occupancy=None, tensor=0.0, dram=41.0)
    gpus = (dataclasses.replace(snap.gpus[0], gpm=gpm), dataclasses.replace(snap.gpus[0], index=1, gpm=None))
    rows = list(csv_rows(dataclasses.replace(snap, gpus=gpus)))
    at = CSV_COLUMNS.index("sm_active [%]")
    assert CSV_COLUMNS.index("clocks_event_reasons.active") < at
    assert rows[0][at : at + 4] == ["6.2", NA, "0.0", "41.0"]  # 0 is a measured 0; unknown is [N/A]
    assert rows[1][at : at + 4] == [NA] * 4


def test_csv_header_once_per_file_and_in_every_rotated_part(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    snaps = world_snaps(6)
    for chunk in (snaps[:2], snaps[2:3]):  # a second recorder appends without a second header
        rec = Recorder(path, as_csv=True)
        for s in chunk:
            rec.write(s)
        rec.close()
    table = read_csv(path)
    assert table.count(list(CSV_COLUMNS)) == 1 and len(table) == 1 + 3 * 4
    path.unlink()
    rec = Recorder(path, as_csv=True, max_bytes=1200)
    for s in snaps:
        rec.write(s)
    rec.close()
    files = parts(path)
    assert len(files) >= 2
    rows = []
    for p in files:
        header, *body = read_csv(p)
        assert tuple(header) == CSV_COLUMNS and body
        rows += body
    assert len(rows) == 4 * len(snaps)


# -- replay: what stops it before the TUI ----------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("", id="empty"),
        pytest.param("\n\n", id="blank"),
        pytest.param("not json\n", id="text"),
        pytest.param('{"schema_version": 1}\n', id="other-json"),
        pytest.param(",".join(CSV_COLUMNS) + "\n", id="csv"),
        pytest.param("[1, 2]\n[3, 4]\n", id="json-arrays"),
        pytest.param("0.5\n", id="json-number"),
    ],
)
def test_replay_of_a_file_without_snapshots_exits_2_with_one_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "nothing.jsonl"
    path.write_text(content)
    err = one_line_error(gputui("replay", path), "gputui replay")
    assert str(path) in err and "no gputui snapshot" in err


def test_replay_of_a_csv_recording_exits_2(recordings: Recordings) -> None:
    err = one_line_error(gputui("replay", recordings.csv), "gputui replay")
    assert "no gputui snapshot" in err


def test_replay_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "missing.jsonl"
    err = one_line_error(gputui("replay", path), "gputui replay")
    assert f"cannot read {path}" in err


def test_replay_of_a_directory_exits_2(tmp_path: Path) -> None:
    err = one_line_error(gputui("replay", tmp_path), "gputui replay")
    assert "cannot read" in err


@pytest.mark.parametrize("flags", [("--speed", "0"), ("--speed", "fast")], ids=lambda f: " ".join(f))
def test_replay_bad_speed_exits_2(tmp_path: Path, flags: tuple[str, str]) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(snapshot_to_dict(world_snaps(1)[0])) + "\n")
    one_line_error(gputui("replay", path, *flags), "gputui replay")
