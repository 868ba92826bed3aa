"""`gputui agent install --python PATH` puts the start-up hook into the *training* environment, which has
no gputui of its own; `gputui run` gives a job only the agent. Both with real virtual environments."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gputui
from gputui.agent import hook, protocol
from gputui.collect.agents import client as agents
from tests.users import NOBODY, become

GPUTUI_SITE = str(Path(gputui.__file__).resolve().parent.parent)
# Run in the job: where its modules come from, and whether its agent answers the monitor.
PROBE = textwrap.dedent("""
    import json, os, sys
    try:
        import psutil
        psutil_from = psutil.__file__
    except ImportError:
        psutil_from = None
    server = sys.modules.get("gputui.agent.server")
    agent = server and server._agent
    print(json.dumps({"pid": os.getpid(), "path": sys.path, "psutil": psutil_from,
                      "socket": str(agent.path) if agent and agent.path else None}), flush=True)
    sys.stdin.readline()  # until the test has asked the agent
""")


@pytest.fixture(scope="module")
def job_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training environment of its own: no gputui, no psutil (it is not gputui's)."""
    root = tmp_path_factory.mktemp("job") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    return root / "bin" / "python"


@pytest.fixture
def installed(job_env: Path) -> Iterator[hook.Environment]:
    env = hook.environment(str(job_env))
    try:
        yield env
    finally:
        hook.uninstall(env)


def agent_cli(*args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """`gputui agent ARGS` run as a command, its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "gputui", "agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        **options,
    )


def probe(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Start the job, read what it says about itself, ask its agent (if any), let it go."""
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        seen = json.loads(proc.stdout.readline() or "null") or {}
        if seen.get("socket"):
            report = agents.AgentPoller(Path(seen["socket"]).parent).poll().get(seen["pid"])
            seen["answered"] = bool(report and report.ok)
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=30)
        seen["stderr"] = err
        seen["returncode"] = proc.returncode
        return seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        with contextlib.suppress(OSError):
            protocol.socket_path(proc.pid).unlink()


def test_run_gives_a_job_in_another_environment_only_the_agent(job_env: Path) -> None:
    seen = probe([sys.executable, "-m", "gputui", "run", "--", str(job_env), "-c", PROBE], dict(os.environ))
    assert seen["returncode"] == 0, seen["stderr"]
    assert seen["psutil"] is None, "psutil came from gputui's environment"
    assert not any(p.startswith(GPUTUI_SITE) for p in seen["path"] if not p.endswith("/autostart")), seen[
        "path"
    ]
    assert not any(
        "site-packages" in p and not p.startswith(str(job_env.parent.parent)) for p in seen["path"]
    )
    assert seen["answered"] is True, seen
    assert "agent not started" not in seen["stderr"]


def test_install_into_another_environment(installed: hook.Environment, job_env: Path) -> None:
    assert hook.status(installed) == "not installed"
    assert installed.purelib.is_relative_to(job_env.parent.parent)
    path = hook.install(installed)
    assert path == installed.purelib / hook.NAME and hook.status(installed) == "installed"
    plain = {k: v for k, v in os.environ.items() if k not in ("GPUTUI_AGENT", "PYTHONPATH")}
    seen = probe([str(job_env), "-c", PROBE], {**plain, "GPUTUI_AGENT": "1"})
    assert seen["returncode"] == 0, seen["stderr"]
    assert seen["answered"] is True and seen["psutil"] is None, seen
    assert seen["stderr"] == ""
    # Without the variable the hook does nothing at all.
    seen = probe([str(job_env), "-c", PROBE], plain)
    assert seen["socket"] is None and seen["stderr"] == ""
    assert hook.uninstall(installed) == path and not path.exists()
    assert hook.uninstall(installed) is None


def test_a_hook_whose_gputui_is_gone_says_so_and_the_job_runs(
    installed: hook.Environment, job_env: Path
) -> None:
    installed.hook.write_text(hook.line(installed.purelib / "no-such-gputui" / "gputui_boot.py"))
    assert hook.status(installed).startswith("installed by another gputui")
    env = {**os.environ, "GPUTUI_AGENT": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run([str(job_env), "-c", "print('trained')"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "trained\n"
    assert result.stderr.startswith("gputui agent not started: ") and len(result.stderr.splitlines()) == 1


def test_the_cli_names_the_python_it_installed_into(installed: hook.Environment, job_env: Path) -> None:
    result = agent_cli("install", "--python", str(job_env))
    assert result.returncode == 0, result.stderr
    assert (
        str(installed.hook) in result.stdout
        and str(job_env) in result.stdout
        and "Python 3." in result.stdout
    )
    status = agent_cli("status", "--python", str(job_env))
    assert status.stdout.startswith("installed: "), status


def test_without_python_it_takes_the_one_on_path_and_says_so(tmp_path: Path, job_env: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(job_env)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = agent_cli("status", env=env)
    assert result.returncode == 0, result.stderr
    assert str(bin_dir / "python") in result.stdout and "the `python` on PATH" in result.stdout
    assert "--python" in result.stdout


@pytest.mark.parametrize(
    "python, why",
    [("/bin/false", "not a Python interpreter"), ("/no/such/python", "cannot run /no/such/python")],
)
def test_what_is_not_a_usable_python_is_one_line(python: str, why: str) -> None:
    result = agent_cli("install", "--python", python)
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and why in result.stderr, result.stderr


def test_an_old_python_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "python3.8"
    answer = {"purelib": str(tmp_path), "version": [3, 8, 18], "prefix": str(tmp_path)}
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    fake.chmod(0o755)
    with pytest.raises(hook.HookError, match=r"needs Python 3\.10 or later"):
        hook.environment(str(fake))


def test_without_write_access_one_line(installed: hook.Environment) -> None:
    """As another user, whose environment it is not: one line that says why and what to do."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            become(NOBODY)
            hook.install(installed)
        except hook.HookError as err:
            os.write(write_end, str(err).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end) as said:
        line = said.read()
    assert os.waitstatus_to_exitcode(status) == 1
    assert line.startswith(f"cannot write {installed.hook}: Permission denied") and "\n" not in line
    assert "--python" in line
    assert not installed.hook.exists()
