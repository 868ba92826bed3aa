"""Whose job a process is: its container, Kubernetes pod or SLURM job, from /proc/PID/cgroup.

Every logged-in user owns a delegated cgroup subtree (`/user.slice/user-UID.slice/user@UID.service/...`)
and may make any directory in it, shaped like a SLURM job, a pod or a container; so may a container's
root below its own cgroup. So a shape counts only where its manager makes it, at the hierarchy's root:
`/slurm/uid_N/job_N` (slurmd, cgroup v1), `/system.slice/slurmstepd.scope/job_N` (slurmd, cgroup v2),
`/kubepods/...` and `/kubepods.slice/...` (kubelet, and containerd's, CRI-O's and docker's containers in
its pods), `/docker/ID` and `/system.slice/docker-ID.scope` (docker), a runtime's scope right below
`system.slice` or `machine.slice`, `/libpod_parent/libpod-ID` (podman); and a rootless podman's (or
docker's) container below `user@N.service`, which is user N's own: it names N, never a job of anyone
else's, and no name is asked for it. Nothing else under user.slice, below a service or below another
shape is a job. The claim is then checked against the kernel's word, when it can be read: every directory
above the shape's own (a `uid_1002` above a job) must belong to root, the `slurm` user (for a job), the
user running gputui, or (for a rootless container) its own user; one that another uid owns was made by
that uid, and the shape is refused. Where the directories cannot be read, the location alone decides.
Every id is validated (hex of the right length, a UID's shape, digits) and every read and length is
bounded.

Names come only from what needs no new privileges or daemons: the node's /var/log/pods directories (a
pod's namespace and name), SLURM_JOB_NAME of the job's own processes (in its cgroup and, on cgroup v1,
running as the job's uid_N), and a container's name from the Docker API (docker's or podman's socket)
when this user may use it, asked on a thread of its own that survives any answer (each reply at most
MAX_API_REPLY bytes, nested at most MAX_JSON_DEPTH deep). containerd and CRI-O speak gRPC: their
containers keep their ids (in a pod, the pod's name is the one that matters).

Bound on cgroup reads (an orphan's "job has ended / still runs (N other processes)"): per tick at most
MAX_TICK_READS (2,048) directory listings and cgroup.procs opens in all, each open reading at most 1 MiB,
however many orphans, jobs or cgroups there are. Only the job's (or pod's) own directory is walked, once a
tick for all its orphans, and at most MAX_WALK (512) directories and MAX_WALK_ENTRIES (65,536) directory
entries of it (past that its state is unknown and left unsaid); a job of more than SMALL_WALK (128)
directories, or one too large, is read again only every GROUP_TTL_S (10 s), a smaller one every tick while
the budget lasts (the least recently read first; a job the budget did not reach keeps its answer of the
last 10 s, else says nothing). Besides: a process's first sight reads its /proc/PID/cgroup (and a SLURM
job's process its environ) once, and stats each directory above its shape at most once every GROUP_TTL_S.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import queue
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from gputui.model import Owner
from gputui.units import printable

if TYPE_CHECKING:
    import http.client

MAX_CGROUP_BYTES = 16384  # /proc/PID/cgroup: about 13 short lines on cgroup v1
MAX_LINES = 32
MAX_PATH = 4096  # PATH_MAX
MAX_SEGMENTS = 64
MAX_ENVIRON = 1 << 20  # as gputui.collect.procs.join reads it
MAX_JOB_NAME = 128
MAX_USER = 64
MAX_PODS = 10_000  # /var/log/pods entries read
MAX_CACHE = 65_536  # processes remembered; past it the cache starts over
MAX_WALK = 512  # directories of one job's or pod's cgroup read to count its processes; past it: unknown
MAX_WALK_ENTRIES = 128 * MAX_WALK  # directory entries (cgroup v2 has up to ~90 files a directory)
SMALL_WALK = 128  # a job of at most this many directories is read every tick; a larger one every GROUP_TTL_S
MAX_TICK_READS = 2048  # directory listings and cgroup.procs opens per tick, all jobs and pods together
MAX_PROCS_BYTES = 1 << 20  # one cgroup.procs
GROUP_TTL_S = 10.0  # a large job's process count, and who owns the directories above a shape
MAX_GROUPS = 4096  # jobs and directories remembered; past it the memory starts over
PODS_REFRESH_S = 30.0
SLURM_STEPS = frozenset({"batch", "extern", "interactive"})

_HEX64 = r"[0-9a-f]{64}"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# The systemd driver's slice names have `_` for `-`.
_UUID_SYSTEMD = r"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_STATIC_UID = r"[0-9a-f]{32}"  # a static pod's UID: a hash, no dashes
_CONTAINER = re.compile(rf"(docker|cri-containerd|crio|libpod)-({_HEX64})(?:\.scope)?")
_RUNTIME = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman"}
_HEX64_RE = re.compile(_HEX64)
_POD_CGROUPFS = re.compile(rf"pod({_UUID}|{_STATIC_UID})")
_POD_SYSTEMD = re.compile(rf"kubepods(?:-(burstable|besteffort))?-pod({_UUID_SYSTEMD}|{_STATIC_UID})\.slice")
_POD_UID = re.compile(rf"{_UUID}|{_STATIC_UID}")
_USER_SLICE = re.compile(r"user-([0-9]{1,10})\.slice")
_USER_SERVICE = re.compile(r"user@([0-9]{1,10})\.service")
_ID = re.compile(r"[0-9]{1,10}")  # a job id, a uid: 32 bits
_STEP = re.compile(r"step_([0-9]{1,10}|batch|extern|interactive)")
_NAMESPACE = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_POD_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
QOS = frozenset({"burstable", "besteffort"})  # "guaranteed" pods have no segment of their own


@dataclass(frozen=True, slots=True)
class Found:
    """An owner and where its group lies: the hierarchy ("" for cgroup v2, else v1's controllers) and
    the path of the pod's or job's cgroup (None for a container: it has no "has ended"); the path of the
    shape's own directory, whose parents must belong to its manager; the uid the path names (a cgroup v1
    job's uid_N, a rootless container's user@N.service), and whether that user's subtree holds it."""

    owner: Owner
    hierarchy: str
    group: str | None
    shape: str = ""
    uid: int | None = None
    rootless: bool = False


def _pod(segs: list[str], i: int, cgroupfs: bool) -> tuple[Owner, int] | None:
    """The pod at segs[i:] after a `kubepods` segment: (owner, index of the pod's segment)."""
    qos = "guaranteed"
    if cgroupfs:
        if i < len(segs) and segs[i] in QOS:
            qos, i = segs[i], i + 1
        m = _POD_CGROUPFS.fullmatch(segs[i]) if i < len(segs) else None
        if m is None:
            return None
        uid = m.group(1)
    else:
        if i < len(segs) and segs[i] in ("kubepods-burstable.slice", "kubepods-besteffort.slice"):
            qos, i = segs[i][9:-6], i + 1
        m = _POD_SYSTEMD.fullmatch(segs[i]) if i < len(segs) else None
        if m is None or (m.group(1) or "guaranteed") != qos:
            return None
        uid = m.group(2).replace("_", "-")
    container = None
    if i + 1 < len(segs):
        nxt = segs[i + 1]
        c = _CONTAINER.fullmatch(nxt)
        if c is not None:
            container = c.group(2)
        elif cgroupfs and _HEX64_RE.fullmatch(nxt):
            container = nxt
    return Owner(kind="kubernetes", id=uid, container=container, qos=qos), i


def _slurm_user(uid: str) -> str | None:
    return _user_name(int(uid))


class _Hit(NamedTuple):
    owner: Owner
    group: int | None  # index of the pod's or job's segment (None: a container, which has no "ended")
    shape: int  # index of the shape's own segment: the directories above it are checked
    uid: int | None = None  # the uid the path names: a v1 job's uid_N, a rootless container's user@N
    rootless: bool = False


def _match(segs: list[str]) -> _Hit | None:
    """The shape a manager makes where it makes it, from the hierarchy's root (see the module's text)."""
    top = segs[0] if segs else ""
    nxt = segs[1] if len(segs) > 1 else ""
    if top in ("kubepods", "kubepods.slice"):
        pod = _pod(segs, 1, cgroupfs=top == "kubepods")
        if pod is None:
            return None
        owner, at = pod
        return _Hit(owner, at, at + 1 if owner.container else at)
    if top == "docker":  # the cgroupfs driver: /docker/ID
        return _Hit(Owner(kind="docker", id=nxt), None, 1) if _HEX64_RE.fullmatch(nxt) else None
    if top in ("system.slice", "machine.slice", "libpod_parent"):  # the systemd driver's scopes; podman's
        c = _CONTAINER.fullmatch(nxt)
        if c is not None and (top != "libpod_parent" or c.group(1) == "libpod"):
            return _Hit(Owner(kind=_RUNTIME[c.group(1)], id=c.group(2)), None, 1)
        if top == "system.slice" and nxt == "slurmstepd.scope":
            # cgroup v2: /system.slice/slurmstepd.scope/job_81234/step_0/user/task_0 (`system`: its own)
            job = segs[2] if len(segs) > 2 else ""
            if job.startswith("job_") and _ID.fullmatch(job[4:]):
                return _Hit(_job(job[4:], segs, 2, None), 2, 2)
        return None
    if top == "slurm" or (top.startswith("slurm_") and len(top) <= 70):  # slurm_<node>: several slurmd
        # cgroup v1: /slurm/uid_1000/job_81234/step_0
        job = segs[2] if len(segs) > 2 else ""
        if (
            nxt.startswith("uid_")
            and _ID.fullmatch(nxt[4:])
            and job.startswith("job_")
            and _ID.fullmatch(job[4:])
        ):
            return _Hit(_job(job[4:], segs, 2, _slurm_user(nxt[4:])), 2, 2, int(nxt[4:]))
        return None
    if top == "user.slice" and len(segs) > 3:
        # A user's own systemd (delegated to that user): only a rootless container, and it is theirs.
        slice_, service = _USER_SLICE.fullmatch(nxt), _USER_SERVICE.fullmatch(segs[2])
        if slice_ is None or service is None or slice_.group(1) != service.group(1):
            return None
        uid = int(slice_.group(1))
        for j in range(3, len(segs)):
            c = _CONTAINER.fullmatch(segs[j])
            if c is not None:
                if c.group(1) not in ("libpod", "docker"):
                    return None
                owner = Owner(kind=_RUNTIME[c.group(1)], id=c.group(2), user=_user_name(uid) or str(uid))
                return _Hit(owner, None, j, uid, rootless=True)
    return None


def _job(job: str, segs: list[str], i: int, user: str | None) -> Owner:
    step = None
    if i + 1 < len(segs):
        m = _STEP.fullmatch(segs[i + 1])
        step = m.group(1) if m else None
    return Owner(kind="slurm", id=str(int(job)), step=step, user=user)


def _line_order(hierarchy: str, controllers: str) -> int:
    """cgroup v2's line first, then v1's systemd hierarchy, then the controllers in the file's order."""
    if hierarchy == "0" and not controllers:
        return 0
    return 1 if controllers == "name=systemd" else 2


def find(text: str, root: str = "/") -> Found | None:
    """The owner in a /proc/PID/cgroup's text, with where its pod's or job's cgroup is. `root`: where
    the managers' locations start ("/": the hierarchy's root; a test's own directory otherwise)."""
    base = [s for s in root.split("/") if s]
    lines: list[tuple[int, str, str]] = []
    for line in text[:MAX_CGROUP_BYTES].splitlines()[:MAX_LINES]:
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/") or len(parts[2]) > MAX_PATH:
            continue
        path = parts[2].removesuffix(" (deleted)")
        lines.append((_line_order(parts[0], parts[1]), parts[1], path))
    lines.sort(key=lambda x: x[0])  # stable: the file's order among equals
    for _, controllers, path in lines:
        segs = [s for s in path.split("/") if s][:MAX_SEGMENTS]
        if segs[: len(base)] != base:
            continue
        hit = _match(segs[len(base) :])
        if hit is not None:
            n = len(base)
            group = None if hit.group is None else "/" + "/".join(segs[: n + hit.group + 1])
            shape = "/" + "/".join(segs[: n + hit.shape + 1])
            return Found(hit.owner, controllers, group, shape, hit.uid, hit.rootless)
    return None


def parse_cgroup(text: str, root: str = "/") -> Owner | None:
    """The container, pod or SLURM job in a /proc/PID/cgroup's text (cgroup v1 or v2, systemd or
    cgroupfs driver); None for anything else: a service or a user's session is no owner."""
    found = find(text, root)
    return found.owner if found else None


_USERS: dict[int, str | None] = {}


def _user_name(uid: int) -> str | None:
    """A uid's login name, remembered (a lookup through NSS may be slow); None if it has none."""
    if uid not in _USERS:
        try:
            name: str | None = printable(pwd.getpwuid(uid).pw_name)[:MAX_USER]
        except (KeyError, OverflowError):
            name = None
        if len(_USERS) > 4096:
            _USERS.clear()
        _USERS[uid] = name
    return _USERS[uid]


def read_pods(pods_dir: Path) -> dict[str, tuple[str, str]]:
    """Pod UID -> (namespace, name) from the node's log directories, `<namespace>_<name>_<uid>`."""
    out: dict[str, tuple[str, str]] = {}
    try:
        with os.scandir(pods_dir) as it:
            for n, entry in enumerate(it):
                if n >= MAX_PODS:
                    break
                parts = entry.name.split("_")
                if (
                    len(parts) == 3
                    and _NAMESPACE.fullmatch(parts[0])
                    and _POD_NAME.fullmatch(parts[1])
                    and _POD_UID.fullmatch(parts[2])
                ):
                    out[parts[2]] = (parts[0], parts[1])
    except OSError:
        pass
    return out


def _read(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(limit)
    except OSError:
        return None


def slurm_job_name(environ: bytes, job: str) -> str | None:
    """SLURM_JOB_NAME from an environment, when its SLURM_JOB_ID is the cgroup's job (a process
    started with another job's environment must not name this one)."""
    values: dict[bytes, bytes] = {}
    for entry in environ.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and name in (b"SLURM_JOB_ID", b"SLURM_JOB_NAME") and name not in values:
            values[name] = value
    if values.get(b"SLURM_JOB_ID") != job.encode() or b"SLURM_JOB_NAME" not in values:
        return None
    text = printable(values[b"SLURM_JOB_NAME"][: 4 * MAX_JOB_NAME].decode("utf-8", errors="replace"))
    return text[:MAX_JOB_NAME] or None


# The Docker API's sockets: docker's, and podman's Docker-compatible one (rootful).
API_SOCKETS = {"docker": Path("/var/run/docker.sock"), "podman": Path("/run/podman/podman.sock")}
API_TIMEOUT_S = 0.5
API_RETRY_S = 60.0  # a failed ask (a slow daemon, a socket gone) is not repeated sooner
MAX_API_REPLY = 1 << 22  # /containers/ID/json of a container with many mounts and variables
MAX_ASKED = 4096
MAX_JSON_DEPTH = 32  # arrays and objects in one another: docker's inspect answer has about 5
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}")  # docker's own rule, bounded


def _unix_http(path: str, timeout: float) -> http.client.HTTPConnection:
    """An HTTP connection over the unix socket `path`. http.client is imported here, on the API thread:
    it costs ~18 ms, which every start (the first frame) would pay for a daemon most boxes do not run."""
    import http.client

    class UnixHTTP(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            self.sock = sock

    return UnixHTTP("localhost", timeout=timeout)


def _shallow(raw: bytes, depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests at most `depth` arrays and objects, brackets balanced (strings aside): json's
    parser recurses once a level, into a RecursionError on a reply nested 100,000 deep. A few passes at
    C speed: the strings emptied, everything but the brackets dropped, then the innermost pairs removed
    once a level; what is left after `depth` passes is too deep (or not JSON)."""
    brackets = _JSON_STRING.sub(b"", raw).translate(_BRACKETS, _NOT_BRACKETS)
    for _ in range(depth):
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"")
    return not brackets


def ask_container_name(path: str, cid: str, timeout: float = API_TIMEOUT_S) -> str | None:
    """A container's name from the Docker API at the unix socket `path`; None when it has none, the
    daemon does not know it, or does not answer within `timeout` (each read or write)."""
    import http.client

    conn = _unix_http(path, timeout)
    try:
        conn.request("GET", f"/containers/{cid}/json")
        reply = conn.getresponse()
        if reply.status != 200:
            return None
        raw = reply.read(MAX_API_REPLY)
        if not _shallow(raw):
            return None
        data = json.loads(raw)
    except (OSError, http.client.HTTPException, ValueError, RecursionError, MemoryError):
        return None
    finally:
        conn.close()
    name = data.get("Name") if isinstance(data, dict) else None
    if not isinstance(name, str):
        return None
    name = name.removeprefix("/")
    return name if _CONTAINER_NAME.fullmatch(name) else None


class ContainerNames:
    """Container names from the Docker API, asked on a thread of this class's own (one at a time, each
    with a timeout) and only where this user may use the socket without new privileges: get() never
    waits, a name not known yet is None until the thread has it."""

    def __init__(
        self,
        sockets: Mapping[str, Path] = API_SOCKETS,
        timeout: float = API_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sockets = dict(sockets)
        self.timeout = timeout
        self.monotonic = monotonic
        self._names: dict[tuple[str, str], str] = {}  # (kind, id) -> name
        self._asked: dict[tuple[str, str], float] = {}  # when asked (a failure is asked again later)
        self._usable: dict[str, str | None] = {}  # kind -> its socket, when this user may use it
        self._queue: queue.SimpleQueue[tuple[str, tuple[str, str]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.asks = 0  # answers the thread had, for tests

    def _socket(self, kind: str) -> str | None:
        if kind not in self._usable:
            path = self.sockets.get(kind)
            usable = None
            with contextlib.suppress(OSError):
                if (
                    path is not None
                    and stat.S_ISSOCK(path.stat().st_mode)
                    and os.access(path, os.R_OK | os.W_OK)
                ):
                    usable = str(path)
            self._usable[kind] = usable
        return self._usable[kind]

    def get(self, kind: str, cid: str) -> str | None:
        key = (kind, cid)
        name = self._names.get(key)
        if name is not None:
            return name
        asked = self._asked.get(key)
        if asked is not None and self.monotonic() - asked < API_RETRY_S:
            return None
        path = self._socket(kind)
        if path is None:
            return None
        if len(self._asked) >= MAX_ASKED:
            self._asked.clear()
            self._names.clear()
        self._asked[key] = self.monotonic()
        self._queue.put((path, key))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gputui-container-names", daemon=True)
            self._thread.start()
        return None

    def _run(self) -> None:
        while True:
            path, key = self._queue.get()
            try:  # whatever one answer does (or one ask raises), it is one failed ask: asked again later
                name = ask_container_name(path, key[1], self.timeout)
            except Exception:
                name = None
            if name is not None:
                self._names[key] = name  # one dict store: the tick thread reads it whole or not at all
            self.asks += 1


def _dir_uid(path: str) -> int | None:
    """Who owns a cgroup directory (the kernel's word: whoever made it, or was handed it); None when it
    cannot be read."""
    try:
        return os.stat(path, follow_symlinks=False).st_uid
    except (OSError, ValueError):
        return None


_SLURM_UIDS: set[int] | None = None


def _slurm_uids() -> set[int]:
    """The `slurm` user's uid (SlurmUser), when this machine has one: slurmd may make a job's directories."""
    global _SLURM_UIDS
    if _SLURM_UIDS is None:
        try:
            _SLURM_UIDS = {pwd.getpwnam("slurm").pw_uid}
        except KeyError:
            _SLURM_UIDS = set()
    return _SLURM_UIDS


@dataclass(slots=True)
class _Group:
    at: float  # when it was read (monotonic)
    tick: int  # on which tick
    pids: frozenset[int] | None  # the processes in its subtree; None: unknown (too large, unreadable)
    dirs: int  # directories it had


@dataclass(slots=True)
class _Entry:
    found: Found  # as parsed, with the user filled in
    owner: Owner  # with the names known when it was last resolved
    generation: int


class Owners:
    """Each process's owner, read once per (pid, start time): /proc/PID/cgroup, and for a SLURM job its
    environ. Names found later (a pod's log directory, another process's SLURM_JOB_NAME) reach the
    processes already seen through a generation count: no re-read, one dict lookup. `cgroup_root`: where
    the managers' locations start in the cgroup paths ("/"; a test's or a bench's own directory)."""

    def __init__(
        self,
        proc: Path = Path("/proc"),
        pods_dir: Path = Path("/var/log/pods"),
        monotonic: Callable[[], float] = time.monotonic,
        mountinfo: Path = Path("/proc/self/mountinfo"),
        container_names: ContainerNames | None = None,
        cgroup_root: str = "/",
    ) -> None:
        self.proc = str(proc)
        self.cgroup_root = cgroup_root
        self.container_names = container_names if container_names is not None else ContainerNames()
        self.mountinfo = mountinfo
        self.pods_dir = pods_dir
        self.monotonic = monotonic
        self._cache: dict[int, tuple[float | None, _Entry | None]] = {}
        self._generation = 0
        self._pods: dict[str, tuple[str, str]] = {}
        self._pods_read: float | None = None
        self._job_names: dict[str, str] = {}
        self._mounts: dict[str, str] | None = None
        self._dir_uids: dict[str, tuple[float, int | None]] = {}  # cgroup directory -> (when, its owner)
        self._groups: dict[str, _Group] = {}  # a job's or pod's cgroup directory -> its processes
        self._tick = 0
        self._reads_left = MAX_TICK_READS
        self.reads = 0  # /proc/PID/cgroup reads, for tests and the bench

    def lookup(self, pid: int, create_time: float | None) -> Owner | None:
        hit = self._cache.get(pid)
        if hit is None or hit[0] != create_time:
            if len(self._cache) >= MAX_CACHE:
                self._cache.clear()
            hit = (create_time, self._first_sight(pid))
            self._cache[pid] = hit
        entry = hit[1]
        if entry is None:
            return None
        if entry.generation != self._generation or (
            entry.owner.name is None
            and entry.owner.kind in ("kubernetes", "docker", "podman")
            and not entry.found.rootless
        ):
            self._resolve(entry)
        return entry.owner

    def found(self, pid: int, create_time: float | None) -> Found | None:
        """What lookup() found, with where the pod's or job's cgroup lies."""
        hit = self._cache.get(pid)
        return hit[1].found if hit is not None and hit[0] == create_time and hit[1] else None

    def forget_except(self, pids: Iterable[int]) -> None:
        """Forget the processes not in `pids` (those of this tick): they ended, or left the GPU."""
        keep = set(pids)
        if len(self._cache) > len(keep):
            self._cache = {pid: v for pid, v in self._cache.items() if pid in keep}

    def _first_sight(self, pid: int) -> _Entry | None:
        self.reads += 1
        raw = _read(f"{self.proc}/{pid}/cgroup", MAX_CGROUP_BYTES)
        if raw is None:
            return None
        found = find(raw.decode("utf-8", errors="replace"), self.cgroup_root)
        if found is None or not self._trusted(found):
            return None
        owner = found.owner
        if owner.kind == "slurm":
            uid = None
            with contextlib.suppress(OSError):
                uid = os.stat(f"{self.proc}/{pid}").st_uid
            if owner.user is None and uid is not None:  # cgroup v2 has no uid_N: the process's is the job's
                owner = dataclasses.replace(owner, user=_user_name(uid))
            # The job's name from its own processes: in its cgroup (a manager's, checked above) and, where
            # the path names the job's user (v1's uid_N), running as that user.
            if owner.id not in self._job_names and uid is not None and found.uid in (None, uid):
                environ = _read(f"{self.proc}/{pid}/environ", MAX_ENVIRON)
                name = slurm_job_name(environ, owner.id) if environ else None
                if name is not None:
                    if len(self._job_names) > 4096:
                        self._job_names.clear()
                    self._job_names[owner.id] = name
                    self._generation += 1
            found = dataclasses.replace(found, owner=owner)
        entry = _Entry(found, owner, -1)
        self._resolve(entry)
        return entry

    def _resolve(self, entry: _Entry) -> None:
        base = entry.found.owner
        if base.kind == "kubernetes":
            now = self.monotonic()
            if base.id not in self._pods and (
                self._pods_read is None or now - self._pods_read >= PODS_REFRESH_S
            ):
                self._pods_read = now
                pods = read_pods(self.pods_dir)
                if pods != self._pods:
                    self._pods = pods
                    self._generation += 1
            names = self._pods.get(base.id)
            if names is not None:
                entry.owner = dataclasses.replace(base, namespace=names[0], name=names[1])
        elif base.kind == "slurm" and base.id in self._job_names:
            entry.owner = dataclasses.replace(base, name=self._job_names[base.id])
        elif base.kind in ("docker", "podman") and not entry.found.rootless:
            # A rootless container is its user's: the system daemon's name for that id is another's.
            name = self.container_names.get(base.kind, base.id)
            if name is not None:
                entry.owner = dataclasses.replace(base, name=name)
        entry.generation = self._generation

    def _mount(self, hierarchy: str) -> str | None:
        """Where the hierarchy of a /proc/PID/cgroup line is mounted ("" : cgroup v2), from this
        process's mountinfo; only mounts of the hierarchy's root (a cgroup namespace's are not)."""
        if self._mounts is None:
            self._mounts = {}
            raw = _read(str(self.mountinfo), 1 << 20) or b""
            for line in raw.decode("utf-8", errors="replace").splitlines():
                fields = line.split(" ")
                if " - " not in line or len(fields) < 10 or fields[3] != "/":
                    continue
                tail = line.split(" - ", 1)[1].split(" ")
                if len(tail) < 3:
                    continue
                point = fields[4].replace("\\040", " ")
                if tail[0] == "cgroup2":
                    self._mounts.setdefault("", point)
                elif tail[0] == "cgroup":
                    opts = set(tail[2].split(","))
                    for key in opts - {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec"}:
                        self._mounts.setdefault(key, point)
        if hierarchy == "":
            return self._mounts.get("")
        mounts = {self._mounts.get(c) for c in hierarchy.split(",")}
        return mounts.pop() if len(mounts) == 1 else None

    def _trusted(self, found: Found) -> bool:
        """Whether the directories above the shape's own belong to its manager: root, the `slurm` user
        (a job), the user running gputui, or a rootless container's own user. One that cannot be read
        says nothing (the shape's location alone decides); one that another uid owns refuses it."""
        mount = self._mount(found.hierarchy)
        if mount is None or any(s in (".", "..") for s in found.shape.split("/")):
            return True
        allowed = {0, os.geteuid()}
        if found.owner.kind == "slurm":
            allowed |= _slurm_uids()
        if found.rootless and found.uid is not None:
            allowed.add(found.uid)
        now = self.monotonic()
        segs = found.shape.split("/")[1:-1]
        for n in range(1, len(segs) + 1):
            path = mount + "/" + "/".join(segs[:n])
            hit = self._dir_uids.get(path)
            if hit is None or not 0 <= now - hit[0] < GROUP_TTL_S:
                if len(self._dir_uids) >= MAX_GROUPS:
                    self._dir_uids.clear()
                hit = self._dir_uids[path] = (now, _dir_uid(path))
            if hit[1] is not None and hit[1] not in allowed:
                return False
        return True

    def tick(self) -> None:
        """A new tick: the budget of cgroup reads (MAX_TICK_READS) starts again."""
        self._tick += 1
        self._reads_left = MAX_TICK_READS

    def read_groups(self, founds: Iterable[Found]) -> None:
        """Count the processes of these pods' and jobs' cgroups for this tick, the least recently read
        first, while the tick's budget lasts (see others_in_group)."""
        keys: dict[str, None] = {}
        for found in founds:
            key = self._group_key(found)
            if key is not None:
                keys[key] = None
        stale = [k for k in keys if self._due(k)]
        stale.sort(key=lambda k: self._groups[k].at if k in self._groups else -1e300)
        for key in stale:
            if self._reads_left <= 0:
                break
            self._read_group(key)

    def others_in_group(self, found: Found, exclude: set[int]) -> int | None:
        """How many processes other than `exclude` are in the pod's or job's cgroup (its whole
        subtree); None when that is unknown (no group, no mount, not readable: not root; more than
        MAX_WALK directories; or this tick's budget spent and no answer of the last GROUP_TTL_S)."""
        key = self._group_key(found)
        if key is None:
            return None
        if self._due(key) and self._reads_left > 0:
            self._read_group(key)
        group = self._groups.get(key)
        if group is None or group.pids is None:
            return None
        if group.tick != self._tick and not 0 <= self.monotonic() - group.at < GROUP_TTL_S:
            return None
        return sum(1 for pid in group.pids if pid not in exclude)

    def _group_key(self, found: Found) -> str | None:
        if found.group is None:
            return None
        mount = self._mount(found.hierarchy)
        if mount is None or any(s in (".", "..") for s in found.group.split("/")):
            return None
        return mount + found.group

    def _due(self, key: str) -> bool:
        """Whether the group is to be read on this tick: never read, or not yet this tick and small, or
        its answer older than GROUP_TTL_S."""
        group = self._groups.get(key)
        if group is None:
            return True
        if group.tick == self._tick:
            return False
        if group.pids is not None and group.dirs <= SMALL_WALK:
            return True
        return not 0 <= self.monotonic() - group.at < GROUP_TTL_S

    def _read_group(self, key: str) -> None:
        """Walk the group's directory (only it), within MAX_WALK directories and this tick's budget; a walk
        the budget cut short leaves what was known before."""
        pids: set[int] = set()
        stack = [key]
        dirs = entries = 0
        result: frozenset[int] | None = None
        try:
            while stack:
                if self._reads_left < 2:
                    return  # the budget is spent: read again on a later tick
                if dirs >= MAX_WALK:
                    break  # too large to count: unknown
                self._reads_left -= 2
                top = stack.pop()
                dirs += 1
                with open(os.path.join(top, "cgroup.procs"), "rb") as f:
                    pids.update(int(w) for w in f.read(MAX_PROCS_BYTES).split())
                with os.scandir(top) as it:
                    for entry in it:
                        entries += 1
                        if entries > MAX_WALK_ENTRIES or dirs + len(stack) > MAX_WALK:
                            break
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                if entries > MAX_WALK_ENTRIES or dirs + len(stack) > MAX_WALK:
                    dirs = MAX_WALK + 1
                    break
            else:
                result = frozenset(pids)
        except (OSError, ValueError):
            pass  # gone, unreadable, or not a cgroup's: unknown
        if len(self._groups) >= MAX_GROUPS:
            self._groups.clear()
        self._groups[key] = _Group(self.monotonic(), self._tick, result, dirs)
