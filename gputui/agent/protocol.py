"""The agent's wire protocol: newline-delimited JSON over a Unix socket in a private per-user directory.

Every request and reply carries "v" (the protocol version). Requests are at most MAX_MESSAGE bytes,
replies at most MAX_REPLY.
Nothing is ever unpickled: JSON only, objects only.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

VERSION = 1
MAX_MESSAGE = 64 * 1024
MAX_REPLY = 1024 * 1024  # 16 devices' segment maps and OOM events fit with room to spare
SUFFIX = ".sock"


class ProtocolError(ValueError):
    pass


def candidate_dirs(uid: int | None = None) -> tuple[Path, ...]:
    """Where the agents of `uid` may live, in the order an agent tries them. /tmp first: it outlives the
    login session (systemd removes /run/user/<uid> at the last logout, while a nohup'd job runs on);
    /run/user/<uid> when another user has taken /tmp/gputui-<uid>. The monitor looks in both."""
    uid = os.getuid() if uid is None else uid
    return Path(f"/tmp/gputui-{uid}"), Path(f"/run/user/{uid}/gputui")


def trusted_dir(info: os.stat_result, uid: int) -> bool:
    """An lstat() result: a real directory (no symlink) of `uid` that nobody else can write into."""
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and not info.st_mode & 0o022


def runtime_dir(uid: int | None = None) -> Path:
    """The directory the agents of `uid` use now: the first candidate that is theirs."""
    uid = os.getuid() if uid is None else uid
    for path in candidate_dirs(uid):
        try:
            if trusted_dir(path.lstat(), uid):
                return path
        except OSError:
            continue
    return candidate_dirs(uid)[0]


def private_dir(path: Path | None = None) -> Path:
    """Create (0700) or check the agent's directory: ours, and nobody else's to read or write. Without
    `path`, the first candidate that can be made ours; PermissionError says why none could."""
    if path is not None:
        return _make_private(path, parents=True)
    reasons = []
    for candidate in candidate_dirs():
        try:
            return _make_private(candidate, parents=False)
        except OSError as err:
            reasons.append(f"{candidate}: {err.strerror or err}")
    raise PermissionError("no private directory for the agent (" + "; ".join(reasons) + ")")


def _make_private(path: Path, parents: bool) -> Path:
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
    except FileNotFoundError:
        if not parents:
            raise
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(errno.EPERM, "is not a directory of ours (another user made it?)")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def pid_of(name: str) -> int | None:
    """The pid in a socket's file name `<pid>.sock`, or None. ASCII digits only: '²'.isdigit() is true
    and int('²') raises; a leading zero or a pid <= 1 is never an agent's."""
    stem = name.removesuffix(SUFFIX)
    if stem == name or not stem.isascii() or not stem.isdigit() or stem.startswith("0") or len(stem) > 10:
        return None
    pid = int(stem)
    return pid if pid > 1 else None


def socket_path(pid: int, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{pid}{SUFFIX}"


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps({"v": VERSION, **message}, separators=(",", ":"), default=str).encode() + b"\n"


def decode(line: bytes, limit: int = MAX_MESSAGE) -> dict[str, Any]:
    if len(line) > limit:
        raise ProtocolError("message too large")
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:  # deep nesting recurses
        raise ProtocolError(f"not JSON: {type(err).__name__}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("not a JSON object")
    if type(obj.get("v")) is not int or obj.get("v") != VERSION:  # not True, not 1.0
        raise ProtocolError(f"unsupported protocol version {obj.get('v')!r} (this side speaks {VERSION})")
    return obj
