"""Which debugger attaches: gdb, else cuda-gdb (a CUDA box often has it alone, on PATH or in
/usr/local/cuda/bin), else lldb; and the attach names the one it used. The real one: cuda-gdb as a link to
this machine's gdb, with gdb and lldb out of PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputui.actions.attach import Plan, Refusal, attach, check, preflight
from gputui.collect.agents.client import AgentPoller
from tests.helpers import ready_loop

GDB = shutil.which("gdb")


def tools(directory: Path, *names: str) -> Path:
    """A directory of programs that do nothing, named `names`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\nexit 1\n")
        path.chmod(0o755)
    return directory


@pytest.fixture
def path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """PATH is one empty directory; CUDA's directory another (both filled by the tests)."""
    on_path = tools(tmp_path / "path")
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setattr(preflight, "CUDA_BIN", str(tools(tmp_path / "cuda" / "bin")))
    return on_path


def test_gdb_comes_first(path: Path) -> None:
    tools(path, "gdb", "cuda-gdb", "lldb")
    assert preflight.debugger() == ("gdb", str(path / "gdb"))


def test_cuda_gdb_when_there_is_no_gdb(path: Path) -> None:
    tools(path, "cuda-gdb", "lldb")
    assert preflight.debugger() == ("cuda-gdb", str(path / "cuda-gdb"))


def test_cuda_gdb_in_cudas_own_directory(path: Path) -> None:
    """Not on PATH (root's PATH seldom has it): /usr/local/cuda/bin. As root only where nobody else may write
    (a directory under /tmp is not such a place), as anyone else wherever it is."""
    cuda = Path(preflight.CUDA_BIN)
    tools(cuda, "cuda-gdb")
    tools(path, "lldb")
    assert preflight.debugger(me=1000) == ("cuda-gdb", str(cuda / "cuda-gdb"))
    assert preflight.debugger(me=0) == ("lldb", str(path / "lldb"))


def test_no_debugger_names_them_all(path: Path) -> None:
    with ready_loop([sys.executable, "-I"]) as proc:
        refusal = check(proc.pid)
        if isinstance(refusal, Refusal) and "ptrace" in refusal.reason:
            pytest.skip(refusal.reason)
        assert isinstance(refusal, Refusal), refusal
        assert (
            "needs a debugger (gdb, cuda-gdb or lldb)" in refusal.reason
            and "apt install gdb" in refusal.reason
        )


# -- for real ----------------------------------------------------------------------------------------


def _ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with ready_loop([sys.executable, "-I"], cwd=tmp_path) as proc:
        yield proc


@pytest.mark.skipif(
    GDB is None or (os.geteuid() != 0 and _ptrace_scope() > 0),
    reason="needs gdb (apt install gdb), and root or kernel.yama.ptrace_scope=0",
)
def test_attach_through_cuda_gdb(path: Path, loop: subprocess.Popen[str]) -> None:
    """cuda-gdb takes gdb's command line (-nx, --batch, -iex, -p, -x): here it is gdb under that name."""
    assert GDB is not None
    (path / "cuda-gdb").symlink_to(GDB)
    assert shutil.which("gdb") is None and shutil.which("lldb") is None
    plan = check(loop.pid)
    assert isinstance(plan, Plan) and plan.mechanism == "cuda-gdb" and plan.tool == str(path / "cuda-gdb"), (
        plan
    )
    assert "cuda-gdb pauses it for a moment" in plan.describe()
    outcome = attach(loop.pid)
    assert outcome.ok, outcome.message
    assert outcome.message == f"attached to pid {loop.pid} with cuda-gdb"
    report = AgentPoller().report(loop.pid)
    assert report is not None and report.ok
    assert loop.poll() is None
