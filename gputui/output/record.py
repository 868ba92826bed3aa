"""`gputui record FILE`: snapshots as JSON Lines (or nvidia-smi-style CSV), without the UI; and reading
them back for `gputui replay`."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import stat
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

from gputui.collect.pace import Pacer
from gputui.model import Snapshot
from gputui.output import schema_check
from gputui.output.jsonout import record_to_dict, schema, snapshot_from_dict
from gputui.units import fmt_bytes, printable

KEEP_ROTATED = 5
NA = "[N/A]"  # what nvidia-smi writes for a field it cannot read
CSV_COLUMNS = (
    "timestamp",
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "utilization.gpu [%]",
    "utilization.memory [%]",
    "memory.used [MiB]",
    "memory.total [MiB]",
    "temperature.gpu",
    "power.draw [W]",
    "power.limit [W]",
    "clocks.sm [MHz]",
    "clocks.mem [MHz]",
    "pstate",
    "fan.speed [%]",
    "clocks_event_reasons.active",
    # GPM (Hopper+), after nvidia-smi's columns so that a reader of those keeps working
    "sm_active [%]",
    "sm_occupancy [%]",
    "tensor_active [%]",
    "dram_active [%]",
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

    def pct(x: float | None) -> str:
        return NA if x is None else f"{x:.1f}"

    for g in snap.gpus:
        yield [
            stamp,
            str(g.index),
            v(g.name),
            v(g.uuid),
            v(g.pci_bus_id),
            v(g.util_gpu),
            v(g.util_mem),
            mib(g.mem_used),
            mib(g.mem_total),
            v(g.temperature),
            watts(g.power),
            watts(g.power_limit),
            v(g.sm_clock),
            v(g.mem_clock),
            NA if g.pstate is None else f"P{g.pstate}",
            v(g.fan),
            NA if g.throttle_reasons is None else (" ".join(g.throttle_reasons) or "none"),
            *(pct(getattr(g.gpm, k, None)) for k in ("sm_active", "sm_occupancy", "tensor", "dram")),
        ]


def _last_bytes(fd: int, n: int = 1) -> bytes:
    """The last `n` bytes of the regular file open (write-only) as `fd`; b"" when shorter, not a regular
    file (a FIFO) or not readable."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < n:
            return b""
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.pread(reader, n, st.st_size - n)
    except OSError:
        return b""
    finally:
        os.close(reader)


STDOUT_FD = 1
# A FILE ending in .gz is one gzip stream, flushed at each record (Z_SYNC_FLUSH): every record is readable
# as soon as it is written, and the stream's 32 KiB window still spans the previous record (a third of
# the size of a gzip member per record) while a record is shorter than the window. An 8-GPU demo hour:
# ~104 MB plain, ~4 MB so; past 32 KiB a record finds nothing of the previous one, and takes ~2.8 times
# as much (measured on the demo's records with every null kept, 33 KiB each).
GZIP_LEVEL = 6
_SYNC = b"\x00\x00\xff\xff"  # how a sync-flushed deflate stream ends
# Ends a member that a killed recorder left open (it ends on _SYNC): an empty final block, then a trailer
# whose CRC and length are unknown (zeros; gputui's reader does not check them, `zcat` warns).
_END_DANGLING = b"\x03\x00" + bytes(8)


class RecordError(Exception):
    """Writing the recording failed (a full disk, a closed pipe, a read-only file): its one-line reason."""


class Recorder:
    """Appends snapshots to `path` (None: standard output); past `max_bytes` the file rotates (path.1,
    path.2, ...). Each record is one complete line: written whole, or, when the disk fills or a signal
    comes in the middle of it, cut back off, so that the file always ends on a whole line."""

    def __init__(self, path: Path | None, as_csv: bool = False, max_bytes: int | None = None) -> None:
        # (`path` stays a Path for the type's sake; to_stdout decides where the records go)
        self.path, self.as_csv, self.max_bytes = path or Path("/dev/stdout"), as_csv, max_bytes
        self.to_stdout = path is None
        self.gzip = path is not None and path.name.endswith(".gz")
        self._fd: int | None = None
        self._pending = b""  # written before the next record: the CSV header, or a newline
        self._z: zlib._Compress | None = None  # the gzip stream being written
        self.written = 0

    @property
    def where(self) -> str:
        return "standard output" if self.to_stdout else str(self.path)

    def open(self) -> None:
        """Open now (the first write would): a file that cannot be written is known before sampling."""
        if self._fd is not None:
            return
        if self.to_stdout:
            if sys.stdout is None:  # started with it closed: fd 1 may be any file opened since
                raise RecordError("cannot write to standard output: it is closed")
            self._fd = STDOUT_FD
            self._pending = self._csv_header() if self.as_csv else b""
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as err:
            raise self._failed(err) from None
        self._fd = fd
        size = self._size()
        if self.as_csv and not size:
            self._pending = self._csv_header()
        elif not self.gzip and _last_bytes(fd) not in (b"", b"\n"):  # killed mid-line: ours starts a new one
            self._pending = b"\n"

    def _csv_header(self) -> bytes:
        buf = io.StringIO()
        csv.writer(buf).writerow(CSV_COLUMNS)
        return buf.getvalue().encode()

    def write(self, snap: Snapshot) -> None:
        # Rotate before a write, not after: FILE always holds the newest part.
        if self.max_bytes and self._fd is not None and not self.to_stdout and self._size() >= self.max_bytes:
            self.rotate()
        self.open()
        if self.as_csv:
            buf = io.StringIO()
            csv.writer(buf).writerows(csv_rows(snap))
            text = buf.getvalue()
        else:
            text = json.dumps(record_to_dict(snap), separators=(",", ":")) + "\n"
        data = self._pending + text.encode()
        if self.gzip:
            data = self._compressed(data)
        try:
            self._write_whole(data)
        except BaseException:
            self._z = None  # the stream ran ahead of the file (cut back): the next record starts anew
            raise
        self._pending = b""
        self.written += 1

    def _compressed(self, data: bytes) -> bytes:
        head, z = b"", self._z
        if z is None:  # a new member; after one that a killed recorder left open, end that first
            assert self._fd is not None
            head = _END_DANGLING if _last_bytes(self._fd, len(_SYNC)) == _SYNC else b""
            z = self._z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return head + z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)

    def _size(self) -> int:
        assert self._fd is not None
        return os.fstat(self._fd).st_size

    def _write_whole(self, data: bytes) -> None:
        assert self._fd is not None
        start = None if self.to_stdout else self._size()  # a pipe cannot be cut back; a file can
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.write(self._fd, view[done:])
        except BaseException as err:  # a full disk, or a signal (SystemExit) between two partial writes
            if start is not None and done:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)
            if isinstance(err, OSError):
                raise self._failed(err) from None
            raise

    def _failed(self, err: OSError) -> RecordError:
        reason = err.strerror or str(err)
        return RecordError(
            f"cannot write to {self.where}: {reason}"
            if self.to_stdout
            else f"cannot write {self.where}: {reason}"
        )

    def rotate(self) -> None:
        self.close()
        try:
            for i in range(KEEP_ROTATED - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
            if self.path.exists():
                os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        except OSError as err:
            raise self._failed(err) from None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        z, self._z = self._z, None
        if fd is not None and z is not None:
            with contextlib.suppress(OSError):  # no end: the reader takes the stream as far as it goes
                os.write(fd, z.flush())
        if fd is not None and not self.to_stdout:
            with contextlib.suppress(OSError):  # every record went out whole with os.write already
                os.close(fd)


def record_paced(
    recorder: Recorder,
    tick: Callable[[], Snapshot],
    interval: float,
    duration: float | None = None,
    warn: Callable[[str], None] = lambda _line: None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Pacer:
    """Samples written every `interval` seconds on a steady schedule (not interval + sampling time) for
    `duration` seconds or until interrupted. The first sample that takes longer than the interval is
    said once, through `warn`; its Pacer counts them all (`late`, `skipped`) for the closing line."""
    pacer = Pacer(interval, monotonic)
    end = None if duration is None else monotonic() + duration
    while end is None or monotonic() < end:
        recorder.write(tick())
        wait = pacer.delay_after_sample()
        if pacer.last_late and pacer.late == 1:
            warn(f"{pacer.describe_late()} (said once; the closing line counts them)")
        if end is not None:
            wait = min(wait, end - monotonic())
        if wait > 0:
            sleep(wait)
    return pacer


def late_note(pacer: Pacer) -> str:
    """What the closing line adds when sampling fell behind its schedule; "" when it kept it."""
    if not pacer.late:
        return ""
    return (
        f" ({pacer.late} samples took longer than the {pacer.interval:g} s interval; "
        f"{pacer.skipped} were skipped)"
    )


# Bounds on reading a recording, which may come from anyone: a line longer than MAX_LINE is skipped
# without being held whole; reading stops after MAX_READ bytes (/dev/zero, an endless file), MAX_KEPT bytes
# of snapshots or MAX_SNAPSHOTS snapshots, whichever comes first (replay holds them all in memory).
MAX_LINE = 4 << 20
MAX_READ = 1 << 30
MAX_KEPT = 256 << 20
MAX_SNAPSHOTS = 100_000
CHUNK = 1 << 20


@dataclass
class Recording:
    snapshots: list[Snapshot] = field(default_factory=list)
    bad: int = 0  # lines that were not snapshots (blank lines are not counted)
    first_bad: str = ""  # why the first of them was refused: "line 3: $.gpus: a string where ..."
    stopped: str = ""  # why reading stopped before the end of the file; "" when it read it all


def read_recording(path: Path) -> tuple[list[Snapshot], int]:
    """(snapshots, lines that were not snapshots). A truncated last line (a recorder killed mid-write)
    is one of those, not an error."""
    found = load_recording(path)
    return found.snapshots, found.bad


def load_recording(path: Path) -> Recording:
    """Every line checked against the snapshot schema, with finite numbers, and its strings made
    printable; what is not a snapshot is counted and skipped. Raises OSError if `path` cannot be read.
    A gzip file (by its first bytes, whatever its name) is read as far as it is whole: a corrupt stream
    stops the reading with a note, its decompressed bytes count towards MAX_READ (no zip bomb)."""
    out = Recording()
    with open(path, "rb") as f:
        head = f.read(2)  # not seek(0): a FIFO cannot
        try:
            _load(_Gunzip(f, head) if head == _GZIP_MAGIC else _Prefixed(f, head), out)
        except GzipError as err:
            out.stopped = f"stopped at a corrupt gzip stream ({err})"
            out.first_bad = out.first_bad or f"corrupt gzip stream: {err}"
    return out


def _load(f: _Prefixed | _Gunzip, out: Recording) -> None:
    kept = 0
    lines = _BoundedLines(f)
    for number, line in enumerate(lines, 1):
        if line is not None and not line.strip():
            continue
        try:
            snap = parse_line(line)
        except ValueError as err:
            out.bad += 1
            out.first_bad = out.first_bad or f"line {number}: {err}"
            continue
        out.snapshots.append(snap)
        kept += len(line or b"")
        if len(out.snapshots) >= MAX_SNAPSHOTS or kept >= MAX_KEPT:
            out.stopped = f"stopped after {len(out.snapshots)} snapshots ({fmt_bytes(kept)})"
            break
    else:
        if lines.cut_short:
            out.stopped = f"stopped after reading {fmt_bytes(MAX_READ)}"


def parse_line(line: bytes | None) -> Snapshot:
    """One line of a recording as a Snapshot; ValueError (one line, saying why) if it is not one.
    `None` stands for a line that was too long to read."""
    if line is None:
        raise ValueError(f"longer than {fmt_bytes(MAX_LINE)}")
    try:
        data = json.loads(line.decode("utf-8", errors="replace"), parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deep") from None
    except ValueError as err:  # JSONDecodeError, and integers longer than Python converts
        raise ValueError(f"not JSON: {str(err).splitlines()[0]}") from None
    if isinstance(data, dict):
        data.setdefault("agents", {})  # a recording from before the agent existed
    data = _snapshot_checker()(data)  # checked, and every string but the agents' replies printable
    try:
        return snapshot_from_dict(data)
    except (TypeError, AttributeError, KeyError, RecursionError) as err:
        raise ValueError(f"not a gputui snapshot: {type(err).__name__}") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


@lru_cache(maxsize=1)
def _snapshot_checker() -> schema_check.Checker:
    return schema_check.Checker(schema(), text=printable)


_GZIP_MAGIC = b"\x1f\x8b"


class GzipError(ValueError):
    """A gzip stream that is not one: its one-line reason."""


class _Prefixed:
    """A file whose first bytes were already read (to tell gzip from JSON Lines)."""

    def __init__(self, f: BinaryIO, head: bytes) -> None:
        self.f, self.head = f, head

    def read(self, n: int) -> bytes:
        if not self.head:
            return self.f.read(n)
        out, self.head = self.head[:n], self.head[n:]
        return out


class _Gunzip:
    """The decompressed bytes of a gzip file of one or more members, `read(n)` at most n at a time (so
    a small file that inflates hugely is never held whole). A member cut short (a recorder killed, or
    still writing) ends the data quietly; bytes that are not gzip raise GzipError. The members' CRCs are
    not checked: a member ended by a later recorder (_END_DANGLING) has none, and every line is checked
    against the schema anyway."""

    def __init__(self, f: BinaryIO, head: bytes = b"") -> None:
        self.f = f
        self._raw = head  # compressed bytes read but not yet decompressed
        self._z: zlib._Decompress | None = None  # the member being decompressed; None: a header comes next
        self._eof = False  # no more compressed input
        self.offset = 0  # compressed bytes consumed, for the error's "at byte N"

    def _fill(self, need: int) -> bool:
        while len(self._raw) < need and not self._eof:
            chunk = self.f.read(CHUNK)
            self._eof = not chunk
            self._raw += chunk
        return len(self._raw) >= need

    def _take(self, n: int) -> bytes:
        data, self._raw = self._raw[:n], self._raw[n:]
        self.offset += len(data)
        return data

    def _header(self) -> bool:
        """Reads a member's header (RFC 1952); False at the clean end of the file."""
        if not self._fill(10):
            if self._raw:
                raise GzipError(f"{len(self._raw)} stray bytes at the end")
            return False
        head = self._take(10)
        if head[:3] != b"\x1f\x8b\x08":
            raise GzipError(f"not a gzip member at byte {self.offset - 10}")
        flags = head[3]
        if flags & 0xE0:
            raise GzipError(f"reserved header flags at byte {self.offset - 10}")
        if flags & 4:  # FEXTRA: its length, then that many bytes
            self._fill(2)
            extra = int.from_bytes(self._take(2), "little")
            self._fill(extra)
            self._take(extra)
        for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
            if flags & bit:
                while b"\x00" not in self._raw and not self._eof and len(self._raw) < MAX_LINE:
                    self._fill(len(self._raw) + 1)
                end = self._raw.find(b"\x00")
                if end < 0:
                    raise GzipError("a header name without its end")
                self._take(end + 1)
        if flags & 2:  # FHCRC
            self._take(2)
        self._z = zlib.decompressobj(-zlib.MAX_WBITS)
        return True

    def read(self, n: int) -> bytes:
        while True:
            if self._z is None and not self._header():
                return b""
            z = self._z
            assert z is not None  # _header() started the member
            if not self._raw and not self._fill(1):
                return b""  # cut short (no end block, no trailer): what came is what there is
            before = len(self._raw)
            try:
                out = z.decompress(self._raw, n)
            except zlib.error as err:
                raise GzipError(f"{err} near byte {self.offset}") from None
            self._raw = z.unconsumed_tail or z.unused_data
            self.offset += before - len(self._raw)
            if z.eof:
                self._raw = z.unused_data
                self._fill(8)
                self._take(8)  # CRC32 and length (see the class's docstring)
                self._z = None
            if out:
                return out


class _BoundedLines:
    """The lines of a binary file without their newline, read in chunks: a line longer than MAX_LINE is
    yielded as None, never held whole; reading stops after MAX_READ bytes (`cut_short` then says so)."""

    def __init__(self, f: _Prefixed | _Gunzip) -> None:
        self.f = f
        self.cut_short = False

    def __iter__(self) -> Iterator[bytes | None]:
        buf, skipping, total = bytearray(), False, 0
        while True:
            chunk = self.f.read(min(CHUNK, MAX_READ - total)) if total < MAX_READ else b""
            if not chunk:
                break
            total += len(chunk)
            lines = chunk.split(b"\n")
            for piece in lines[:-1]:  # each ends a line
                if skipping or len(buf) + len(piece) > MAX_LINE:
                    yield None
                else:
                    yield bytes(buf + piece)
                buf.clear()
                skipping = False
            if not skipping and len(buf) + len(lines[-1]) > MAX_LINE:
                buf.clear()
                skipping = True  # the rest of this line is dropped as it comes
            elif not skipping:
                buf += lines[-1]
        if total >= MAX_READ and self.f.read(1):
            self.cut_short = True
        if skipping:
            yield None
        elif buf:
            yield bytes(buf)
