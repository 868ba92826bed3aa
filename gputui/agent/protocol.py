"""The agent's wire protocol: newline-delimited JSON over a Unix socket in a private per-user directory.

Every request and reply carries "v" (the protocol version). Requests are at most MAX_MESSAGE bytes.
Nothing is ever unpickled: JSON only, objects only.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

VERSION = 1
MAX_MESSAGE = 64 * 1024
SUFFIX = ".sock"


class ProtocolError(ValueError):
    pass


def runtime_dir(uid: int | None = None) -> Path:
    """$XDG_RUNTIME_DIR/gputui for the current user, else /tmp/gputui-<uid>."""
    uid = os.getuid() if uid is None else uid
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and uid == os.getuid() and os.path.isdir(xdg):
        return Path(xdg) / "gputui"
    return Path(f"/tmp/gputui-{uid}")


def private_dir(path: Path | None = None) -> Path:
    """Create (0700) or check the directory: ours, and nobody else's to read or write."""
    path = path or runtime_dir()
    try:
        path.mkdir(mode=0o700, parents=False, exist_ok=True)
    except FileNotFoundError:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a directory of ours")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def socket_path(pid: int, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{pid}{SUFFIX}"


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps({"v": VERSION, **message}, separators=(",", ":"), default=str).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_MESSAGE:
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
