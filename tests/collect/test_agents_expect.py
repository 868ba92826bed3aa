"""AgentPoller.expect: after an attach, root looks at the target user's directories at the next poll,
not only at the next listing of every user's (DIRS_EVERY_S later)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui.agent import protocol
from gputui.collect.agents import client as agents
from gputui.collect.agents.client import DIRS_EVERY_S, AgentPoller

USER = 4242


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _uids(poller: AgentPoller) -> set[int]:
    return {uid for _path, uid in poller.directories()}


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """gputui as root; the listing of users' directories returns what the test puts in it."""
    listed: list[set[int]] = [set()]
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setattr(agents, "_users_with_agents", lambda: set(listed[0]))
    monkeypatch.setattr(protocol, "candidate_dirs", lambda uid=None: (Path(f"/nonexistent/gputui-{uid}"),))
    return listed


def test_an_expected_uid_is_looked_at_before_the_next_listing(root: list[set[int]]) -> None:
    clock = Clock()
    poller = AgentPoller(monotonic=clock)
    assert _uids(poller) == {0}  # listed once: nobody else had a directory then
    root[0] = {USER}  # the attach made the user's directory just now
    clock.now += 1.0
    assert _uids(poller) == {0}  # not listed again for DIRS_EVERY_S: no ◆ for up to 5 s
    poller.expect(USER)
    assert _uids(poller) == {0, USER}
    assert (Path(f"/nonexistent/gputui-{USER}"), USER) in poller.directories()


def test_the_next_listing_decides_again(root: list[set[int]]) -> None:
    clock = Clock()
    poller = AgentPoller(monotonic=clock)
    poller.directories()
    poller.expect(USER)
    clock.now += DIRS_EVERY_S
    assert _uids(poller) == {0}  # its directory is gone (the job ended): not looked at forever


def test_a_non_root_monitor_still_looks_only_at_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    poller = AgentPoller()
    poller.expect(USER)
    assert _uids(poller) == {1000}  # another user's directories are never this user's to read
