"""`gputui run -- CMD` starts the agent in the job's Python processes; the sampler picks agents up."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import protocol, server
from gputui.collect.agents import client as agents
from gputui.collect.sampler import Sampler
from gputui.collect.sources.demo import DemoSource

STARTUP_S = 45.0  # importing torch on a loaded CI machine


def gputui_run(*command: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputui", "run", *command],
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts: killed, reaped and their sockets removed whatever happens."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.communicate(timeout=10)
            with contextlib.suppress(OSError):
                protocol.socket_path(p.pid).unlink()


TRAIN = textwrap.dedent("""
    import sys, time
    import torch
    from torch.utils.data import DataLoader
    loader = DataLoader(list(range(64)), batch_size=4)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        for batch in loader:
            time.sleep(0.005)
    print("trained", flush=True)
    time.sleep(120)
""")


def test_run_starts_an_agent_in_the_job(procs: list[subprocess.Popen[str]]) -> None:
    pytest.importorskip("torch")  # the job trains with it
    proc = gputui_run("--", sys.executable, "-c", TRAIN, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs.append(proc)
    path = protocol.socket_path(proc.pid)  # gputui execs: the job keeps its pid
    reply = None
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline and proc.poll() is None:
        if proc.pid in agents.discover():
            assert agents.discover()[proc.pid].path == path
            reply = agents.AgentPoller().poll().get(proc.pid)
            if reply and reply.torch and (reply.progress.batches or 0) > 0:
                break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate(timeout=5)
    assert reply is not None, "no agent answered"
    assert reply.ok and reply.pid == proc.pid
    assert reply.torch, reply
    assert reply.cuda_initialized is False and reply.devices == ()
    assert (reply.progress.batches or 0) > 0, reply.progress
    # Killed without a chance to clean up, its socket stays until discover() sees the process gone.
    assert path.exists()
    proc.kill()
    proc.communicate(timeout=10)  # reaped: no /proc entry left
    assert path.exists()
    assert proc.pid not in agents.discover()
    assert not path.exists()
    assert proc.pid not in agents.AgentPoller().poll()


def test_run_chains_to_an_existing_sitecustomize(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "marker"
    (site / "sitecustomize.py").write_text(
        textwrap.dedent("""
        import os, sys
        with open(os.environ["MARKER"], "a") as f:
            f.write(f"ran agent={os.environ.get('GPUTUI_AGENT')} started={'gputui.agent' in sys.modules}\\n")
    """)
    )
    script = textwrap.dedent("""
        import os
        import gputui.agent.server as s
        from gputui.collect.agents import client as agents
        a = s._agent
        print(a is not None and a.running, a.path if a else None)
        print(agents.AgentPoller(a.path.parent).poll()[os.getpid()].ok)
    """)
    env = {**os.environ, "PYTHONPATH": str(site), "MARKER": str(marker)}
    proc = gputui_run(
        "--", sys.executable, "-c", script, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    procs.append(proc)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    running, path, hello = out.split()
    assert running == "True" and hello == "True"
    assert path == str(protocol.socket_path(proc.pid))
    # The user's sitecustomize ran in `gputui run` itself (its PYTHONPATH is ours) and once in the job,
    # after the agent had started.
    assert marker.read_text().splitlines() == ["ran agent=None started=False", "ran agent=1 started=True"]
    assert not Path(path).exists()  # a normal exit removes the socket (atexit)
    assert "agent not started" not in err


def test_run_without_the_agent_variable_in_our_own_process() -> None:
    """`gputui run` sets GPUTUI_AGENT only for the job; the plain sitecustomize path does nothing."""
    script = "import sys; print('gputui.agent.server' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "GPUTUI_AGENT"}
    autostart = Path(server.__file__).parent / "autostart"
    env["PYTHONPATH"] = str(autostart)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out


@pytest.mark.parametrize("args", [[], ["--"]])
def test_run_without_a_command(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and "no command" in proc.stderr, proc.stderr


def test_run_a_missing_command(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-command")
    for command in (missing, "gputui-no-such-command-xyz"):
        proc = subprocess.run(
            [sys.executable, "-m", "gputui", "run", "--", command, "--flag"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 127
        assert proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "cannot run" in proc.stderr and command in proc.stderr
        assert "Traceback" not in proc.stderr


def test_run_passes_the_exit_status_and_signals_through() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gputui", "run", "--", sys.executable, "-c", "import sys; sys.exit(7)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 7, proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputui",
            "run",
            "--",
            sys.executable,
            "-c",
            "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGTERM, proc.stderr


# -- the sampler ---------------------------------------------------------------------------------


def test_sampler_picks_up_an_agent(tmp_path: Path, module_agent: None) -> None:
    pytest.importorskip("torch")  # the agent reports torch once the process has imported it
    directory = tmp_path / "run"
    agent = server.start(directory=directory)
    assert agent is not None
    sampler = Sampler(DemoSource(gpus=1, workers=0), agents=agents.AgentPoller(directory))
    try:
        sampler.open()
        snap = sampler.tick()
    finally:
        sampler.close()
    assert list(snap.agents) == [os.getpid()]
    reply = snap.agents[os.getpid()]
    assert reply.ok and reply.pid == os.getpid() and reply.torch is not None
    server.stop()
    assert agent.path is not None and not agent.path.exists()
