"""Formatting of measured values for people. None always renders as "n/a"."""

from __future__ import annotations

from functools import lru_cache

NA = "n/a"


def printable(s: str) -> str:
    """User data (command lines, names) with control characters replaced: an escape sequence from a
    process's argv must never reach the terminal."""
    return s if s.isprintable() else "".join(ch if ch.isprintable() else "?" for ch in s)


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@lru_cache(maxsize=256)  # a tick formats each process's memory and RSS again, mostly the same values
def fmt_bytes(n: float | None, digits: int = 1) -> str:
    """At most three digits before the point: 1000 MiB and up is shown in GiB (`1.0 GiB`, not
    `1000.0 MiB`), so a value always fits the column its largest reading fits (`999.9 MiB`)."""
    if n is None:
        return NA
    value = float(n)
    for unit in _UNITS:
        shown = 0 if unit == "B" else digits
        # Decide on the rounded value: 999.97 MiB would print as `1000.0 MiB`.
        if abs(round(value, shown)) < 1000 or unit == _UNITS[-1]:
            return f"{value:.{shown}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_pct(v: float | None) -> str:
    return NA if v is None else f"{v:.0f}%"


def fmt_num(v: float | None, unit: str, digits: int = 0) -> str:
    return NA if v is None else f"{v:.{digits}f}{unit}"


def fmt_duration(seconds: float | None) -> str:
    """Coarse on purpose: it changes once a minute, not every tick (every change is sent over SSH)."""
    if seconds is None or seconds < 0:
        return NA
    m = int(seconds) // 60
    if m < 1:
        return "<1m"
    if m < 60:
        return f"{m}m"
    if m < 24 * 60:
        return f"{m // 60}h{m % 60:02d}m"
    return f"{m // 1440}d{m % 1440 // 60:02d}h"
