"""The one boundary for what an agent says: a stats reply (or a recorded one) parsed into an AgentReport.

An agent runs inside a process of another user, who may have replaced it with anything. So every number
must be finite and in range, every string is cut short and made printable, every container must have the
shape the agent sends; anything else makes the whole reply unreadable, with the first thing wrong as the
reason. Unknown keys are ignored (a newer agent may send more). Nothing downstream sees the raw dict.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from gputui.model import (
    AGENT_OK,
    AGENT_SLOW,
    AGENT_UNREADABLE,
    AgentReport,
    AllocatorDevice,
    OomEvent,
    TrainingProgress,
)
from gputui.units import printable

MAX_TEXT = 200  # characters of a version or PYTORCH_CUDA_ALLOC_CONF
MAX_DEVICES = 64
MAX_SEGMENTS = 512  # the agent sends at most this many cells of the segment map
MAX_OOM_EVENTS = 20
MAX_COUNT = 2**63 - 1  # torch's counters are int64
MAX_DEVICE_INDEX = 1023
STATUSES = (AGENT_OK, AGENT_SLOW, AGENT_UNREADABLE)

_DEVICE_COUNTS = tuple(
    f.name
    for f in dataclasses.fields(AllocatorDevice)
    if f.name not in ("index", "fragmentation", "segment_fill")
)


class BadReply(ValueError):
    """What is wrong with a reply, and where: `allocator.devices[0].allocated: not a whole number`."""


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadReply(f"{where}: not an object")
    return value


def _list(value: object, where: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadReply(f"{where}: not a list")
    if len(value) > limit:
        raise BadReply(f"{where}: more than {limit} entries")
    return value


def _count(value: object, where: str, limit: int = MAX_COUNT) -> int | None:
    """A whole number in 0..limit; JSON's 3.0 is accepted as 3 (torch's counters are ints)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadReply(f"{where}: not a number")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise BadReply(f"{where}: not a whole number")
    if not 0 <= value <= limit:
        raise BadReply(f"{where}: out of range")
    return int(value)


def _real(value: object, where: str, low: float, high: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadReply(f"{where}: not a number")
    if not (math.isfinite(value) and low <= value <= high):
        raise BadReply(f"{where}: not a finite number in {low:g}..{high:g}")
    return float(value)


def _text(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadReply(f"{where}: not a string")
    return printable(value[:MAX_TEXT])


def _device(d: object, where: str) -> AllocatorDevice:
    d = _object(d, where)
    fill = _list(d.get("segment_fill"), f"{where}.segment_fill", MAX_SEGMENTS)
    return AllocatorDevice(
        index=_count(d.get("index", 0), f"{where}.index", MAX_DEVICE_INDEX) or 0,
        fragmentation=_real(d.get("fragmentation"), f"{where}.fragmentation", 0.0, 100.0),
        segment_fill=tuple(_real(v, f"{where}.segment_fill", 0.0, 1.0) or 0.0 for v in fill),
        **{key: _count(d.get(key), f"{where}.{key}") for key in _DEVICE_COUNTS},
    )


def _oom(e: object, where: str) -> OomEvent:
    e = _object(e, where)
    return OomEvent(
        time=_real(e.get("time"), f"{where}.time", 0.0, 1e11),
        device=_count(e.get("device"), f"{where}.device", MAX_DEVICE_INDEX),
        requested=_count(e.get("requested"), f"{where}.requested"),
        allocated=_count(e.get("allocated"), f"{where}.allocated"),
        free=_count(e.get("free"), f"{where}.free"),
    )


def _progress(p: object) -> TrainingProgress:
    p = _object(p if p is not None else {}, "progress")
    return TrainingProgress(
        batches=_count(p.get("batches"), "progress.batches"),
        steps_per_s=_real(p.get("steps_per_s"), "progress.steps_per_s", 0.0, 1e6),
        data_wait_share=_real(p.get("data_wait_share"), "progress.data_wait_share", 0.0, 1.0),
        window_s=_real(p.get("window_s"), "progress.window_s", 0.0, 1e7),
        steps=_count(p.get("steps"), "progress.steps"),
        last_step_age_s=_real(p.get("last_step_age_s"), "progress.last_step_age_s", 0.0, 1e9),
        usual_step_s=_real(p.get("usual_step_s"), "progress.usual_step_s", 0.0, 1e7),
    )


def parse(pid: int, reply: object) -> AgentReport:
    """A stats reply from the agent of `pid` (or a recorded report) as an AgentReport; never raises: a
    reply that is not valid is an unreadable report that says why."""
    try:
        return _parse(pid, reply)
    except BadReply as err:
        return unreadable(pid, f"bad reply: {err}")
    except (RecursionError, MemoryError):
        return unreadable(pid, "bad reply: too deeply nested")


def unreadable(pid: int, why: str) -> AgentReport:
    return AgentReport(pid=pid, status=AGENT_UNREADABLE, error=printable(why[:MAX_TEXT]))


def _parse(pid: int, reply: object) -> AgentReport:
    reply = _object(reply, "reply")
    if reply.get("ok") is False:  # the agent's own error reply
        raise BadReply(f"the agent said: {_text(reply.get('error'), 'error') or 'no reason'}")
    status = reply.get("status", AGENT_OK)  # recordings carry it; the agent's own replies do not
    if status not in STATUSES:
        raise BadReply("status: not one of " + ", ".join(STATUSES))
    if "pid" in reply and reply["pid"] != pid:
        raise BadReply(f"pid: says {_count(reply['pid'], 'pid')}, not {pid}")
    alloc = _object(reply.get("allocator", {}), "allocator")
    initialized = alloc.get("cuda_initialized", False)
    if not isinstance(initialized, bool):
        raise BadReply("allocator.cuda_initialized: not true or false")
    return AgentReport(
        pid=pid,
        status=status,
        error=_text(reply.get("error"), "error") or "",
        time=_real(reply.get("time"), "time", 0.0, 1e11),
        torch=_text(alloc.get("torch"), "allocator.torch"),
        cuda=_text(alloc.get("cuda"), "allocator.cuda"),
        cuda_initialized=initialized,
        allocator_backend=_text(alloc.get("allocator_backend"), "allocator.allocator_backend"),
        alloc_conf=_text(alloc.get("alloc_conf"), "allocator.alloc_conf"),
        devices=tuple(
            _device(d, f"allocator.devices[{i}]")
            for i, d in enumerate(_list(alloc.get("devices"), "allocator.devices", MAX_DEVICES))
        ),
        oom_events=tuple(
            _oom(e, f"allocator.oom_events[{i}]")
            for i, e in enumerate(_list(alloc.get("oom_events"), "allocator.oom_events", MAX_OOM_EVENTS))
        ),
        progress=_progress(reply.get("progress")),
    )


def to_dict(report: AgentReport) -> dict[str, Any]:
    """The report in the agent's own reply shape (plus status and error), for --json and recordings;
    `parse` reads it back."""
    return {
        "status": report.status,
        "error": report.error,
        "pid": report.pid,
        "time": report.time,
        "allocator": {
            "torch": report.torch,
            "cuda": report.cuda,
            "cuda_initialized": report.cuda_initialized,
            "allocator_backend": report.allocator_backend,
            "alloc_conf": report.alloc_conf,
            "devices": [
                {**dataclasses.asdict(d), "segment_fill": list(d.segment_fill)} for d in report.devices
            ],
            "oom_events": [dataclasses.asdict(e) for e in report.oom_events],
        },
        "progress": dataclasses.asdict(report.progress),
    }


# -- memory_history: the agent's own memory over the last minutes -----------------------------------

MAX_HISTORY_POINTS = 256  # per device; the agent keeps 133 (11 minutes, one point per 5 s)
MAX_HISTORY_DEVICES = 16


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryHistory:
    """A `memory_history` reply: per CUDA device index (the process's own numbering), its (wall time,
    allocated bytes, reserved bytes) points, oldest first; `time`: the agent's clock when it answered."""

    time: float
    devices: dict[int, tuple[tuple[float, int, int], ...]]


def _point(p: object, where: str) -> tuple[float, int, int]:
    if not isinstance(p, list) or len(p) != 3:
        raise BadReply(f"{where}: not [time, allocated, reserved]")
    t = _real(p[0], f"{where}[0]", 0.0, 1e11)
    allocated, reserved = _count(p[1], f"{where}[1]"), _count(p[2], f"{where}[2]")
    if t is None or allocated is None or reserved is None:
        raise BadReply(f"{where}: a null")
    return t, allocated, reserved


def _history_device(d: object, where: str) -> tuple[int, tuple[tuple[float, int, int], ...]]:
    d = _object(d, where)
    index = _count(d.get("index"), f"{where}.index", MAX_DEVICE_INDEX)
    if index is None:
        raise BadReply(f"{where}.index: missing")
    raw = _list(d.get("points"), f"{where}.points", MAX_HISTORY_POINTS)
    points = tuple(_point(p, f"{where}.points[{i}]") for i, p in enumerate(raw))
    if any(b[0] < a[0] for a, b in itertools.pairwise(points)):
        raise BadReply(f"{where}.points: not in time order")
    return index, points


def parse_memory_history(reply: object) -> MemoryHistory:
    """A `memory_history` reply, validated; raises BadReply saying what is wrong (an agent too old to
    know the op answers with an error, which is said too)."""
    reply = _object(reply, "reply")
    if reply.get("ok") is not True:
        raise BadReply(f"the agent said: {_text(reply.get('error'), 'error') or 'no reason'}")
    now = _real(reply.get("time"), "time", 0.0, 1e11)
    if now is None:
        raise BadReply("time: missing")
    raw = _list(reply.get("devices"), "devices", MAX_HISTORY_DEVICES)
    devices = dict(_history_device(d, f"devices[{i}]") for i, d in enumerate(raw))
    if len(devices) != len(raw):
        raise BadReply("devices: an index twice")
    return MemoryHistory(now, devices)
