"""The agent's memory ring and its `memory_history` op: bounded, one point per POINT_S, read from the
allocator only when due; the reply, through a real socket, validated by the monitor's parser; hostile
replies refused. A child process with a torch-like module (no CUDA here) shows the whole chain: the serve
loop's tick reads the allocator, the doctor reads the ring."""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import memory_ring, protocol
from gputui.agent.memory_ring import KEEP_S, MAX_DEVICES, MAX_POINTS, POINT_S, MemoryRing
from gputui.agent.server import Agent
from gputui.collect.agents.reply import (
    MAX_HISTORY_DEVICES,
    MAX_HISTORY_POINTS,
    BadReply,
    MemoryHistory,
    parse_memory_history,
)
from gputui.doctor import process
from tests.agent.conftest import request, stop_agent
from tests.helpers import wait_until

MIB = 1 << 20


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def ring_with_reads(points: list[memory_ring.Point]) -> tuple[MemoryRing, Clock, list[float]]:
    """A ring on a hand-moved clock whose allocator read returns `points` and notes when it was asked."""
    clock = Clock()
    asked: list[float] = []

    def read() -> list[memory_ring.Point]:
        asked.append(clock.t)
        return list(points)

    return MemoryRing(clock=clock, wall=lambda: 1.7e9 + clock.t, read=read), clock, asked


# -- the ring ----------------------------------------------------------------------------------------


def test_the_allocator_is_read_once_per_point() -> None:
    ring, clock, asked = ring_with_reads([(0, 10 * MIB, 20 * MIB)])
    for _ in range(200):  # the serve loop ticks every half second
        ring.tick()
        clock.t += 0.5
    assert len(asked) == 20  # 100 s: one read per POINT_S, not one per tick
    assert all(b - a == pytest.approx(POINT_S) for a, b in itertools.pairwise(asked))
    times = [t for t, _, _ in ring.reply()["devices"][0]["points"]]
    assert all(b - a == pytest.approx(POINT_S, abs=0.02) for a, b in itertools.pairwise(times))


def test_the_ring_is_bounded_to_its_minutes() -> None:
    ring, clock, _ = ring_with_reads([(0, 1, 2), (1, 3, 4)])
    for _ in range(2000):  # ~2.8 h of points
        ring.tick()
        clock.t += POINT_S
    reply = ring.reply()
    for device in reply["devices"]:
        points = device["points"]
        assert len(points) <= MAX_POINTS
        assert reply["time"] - points[0][0] <= KEEP_S + POINT_S
        assert reply["time"] - points[0][0] >= KEEP_S - 2 * POINT_S  # and keeps them all that long
    assert MAX_POINTS * POINT_S >= 600 + 60  # the forecast's window and its envelope fit


def test_devices_are_bounded() -> None:
    ring, _, _ = ring_with_reads([(i, i, i) for i in range(MAX_DEVICES + 10)])
    ring.tick()
    assert len(ring.reply()["devices"]) == MAX_DEVICES


def test_a_failing_read_never_reaches_the_host() -> None:
    def broken() -> list[memory_ring.Point]:
        raise RuntimeError("CUDA error: an illegal memory access")

    ring = MemoryRing(read=broken)
    ring.tick()  # no exception
    assert ring.reply()["devices"] == []


def test_a_stats_request_offers_its_numbers_when_a_point_is_due() -> None:
    ring, clock, asked = ring_with_reads([])
    ring.offer([{"index": 0, "allocated": 5, "reserved": 8}, {"index": 1, "allocated": None}])
    clock.t += 1.0
    ring.offer([{"index": 0, "allocated": 6, "reserved": 9}])  # not due: dropped
    ring.tick()  # not due either: the allocator is not read
    assert asked == []
    (device,) = ring.reply()["devices"]
    assert device["index"] == 0 and [p[1:] for p in device["points"]] == [[5, 8]]


def test_without_torch_the_agent_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert memory_ring.read_torch() == []


def test_a_full_ring_fits_in_one_reply() -> None:
    ring, clock, _ = ring_with_reads([(i, 2**40 + i, 2**41 + i) for i in range(MAX_DEVICES)])
    for _ in range(MAX_POINTS + 5):
        ring.tick()
        clock.t += POINT_S
    data = protocol.encode(ring.reply())
    assert len(data) < protocol.MAX_REPLY / 4
    history = parse_memory_history(protocol.decode(data.rstrip(b"\n"), limit=protocol.MAX_REPLY))
    assert len(history.devices) == MAX_DEVICES <= MAX_HISTORY_DEVICES
    assert all(len(p) == MAX_POINTS <= MAX_HISTORY_POINTS for p in history.devices.values())


# -- the op, through a real agent ----------------------------------------------------------------------


def test_the_op_over_the_socket(tmp_path: Path) -> None:
    ring, clock, _ = ring_with_reads([(0, 100 * MIB, 128 * MIB), (2, 1 * MIB, 2 * MIB)])
    for k in range(10):
        clock.t += POINT_S if k else 0.0
        ring.tick()  # the last point is fresh: the agent's own loop takes none before the request
    agent = Agent(directory=tmp_path / "run", memory=ring)
    path = agent.start()
    try:
        reply = request(path, {"op": "memory_history"})
    finally:
        stop_agent(agent)
    history = parse_memory_history(reply)
    assert sorted(history.devices) == [0, 2]
    points = history.devices[0]
    assert len(points) == 10 and points[-1][1:] == (100 * MIB, 128 * MIB)
    assert points[-1][0] <= history.time and history.time - points[0][0] == pytest.approx(45.0, abs=0.1)


def test_the_serve_loop_takes_the_points(tmp_path: Path) -> None:
    reads: list[float] = []

    def read() -> list[memory_ring.Point]:
        reads.append(time.monotonic())
        return [(0, len(reads), len(reads))]

    agent = Agent(directory=tmp_path / "run", memory=MemoryRing(read=read))
    agent.start()
    try:
        assert wait_until(lambda: len(reads) >= 1, 5.0)
        time.sleep(1.5)
        assert len(reads) == 1  # the next one is POINT_S away
    finally:
        stop_agent(agent, join=True)


# -- hostile replies ---------------------------------------------------------------------------------


def good() -> dict[str, Any]:
    return with_points([[1.7e9 - 5, 1, 2], [1.7e9, 3, 4]])


def with_points(points: object) -> dict[str, Any]:
    return {"ok": True, "time": 1.7e9, "devices": [{"index": 0, "points": points}]}


HOSTILE = {
    "not an object": [1, 2],
    "an error": {"ok": False, "error": "unknown op 'memory_history'"},
    "no ok": {"time": 1.7e9, "devices": []},
    "no time": {"ok": True, "devices": []},
    "a time of nan": {"ok": True, "time": float("nan"), "devices": []},
    "a negative time": with_points([[-1.0, 1, 2]]),
    "an infinite time": with_points([[float("inf"), 1, 2]]),
    "negative bytes": with_points([[1.0, -1, 2]]),
    "fractional bytes": with_points([[1.0, 1.5, 2]]),
    "bytes as true": with_points([[1.0, True, 2]]),
    "bytes as text": with_points([[1.0, "1", 2]]),
    "bytes beyond int64": with_points([[1.0, 2**64, 2]]),
    "a short point": with_points([[1.0, 1]]),
    "a point as an object": with_points([{"t": 1.0}]),
    "a null": with_points([[1.0, None, 2]]),
    "out of order": with_points([[2.0, 1, 2], [1.0, 1, 2]]),
    "too many points": with_points([[float(i), 1, 2] for i in range(MAX_HISTORY_POINTS + 1)]),
    "too many devices": {
        "ok": True,
        "time": 1.7e9,
        "devices": [{"index": i, "points": []} for i in range(MAX_HISTORY_DEVICES + 1)],
    },
    "an index twice": {
        "ok": True,
        "time": 1.7e9,
        "devices": [{"index": 0, "points": []}, {"index": 0, "points": []}],
    },
    "a huge index": {"ok": True, "time": 1.7e9, "devices": [{"index": 10**6, "points": []}]},
    "no index": {"ok": True, "time": 1.7e9, "devices": [{"points": []}]},
    "devices as an object": {"ok": True, "time": 1.7e9, "devices": {"0": []}},
}


def test_a_good_reply_is_read() -> None:
    assert parse_memory_history(good()) == MemoryHistory(1.7e9, {0: ((1.7e9 - 5, 1, 2), (1.7e9, 3, 4))})


@pytest.mark.parametrize("reply", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_replies_are_refused(reply: object) -> None:
    with pytest.raises(BadReply):
        parse_memory_history(reply)


def test_an_error_text_is_made_printable() -> None:
    with pytest.raises(BadReply) as err:
        parse_memory_history({"ok": False, "error": "\x1b[2J" + "x" * 5000})
    assert "\x1b" not in str(err.value) and len(str(err.value)) < 300


# -- the doctor's side of the exchange -------------------------------------------------------------------


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """A socket in this process's name that answers each connection with the next scripted line: an
    older agent, or a hostile one (it is this process, so the peer check passes as for a real agent)."""
    directory = protocol.private_dir(tmp_path / "run")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(protocol.socket_path(os.getpid(), directory)))
    sock.listen(4)
    lines: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(lines.pop(0) if lines else b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield directory, lines
    finally:
        with contextlib.suppress(OSError):  # wakes the accept() (a close alone leaves it waiting)
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        thread.join(timeout=5)


def test_the_doctor_says_why_an_older_agent_gives_no_history(scripted: tuple[Path, list[bytes]]) -> None:
    directory, lines = scripted
    lines.append(protocol.encode({"ok": False, "error": "unknown op 'memory_history'"}))
    why = process.agent_history(os.getpid(), directory)
    assert why == "bad reply: the agent said: unknown op 'memory_history'"


def test_the_doctor_refuses_a_hostile_history(scripted: tuple[Path, list[bytes]]) -> None:
    directory, lines = scripted
    lines.append(protocol.encode(with_points([[1.0, -5, 2]])))
    lines.append(b'{"v":1,"ok":true,"time":1e9,"devices":' + b"[" * 100_000 + b"\n")
    assert process.agent_history(os.getpid(), directory) == "bad reply: devices[0].points[0][1]: out of range"
    assert str(process.agent_history(os.getpid(), directory)).startswith("bad reply:")


# -- the whole chain, in a child process ---------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, time, types
    from pathlib import Path

    # A torch-like module: CUDA initialized, one device whose allocations grow by 1 MiB a read.
    state = {"n": 0}
    def memory_stats(device):
        state["n"] += 1
        return {
            "allocated_bytes.all.current": state["n"] << 20,
            "reserved_bytes.all.current": (state["n"] + 8) << 20,
            "reserved_bytes.all.peak": (state["n"] + 8) << 20,
        }
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: True, device_count=lambda: 1, memory_stats=memory_stats
    )
    sys.modules["torch"] = torch

    from gputui.agent import memory_ring
    memory_ring.POINT_S = 0.05  # a point per loop turn: the test cannot wait minutes
    from gputui.agent.server import Agent
    Agent(directory=Path(sys.argv[1])).start()
    print("ready", flush=True)
    time.sleep(60)
""")


def test_a_real_agent_keeps_its_memory_and_the_doctor_reads_it(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        got: list[MemoryHistory] = []

        def has_points() -> bool:
            h = process.agent_history(child.pid, directory)
            if isinstance(h, MemoryHistory) and len(h.devices.get(0, ())) >= 3:
                got.append(h)
                return True
            return False

        assert wait_until(has_points, 15.0, step=0.3)
        points = got[-1].devices[0]
        allocated = [a for _, a, _ in points]
        assert allocated == sorted(allocated) and allocated[0] >= MIB  # read from the module, growing
        assert all(r - a == 8 * MIB for _, a, r in points)
        assert all(t <= got[-1].time for t, _, _ in points)
    finally:
        child.kill()
        child.wait(timeout=10)
        assert child.stdout is not None
        child.stdout.close()
