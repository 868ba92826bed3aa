"""gputui: a full-screen terminal GPU monitor for ML engineers."""

__version__ = "0.1.0"
