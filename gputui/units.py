"""Formatting of measured values for people. None always renders as "n/a"."""

from __future__ import annotations

NA = "n/a"


def fmt_bytes(n: float | None, digits: int = 1) -> str:
    if n is None:
        return NA
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{digits}f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_pct(v: float | None) -> str:
    return NA if v is None else f"{v:.0f}%"


def fmt_num(v: float | None, unit: str, digits: int = 0) -> str:
    return NA if v is None else f"{v:.{digits}f}{unit}"


def fmt_rate(v: float | None) -> str:
    return NA if v is None else fmt_bytes(v) + "/s"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return NA
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    if s < 86400:
        return f"{s // 3600}:{s % 3600 // 60:02d}h"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
