"""`gputui record FILE`: snapshots as JSON Lines (or nvidia-smi-style CSV), without the UI; and reading
them back for `gputui replay`."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from gputui.jsonout import snapshot_from_dict, snapshot_to_dict
from gputui.model import Snapshot

KEEP_ROTATED = 5
NA = "[N/A]"  # what nvidia-smi writes for a field it cannot read
CSV_COLUMNS = (
    "timestamp", "index", "name", "uuid", "pci.bus_id", "utilization.gpu [%]", "utilization.memory [%]",
    "memory.used [MiB]", "memory.total [MiB]", "temperature.gpu", "power.draw [W]", "power.limit [W]",
    "clocks.sm [MHz]", "clocks.mem [MHz]", "pstate", "fan.speed [%]", "clocks_event_reasons.active",
)


def csv_rows(snap: Snapshot) -> Iterator[list[str]]:
    millis = int(snap.time % 1 * 1000)
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(snap.time)) + f".{millis:03d}"

    def v(x: object) -> str:
        return NA if x is None else str(x)

    def mib(x: int | None) -> str:
        return NA if x is None else str(x // (1 << 20))

    def watts(x: float | None) -> str:
        return NA if x is None else f"{x:.2f}"

    for g in snap.gpus:
        yield [stamp, str(g.index), v(g.name), v(g.uuid), v(g.pci_bus_id), v(g.util_gpu), v(g.util_mem),
               mib(g.mem_used), mib(g.mem_total), v(g.temperature),
               watts(g.power), watts(g.power_limit),
               v(g.sm_clock), v(g.mem_clock), NA if g.pstate is None else f"P{g.pstate}", v(g.fan),
               NA if g.throttle_reasons is None else (" ".join(g.throttle_reasons) or "none")]


class Recorder:
    """Appends snapshots to `path`; past `max_bytes` the file rotates (path.1, path.2, ...)."""

    def __init__(self, path: Path, as_csv: bool = False, max_bytes: int | None = None) -> None:
        self.path, self.as_csv, self.max_bytes = path, as_csv, max_bytes
        self._file: TextIO | None = None
        self.written = 0

    def _open(self) -> TextIO:
        if self._file is None:
            fresh = not self.path.exists() or self.path.stat().st_size == 0
            self._file = open(self.path, "a", newline="" if self.as_csv else None)  # noqa: SIM115
            if self.as_csv and fresh:
                csv.writer(self._file).writerow(CSV_COLUMNS)
        return self._file

    def write(self, snap: Snapshot) -> None:
        # Rotate before a write, not after: FILE always holds the newest part.
        if self.max_bytes and self._file is not None and self._file.tell() >= self.max_bytes:
            self.rotate()
        f = self._open()
        if self.as_csv:
            buf = io.StringIO()
            csv.writer(buf).writerows(csv_rows(snap))
            f.write(buf.getvalue())
        else:
            f.write(json.dumps(snapshot_to_dict(snap), separators=(",", ":")) + "\n")
        f.flush()
        self.written += 1

    def rotate(self) -> None:
        self.close()
        for i in range(KEEP_ROTATED - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.path.exists():
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_recording(path: Path) -> tuple[list[Snapshot], int]:
    """(snapshots, lines that were not snapshots). A truncated last line (a recorder killed mid-write)
    is one of those, not an error."""
    snaps, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                snaps.append(snapshot_from_dict(json.loads(line)))
            except (ValueError, TypeError, AttributeError):
                bad += 1
    return snaps, bad
