"""Another user, for the tests that play one: root becomes `nobody` in a forked child."""

from __future__ import annotations

import os

NOBODY = 65534


def become(uid: int = NOBODY) -> None:
    """In a forked child: drop every group and become `uid` for good."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
