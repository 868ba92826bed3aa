"""The in-process agent: `import gputui.agent; gputui.agent.start()` inside a training script, or
`gputui run -- python train.py`. Standard library only; torch is read only once the host imported it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputui.agent.server import Agent, start, stop

__all__ = ["Agent", "start", "stop"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the monitor imports gputui.agent.protocol on every start and needs no server.
    if name in __all__:
        from gputui.agent import server

        return getattr(server, name)
    raise AttributeError(f"module 'gputui.agent' has no attribute {name!r}")
