"""A flood of `gputui-<digits>` names costs root's monitor nothing per tick.

Any user may make 300,000 empty files /tmp/gputui-<n>: root's monitor used to take every such name for a
uid and try to open that uid's directories on every tick (the exporter's samples ran 9-10 s late). Here a
directory of the test plays /tmp (and /run/user): whatever the monitor lists or opens there, it must not
grow with the flood, and the real agents must still be found. A flood inside a user's own directory costs
at most MAX_DIR_ENTRIES names per directory and tick.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import protocol
from gputui.agent.server import Agent
from gputui.collect.agents import client as agents
from gputui.collect.agents.client import DIRS_EVERY_S, AgentPoller
from tests.agent.impostors import Impostor, shared_base, users_dir
from tests.users import NOBODY

FLOOD = 20_000
CAP = 1024  # agents.MAX_DIR_ENTRIES: the names of one directory read per tick
ROOT = os.getuid() == 0  # then a real agent of another user (nobody) is found through the flood too


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counted:
    """Counts the file-system calls made while it is on: os.open, os.stat, os.lstat, os.unlink, and the
    names that os.listdir and os.scandir return, each by the path (or descriptor) it was made on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, redirect: dict[str, Path]) -> None:  # noqa: C901
        self.on = False
        self.calls: Counter[str] = Counter()
        self.names: Counter[str] = Counter()  # directory -> names read from it
        self.opened: list[str] = []
        real = {name: getattr(os, name) for name in ("open", "stat", "lstat", "unlink", "listdir", "scandir")}

        def where(path: Any) -> Any:
            return redirect.get(str(path), path) if isinstance(path, str | Path) else path

        def counting(name: str) -> Any:
            def call(path: Any, *args: Any, **kwargs: Any) -> Any:
                if self.on:
                    self.calls[name] += 1
                    if name == "open":
                        self.opened.append(str(path))
                return real[name](path, *args, **kwargs)

            return call

        def listdir(path: Any = ".") -> list[str]:
            out: list[str] = real["listdir"](where(path))
            if self.on:
                self.names[str(path)] += len(out)
            return out

        counter = self

        class Scan:
            def __init__(self, path: Any) -> None:
                self.path, self.it = str(path), real["scandir"](where(path))

            def __enter__(self) -> Scan:
                return self

            def __exit__(self, *_: object) -> None:
                self.it.close()

            def close(self) -> None:
                self.it.close()

            def __iter__(self) -> Scan:
                return self

            def __next__(self) -> os.DirEntry[str]:
                entry: os.DirEntry[str] = next(self.it)
                if counter.on:
                    counter.names[self.path] += 1
                return entry

        for name in ("open", "stat", "lstat", "unlink"):
            monkeypatch.setattr(os, name, counting(name))
        monkeypatch.setattr(os, "listdir", listdir)
        monkeypatch.setattr(os, "scandir", lambda path=".": Scan(path))

    def poll(self, poller: AgentPoller) -> dict[int, Any]:
        self.calls.clear()
        self.names.clear()
        self.opened.clear()
        self.on = True
        try:
            return poller.poll()
        finally:
            self.on = False

    @property
    def names_read(self) -> int:
        return sum(self.names.values())


def stats() -> bytes:
    return json.dumps({"v": 1, "ok": True, "time": time.time(), "progress": {"batches": 1}}).encode() + b"\n"


def process_uids() -> set[int]:
    uids = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                uids.add(os.stat(f"/proc/{name}").st_uid)
            except OSError:
                continue
    return uids


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """/tmp and /run/user played by directories of a shared base; FLOOD files gputui-<n> in the first;
    the test's own agent in its directory, and (as root) nobody's in nobody's, beside a directory of
    nobody's that others may write (never to be opened)."""
    me = os.getuid()
    with shared_base() as base:
        tmp, run = base / "tmp", base / "run"
        tmp.mkdir(mode=0o755)
        run.mkdir(mode=0o755)
        for n in range(1, FLOOD + 1):
            if n not in (me, NOBODY):
                (tmp / f"gputui-{n}").touch()
        own = Agent(directory=tmp / f"gputui-{me}")
        own.start()
        impostor = None
        try:
            if ROOT:
                users_dir(run, str(NOBODY), mode=0o755)
                users_dir(run / str(NOBODY), "gputui", mode=0o777)  # not trusted: others may write
                impostor = Impostor(users_dir(tmp, f"gputui-{NOBODY}"), stats())

            def candidates(uid: int | None = None) -> tuple[Path, ...]:
                uid = os.getuid() if uid is None else uid
                return tmp / f"gputui-{uid}", run / str(uid) / "gputui"

            monkeypatch.setattr(protocol, "candidate_dirs", candidates)
            monkeypatch.setattr(os, "getuid", lambda: 0)  # the monitor runs as root
            counted = Counted(monkeypatch, {"/tmp": tmp, "/run/user": run})
            yield {"tmp": tmp, "run": run, "counted": counted, "impostor": impostor, "me": me}
        finally:
            own.stop()
            if impostor is not None:
                impostor.stop()


def test_a_flood_of_names_costs_root_nothing_per_tick(world: dict[str, Any]) -> None:
    counted: Counted = world["counted"]
    tmp: Path = world["tmp"]
    clock = Clock()
    poller = AgentPoller(monotonic=clock)

    found = counted.poll(poller)  # the first poll lists the users
    assert os.getpid() in found and found[os.getpid()].ok
    if ROOT:
        assert world["impostor"].pid in found and found[world["impostor"].pid].ok
    users = len(process_uids() | {NOBODY})
    rescan = sum(counted.calls.values()) + counted.names_read
    # Rescan: a look at each uid that owns a process (its two candidates) and the listing of processes;
    # nothing of the flood's size.
    assert rescan < FLOOD // 4, (counted.calls, counted.names)
    assert counted.names[str(tmp)] <= CAP, counted.names
    assert counted.calls["open"] + counted.calls["lstat"] + counted.calls["stat"] <= 4 * users + 16, (
        counted.calls
    )

    for _ in range(3):  # the ticks until the next rescan
        clock.now += 1.0
        found = counted.poll(poller)
        assert os.getpid() in found and found[os.getpid()].ok
        if ROOT:
            assert world["impostor"].pid in found
        # per tick: root's own two directories and the one other trusted directory, no more
        assert counted.calls["open"] <= 3, counted.opened[:10]
        flood = [
            p
            for p in counted.opened
            if Path(p).parent == tmp
            and Path(p).name not in (f"gputui-{world['me']}", f"gputui-{NOBODY}", "gputui-0")
        ]
        assert flood == []
        assert all(not p.startswith(str(world["run"] / str(NOBODY))) for p in counted.opened)  # refused
        assert sum(counted.calls.values()) + counted.names_read <= 32, (counted.calls, counted.names)

    # The flood doubles: the next rescan costs what the first did, give or take the processes' users.
    for n in range(FLOOD + 1, 2 * FLOOD + 1):
        (tmp / f"gputui-{n}").touch()
    clock.now += DIRS_EVERY_S
    found = counted.poll(poller)
    assert os.getpid() in found
    assert sum(counted.calls.values()) + counted.names_read < FLOOD // 4, (counted.calls, counted.names)


def test_a_flood_inside_a_directory_is_read_at_most_max_dir_entries_a_tick(tmp_path: Path) -> None:
    """A user's own directory full of `<pid>.sock` names: each tick reads at most MAX_DIR_ENTRIES of them
    (and in the monitor's own directory removes that many of the dead), and the real agent is found once
    the dead names are gone."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    dead = 3_000_000_000  # above any pid_max: no such process
    for n in range(FLOOD):
        (directory / f"{dead + n}.sock").touch()
    agent = Agent(directory=directory)
    agent.start()
    try:
        poller = AgentPoller(directory)
        unlinked = os.unlink
        removed = []

        def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
            removed.append(path)
            unlinked(path, *args, **kwargs)

        exists = os.path.exists
        looked = []

        def exists_counted(path: Any) -> bool:
            looked.append(path)
            return exists(path)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "unlink", unlink)
            mp.setattr(os.path, "exists", exists_counted)
            for polls in range(1, FLOOD // CAP + 3):
                found = poller.poll()
                assert len(removed) <= polls * CAP, f"{len(removed)} names removed in {polls} polls"
                assert len(looked) <= polls * CAP, f"{len(looked)} names looked up in {polls} polls"
        assert os.getpid() in found and found[os.getpid()].ok
        assert len(os.listdir(directory)) == 1  # the dead names are gone, the agent's socket is left
        assert agents.MAX_DIR_ENTRIES == CAP
    finally:
        agent.stop()
