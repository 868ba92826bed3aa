"""The agent's server: a private socket, a uid check, bounded requests, and nothing that can kill it."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import protocol, server
from gputui.agent.server import Agent
from gputui.collect.agents import client as agents
from tests.agent.conftest import connect, exchange, lines, read_all, request, stop_agent
from tests.users import NOBODY, become


def hello(agent: Agent) -> dict[str, Any]:
    assert agent.path is not None
    return request(agent.path, {"op": "hello"}, timeout=5.0)


def assert_alive(agent: Agent) -> None:
    assert agent._thread is not None and agent._thread.is_alive()
    reply = hello(agent)
    assert reply["ok"] is True and reply["pid"] == os.getpid()


def assert_error(replies: list[dict[str, Any]]) -> None:
    assert len(replies) <= 1, replies
    for reply in replies:
        assert reply["v"] == protocol.VERSION
        assert reply["ok"] is False and isinstance(reply["error"], str) and reply["error"]


# -- the socket and its directory -----------------------------------------------------------------


def test_directory_0700_and_socket_0600(agent: Agent, tmp_path: Path) -> None:
    directory = tmp_path / "run"
    assert agent.path == directory / f"{os.getpid()}.sock"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    info = agent.path.lstat()
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.getuid()
    assert agent.running
    assert agent._thread is not None and agent._thread.daemon and agent._thread.name == "gputui-agent"


def test_hello_and_stats(agent: Agent) -> None:
    reply = hello(agent)
    assert reply == {"v": protocol.VERSION, "ok": True, "pid": os.getpid(), "started": agent.started}
    assert agent.path is not None
    stats = request(agent.path, {"op": "stats"})
    assert stats["ok"] is True and stats["pid"] == os.getpid()
    assert abs(stats["time"] - time.time()) < 60
    assert {"torch", "alloc_conf", "devices"} <= set(stats["allocator"])
    assert isinstance(stats["progress"], dict) and "batches" in stats["progress"]
    assert agent.requests >= 2


def test_discover_and_poll(agent: Agent, tmp_path: Path) -> None:
    directory = tmp_path / "run"
    assert agent.path is not None
    assert agents.discover(directory) == {
        os.getpid(): agents.AgentSocket(os.getpid(), os.getuid(), agent.path)
    }
    polled = agents.AgentPoller(directory).poll()
    assert list(polled) == [os.getpid()] and polled[os.getpid()].ok
    assert polled[os.getpid()].pid == os.getpid() and polled[os.getpid()].error == ""


def test_unknown_op(agent: Agent) -> None:
    assert agent.path is not None
    for message in ({"op": "rm -rf"}, {}, {"op": None}, {"op": ["hello"]}):
        reply = request(agent.path, message)
        assert reply["ok"] is False and "unknown op" in reply["error"]


@pytest.mark.parametrize("op", ["record_history", "dump_snapshot", "empty_cache"])
def test_cuda_actions_without_cuda_are_errors(agent: Agent, op: str) -> None:
    assert agent.path is not None
    reply = agents.AgentPoller(agent.path.parent).act(os.getpid(), op, enabled=True)
    assert reply["ok"] is False and "CUDA is not initialized" in reply["message"]
    assert_alive(agent)


def test_act_on_a_missing_agent_is_an_error(tmp_path: Path) -> None:
    reply = agents.AgentPoller(tmp_path).act(1, "empty_cache")
    assert reply == {"ok": False, "message": "no gputui agent of pid 1 is listening"}


def test_several_requests_on_one_connection(agent: Agent) -> None:
    assert agent.path is not None
    with connect(agent.path) as sock:
        replies = lines(sock)
        for op in ("hello", "stats", "hello", "nope", "hello"):
            sock.sendall(protocol.encode({"op": op}))
            reply = next(replies)
            assert reply["ok"] is (op != "nope"), reply
        # Pipelined: three requests in one write, three replies in order.
        sock.sendall(protocol.encode({"op": "hello"}) + b"garbage\n" + protocol.encode({"op": "stats"}))
        first, second, third = next(replies), next(replies), next(replies)
        assert first["ok"] and "started" in first
        assert second["ok"] is False
        assert third["ok"] and "allocator" in third
        # One request split over several writes.
        line = protocol.encode({"op": "hello"})
        for i in range(len(line)):
            sock.sendall(line[i : i + 1])
        assert next(replies)["ok"] is True


# -- malformed input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x01\x02garbage\xff\n",
        b"\xff\xfe\xfa\xc3\x28\n",  # invalid UTF-8
        b"[1,2,3]\n",  # an array
        b'"hello"\n',
        b'{"v":2,"op":"hello"}\n',  # wrong version
        b'{"op":"hello"}\n',  # no version
        b"\n",  # an empty line
        b"[" * 60_000 + b"\n",  # nesting past the recursion limit
        b'{"v":1,"op":"hello","n":' + b"9" * 10_000 + b"}\n",
    ],
    ids=["garbage", "utf8", "array", "string", "version", "noversion", "empty", "nested", "bigint"],
)
def test_malformed_line_gets_an_error_reply(agent: Agent, payload: bytes) -> None:
    assert agent.path is not None
    replies = exchange(agent.path, payload)
    assert len(replies) == 1
    assert_error(replies)
    assert_alive(agent)


def test_line_too_long_without_newline(agent: Agent) -> None:
    assert agent.path is not None
    replies = exchange(agent.path, b"x" * (100 * 1024))
    assert_error(replies)
    if replies:
        assert "too large" in replies[0]["error"]
    assert_alive(agent)


def test_line_too_long_with_newline(agent: Agent) -> None:
    assert agent.path is not None
    replies = exchange(agent.path, b'{"v":1,"op":"hello","pad":"' + b"x" * (200 * 1024) + b'"}\n')
    assert_error(replies)
    assert_alive(agent)


def test_huge_stream_is_cut_off(agent: Agent) -> None:
    """A client that keeps writing gets an error and a closed connection, not an agent that buffers all."""
    assert agent.path is not None
    with connect(agent.path) as sock:
        sent = 0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
            for _ in range(256):  # up to 16 MiB
                sock.sendall(b"y" * 65536)
                sent += 65536
        data = read_all(sock)
    assert sent < 16 * 1024 * 1024
    assert_error([json.loads(line) for line in data.split(b"\n") if line])
    assert_alive(agent)


def test_slow_client_is_dropped(agent: Agent, short_timeouts: None) -> None:
    assert agent.path is not None
    with connect(agent.path) as sock:
        sock.sendall(b'{"v":1,"op":')  # half a line, then nothing
        start = time.monotonic()
        data = read_all(sock, deadline_s=5.0)
        waited = time.monotonic() - start
    assert data == b""  # closed without a reply
    assert waited < 3.0, f"the agent waited {waited:.1f} s for the rest of the line"
    assert_alive(agent)


def test_silent_client_is_dropped(agent: Agent, short_timeouts: None) -> None:
    assert agent.path is not None
    with connect(agent.path) as sock:
        start = time.monotonic()
        assert read_all(sock, deadline_s=5.0) == b""
        assert time.monotonic() - start < 3.0
    assert_alive(agent)


def test_trickling_client_is_dropped_at_the_idle_timeout(agent: Agent, short_timeouts: None) -> None:
    """One byte every 0.2 s (each under the request timeout) still ends at the idle timeout."""
    assert agent.path is not None
    with connect(agent.path) as sock:
        start = time.monotonic()
        closed = False
        for _ in range(40):
            try:
                sock.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.2)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    closed = True
                    break
            except BlockingIOError:
                pass
            finally:
                sock.settimeout(5.0)
        assert closed
        assert time.monotonic() - start < 3.0
    assert_alive(agent)


def test_slow_client_does_not_block_the_agent_for_long(agent: Agent, short_timeouts: None) -> None:
    """While a stalled client holds the connection, a poller waits at most about the request timeout."""
    assert agent.path is not None
    with connect(agent.path) as stalled:
        stalled.sendall(b'{"v":1')
        time.sleep(0.05)
        start = time.monotonic()
        assert request(agent.path, {"op": "hello"}, timeout=5.0)["ok"]
        # About the 0.3 s request timeout (short_timeouts); blocked behind the stalled client, the poller
        # would give up at its 5 s. 3 s sits far from both, whatever a loaded box adds.
        assert time.monotonic() - start < 3.0


def test_client_that_never_reads_replies(agent: Agent, short_timeouts: None) -> None:
    """Thousands of pipelined requests whose replies are never read: the agent must not hang forever."""
    assert agent.path is not None
    with connect(agent.path) as sock:
        sock.setblocking(False)
        burst = protocol.encode({"op": "stats"}) * 2000
        with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionResetError):
            sock.sendall(burst)
        time.sleep(0.1)
        start = time.monotonic()
        reply = request(agent.path, {"op": "hello"}, timeout=5.0)
        assert reply["ok"] and time.monotonic() - start < 4.0
    assert_alive(agent)


def test_client_that_disconnects_at_once(agent: Agent) -> None:
    assert agent.path is not None
    for _ in range(20):
        connect(agent.path).close()
        with connect(agent.path) as sock:
            sock.sendall(protocol.encode({"op": "stats"}))  # and leaves before the reply
        time.sleep(0.01)  # the backlog is 8: a connect() with a timeout fails at once when it is full
    assert_alive(agent)


def test_fuzz(agent: Agent) -> None:
    assert agent.path is not None
    rng = random.Random(20240607)
    valid = [protocol.encode({"op": op}) for op in ("hello", "stats", "nope")]
    for case in range(300):
        kind = case % 3
        if kind == 0:  # random bytes
            payload = rng.randbytes(rng.randrange(0, 2048))
        elif kind == 1:  # random bytes cut into lines
            payload = b"\n".join(rng.randbytes(rng.randrange(0, 64)) for _ in range(rng.randrange(1, 8)))
        else:  # a valid request with a few bytes flipped, inserted or removed
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(data))
                action = rng.randrange(3)
                if action == 0:
                    data[i] = rng.randrange(256)
                elif action == 1:
                    data.insert(i, rng.randrange(256))
                elif len(data) > 1:
                    del data[i]
            payload = bytes(data)
        replies = exchange(agent.path, payload)
        assert len(replies) <= payload.count(b"\n") + 1
        for reply in replies:
            assert reply["v"] == protocol.VERSION and isinstance(reply["ok"], bool)
            assert reply["ok"] or reply["error"]
        if case % 50 == 49:
            assert_alive(agent)
    assert_alive(agent)


def test_answer_never_raises(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> dict[str, Any]:
        raise RuntimeError("allocator exploded")

    monkeypatch.setattr(agent.stats, "collect", boom)
    reply = agent.answer(protocol.encode({"op": "stats"}))
    assert reply == {"ok": False, "error": "RuntimeError: allocator exploded"}
    assert agent.answer(b"[" * 100_000)["ok"] is False
    assert agent.answer(b"\xff" * 10)["ok"] is False
    assert_alive(agent)  # and over the socket
    assert agent.path is not None
    assert request(agent.path, {"op": "stats"})["ok"] is False


# -- peers of another uid ------------------------------------------------------------------------


@pytest.fixture
def world_reachable_agent() -> Iterator[Agent]:
    """An agent in a directory under /tmp (pytest's tmp_path is 0700, so nobody could reach it) whose
    directory and socket are then opened up: only the SO_PEERCRED check stands between."""
    base = Path(tempfile.mkdtemp(prefix="gputui-test-peer-", dir="/tmp"))
    os.chmod(base, 0o711)
    a = Agent(directory=base / "run")
    try:
        a.start()
        assert a.path is not None
        os.chmod(base / "run", 0o711)
        os.chmod(a.path, 0o666)
        yield a
    finally:
        stop_agent(a)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to become another uid")
def test_peer_of_another_uid_is_refused(world_reachable_agent: Agent) -> None:
    path = world_reachable_agent.path
    assert path is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, ask, report through the pipe, and leave without cleanup
        code = 1
        try:
            os.close(read_end)
            become(NOBODY)
            result: dict[str, Any] = {"uid": os.getuid(), "data": ""}
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(5)
                    sock.connect(str(path))
                    result["connected"] = True
                    # The agent may refuse (and close) before our request is even written: the write
                    # then fails, and the refusal still waits to be read.
                    try:
                        sock.sendall(protocol.encode({"op": "stats"}))
                    except OSError as err:
                        result["send_error"] = str(err)
                    # Closed with our request unread, the connection is reset after the reply (Linux):
                    # keep what came before an error.
                    while chunk := sock.recv(65536):
                        result["data"] += chunk.decode("utf-8", "replace")
            except OSError as err:
                result["oserror"] = str(err)
            os.write(write_end, json.dumps(result).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    result = json.loads(b"".join(chunks))
    assert result["uid"] == NOBODY
    assert result.get("connected"), result  # it did reach the socket...
    replies = [json.loads(line) for line in result["data"].splitlines() if line]
    assert len(replies) == 1  # ...and got one refusal, nothing else
    assert replies[0]["ok"] is False and "refused" in replies[0]["error"]
    assert "allocator" not in replies[0]
    assert_alive(world_reachable_agent)


def test_peer_uid_of_our_own_connection(agent: Agent) -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert server.peer_uid(a) == os.getuid()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as inet:
        assert server.peer_uid(inet) in (None, -1)  # not a Unix socket: no credentials


# -- lifecycle -----------------------------------------------------------------------------------


def test_stop_removes_the_socket(tmp_path: Path) -> None:
    a = Agent(directory=tmp_path / "run")
    path = a.start()
    assert path.exists()
    stop_agent(a, join=True)
    assert not path.exists()
    assert not a.running
    assert a._thread is not None and not a._thread.is_alive()
    with pytest.raises(OSError):
        request(path, {"op": "hello"})
    a.stop()  # twice is fine


def test_stop_before_start_is_harmless(tmp_path: Path) -> None:
    Agent(directory=tmp_path / "run").stop()


def test_module_start_twice_returns_the_same_agent(tmp_path: Path, module_agent: None) -> None:
    first = server.start(directory=tmp_path / "run")
    second = server.start(directory=tmp_path / "run")
    assert first is not None and first is second and first.running
    assert first.path is not None and agents.discover(tmp_path / "run")[os.getpid()].path == first.path
    server.stop()
    assert not first.running and first.path is not None and not first.path.exists()
    third = server.start(directory=tmp_path / "run")
    assert third is not None and third is not first and third.running and third.path is not None
    assert request(third.path, {"op": "hello"})["ok"]
    server.stop()
    server.stop()  # twice is fine


def test_package_exports(module_agent: None) -> None:
    import gputui.agent

    assert gputui.agent.start is server.start and gputui.agent.stop is server.stop
    assert gputui.agent.Agent is Agent


def test_stale_socket_of_our_pid_is_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    protocol.private_dir(directory)
    stale = directory / f"{os.getpid()}.sock"
    # A socket left by an earlier process with our pid: bound, then abandoned.
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(str(stale))
    old.close()
    with pytest.raises(ConnectionRefusedError):
        request(stale, {"op": "hello"})
    a = Agent(directory=directory)
    try:
        assert a.start() == stale
        assert request(stale, {"op": "hello"})["ok"]
        assert stat.S_IMODE(stale.lstat().st_mode) == 0o600
    finally:
        stop_agent(a)


def test_stale_plain_file_of_our_pid_is_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    protocol.private_dir(directory)
    stale = directory / f"{os.getpid()}.sock"
    stale.write_text("left over")
    a = Agent(directory=directory)
    try:
        a.start()
        assert stat.S_ISSOCK(stale.lstat().st_mode)
        assert request(stale, {"op": "hello"})["ok"]
    finally:
        stop_agent(a)


def test_discover_removes_sockets_of_dead_processes(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    protocol.private_dir(directory)
    dead = 4_000_000  # above pid_max's ceiling (2**22): never a live process
    (directory / f"{dead}.sock").write_text("")
    (directory / "notes.txt").write_text("")
    (directory / "abc.sock").write_text("")
    assert agents.discover(directory) == {}
    assert not (directory / f"{dead}.sock").exists()
    assert (directory / "notes.txt").exists() and (directory / "abc.sock").exists()
    assert agents.discover(tmp_path / "absent") == {}


def test_poll_skips_an_agent_that_does_not_answer(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    protocol.private_dir(directory)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / f"{os.getpid()}.sock"))
    listener.listen(1)  # never accepts: the poller's deadline must end it
    try:
        start = time.monotonic()
        report = agents.AgentPoller(directory).poll()[os.getpid()]
        assert time.monotonic() - start < 2.0  # the deadline (0.15 s), else never: slack for load
        assert report.status == "slow" and "no reply within 150 ms" in report.error
    finally:
        listener.close()


def _fake_agent(directory: Path, reply: bytes) -> tuple[socket.socket, threading.Thread]:
    protocol.private_dir(directory)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / f"{os.getpid()}.sock"))
    listener.listen(1)

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (b"garbage\n", "not JSON"),
        (b'{"v":2,"ok":true}\n', "version"),
        (b"", "closed the connection"),
        (b'{"v":1,"ok":false}\n', "the agent said: no reason"),
        (b"\xff\xfe\n", "not JSON"),
    ],
)
def test_a_bad_reply_is_unreadable(tmp_path: Path, reply: bytes, why: str) -> None:
    listener, thread = _fake_agent(tmp_path / "run", reply)
    try:
        report = agents.AgentPoller(tmp_path / "run").poll()[os.getpid()]
        assert report.status == "unreadable" and why in report.error and report.devices == ()
    finally:
        listener.close()
        thread.join(timeout=2)


def test_poll_survives_a_deeply_nested_reply(tmp_path: Path) -> None:
    listener, thread = _fake_agent(tmp_path / "run", b"[" * 50_000 + b"\n")
    try:
        assert agents.AgentPoller(tmp_path / "run").poll()[os.getpid()].status == "unreadable"
    finally:
        listener.close()
        thread.join(timeout=2)


# -- cost ------------------------------------------------------------------------------------------


def _thread_cpu(thread: threading.Thread) -> float:
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def test_agent_thread_is_cheap(agent: Agent) -> None:
    """Idle, the thread wakes twice a second; a stats request costs well under a millisecond of CPU."""
    assert agent._thread is not None and agent.path is not None
    before = _thread_cpu(agent._thread)
    time.sleep(1.0)
    idle = _thread_cpu(agent._thread) - before
    assert idle < 0.05, f"idle agent used {idle * 1000:.1f} ms of CPU in a second"
    poller = agents.AgentPoller(agent.path.parent)
    before = _thread_cpu(agent._thread)
    for _ in range(50):
        assert os.getpid() in poller.poll()
    busy = _thread_cpu(agent._thread) - before
    assert busy / 50 < 0.01, f"{busy / 50 * 1000:.2f} ms of agent CPU per stats request"
