"""A check's verdict, and the report: text for people, JSON for scripts, an exit code for both."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from gputui.units import printable

OK, WARNING, PROBLEM = "ok", "warning", "problem"
EXIT_OK, EXIT_PROBLEM, EXIT_CANNOT_RUN = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Check:
    area: str  # driver, gpus, cuda, torch, process
    status: str  # ok, warning, problem
    found: str  # what was found, one line
    fix: str = ""  # the concrete thing to do (empty when nothing is wrong)

    def __post_init__(self) -> None:
        # One gate for the text report, the JSON and the D screen: what is found often quotes another
        # user's strings (a process's environment, its parent's name, what its Python printed).
        object.__setattr__(self, "found", printable(self.found))
        object.__setattr__(self, "fix", printable(self.fix))


def ok(area: str, found: str) -> Check:
    return Check(area, OK, found)


def warning(area: str, found: str, fix: str) -> Check:
    return Check(area, WARNING, found, fix)


def problem(area: str, found: str, fix: str) -> Check:
    return Check(area, PROBLEM, found, fix)


def exit_code(checks: Iterable[Check]) -> int:
    return EXIT_PROBLEM if any(c.status == PROBLEM for c in checks) else EXIT_OK


def summary(checks: list[Check]) -> str:
    problems = sum(c.status == PROBLEM for c in checks)
    warnings = sum(c.status == WARNING for c in checks)
    if not problems and not warnings:
        return "nothing wrong found"
    parts = []
    if problems:
        parts.append(f"{problems} problem{'s' * (problems != 1)}")
    if warnings:
        parts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    return ", ".join(parts)


def line(c: Check) -> str:
    """One line: verdict, area, what was found, and the fix."""
    text = f"{c.status.upper() if c.status != OK else 'ok':<8} {c.area:<8} {c.found}"
    return f"{text} — fix: {c.fix}" if c.fix else text


def text(checks: list[Check]) -> str:
    return "\n".join(
        ["gputui doctor: why isn't my GPU being used?", *(line(c) for c in checks), summary(checks)]
    )


def as_json(checks: list[Check]) -> str:
    return json.dumps(
        {
            "checks": [asdict(c) for c in checks],
            "problems": sum(c.status == PROBLEM for c in checks),
            "warnings": sum(c.status == WARNING for c in checks),
            "exit_code": exit_code(checks),
        },
        indent=2,
    )
