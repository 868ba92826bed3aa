"""The agent's server: a daemon thread answering on <runtime dir>/<pid>.sock.

Safe to run inside someone's training job: standard library only; the socket lives in a 0700 directory
and is itself 0600; a peer of another uid (root aside) is refused (SO_PEERCRED); requests are bounded in
size and time; a malformed request gets an error reply and nothing else happens; every failure inside
is caught, so the host process never notices the agent.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gputui.agent import protocol
from gputui.agent.memory_ring import MemoryRing
from gputui.agent.profile import MAX_SECONDS, MAX_STEPS, ProfileError, Profiler
from gputui.agent.progress import Progress
from gputui.agent.torchstats import TorchStats

REQUEST_TIMEOUT_S = 2.0
IDLE_TIMEOUT_S = 10.0  # a connection that asks nothing for this long is closed
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(conn: socket.socket) -> int | None:
    try:
        _, uid, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        return int(uid)  # struct answers Any
    except (OSError, AttributeError):
        return None


class Agent:
    def __init__(
        self,
        directory: Path | None = None,
        stats: TorchStats | None = None,
        progress: Progress | None = None,
        memory: MemoryRing | None = None,
    ) -> None:
        self.directory = directory
        self.stats = stats or TorchStats()
        self.progress = progress or Progress()
        self.memory = memory or MemoryRing()  # its own memory over the last minutes: doctor's trend
        self.profiler = Profiler(self._private_dir, self.progress.set_hook)
        self.path: Path | None = None
        self.started = time.time()
        self.requests = 0
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Path:
        """Raises OSError when no socket can be made; `start()` below turns that into a warning."""
        directory = protocol.private_dir(self.directory)
        path = protocol.socket_path(self._pid, directory)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by an earlier process with our pid
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, 0o600)
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._sock, self.path = sock, path
        self._thread = threading.Thread(target=self._serve, name="gputui-agent", daemon=True)
        self._thread.start()
        atexit.register(self.stop)
        return path

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        # Only the process that made the socket removes it (a forked child inherits this object).
        if self.path is not None and os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                self.path.unlink()
        self.progress.uninstall()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    # -- serving -----------------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            sock = self._sock
            if sock is None:
                return
            self.progress.install()  # torch.utils.data may have been imported since
            self.memory.tick()  # reads the allocator only every POINT_S
            try:
                ready, _, _ = select.select([sock], [], [], 0.5)
                if not ready:
                    continue
                conn, _ = sock.accept()
            except (OSError, ValueError):
                if self._stop.is_set():
                    return
                time.sleep(0.1)
                continue
            try:
                self._handle(conn)
            except Exception:  # whatever happens, the host process carries on
                pass
            finally:
                with contextlib.suppress(OSError):
                    conn.close()

    def _handle(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        if uid is None or uid not in (os.getuid(), 0):
            conn.sendall(protocol.encode({"ok": False, "error": "refused: another user"}))
            return
        conn.setblocking(True)
        buffer = b""
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while not self._stop.is_set():
            while b"\n" not in buffer:
                if len(buffer) > protocol.MAX_MESSAGE:
                    conn.sendall(protocol.encode({"ok": False, "error": "request too large"}))
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                conn.settimeout(min(REQUEST_TIMEOUT_S, remaining))
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    return
                if not chunk:
                    return
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            conn.sendall(protocol.encode(self.answer(line)))
            deadline = time.monotonic() + IDLE_TIMEOUT_S

    def _private_dir(self) -> Path:
        return self.path.parent if self.path else protocol.private_dir(self.directory)

    def answer(self, line: bytes) -> dict[str, Any]:
        """One request to one reply; never raises. Ops: hello, stats, memory_history, record_history,
        dump_snapshot, empty_cache, profile, profile_status."""
        self.requests += 1
        try:
            request = protocol.decode(line)
            op = request.get("op")
            if op == "hello":
                return {"ok": True, "pid": self._pid, "started": self.started}
            if op == "stats":
                allocator = self.stats.collect()
                self.memory.offer(allocator.get("devices", ()))  # read anyway: the ring's point for free
                return {
                    "ok": True,
                    "pid": self._pid,
                    "time": time.time(),
                    "allocator": allocator,
                    "progress": self.progress.summary(),
                }
            if op == "memory_history":
                return self.memory.reply()
            if op == "record_history":
                return {"ok": True, "message": self.stats.record_history(bool(request.get("enabled")))}
            if op == "dump_snapshot":
                directory = str(self.path.parent if self.path else protocol.runtime_dir())
                path = self.stats.dump_snapshot(directory)
                return {"ok": True, "path": path, "message": f"snapshot written to {path}"}
            if op == "empty_cache":
                return {"ok": True, "message": self.stats.empty_cache()}
            if op == "profile":
                steps = _bounded(request.get("steps", 20), "steps", 1, MAX_STEPS)
                seconds = _bounded(request.get("max_seconds", 60), "max_seconds", 1, MAX_SECONDS)
                return {"ok": True, "message": self.profiler.request(int(steps), seconds)}
            if op == "profile_status":
                return {"ok": True, "profile": self.profiler.status()}
            return {"ok": False, "error": f"unknown op {op!r}"}
        except (protocol.ProtocolError, ProfileError) as err:
            return {"ok": False, "error": str(err)}
        except Exception as err:
            return {"ok": False, "error": f"{type(err).__name__}: {err}"}


def _bounded(value: object, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise protocol.ProtocolError(f"{name}: not a number in {low:g}..{high:g}")
    return float(value)


_agent: Agent | None = None
_lock = threading.Lock()


_warned = False


def start(directory: Path | None = None) -> Agent | None:
    """Start the agent in this process (once; later calls return the running one). Never raises into
    the host program: a monitoring helper must not end a training job. When no agent can start (its
    directory taken by another user, a read-only /tmp, ...) it says so once on stderr and returns None."""
    global _agent
    with _lock:
        if _agent is not None and _agent.running and _agent._pid == os.getpid():
            return _agent
        agent = Agent(directory)
        try:
            agent.start()
        except Exception as err:
            _warn_once(f"gputui agent: not started, the program runs on without it: {err}")
            return None
        _agent = agent
        return agent


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        with contextlib.suppress(Exception):  # a closed stderr is no reason to fail either
            print(message, file=sys.stderr, flush=True)


def stop() -> None:
    global _agent
    with _lock:
        if _agent is not None:
            _agent.stop()
            _agent = None
