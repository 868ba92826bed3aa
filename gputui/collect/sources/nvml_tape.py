"""An NVML "tape": every pynvml answer NvmlSource receives, recorded on a machine with GPUs and played
back on one without a GPU or driver (tests, bug reports, demos of a customer's odd machine).

Recording (``with Recorder() as rec: ...``) wraps pynvml's ``nvml*`` functions and its
``_nvmlGetFunctionPointer``: the real call runs, and its arguments, its answer (or NVMLError code) and its
wall time go into the tape. Only calls made from outside pynvml are recorded: the binding's functions call
each other (and the pointer lookup) through module globals, and those inner calls pass straight through
(a thread-local depth counter, and a look at the caller's module for the calls pynvml makes on its own,
such as NVMLError.__str__ asking nvmlErrorString). The Xid event functions are not wrapped at all.

Playing (``Player(tape).install()``) puts replaying functions in their place: each call takes the next
recorded answer for its key (function name and arguments; keyword arguments count), and the last answer
repeats once they run out, so a sampler may tick longer than the recording did. A call never recorded
raises FunctionNotFound, NvmlSource's sign of a function the driver lacks; where the function was recorded
with other arguments it exists, so such a call raises NotSupported (a MIG device index, a sensor, a
timestamp never asked for). nvmlInit* and nvmlShutdown always succeed; the event functions answer "no
events" (a wait sleeps at most 0.1 s and times out).

The tape (JSON, ``"version": 1``)::

    {"format": "gputui-nvml-tape", "version": 1, "pynvml_version": "13.615.71",
     "handles": {"gpu 0": {"gpu": 0}, "mig 0/3": {"mig": [0, 3]}},
     "calls": [
      {"mark": "tick 1"},
      {"fn": "nvmlDeviceGetHandleByIndex", "args": [0], "result": {"gpu": 0}, "us": 3.1},
      {"fn": "nvmlDeviceGetMemoryInfo", "args": [{"gpu": 0}, 33554472],
       "result": {"struct": "c_nvmlMemory_v2_t", "hex": "2800...", "fields": {"total": 85899345920, ...}}},
      {"fn": "nvmlDeviceGetFanSpeed", "args": [{"gpu": 1}], "error": 3},
      {"fn": "_nvmlGetFunctionPointer", "args": ["nvmlDeviceGetComputeRunningProcesses_v3"], "error": 13},
      {"fn": "nvmlDeviceGetComputeRunningProcesses_v2", "c": true, "args": [{"gpu": 0}],
       "result": {"procs": {"size": 24, "hex": ["..."], "fields": [{"pid": 4242, ...}]}}}]}

Values: JSON scalars and lists as themselves; ``{"tuple": [...]}``, ``{"bytes": hex}``; a ctypes structure
or union of pynvml's as ``{"struct": class name, "hex": its bytes, "fields": a readable decode, ignored on
load}``, an array of them as ``{"array": class name, "n": length, "hex": ..., "fields": [...]}``; a device
handle as its key (``{"gpu": i}``, ``{"mig": [i, j]}``, ``{"uuid": s}``, ``{"pci": s}``, else
``{"handle": n}``); what cannot be stored (a struct holding pointers, a GPM sample) as ``{"opaque": type
name}``, answered NotSupported on replay. An ``"exception"`` entry is an error other than NVMLError.

Process lists: NvmlSource calls the C functions itself (``_nvmlGetFunctionPointer`` and NVML's two-call
buffer sizing). The recorder's lookup returns a wrapper that records, per sizing sequence, the final answer
(the entries as raw bytes of the caller's struct, or the error code); the player's lookup returns a callable
that follows the same C convention against the caller's buffer, and refuses (ValueError) a buffer whose
entry size differs from the recorded one: a struct version mismatch would otherwise pass unnoticed.

PIDs: the recording machine's PIDs could name live processes on the replaying one, so the player maps each
(in process lists and in structs with a ``pid`` field) to 4,200,000 + n in order of first appearance in the
tape, above Linux's PID_MAX_LIMIT (4,194,304): no process has them. ``Player.pid_map`` holds the mapping.

A tape is untrusted input: at most MAX_TAPE_BYTES, checked against this schema on load, only pynvml's own
structs without pointer fields, hex lengths equal to the struct sizes; anything else is a ValueError with a
one-line message.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import functools
import importlib.metadata
import json
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

FORMAT = "gputui-nvml-tape"
VERSION = 1
MAX_TAPE_BYTES = 64 << 20
PID_BASE = 4_200_000  # above Linux's PID_MAX_LIMIT (4,194,304): no live process has such a PID
MAX_DEPTH = 16  # nesting of lists in one value
MAX_ITEMS = 1 << 16  # entries of one array or process list
EVENT_WAIT_S = 0.1  # the longest a replayed event wait sleeps before its timeout

_LOOKUP = "_nvmlGetFunctionPointer"
# Xid events: passed through while recording, "no events" on replay.
_EVENTS = frozenset(
    {
        "nvmlEventSetCreate",
        "nvmlDeviceRegisterEvents",
        "nvmlEventSetWait",
        "nvmlEventSetWait_v2",
        "nvmlEventSetFree",
    }
)
# pynvml helpers that never reach the library.
_HELPERS = frozenset({"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"})
# Calls whose answer is a device handle even where it is not a c_nvmlDevice_t (a test's fake handle).
_HANDLE_MAKERS = frozenset(
    {
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByUUIDV",
        "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetHandleByPciBusId_v2",
        "nvmlDeviceGetHandleBySerial",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    }
)
_HANDLE_BASE = 0x7E00_0000_1000  # replayed handle n points at _HANDLE_BASE + n * 0x100: never dereferenced
_FN_NAME = re.compile(r"_?nvml[A-Za-z0-9_]{1,120}")
_PYNVML_GLOBALS = vars(pynvml)
# A tagged value: its tag -> (required keys, allowed keys).
_SHAPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "bytes": (frozenset({"bytes"}), frozenset({"bytes"})),
    "tuple": (frozenset({"tuple"}), frozenset({"tuple"})),
    "struct": (frozenset({"struct", "hex"}), frozenset({"struct", "hex", "fields"})),
    "array": (frozenset({"array", "n", "hex"}), frozenset({"array", "n", "hex", "fields"})),
    "opaque": (frozenset({"opaque"}), frozenset({"opaque"})),
    **{tag: (frozenset({tag}), frozenset({tag})) for tag in ("gpu", "mig", "uuid", "pci", "handle")},
}


def _functions() -> dict[str, Any]:
    """pynvml's NVML calls as the module holds them now (a test's fakes, where installed)."""
    return {
        name: value
        for name, value in vars(pynvml).items()
        if name.startswith("nvml")
        and callable(value)
        and not isinstance(value, type)
        and name not in _HELPERS
    }


def _binding_version() -> str | None:
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return None


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _address(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


@functools.cache
def _plain(ctype: Any) -> bool:
    """A ctypes type made of numbers, characters and nested such types only: no pointer, which a value from
    a tape (or from another process) would make dangerous to read."""
    if isinstance(ctype, type) and issubclass(ctype, (ctypes.Structure, ctypes.Union)):
        return all(_plain(f[1]) for f in getattr(ctype, "_fields_", ()))
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        return _plain(ctype._type_)
    if isinstance(ctype, type) and issubclass(ctype, ctypes._SimpleCData):
        return getattr(ctype, "_type_", "P") not in "zZPO"  # char*, wchar_t*, void*, PyObject*
    return False


def _struct_class(name: object) -> Any:
    """The pynvml Structure/Union called `name`, one without pointers; else None."""
    if not isinstance(name, str) or not name.startswith(("c_nvml", "nvml")):
        return None
    cls = getattr(pynvml, name, None)
    ok = isinstance(cls, type) and issubclass(cls, (ctypes.Structure, ctypes.Union)) and cls.__name__ == name
    return cls if ok and _plain(cls) else None


def _shallow(obj: Any, depth: int = 0) -> Any:
    """A struct decoded for people reading the tape (ignored on load)."""
    if isinstance(obj, (ctypes.Structure, ctypes.Union)):
        if depth >= 3:
            return "..."
        return {f[0]: _shallow(getattr(obj, f[0]), depth + 1) for f in obj._fields_}
    if isinstance(obj, ctypes.Array):
        return [_shallow(x, depth + 1) for x in obj[:16]]
    if isinstance(obj, bytes):
        return obj.decode(errors="replace")
    if obj is None or isinstance(obj, (int, float, str)):
        return obj
    return type(obj).__name__


def _encode(
    value: Any, handle_key: Callable[[Any], dict[str, Any] | None], human: bool, depth: int = 0
) -> Any:
    """A Python value (an argument or an answer) as tape JSON; `human`: with the readable struct fields."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    key = handle_key(value)
    if key is not None:
        return key
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        items = [_encode(v, handle_key, human, depth + 1) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    cls = type(value)
    if isinstance(value, (ctypes.Structure, ctypes.Union)) and _struct_class(cls.__name__) is cls:
        out: dict[str, Any] = {"struct": cls.__name__, "hex": bytes(value).hex()}
        if human:
            out["fields"] = _shallow(value)
        return out
    if isinstance(value, ctypes.Array) and _struct_class(value._type_.__name__) is value._type_:
        out = {"array": value._type_.__name__, "n": len(value), "hex": bytes(value).hex()}
        if human:
            out["fields"] = [_shallow(v) for v in value]
        return out
    if isinstance(value, ctypes._SimpleCData) and _plain(type(value)):
        return _encode(value.value, handle_key, human, depth + 1)
    return {"opaque": type(value).__name__}


def _count_of(count_ref: Any) -> Any:
    """The c_uint behind a process-list call's `byref(count)` (or pointer), or None."""
    count = getattr(count_ref, "_obj", None)
    if count is None:
        count = getattr(count_ref, "contents", None)
    return count if isinstance(count, ctypes.c_uint) else None


def _failure(err: BaseException) -> dict[str, Any]:
    """How a failed call is written: an NVML error code, or another exception's type and message."""
    if isinstance(err, pynvml.NVMLError) and isinstance(getattr(err, "value", None), int):
        return {"error": int(err.value)}
    try:
        message = _one_line(err, 500)
    except Exception:
        message = ""
    return {"exception": {"type": type(err).__name__, "message": message}}


# -- recording -------------------------------------------------------------------------------------------


class Recorder:
    """Context manager: while active, every pynvml function gputui calls (top-level calls only) is
    wrapped: the real call runs, and its arguments, result or NVMLError code, and wall time are appended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the Xid thread and a UI thread may call NVML concurrently
        self._local = threading.local()  # per thread: how deep inside a recorded call it is
        self._calls: list[dict[str, Any]] = []
        self._handles: dict[tuple[str, int], dict[str, Any]] = {}  # handle identity -> its key
        self._labels: dict[str, dict[str, Any]] = {}  # "gpu 0" -> {"gpu": 0}, in order of appearance
        self._kept: list[Any] = []  # handles known by id(): kept alive so that no other object gets the id
        self._pending: dict[tuple[str, str], tuple[list[Any], float]] = {}  # unfinished sizing sequences
        self._saved: dict[str, Any] | None = None

    def __enter__(self) -> Recorder:
        if self._saved is not None:
            raise RuntimeError("this Recorder is recording already")
        saved = {name: fn for name, fn in _functions().items() if name not in _EVENTS}
        if callable(vars(pynvml).get(_LOOKUP)):
            saved[_LOOKUP] = vars(pynvml)[_LOOKUP]
        self._saved = saved
        for name, real in saved.items():
            setattr(pynvml, name, self._wrap(name, real))
        return self

    def __exit__(self, *exc: object) -> None:
        saved, self._saved = self._saved, None
        for name, real in (saved or {}).items():
            setattr(pynvml, name, real)

    def mark(self, label: str, data: Any = None) -> None:
        """A marker in the tape ("tick 3", "load on"), with JSON `data` if given (what an oracle said at
        that moment, say): for people and tests reading it; the player skips it."""
        entry: dict[str, Any] = {"mark": _one_line(label)}
        if data is not None:
            entry["data"] = json.loads(json.dumps(data))  # JSON now, not when saved
        with self._lock:
            self._calls.append(entry)

    def tape(self) -> dict[str, Any]:
        """The tape so far: a copy, JSON-ready."""
        with self._lock:
            for slot in list(self._pending):  # a sizing sequence the caller gave up on
                self._finish_pending(slot)
            tape = {
                "format": FORMAT,
                "version": VERSION,
                "pynvml_version": _binding_version(),
                "handles": self._labels,
                "calls": self._calls,
            }
            copy: dict[str, Any] = json.loads(json.dumps(tape))
            return copy

    def save(self, path: Path) -> None:
        write_tape(self.tape(), path)

    def latency(self) -> dict[str, dict[str, float]]:
        """Per function (C process-list symbols by their own name), costliest first: calls, mean_us,
        p50_us, max_us, total_ms."""
        with self._lock:
            times: dict[str, list[float]] = {}
            for call in self._calls:
                if "us" in call:
                    times.setdefault(call["fn"], []).append(call["us"])
        out: dict[str, dict[str, float]] = {}
        for name, us in sorted(times.items(), key=lambda kv: (-sum(kv[1]), kv[0])):
            out[name] = {
                "calls": len(us),
                "mean_us": round(statistics.fmean(us), 1),
                "p50_us": round(statistics.median(us), 1),
                "max_us": round(max(us), 1),
                "total_ms": round(sum(us) / 1000, 3),
            }
        return out

    # -- wrapping --------------------------------------------------------------------------------------

    def _wrap(self, name: str, real: Any) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            local = self._local
            depth = getattr(local, "depth", 0)
            # Inner calls (pynvml calling itself, or a recorded call's callee calling pynvml) pass through.
            if depth or sys._getframe(1).f_globals is _PYNVML_GLOBALS:
                return real(*args, **kwargs)
            with self._lock:  # before the call: a call may fill the structs it is given
                args_json = [self._safely(a, human=False) for a in args]
                kwargs_json = {k: self._safely(v, human=False) for k, v in kwargs.items()}
            local.depth = depth + 1
            start = time.perf_counter_ns()
            try:
                result = real(*args, **kwargs)
            except Exception as err:
                self._append(name, args_json, kwargs_json, start, _failure(err))
                raise
            finally:
                local.depth = depth
            if name == _LOOKUP:
                self._append(name, args_json, kwargs_json, start, {"result": {"cfunc": str(args[0])}})
                return _RecordedCFunction(self, str(args[0]), result)
            with self._lock:
                key = self._result_handle(name, args, result)
                answer = key if key is not None else self._safely(result, human=True)
            self._append(name, args_json, kwargs_json, start, {"result": answer})
            return result

        recorded.__name__ = recorded.__qualname__ = name
        recorded.__wrapped__ = real  # type: ignore[attr-defined]
        return recorded

    def _safely(self, value: Any, human: bool) -> Any:
        """_encode, but an odd object never breaks the program being recorded."""
        try:
            return _encode(value, self._handle_key, human)
        except Exception:
            return {"opaque": type(value).__name__}

    def _append(
        self, name: str, args: list[Any], kwargs: dict[str, Any], start_ns: int, outcome: dict[str, Any]
    ) -> None:
        us = (time.perf_counter_ns() - start_ns) / 1000
        entry: dict[str, Any] = {"fn": name, "args": args}
        if kwargs:
            entry["kwargs"] = kwargs
        entry.update(outcome)
        entry["us"] = round(us, 1)
        with self._lock:
            self._calls.append(entry)

    # -- device handles (called with the lock held) ---------------------------------------------------

    def _identity(self, obj: Any) -> tuple[str, int] | None:
        if isinstance(obj, pynvml.c_nvmlDevice_t):
            return ("address", _address(obj))  # a new object per call, the same address per device
        if ("id", id(obj)) in self._handles:
            return ("id", id(obj))
        return None

    def _remember(self, identity: tuple[str, int], key: dict[str, Any], obj: Any) -> dict[str, Any]:
        if identity[0] == "id":
            self._kept.append(obj)
        self._handles[identity] = key
        if "gpu" in key:
            label = f"gpu {key['gpu']}"
        elif "mig" in key:
            label = f"mig {key['mig'][0]}/{key['mig'][1]}"
        else:
            label = " ".join(f"{k} {v}" for k, v in key.items())
        self._labels.setdefault(label, key)
        return key

    def _handle_key(self, obj: Any) -> dict[str, Any] | None:
        """An argument's handle key: a known handle, or a device pointer met for the first time."""
        if obj is None or isinstance(obj, (bool, int, float, str, bytes, list, tuple)):
            return None
        identity = self._identity(obj)
        if identity is None:
            return None
        if identity not in self._handles:
            return self._remember(identity, {"handle": len(self._labels)}, obj)
        return self._handles[identity]

    def _result_handle(self, name: str, args: tuple[Any, ...], result: Any) -> dict[str, Any] | None:
        """The key of a handle a call answered with (None: the answer is no handle)."""
        if not isinstance(result, pynvml.c_nvmlDevice_t) and name not in _HANDLE_MAKERS:
            return None
        identity = self._identity(result) or ("id", id(result))
        if identity in self._handles:  # by index and by UUID alike: the first key stays
            return self._handles[identity]
        key: dict[str, Any] = {"handle": len(self._labels)}
        first = args[0] if args else None
        if name.startswith("nvmlDeviceGetHandleByIndex") and type(first) is int:
            key = {"gpu": first}
        elif name == "nvmlDeviceGetMigDeviceHandleByIndex" and len(args) == 2 and type(args[1]) is int:
            parent = self._handle_key(first)
            if parent is not None and "gpu" in parent:
                key = {"mig": [parent["gpu"], args[1]]}
        elif name.startswith("nvmlDeviceGetHandleByUUID") and isinstance(first, (str, bytes)):
            key = {"uuid": _one_line(first.decode(errors="replace") if isinstance(first, bytes) else first)}
        elif name.startswith("nvmlDeviceGetHandleByPciBusId") and isinstance(first, (str, bytes)):
            key = {"pci": _one_line(first.decode(errors="replace") if isinstance(first, bytes) else first)}
        return self._remember(identity, key, result)

    # -- process lists --------------------------------------------------------------------------------

    def _c_call(self, symbol: str, handle: Any, us: float, ret: Any, count_ref: Any, buf: Any) -> None:
        """One C invocation of a process-list symbol: a finished sizing sequence becomes one entry."""
        with self._lock:
            hkey = _encode(handle, self._handle_key, human=False)
            slot = (symbol, json.dumps(hkey, sort_keys=True))
            if buf is None and slot in self._pending:  # a new sequence: the last one was given up on
                self._finish_pending(slot)
            pending = self._pending.pop(slot, None)
            us += pending[1] if pending is not None else 0.0
            if isinstance(ret, int) and ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
                self._pending[slot] = ([hkey], us)  # the caller grows its buffer and calls again
                return
            entry: dict[str, Any] = {"fn": symbol, "c": True, "args": [hkey]}
            if isinstance(ret, BaseException):
                entry.update(_failure(ret))
            elif not isinstance(ret, int):
                entry["result"] = {"opaque": type(ret).__name__}
            elif ret != pynvml.NVML_SUCCESS:
                entry["error"] = int(ret)
            else:
                entry["result"] = _process_entries(count_ref, buf)
            entry["us"] = round(us, 1)
            self._calls.append(entry)

    def _finish_pending(self, slot: tuple[str, str]) -> None:
        args, us = self._pending.pop(slot)
        self._calls.append(
            {
                "fn": slot[0],
                "c": True,
                "args": args,
                "error": pynvml.NVML_ERROR_INSUFFICIENT_SIZE,
                "us": round(us, 1),
            }
        )


def write_tape(tape: dict[str, Any], path: Path) -> None:
    """A tape as JSON, one call per line (readable, and diffs well)."""
    head = json.dumps({k: v for k, v in tape.items() if k != "calls"})[:-1]
    body = ",\n".join(json.dumps(c) for c in tape["calls"])
    Path(path).write_text(f'{head}, "calls": [\n{body}\n]}}\n', encoding="utf-8")


def _process_entries(count_ref: Any, buf: Any) -> dict[str, Any]:
    """A successful process-list answer: the filled entries, as bytes of the caller's struct."""
    if buf is None:  # the sizing call found no process
        return {"procs": {"hex": []}}
    if not isinstance(buf, ctypes.Array):
        return {"opaque": type(buf).__name__}
    count = _count_of(count_ref)
    items = [buf[i] for i in range(min(count.value if count is not None else 0, len(buf)))]
    return {
        "procs": {
            "size": ctypes.sizeof(buf._type_),
            "hex": [bytes(p).hex() for p in items],
            "fields": [_shallow(p) for p in items],
        }
    }


class _RecordedCFunction:
    """What the recorder's _nvmlGetFunctionPointer hands out: the real C function, recorded."""

    def __init__(self, recorder: Recorder, symbol: str, real: Any) -> None:
        self._recorder, self._symbol, self._real = recorder, symbol, real

    def __call__(self, handle: Any, count_ref: Any, buf: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            ret = self._real(handle, count_ref, buf)
        except Exception as err:
            self._recorder._c_call(
                self._symbol, handle, (time.perf_counter_ns() - start) / 1000, err, None, None
            )
            raise
        self._recorder._c_call(
            self._symbol, handle, (time.perf_counter_ns() - start) / 1000, ret, count_ref, buf
        )
        return ret


# -- playing ---------------------------------------------------------------------------------------------


class _Opaque(Exception):
    """A recorded answer the tape could not store."""


_MISSING = object()


def _unhex(text: object, size: int) -> bytes:
    if not isinstance(text, str) or len(text) != 2 * size:
        raise ValueError(f"hex of {len(text) if isinstance(text, str) else 'no'} digits, {2 * size} expected")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ValueError("not hex") from None


def _check_key(tag: str, value: Any) -> None:
    """A device handle's key, as the recorder writes it."""
    if tag in ("gpu", "handle"):
        ok = type(value) is int and 0 <= value < 1 << 20
    elif tag == "mig":
        ok = (
            isinstance(value, list)
            and len(value) == 2
            and all(type(v) is int and 0 <= v < 1 << 20 for v in value)
        )
    else:
        ok = isinstance(value, str) and len(value) <= 200
    if not ok:
        raise ValueError(f"bad {tag} handle key")


class Player:
    """Answers pynvml calls from a tape: install() patches pynvml's functions (monkeypatch-like, with
    restore), then NvmlSource() works unchanged on a machine without a GPU or driver."""

    def __init__(self, tape: dict[str, Any] | Path | str, keep_pids: bool = False) -> None:
        """`tape`: a Recorder's tape() or a saved file. Bad input: ValueError with one line.
        `keep_pids`: answer the recorded PIDs as they are (pid_map then maps each to itself)."""
        self.keep_pids = keep_pids
        self.pid_map: dict[int, int] = {}  # recorded PID -> the PID answered
        self._lock = threading.Lock()
        self._answers: dict[str, list[dict[str, Any]]] = {}  # key -> its answers, in order
        self._cursor: dict[str, int] = {}
        self._names: set[str] = set()  # functions recorded (any arguments)
        self._addresses: dict[str, int] = {}  # handle key (as JSON) -> its fake address
        self._keys: dict[int, Any] = {}  # fake address -> handle key
        self._saved: dict[str, Any] | None = None
        data: Any = _read(Path(tape)) if isinstance(tape, (str, Path)) else tape
        try:
            self._load(data)
        except RecursionError:
            raise ValueError("tape: nested too deeply") from None
        self.pynvml_version: str | None = data.get("pynvml_version")

    # -- install --------------------------------------------------------------------------------------

    def install(self, monkeypatch: Any = None) -> Player:
        """Replace every NVML function of pynvml with its replay (with a pytest `monkeypatch`, it also
        restores them at the test's end); uninstall() restores them either way."""
        if self._saved is not None:
            raise RuntimeError("this Player is installed already")
        names = set(_functions()) | self._names | {_LOOKUP}
        self._saved = {name: vars(pynvml).get(name, _MISSING) for name in names}
        for name in sorted(names):
            if monkeypatch is not None:
                monkeypatch.setattr(pynvml, name, self._replay(name), raising=False)
            else:
                setattr(pynvml, name, self._replay(name))
        return self

    def uninstall(self) -> None:
        saved, self._saved = self._saved, None
        for name, value in (saved or {}).items():
            if value is not _MISSING:
                setattr(pynvml, name, value)
            elif name in vars(pynvml):
                delattr(pynvml, name)

    def __enter__(self) -> Player:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- loading --------------------------------------------------------------------------------------

    def _load(self, tape: Any) -> None:
        if not isinstance(tape, dict):
            raise ValueError(f"tape: a JSON object expected, not {type(tape).__name__}")
        if tape.get("format") != FORMAT:
            raise ValueError(f"tape: not a {FORMAT} (format: {_one_line(repr(tape.get('format')), 60)})")
        if tape.get("version") != VERSION:
            raise ValueError(
                f"tape: version {_one_line(repr(tape.get('version')), 20)}; this gputui reads {VERSION}"
            )
        if not isinstance(tape.get("pynvml_version"), (str, type(None))):
            raise ValueError("tape: pynvml_version is not a string")
        handles, calls = tape.get("handles", {}), tape.get("calls")
        if not isinstance(handles, dict) or not isinstance(calls, list):
            raise ValueError("tape: 'handles' must be an object and 'calls' a list")
        for label, key in handles.items():
            try:
                self._handle(key)  # the recorded order gives the fake addresses
            except ValueError as err:
                raise ValueError(f"tape: handles[{_one_line(repr(label), 40)}]: {err}") from None
        for i, call in enumerate(calls):
            try:
                self._load_call(call)
            except ValueError as err:
                fn = call.get("fn") if isinstance(call, dict) else None
                where = f" ({_one_line(fn, 80)})" if isinstance(fn, str) else ""
                raise ValueError(f"tape: calls[{i}]{where}: {_one_line(err)}") from None

    def _load_call(self, call: Any) -> None:  # noqa: C901
        if not isinstance(call, dict):
            raise ValueError(f"an object expected, not {type(call).__name__}")
        if "mark" in call:
            if not set(call) <= {"mark", "data"} or not isinstance(call["mark"], str):
                raise ValueError("a mark has a string and, at most, data")
            return
        unknown = set(call) - {"fn", "c", "args", "kwargs", "result", "error", "exception", "us"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)[:3]}")
        fn, c, args, kwargs = call.get("fn"), call.get("c", False), call.get("args"), call.get("kwargs", {})
        if not isinstance(fn, str) or not _FN_NAME.fullmatch(fn):
            raise ValueError("'fn' is not an NVML function name")
        if not isinstance(c, bool) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError("'c' must be a boolean, 'args' a list and 'kwargs' an object")
        if not isinstance(call.get("us", 0), (int, float)) or isinstance(call.get("us"), bool):
            raise ValueError("'us' is not a number")
        outcomes = [k for k in ("result", "error", "exception") if k in call]
        if len(outcomes) != 1:
            raise ValueError("one of 'result', 'error' or 'exception' expected")
        if "error" in call:
            code = call["error"]
            if type(code) is not int or not 0 < code < 1 << 31:
                raise ValueError("'error' is not an NVML error code")
        elif "exception" in call:
            exc = call["exception"]
            if not (
                isinstance(exc, dict)
                and isinstance(exc.get("type"), str)
                and isinstance(exc.get("message"), str)
            ):
                raise ValueError("'exception' needs a type and a message")
        elif c:
            self._check_procs(call["result"])
        elif fn == _LOOKUP:
            result = call["result"]
            if not (
                isinstance(result, dict) and set(result) == {"cfunc"} and isinstance(result["cfunc"], str)
            ):
                raise ValueError("a lookup's result is {'cfunc': symbol}")
        else:
            with contextlib.suppress(_Opaque):
                self._decode(call["result"])  # checks it, and numbers its PIDs in order
        if c and len(args) != 1:
            raise ValueError("a process-list call has one argument, the handle")
        try:
            key = _key(fn, c, args, kwargs)
        except TypeError:  # a dict given to Player(), holding what JSON cannot
            raise ValueError("the arguments are not JSON") from None
        self._answers.setdefault(key, []).append(call)
        if not c:
            self._names.add(fn)

    def _check_procs(self, result: Any) -> None:
        if isinstance(result, dict) and set(result) == {"opaque"}:
            return
        procs = result.get("procs") if isinstance(result, dict) and set(result) == {"procs"} else None
        if not isinstance(procs, dict) or not isinstance(procs.get("hex"), list):
            raise ValueError("a process list's result is {'procs': {'size': n, 'hex': [...]}}")
        entries, size = procs["hex"], procs.get("size")
        if len(entries) > MAX_ITEMS:
            raise ValueError(f"more than {MAX_ITEMS} processes")
        if not entries and size is None:
            return
        if type(size) is not int or not 4 <= size <= 4096:
            raise ValueError("a process entry's size must be 4 to 4096 bytes")
        for raw in entries:
            pid = ctypes.c_uint.from_buffer_copy(_unhex(raw, size)).value  # every version starts with its pid
            self._pid(pid)

    # -- answering ------------------------------------------------------------------------------------

    def _replay(self, name: str) -> Callable[..., Any]:
        if name == _LOOKUP:
            return self._lookup
        if name.startswith("nvmlInit") or name in (
            "nvmlShutdown",
            "nvmlDeviceRegisterEvents",
            "nvmlEventSetFree",
        ):
            return _succeed
        if name == "nvmlEventSetCreate":
            return _event_set_create
        if name.startswith("nvmlEventSetWait"):
            return _no_event

        def replay(*args: Any, **kwargs: Any) -> Any:
            entry = self._next(name, False, args, kwargs)
            if entry is None:
                # Never recorded: a function recorded with other arguments exists (NotSupported); one
                # never called may not (FunctionNotFound, NvmlSource's sign of a function the driver lacks).
                known = name in self._names
                raise pynvml.NVMLError(
                    pynvml.NVML_ERROR_NOT_SUPPORTED if known else pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
                )
            try:
                result = _outcome(entry)
                with self._lock:
                    return self._decode(result)
            except _Opaque:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED) from None

        replay.__name__ = replay.__qualname__ = name
        return replay

    def _next(self, fn: str, c: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """The next recorded answer for this call (the last one again once they ran out); None: none."""
        with self._lock:
            key = _key(
                fn,
                c,
                [_encode(a, self._arg_key, human=False) for a in args],
                {k: _encode(v, self._arg_key, human=False) for k, v in kwargs.items()},
            )
            answers = self._answers.get(key)
            if not answers:
                return None
            i = self._cursor.get(key, 0)
            self._cursor[key] = i + 1
            return answers[min(i, len(answers) - 1)]

    def _lookup(self, symbol: str) -> Any:
        entry = self._next(_LOOKUP, False, (symbol,), {})
        if entry is None or "result" not in entry:
            _outcome(entry)  # raises its error; a symbol never looked up is one the driver lacks
        return _PlayedCFunction(self, symbol)

    # -- values ---------------------------------------------------------------------------------------

    def _pid(self, pid: int) -> int:
        """The PID answered for a recorded one (numbered in order of first appearance)."""
        if pid not in self.pid_map:
            self.pid_map[pid] = pid if self.keep_pids else PID_BASE + len(self.pid_map)
        return self.pid_map[pid]

    def _with_pids(self, obj: Any) -> Any:
        if any(f[0] == "pid" for f in obj._fields_):
            obj.pid = self._pid(obj.pid)
        return obj

    def _handle(self, key: Any) -> Any:
        """A fresh c_nvmlDevice_t for a handle key (the same address for the same key)."""
        if (
            not isinstance(key, dict)
            or len(key) != 1
            or next(iter(key)) not in ("gpu", "mig", "uuid", "pci", "handle")
        ):
            raise ValueError("not a handle key")
        tag, value = next(iter(key.items()))
        _check_key(tag, value)
        text = json.dumps(key, sort_keys=True)
        if text not in self._addresses:
            address = _HANDLE_BASE + len(self._addresses) * 0x100
            self._addresses[text] = address
            self._keys[address] = key
        handle = pynvml.c_nvmlDevice_t()
        ctypes.cast(ctypes.pointer(handle), ctypes.POINTER(ctypes.c_void_p))[0] = self._addresses[text]
        return handle

    def _arg_key(self, obj: Any) -> dict[str, Any] | None:
        if isinstance(obj, pynvml.c_nvmlDevice_t):
            key: dict[str, Any] | None = self._keys.get(_address(obj))
            return key
        return None

    def _decode(self, value: Any, depth: int = 0) -> Any:
        """Tape JSON to the Python value pynvml would answer; checks it on the way (ValueError)."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if depth >= MAX_DEPTH:
            raise ValueError("nested too deeply")
        if isinstance(value, list):
            return [self._decode(v, depth + 1) for v in value]
        if not isinstance(value, dict):
            raise ValueError(f"not a tape value: {type(value).__name__}")
        tags = [t for t in value if t in _SHAPES]
        if len(tags) != 1 or not _SHAPES[tags[0]][0] <= set(value) <= _SHAPES[tags[0]][1]:
            raise ValueError(f"unknown value with keys {_one_line(sorted(value)[:4], 80)}")
        tag = tags[0]
        if tag in ("gpu", "mig", "uuid", "pci", "handle"):
            return self._handle(value)
        if tag == "bytes":
            text = value["bytes"]
            return _unhex(text, len(text) // 2 if isinstance(text, str) else 0)
        if tag == "tuple":
            if not isinstance(value["tuple"], list):
                raise ValueError("a tuple holds a list")
            return tuple(self._decode(v, depth + 1) for v in value["tuple"])
        if tag == "opaque":
            raise _Opaque
        name = value.get("struct", value.get("array"))
        cls = _struct_class(name)
        if cls is None:
            raise ValueError(f"unknown struct {_one_line(repr(name), 60)}")
        if tag == "struct":
            return self._with_pids(cls.from_buffer_copy(_unhex(value["hex"], ctypes.sizeof(cls))))
        n = value["n"]
        if type(n) is not int or not 0 <= n <= MAX_ITEMS:
            raise ValueError("bad array length")
        array = (cls * n).from_buffer_copy(_unhex(value["hex"], n * ctypes.sizeof(cls)))
        for item in array:
            self._with_pids(item)
        return array


# Arguments that are a moment, not a question: "samples since this timestamp" (the caller's last seen one, or
# now minus a window). A replay asks at other moments; its answers are matched on the other arguments.
_MOMENT_ARGS = {"nvmlDeviceGetProcessUtilization": 1}


def _key(fn: str, c: bool, args: list[Any], kwargs: dict[str, Any]) -> str:
    moment = _MOMENT_ARGS.get(fn)
    if moment is not None and len(args) > moment:
        args = [*args[:moment], None, *args[moment + 1 :]]
    return json.dumps([fn, c, args, kwargs], sort_keys=True, separators=(",", ":"))


def _outcome(entry: dict[str, Any] | None) -> Any:
    """A recorded answer's result; its error raised."""
    if entry is None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    if "error" in entry:
        raise pynvml.NVMLError(entry["error"])
    if "exception" in entry:
        exc = entry["exception"]
        cls = getattr(builtins, exc["type"], None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = RuntimeError
        raise cls(exc["message"])
    return entry["result"]


# The codes a C function answers, typed once (pynvml has no annotations)
_SUCCESS: int = pynvml.NVML_SUCCESS
_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
_INVALID_ARGUMENT: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
_INSUFFICIENT_SIZE: int = pynvml.NVML_ERROR_INSUFFICIENT_SIZE


class _PlayedCFunction:
    """A process-list C function on replay: NVML's convention against the caller's count and buffer."""

    def __init__(self, player: Player, symbol: str) -> None:
        self._player, self._symbol = player, symbol
        self._current: dict[int, dict[str, Any] | None] = {}  # per handle: the answer of this sequence

    def __call__(self, handle: Any, count_ref: Any, buf: Any) -> int:
        slot = _address(handle) if isinstance(handle, pynvml.c_nvmlDevice_t) else id(handle)
        if buf is None or slot not in self._current:  # a sizing call starts a sequence: the next answer
            self._current[slot] = self._player._next(self._symbol, True, (handle,), {})
        entry = self._current[slot]
        if entry is None:
            return _NOT_SUPPORTED
        if "error" in entry:
            return int(entry["error"])
        result = _outcome(entry)  # raises a recorded exception
        if "procs" not in result:
            return _NOT_SUPPORTED
        entries, size = result["procs"]["hex"], result["procs"].get("size")
        count = _count_of(count_ref)
        if count is None:
            return _INVALID_ARGUMENT
        if buf is None:
            count.value = len(entries)
            return _SUCCESS if not entries else _INSUFFICIENT_SIZE
        element: Any = getattr(type(buf), "_type_", None)
        if not isinstance(buf, ctypes.Array) or not hasattr(element, "_fields_"):
            return _INVALID_ARGUMENT
        if size is not None and ctypes.sizeof(element) != size:
            raise ValueError(
                f"{self._symbol}: the caller's entries are {ctypes.sizeof(element)} bytes, the tape's {size}"
                " (a different struct version)"
            )
        if count.value > len(buf):
            return _INVALID_ARGUMENT  # the driver would write past the buffer
        if count.value < len(entries):
            count.value = len(entries)
            return _INSUFFICIENT_SIZE
        with self._player._lock:
            for i, raw in enumerate(entries):
                buf[i] = self._player._with_pids(element.from_buffer_copy(bytes.fromhex(raw)))
        count.value = len(entries)
        return _SUCCESS


def _succeed(*args: Any, **kwargs: Any) -> None:
    return None


def _event_set_create() -> Any:
    """A dummy event set: nothing is ever delivered to it."""
    event_set = pynvml.c_nvmlEventSet_t()
    ctypes.cast(ctypes.pointer(event_set), ctypes.POINTER(ctypes.c_void_p))[0] = _HANDLE_BASE - 0x100
    return event_set


def _no_event(event_set: Any, timeout_ms: int, *args: Any) -> Any:
    time.sleep(min(max(timeout_ms, 0) / 1000, EVENT_WAIT_S))
    raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)


def _read(path: Path) -> Any:
    """A tape file, bounded in size, parsed (ValueError with one line)."""
    if path.stat().st_size > MAX_TAPE_BYTES:
        raise ValueError(f"tape: {path.name} is larger than {MAX_TAPE_BYTES >> 20} MiB")
    with path.open("rb") as f:
        data = f.read(MAX_TAPE_BYTES + 1)
    if len(data) > MAX_TAPE_BYTES:
        raise ValueError(f"tape: {path.name} is larger than {MAX_TAPE_BYTES >> 20} MiB")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, bad UTF-8, a 5000-digit number
        raise ValueError(f"tape: {path.name} is not JSON: {_one_line(err, 120)}") from None
