"""The oldest versions gputui declares it works with, read from the installed package's own metadata.

`make test-min` installs gputui (without dependencies) into .venv-min, then asks this script for a
requirements file that pins every runtime dependency, and those of the extras it names, to its declared
floor (`>=X` becomes `==X`), plus the test extra as declared. The pins come from the same metadata a
wheel carries, so they cannot drift from pyproject.toml. `--check` then verifies that what pip
installed is exactly those floors.

    python tests/minimum_versions.py --extra prometheus > requirements.txt
    python tests/minimum_versions.py --extra prometheus --check
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from dataclasses import dataclass

PACKAGE = "gputui"
TEST_EXTRA = "test"
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*\(?([^;)]*)\)?\s*$")
_EXTRA_MARKER = re.compile(r"""^\s*extra\s*==\s*["']([^"']+)["']\s*$""")


@dataclass(frozen=True)
class Requirement:
    name: str
    specifiers: tuple[str, ...]
    extra: str | None  # None: a runtime dependency

    @property
    def floor(self) -> str:
        """The version after `>=`: every dependency we pin must declare one."""
        floors = [s[2:].strip() for s in self.specifiers if s.startswith(">=")]
        if len(floors) != 1:
            raise SystemExit(f"{self.name}: no single `>=` floor in {','.join(self.specifiers) or 'nothing'}")
        return floors[0]

    @property
    def line(self) -> str:
        """The requirement as declared, for pip."""
        return self.name + ",".join(self.specifiers)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(line: str) -> Requirement:
    """One Requires-Dist line. Only `extra == "..."` markers are understood: any other marker would make
    a pin that holds on some machines only, so it is refused rather than guessed at."""
    spec, _, marker = line.partition(";")
    extra = None
    if marker.strip():
        match = _EXTRA_MARKER.match(marker)
        if match is None:
            raise SystemExit(f"unsupported marker in {line!r}: teach tests/minimum_versions.py about it")
        extra = normalized(match.group(1))
    found = _REQUIREMENT.match(spec)
    if found is None:
        raise SystemExit(f"cannot read requirement {line!r}")
    name, _extras, specifiers = found.groups()
    parts = tuple(s.strip().replace(" ", "") for s in specifiers.split(",") if s.strip())
    return Requirement(normalized(name), parts, extra)


def declared() -> list[Requirement]:
    return [parse(line) for line in importlib.metadata.requires(PACKAGE) or []]


def pinned(requirements: list[Requirement], extras: set[str]) -> list[Requirement]:
    """The runtime dependencies and those of `extras`, not gputui itself (the dev extra names it)."""
    return [r for r in requirements if (r.extra is None or r.extra in extras) and r.name != PACKAGE]


def requirements_file(requirements: list[Requirement], extras: set[str]) -> list[str]:
    pins = pinned(requirements, extras)
    pinned_names = {r.name for r in pins}
    tools = [r.line for r in requirements if r.extra == TEST_EXTRA and r.name not in pinned_names]
    return [f"{r.name}=={r.floor}" for r in pins] + tools


def same_version(a: str, b: str) -> bool:
    """0.20 and 0.20.0 are one version (PEP 440); anything but plain release numbers compares as text."""
    plain = re.compile(r"^\d+(\.\d+)*$")
    if not (plain.match(a) and plain.match(b)):
        return a == b
    ours, theirs = [int(p) for p in a.split(".")], [int(p) for p in b.split(".")]
    width = max(len(ours), len(theirs))
    return ours + [0] * (width - len(ours)) == theirs + [0] * (width - len(theirs))


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check(requirements: list[Requirement], extras: set[str]) -> int:
    """Print each pinned dependency with its floor and what is installed; 1 when any differs."""
    wrong = 0
    for r in pinned(requirements, extras):
        have = installed_version(r.name)
        same = have is not None and same_version(have, r.floor)
        wrong += not same
        print(f"{'ok  ' if same else 'DIFF'} {r.name:<20} floor {r.floor:<12} installed {have}")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--extra", action="append", default=[], help="also pin this extra's dependencies")
    ap.add_argument("--check", action="store_true", help="verify the installed versions are the floors")
    args = ap.parse_args(argv)
    extras = {normalized(e) for e in args.extra}
    requirements = declared()
    unknown = extras - {r.extra for r in requirements if r.extra}
    if unknown:
        raise SystemExit(f"{PACKAGE} declares no extra {', '.join(sorted(unknown))}")
    if args.check:
        return check(requirements, extras)
    print("\n".join(requirements_file(requirements, extras)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
