"""gputui: a full-screen terminal GPU monitor for ML engineers."""

# The one place the version is written: pyproject.toml reads it (dynamic version), and so does
# `gputui --version`. Say what changed in CHANGELOG.md when it moves.
__version__ = "0.1.0"
