"""Stand-in Pythons for the doctor's torch probe: small `#!/bin/sh` executables written to a test's
temporary directory. The doctor runs `PYTHON -c PROBE`; a stand-in ignores its arguments and answers as a
Python with some torch would (one JSON line), or fails the way a broken interpreter does.

They use only shell builtins (and `exec sleep`), so they run with an empty environment too.
"""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path
from typing import Any

# What the probe prints for a healthy CUDA build on one H100 (torch 2.3, CUDA 12.1).
ARCHS_CU121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def write(directory: Path, name: str, body: str) -> str:
    """An executable shell script `name` in `directory`; returns its path."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body.rstrip("\n") + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def printing(directory: Path, doc: dict[str, Any], name: str = "python", before: str = "") -> str:
    """A Python whose probe prints `doc` as its JSON line (after the lines of `before`, if any)."""
    lines = [*before.splitlines(), json.dumps(doc)]
    return write(directory, name, "\n".join(f"printf '%s\\n' {shlex.quote(ln)}" for ln in lines))


def printing_text(directory: Path, text: str, name: str = "python", code: int = 0) -> str:
    """A Python that prints `text` (not the probe's JSON) and exits with `code`."""
    return write(directory, name, f"printf '%s\\n' {shlex.quote(text)}\nexit {code}")


def crashing(directory: Path, stderr: list[str], code: int = 1, name: str = "python") -> str:
    """A Python that writes `stderr` (a traceback, say) and exits with `code`."""
    said = "\n".join(f"printf '%s\\n' {shlex.quote(ln)} >&2" for ln in stderr)
    return write(directory, name, f"{said}\nexit {code}")


def sleeping(directory: Path, seconds: float, name: str = "python") -> str:
    """A Python that hangs (importing torch from a dead network disk, say). `exec` so that killing it on a
    timeout kills the sleep too."""
    return write(directory, name, f"exec sleep {seconds:g}")


def recording(directory: Path, doc: dict[str, Any], name: str = "python") -> tuple[str, Path, Path]:
    """A Python that prints `doc` and records how it was called: its arguments, one a line, in `args`,
    and its environment variable MARK in `mark`. Returns (path, args, mark)."""
    args, mark = directory / f"{name}.args", directory / f"{name}.mark"
    body = (
        f'for a in "$@"; do printf \'%s\\n\' "$a"; done > {shlex.quote(str(args))}\n'
        f"printf '%s' \"${{MARK-unset}}\" > {shlex.quote(str(mark))}\n"
        f"printf '%s\\n' {shlex.quote(json.dumps(doc))}"
    )
    return write(directory, name, body), args, mark


def torch_doc(
    torch: str | None = "2.3.0+cu121",
    cuda: str | None = "12.1",
    *,
    hip: str | None = None,
    available: bool = True,
    device_count: int = 1,
    arch_list: list[str] | None = None,
    capabilities: list[list[int]] | None = None,
    warnings: list[str] | None = None,
    import_error: str | None = None,
    cuda_error: str | None = None,
) -> dict[str, Any]:
    """The JSON line PROBE prints, for the torch described (torch=None: not importable)."""
    doc: dict[str, Any] = {"python": "3.11.7"}
    if torch is None:
        doc["import_error"] = import_error or "ModuleNotFoundError: No module named 'torch'"
        return doc
    doc.update(
        torch=torch,
        cuda=cuda,
        hip=hip,
        available=available,
        device_count=device_count if available else 0,
        arch_list=(ARCHS_CU121 if arch_list is None else arch_list) if cuda else [],
        capabilities=(capabilities if capabilities is not None else [[9, 0]] * device_count)
        if available
        else [],
        warnings=warnings or [],
    )
    if cuda_error is not None:
        doc["cuda_error"] = cuda_error
    return doc
