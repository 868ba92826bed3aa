"""The monitor's side of the agent protocol: find the agents, make sure each is who it claims, ask them.

Trust (see SECURITY.md): a socket counts only in a directory that is no symlink, belongs to the uid it is
for and that nobody else can write; and once connected, the kernel's credentials of the listening process
(SO_PEERCRED, which a client can read too) must be the pid its name claims, running as that uid. Root
reads every user's agents, each from that user's own directories. Nothing is removed from a directory
that is not the monitor's own.

All agents are asked at once, on non-blocking sockets under one deadline per tick: a stopped or slow
agent costs that deadline, never more, and is marked, not waited for.

What finding them costs is bounded, whatever other users put in /tmp (anyone may make 300,000 files
/tmp/gputui-<digits>; root once took each name for a uid and opened its directories on every tick):

- Only a process can serve an agent, so root looks only at the uids that own a process here: every
  DIRS_EVERY_S, one listing of /proc (at most MAX_PROC_ENTRIES entries, one stat each, for its owner),
  then one lstat of each candidate directory (protocol.candidate_dirs: /tmp/gputui-<uid>,
  /run/user/<uid>/gputui) of at most MAX_USERS of those uids, lowest first. Nothing in /tmp is listed:
  names there cost nothing, and no flood can hide a real directory.
- A candidate that is not a real directory of its uid that nobody else can write is refused at that
  rescan and not opened again until the next; so is one refused when opened. Per tick root opens only
  the directories that passed (at most 2 * MAX_USERS; in practice one per user running agents), its
  own two, and for DIRS_EVERY_S after an attach (expect) the two of that user.
- In each directory opened, at most MAX_DIR_ENTRIES names are read per tick (one stat each, to see
  whether its process lives; in the monitor's own directories, a dead one's socket is removed).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import selectors
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gputui.agent import protocol
from gputui.collect.agents import reply as agent_reply
from gputui.model import AGENT_SLOW, AgentReport, Snapshot
from gputui.units import printable

TICK_DEADLINE_S = 0.15  # for every agent together, once a tick
ACT_DEADLINE_S = 30.0  # an action (empty_cache, a snapshot dump) may take a while
DIRS_EVERY_S = 5.0  # how often root looks again at which users own processes, and at their directories
MAX_PROC_ENTRIES = 1 << 17  # /proc entries read per rescan
MAX_USERS = 1024  # uids whose directories root looks at per rescan (the lowest: real users before subuids)
MAX_DIR_ENTRIES = 1024  # names read of one agent directory per tick
PROC = "/proc"
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True, slots=True)
class AgentSocket:
    pid: int  # the process the socket's name claims
    uid: int  # the owner of its directory: the only user whose process may serve it
    path: Path


def _open_trusted(directory: Path, uid: int) -> int | None:
    """A file descriptor of `directory` if it is a real directory of `uid` that nobody else can write."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if protocol.trusted_dir(os.fstat(fd), uid):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _users_with_agents() -> set[int]:
    """Root's view: the uids that may run an agent, those that own a process here (the owner of its
    /proc/PID: its effective uid; root's for a process made non-dumpable), at most MAX_USERS of them,
    the lowest. Their directories are checked later. Bounded by the processes, never by the names
    anyone gives files in /tmp."""
    uids: set[int] = set()
    with contextlib.suppress(OSError), os.scandir(PROC) as entries:
        for n, entry in enumerate(entries):
            if n >= MAX_PROC_ENTRIES:
                break
            if entry.name.isdigit():
                with contextlib.suppress(OSError):  # gone since the listing
                    uids.add(entry.stat(follow_symlinks=False).st_uid)
    return set(sorted(uids)[:MAX_USERS])


def _looks_trusted(directory: Path, uid: int) -> bool:
    """lstat only, nothing opened: whether `directory` may be an agent directory of `uid` (checked again
    on the descriptor when it is opened)."""
    try:
        return protocol.trusted_dir(os.lstat(directory), uid)
    except OSError:
        return False


def discover_in(
    directories: Iterable[tuple[Path, int]], refused: set[Path] | None = None
) -> dict[int, AgentSocket]:
    """pid -> socket, for every `<pid>.sock` of a live process in the trusted ones of `directories`
    (path, owner uid), among the first MAX_DIR_ENTRIES names of each. Sockets of dead processes are
    removed from the monitor's own directories only. `refused`: gets the directories that were not."""
    found: dict[int, AgentSocket] = {}
    me = os.getuid()
    for directory, uid in directories:
        fd = _open_trusted(directory, uid)
        if fd is None:
            if refused is not None:
                refused.add(directory)
            continue
        try:
            with os.scandir(fd) as entries:
                names = [entry.name for entry in itertools.islice(entries, MAX_DIR_ENTRIES)]
            for name in names:
                pid = protocol.pid_of(name)
                if pid is None or pid in found:
                    continue
                if os.path.exists(f"/proc/{pid}"):
                    found[pid] = AgentSocket(pid, uid, directory / name)
                elif uid == me:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)  # its process died without cleaning up (SIGKILL)
        except OSError:
            continue
        finally:
            os.close(fd)
    return found


def _owner_uids(pid: int) -> tuple[int, ...]:
    """Real and effective uid of a process, from /proc/PID/status; () when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return tuple(int(v) for v in line.split()[1:3])
    except (OSError, ValueError):
        pass
    return ()


def check_peer(sock: socket.socket, target: AgentSocket) -> str | None:
    """Why the process listening on `sock` is not the agent `target` claims to be, or None when it is."""
    try:
        pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    except OSError as err:
        return f"no peer credentials: {err.strerror}"
    if pid != target.pid:
        return f"served by pid {pid}, not by pid {target.pid}"
    if uid != target.uid or target.uid not in _owner_uids(pid):
        return f"pid {pid} does not run as uid {target.uid}, the owner of {target.path.parent}"
    return None


class Exchange:
    """One request on one non-blocking connection: `reply` (the line), or `error` saying why not;
    `refused`: the socket is not the agent it claims to be; `slow`: no reply in time."""

    def __init__(self, target: AgentSocket, request: bytes, limit: int) -> None:
        self.target, self.limit = target, limit
        self.received = bytearray()
        self.reply: bytes | None = None
        self.error: str | None = None
        self.refused = self.slow = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        code = self.sock.connect_ex(str(target.path))
        if code in (errno.EAGAIN, errno.EINPROGRESS):
            self.error, self.slow = "slow: its connection queue is full", True
        elif code:
            self.error = f"cannot connect: {os.strerror(code)}"
        else:
            self.error = check_peer(self.sock, target)
            self.refused = self.error is not None
            if self.error is None:
                try:
                    self.sock.send(request)  # a few dozen bytes: a fresh socket's buffer takes them
                except OSError as err:
                    self.error = f"cannot send: {err.strerror}"

    @property
    def pending(self) -> bool:
        return self.reply is None and self.error is None

    def read(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as err:
            self.error = f"cannot read: {err.strerror}"
            return
        if not chunk:
            self.error = "closed the connection without a reply"
            return
        self.received += chunk
        end = self.received.find(b"\n")
        if end >= 0:
            self.reply = bytes(self.received[:end])
        elif len(self.received) > self.limit:
            self.error = f"reply larger than {self.limit} bytes"


def exchange(
    targets: Iterable[AgentSocket],
    message: dict[str, Any],
    deadline_s: float,
    limit: int = protocol.MAX_REPLY,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[int, Exchange]:
    """Send `message` to every target at once; pid -> how it went. Returns by `deadline_s`, whatever
    the agents do."""
    request = protocol.encode(message)
    end = monotonic() + deadline_s
    exchanges = [Exchange(t, request, limit) for t in targets]
    try:
        with selectors.DefaultSelector() as selector:
            for ex in exchanges:
                if ex.pending:
                    selector.register(ex.sock, selectors.EVENT_READ, ex)
            while any(ex.pending for ex in exchanges):
                remaining = end - monotonic()
                if remaining <= 0:
                    break
                for key, _ in selector.select(remaining):
                    ex = key.data
                    ex.read()
                    if not ex.pending:
                        selector.unregister(ex.sock)
    finally:
        for ex in exchanges:
            ex.sock.close()
            if ex.pending:
                ex.error, ex.slow = f"slow: no reply within {deadline_s * 1000:.0f} ms", True
    return {ex.target.pid: ex for ex in exchanges}


def _decode(ex: Exchange) -> dict[str, Any] | str:
    """The reply as a JSON object, or why there is none."""
    if ex.reply is None:
        return ex.error or "no reply"
    try:
        return protocol.decode(ex.reply, limit=protocol.MAX_REPLY)
    except protocol.ProtocolError as err:
        return f"bad reply: {err}"


def report_of(ex: Exchange) -> AgentReport:
    data = _decode(ex)
    pid = ex.target.pid
    return agent_reply.unreadable(pid, data) if isinstance(data, str) else agent_reply.parse(pid, data)


class AgentPoller:
    """Asks every agent for its stats; the sampler calls it once a tick.

    `directory`: look only there (tests, and a user who keeps agents elsewhere), as this user's own.
    """

    def __init__(
        self,
        directory: Path | None = None,
        deadline_s: float = TICK_DEADLINE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.deadline_s = deadline_s
        self.monotonic = monotonic
        self._last: dict[int, AgentReport] = {}  # the last good report of each agent
        self._uids: set[int] = set()  # root: the users that owned processes at the last rescan
        self._dirs: list[tuple[Path, int]] = []  # ...and their directories that passed its lstat
        self._expected: dict[int, float] = {}  # uid -> when an attach said to look at it (expect)
        self._uids_at: float | None = None
        self.refused: dict[int, str] = {}  # pid -> why its socket was not believed (last poll)

    def directories(self) -> list[tuple[Path, int]]:
        """The directories to open this tick: this user's own; as root also the other users' that passed
        the last rescan, and those of a user just attached to (see the module's bounds)."""
        me = os.getuid()
        if self.directory is not None:
            return [(self.directory, me)]
        out = [(path, me) for path in protocol.candidate_dirs(me)]
        if me != 0:
            return out
        # root may read every user's agents, each from that user's own directories
        now = self.monotonic()
        if self._uids_at is None or now - self._uids_at >= DIRS_EVERY_S:
            self._uids, self._uids_at = _users_with_agents() - {me}, now
            self._dirs = [
                (path, uid)
                for uid in sorted(self._uids)
                for path in protocol.candidate_dirs(uid)
                if _looks_trusted(path, uid)
            ]
        expected = sorted(uid for uid, at in self._expected.items() if 0 <= now - at < DIRS_EVERY_S)
        if len(expected) < len(self._expected):
            self._expected = {uid: self._expected[uid] for uid in expected}
        out += self._dirs
        out += [(path, uid) for uid in expected if uid != me for path in protocol.candidate_dirs(uid)]
        return list(dict.fromkeys(out))

    def expect(self, uid: int) -> None:
        """An agent of `uid` was just started (an attach): root looks at that user's directories from
        the next poll and for DIRS_EVERY_S, not only after the next rescan. Called from the UI thread:
        the dict is replaced, never changed in place, while the sampler's thread may read it."""
        self._expected = {**self._expected, uid: self.monotonic()}

    def discover(self) -> dict[int, AgentSocket]:
        refused: set[Path] = set()
        found = discover_in(self.directories(), refused)
        if refused and self._dirs:  # not opened again until the next rescan looks at them afresh
            self._dirs = [d for d in self._dirs if d[0] not in refused]
        return found

    def poll(self) -> dict[int, AgentReport]:
        found = self.discover()
        answers = exchange(found.values(), {"op": "stats"}, self.deadline_s, monotonic=self.monotonic)
        out: dict[int, AgentReport] = {}
        self.refused = {}
        for pid, ex in answers.items():
            if ex.refused:  # not that process's agent: no ◆ for it, nothing it said is shown
                self.refused[pid] = ex.error or ""
                continue
            if ex.slow:  # the last good numbers, marked
                report = replace(
                    self._last.get(pid, AgentReport(pid=pid)), status=AGENT_SLOW, error=ex.error or ""
                )
            else:
                report = report_of(ex)
            if report.ok:
                self._last[pid] = report
            out[pid] = report
        self._last = {pid: r for pid, r in self._last.items() if pid in out}
        return out

    def report(self, pid: int, deadline_s: float = 1.0) -> AgentReport | None:
        """The stats of one process's agent, or None when it runs none (the doctor's question)."""
        target = self.discover().get(pid)
        if target is None:
            return None
        ex = exchange([target], {"op": "stats"}, deadline_s, monotonic=self.monotonic)[pid]
        return None if ex.refused else report_of(ex)

    def act(self, pid: int, op: str, **params: Any) -> dict[str, Any]:
        """An action on one agent (record_history, dump_snapshot, empty_cache, profile): {"ok": bool,
        "message"} with a printable message; profile_status adds "profile", a ProfileStatus."""
        target = self.discover().get(pid)
        if target is None:
            return {"ok": False, "message": f"no gputui agent of pid {pid} is listening"}
        ex = exchange([target], {"op": op, **params}, ACT_DEADLINE_S, monotonic=self.monotonic)[pid]
        data = _decode(ex)
        if isinstance(data, str):
            return {"ok": False, "message": printable(data)}
        ok = data.get("ok") is True
        text = data.get("message" if ok else "error")
        out: dict[str, Any] = {
            "ok": ok,
            "message": printable(str(text)[: agent_reply.MAX_TEXT]) if text else "",
        }
        if ok and op == "profile_status":  # its state and summary, validated like a stats reply
            try:
                from gputui.collect.agents import profile_reply

                out["profile"] = profile_reply.parse_status(data.get("profile"))
            except agent_reply.BadReply as err:
                return {"ok": False, "message": printable(f"bad reply: {err}"[: agent_reply.MAX_TEXT])}
            except (RecursionError, MemoryError):
                return {"ok": False, "message": "bad reply: too deeply nested"}
        return out


def discover(directory: Path | None = None) -> dict[int, AgentSocket]:
    """The agents an AgentPoller would ask now."""
    return AgentPoller(directory).discover()


HISTORY = 300  # samples of allocated/reserved kept per (pid, device)


class AgentHistory:
    """allocated/reserved over time for every agent, kept by the app so a panel opens with a past."""

    def __init__(self) -> None:
        self.series: dict[tuple[int, int], deque[tuple[int, int]]] = {}

    def add(self, snap: Snapshot) -> None:
        for pid, report in snap.agents.items():
            if not report.ok:  # a slow agent's numbers are the last good ones: not a new point
                continue
            for d in report.devices:
                self.series.setdefault((pid, d.index), deque(maxlen=HISTORY)).append(
                    (d.allocated or 0, d.reserved or 0)
                )
        for key in [k for k in self.series if k[0] not in snap.agents]:
            del self.series[key]  # the process or its agent is gone

    def points(self, pid: int, device: int) -> list[tuple[int, int]]:
        return list(self.series.get((pid, device), ()))
