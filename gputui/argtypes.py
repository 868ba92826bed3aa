"""Argument types for the command line: each turns the user's text into a value or one clear line."""

from __future__ import annotations

import argparse
from pathlib import Path


def interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0.1 and 3600 seconds, not {text}")
    return value


def gpu_count(text: str) -> int:
    from gputui.collect.sources.demo import MAX_GPUS

    if not text.isdigit() or not 1 <= int(text) <= MAX_GPUS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_GPUS}, not {text!r}")
    return int(text)


def directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"not a directory: {text}")
    return path


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text!r}")
    return int(text)


def hostname(text: str) -> str:
    if not text.strip() or any(not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError(f"not a usable host name: {text!r}")
    return text


def duration(text: str) -> float:
    """Seconds, or a number with s, m or h: 900, 15m, 1h."""
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], 1) if text else 1
    number = text[:-1] if text[-1:] in ("s", "m", "h") else text
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 900, 15m, 1h)") from None
    if not 60 <= value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"must be between 1 minute and 7 days, not {text}")
    return value


def pid(text: str) -> int:
    # isascii: "²" is a digit to str.isdigit() but not to int()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a process id: {text!r}")
    return int(text)


def attach_timeout(text: str) -> float:
    """How long `gputui attach` gives the debugger and the agent's first answer: long enough for a busy
    process to reach a safe point, short enough that a hung debugger is not left holding a job."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be between 1 and 60 seconds, not {text}")
    return value


def prometheus_url(text: str) -> str:
    from gputui.export.promql import check_url

    try:
        return check_url(text)
    except ValueError as err:  # its message never repeats a password; argparse's own would
        raise argparse.ArgumentTypeError(str(err)) from None
