"""Shared helpers for the agent's tests: an agent on a private directory, and raw socket exchanges."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import protocol, server
from gputui.agent.server import Agent


def stop_agent(agent: Agent, join: bool = False) -> None:
    """Stop it; its thread leaves within the half second of its select() (join: wait for that)."""
    agent.stop()
    if join and agent._thread is not None:
        agent._thread.join(timeout=3)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(directory=tmp_path / "run")
    a.start()
    try:
        yield a
    finally:
        stop_agent(a)


@pytest.fixture
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "REQUEST_TIMEOUT_S", 0.3)
    monkeypatch.setattr(server, "IDLE_TIMEOUT_S", 1.0)


@pytest.fixture
def module_agent() -> Iterator[None]:
    """Whatever a test does with the module-level agent, none is left running after it."""
    server.stop()
    try:
        yield
    finally:
        server.stop()


def request(path: Path, message: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """A plain client for the tests: one request, one reply, no checks (the monitor's own client,
    gputui.collect.agents.client, verifies whom it talks to)."""
    with connect(path, timeout) as sock:
        sock.sendall(protocol.encode(message))
        return next(lines(sock))


def connect(path: Path, timeout: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(path))
    return sock


def read_all(sock: socket.socket, deadline_s: float = 5.0) -> bytes:
    """Everything until the agent closes the connection (a reset counts as a close)."""
    data = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        data += chunk
    return data


def exchange(path: Path, payload: bytes, deadline_s: float = 5.0) -> list[dict[str, Any]]:
    """Send raw bytes, close our side, and return every reply line the agent sent before closing."""
    with connect(path, timeout=deadline_s) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        data = read_all(sock, deadline_s)
    return [json.loads(line) for line in data.split(b"\n") if line]


def lines(sock: socket.socket) -> Iterator[dict[str, Any]]:
    """The replies on one connection, one at a time."""
    with sock.makefile("rb") as f:
        while line := f.readline():
            yield json.loads(line)
