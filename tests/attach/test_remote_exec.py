"""The Python 3.14 path up to the interpreter: what gputui asks the target's own interpreter to run, and how
its failures read. (A real 3.14 target is tested in test_attach_real.py where one is installed.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gputui.actions.attach import Plan
from gputui.actions.attach.preflight import _root_only
from gputui.actions.attach.run import bootstrap, run_remote_exec


def fake_python(tmp_path: Path, exit_code: int = 0, stderr: str = "") -> Path:
    """An 'interpreter' that writes down how it was called, then exits as told."""
    log = tmp_path / "called.json"
    fake = tmp_path / "python3.14"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"json.dump(sys.argv[1:], open({str(log)!r}, 'w'))\n"
        f"sys.stderr.write({stderr!r})\n"
        f"sys.exit({exit_code})\n"
    )
    fake.chmod(0o755)
    return fake


def plan(tool: Path) -> Plan:
    return Plan(4242, os.getuid(), "alice", str(tool), (3, 14), "remote_exec", str(tool))


def test_the_targets_interpreter_queues_the_bootstrap_isolated(tmp_path: Path) -> None:
    boot = tmp_path / "gputui" / "agent" / "autostart" / "gputui_boot.py"
    boot.parent.mkdir(parents=True)
    tool = fake_python(tmp_path)
    outcome = run_remote_exec(plan(tool), boot, timeout=10)
    assert outcome.ok and "sys.remote_exec" in outcome.message
    args = json.loads((tmp_path / "called.json").read_text())
    assert args[:3] == ["-I", "-S", "-c"]  # no user site, no .pth: gputui may be root
    script = boot.parent / "attach_remote.py"
    assert args[3] == f"import sys; sys.remote_exec(4242, {str(script)!r})"
    assert script.read_text().strip() == bootstrap(boot)


def test_its_failure_is_one_line(tmp_path: Path) -> None:
    boot = tmp_path / "boot.py"
    tool = fake_python(
        tmp_path, 1, "Traceback ...\nRuntimeError: Remote debugging is not enabled in the remote process\n"
    )
    outcome = run_remote_exec(plan(tool), boot, timeout=10)
    assert not outcome.ok
    assert (
        outcome.message
        == "sys.remote_exec failed: RuntimeError: Remote debugging is not enabled in the remote process"
    )


def test_root_runs_only_an_interpreter_nobody_else_can_write(tmp_path: Path) -> None:
    assert _root_only(Path("/usr/bin/env"))  # root's, in root's directories, writable by root alone
    writable = tmp_path / "python3.14"
    writable.write_text("")
    assert not _root_only(writable)  # under /tmp (1777): another user could have put it there
    assert not _root_only(tmp_path / "missing")
