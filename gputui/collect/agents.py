"""The monitor's side of the agent protocol: find the agents of this user and ask them."""

from __future__ import annotations

import contextlib
import os
import socket
from collections import deque
from pathlib import Path
from typing import Any

from gputui.agent import protocol
from gputui.model import Snapshot

TIMEOUT_S = 0.5


def request(path: Path, message: dict[str, Any], timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """One request, one reply. Raises OSError or protocol.ProtocolError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(protocol.encode(message))
        data = b""
        while b"\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) > 16 * protocol.MAX_MESSAGE:
                raise protocol.ProtocolError("reply too large")
    return protocol.decode(data.split(b"\n", 1)[0])


def discover(directory: Path | None = None) -> dict[int, Path]:
    """pid -> socket of each agent whose process is alive; sockets of dead processes are removed."""
    directory = directory or protocol.runtime_dir()
    found: dict[int, Path] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        stem = name.removesuffix(protocol.SUFFIX)
        if not name.endswith(protocol.SUFFIX) or not stem.isdigit():
            continue
        pid, path = int(stem), directory / name
        if os.path.exists(f"/proc/{pid}"):
            found[pid] = path
        else:
            with contextlib.suppress(OSError):
                path.unlink()  # the process died without cleaning up (SIGKILL)
    return found


class AgentPoller:
    """Asks every agent for its stats; the sampler calls it once a tick."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory

    def poll(self) -> dict[int, dict[str, Any]]:
        out = {}
        for pid, path in discover(self.directory).items():
            try:
                reply = request(path, {"op": "stats"})
            except Exception:  # anything a process may answer on that socket must not stop a tick
                continue
            if reply.get("ok"):
                out[pid] = reply
        return out

    def act(self, pid: int, op: str, **params: Any) -> dict[str, Any]:
        """An action on one agent (record_history, dump_snapshot, empty_cache): the reply, or an error."""
        path = protocol.socket_path(pid, self.directory or protocol.runtime_dir())
        try:
            return request(path, {"op": op, **params}, timeout=30.0)
        except (OSError, protocol.ProtocolError) as err:
            return {"ok": False, "error": str(err)}


HISTORY = 300  # samples of allocated/reserved kept per (pid, device)


def _bytes(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


class AgentHistory:
    """allocated/reserved over time for every agent, kept by the app so a panel opens with a past."""

    def __init__(self) -> None:
        self.series: dict[tuple[int, int], deque[tuple[int, int]]] = {}

    def add(self, snap: Snapshot) -> None:
        for pid, reply in snap.agents.items():
            # A reply comes from another process: trust no shape in it.
            allocator = reply.get("allocator") if isinstance(reply, dict) else None
            devices = allocator.get("devices") if isinstance(allocator, dict) else None
            for d in devices if isinstance(devices, list) else ():
                if not isinstance(d, dict):
                    continue
                key = (pid, d.get("index", 0) if isinstance(d.get("index", 0), int) else 0)
                self.series.setdefault(key, deque(maxlen=HISTORY)).append(
                    (_bytes(d.get("allocated")), _bytes(d.get("reserved"))))
        for key in [k for k in self.series if k[0] not in snap.agents]:
            del self.series[key]  # the process or its agent is gone

    def points(self, pid: int, device: int) -> list[tuple[int, int]]:
        return list(self.series.get((pid, device), ()))
