"""The in-process agent: `import gputui.agent; gputui.agent.start()` inside a training script, or
`gputui run -- python train.py`. Standard library only; torch is read only once the host imported it."""

from gputui.agent.server import Agent, start, stop

__all__ = ["Agent", "start", "stop"]
