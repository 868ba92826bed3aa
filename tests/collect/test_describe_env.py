"""The detail's training variables (NCCL_*, RANK, MASTER_ADDR, ...), read from a real process's
/proc/PID/environ: only those names, printable, cut, bounded in number and in bytes read."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from gputui import cells
from gputui.collect.procs.join import MAX_ENV_VALUE, MAX_ENV_VARS, MAX_ENVIRON, describe, read_environ
from gputui.model import ProcessDetail
from tests.helpers import wait_until
from tests.users import become

HOSTILE = "eth0\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b"

# What a torchrun worker might carry, and what it must not show.
TRAINING: dict[str | bytes, str | bytes] = {
    "RANK": "3",
    "NCCL_DEBUG": "INFO",
    "MASTER_ADDR": "10.0.0.1",
    "SECRET_TOKEN": "x",
    "MASTER_PASSWORD": "hunter2",  # MASTER_ADDR and MASTER_PORT are named one by one, not MASTER_*
    "AWS_SECRET_ACCESS_KEY": "hunter3",
    "NCCL_SOCKET_IFNAME": HOSTILE,
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True," + "y" * 10_000,
    b"NCCL_\x1b[31mX": b"\xff\xfe1",  # NCCL_ is a prefix: the rest of the name is anyone's too
}


@contextmanager
def sleeper(env: Mapping[str | bytes, str | bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """A real process started with `env` (and PATH), until the test is done with it."""
    full: dict[str | bytes, str | bytes] = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=full)  # type: ignore[arg-type]
    try:
        assert wait_until(lambda: _started(proc.pid), 5.0)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _started(pid: int) -> bool:
    try:  # until exec() is done, its environ is the parent's
        return "sleep(60)" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def _safe(text: str) -> bool:
    return text.isprintable() and "\x1b" not in text and "\x07" not in text


def detail_of(proc: subprocess.Popen[bytes]) -> ProcessDetail:
    return describe(proc.pid, psutil.Process(proc.pid).create_time(), Path("/dev"))


def describe_as_another_user(pid: int) -> ProcessDetail:
    """describe() of `pid` from a process of another user (`nobody`), which may not read its environ."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to be another user")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child; it reports through the pipe
        code = 1
        try:
            os.close(read)
            become()
            with os.fdopen(write, "wb") as out:
                pickle.dump(describe(pid, None, Path("/dev")), out)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as inp:
        data = inp.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    detail = pickle.loads(data)
    assert isinstance(detail, ProcessDetail)
    return detail


def test_only_the_training_variables_are_kept() -> None:
    with sleeper(TRAINING) as proc:
        d = detail_of(proc)
    assert d.error is None and d.environ_readable
    env = dict(d.training_env)
    assert env["RANK"] == "3" and env["NCCL_DEBUG"] == "INFO" and env["MASTER_ADDR"] == "10.0.0.1"
    assert [name for name, _ in d.training_env] == sorted(env)
    assert set(env) == {
        "RANK",
        "NCCL_DEBUG",
        "MASTER_ADDR",
        "NCCL_SOCKET_IFNAME",
        "PYTORCH_CUDA_ALLOC_CONF",
        "NCCL_?[31mX",
    }
    everything = repr(d)
    for secret in ("SECRET_TOKEN", "MASTER_PASSWORD", "hunter2", "hunter3", "AWS_"):
        assert secret not in everything
    assert d.training_env_more == 0 and not d.environ_cut


def test_hostile_names_and_values_are_printable() -> None:
    with sleeper(TRAINING) as proc:
        d = detail_of(proc)
    for name, value in d.training_env:
        assert _safe(name) and _safe(value), (name, value)
        (name + value).encode("utf-8")  # no surrogates of undecodable bytes left
    env = dict(d.training_env)
    assert env["NCCL_SOCKET_IFNAME"] == "eth0?]0;pwned??]52;c;cHduZWQ=??[2J?"
    assert env["NCCL_?[31mX"] == "\ufffd\ufffd1"


def test_a_long_value_is_cut_to_its_cells() -> None:
    with sleeper(TRAINING) as proc:
        d = detail_of(proc)
    value = dict(d.training_env)["PYTORCH_CUDA_ALLOC_CONF"]
    assert value.startswith("expandable_segments:True,yyy") and value.endswith(cells.ELLIPSIS)
    assert cells.width(value) == MAX_ENV_VALUE


def test_wide_and_zero_width_values_stay_within_the_cells() -> None:
    env: dict[str | bytes, str | bytes] = {"NCCL_WIDE": "字" * 5_000, "NCCL_MARKS": "a" + "\u0301" * 5_000}
    with sleeper(env) as proc:
        d = detail_of(proc)
    shown = dict(d.training_env)
    assert cells.width(shown["NCCL_WIDE"]) <= MAX_ENV_VALUE and shown["NCCL_WIDE"].endswith(cells.ELLIPSIS)
    # Zero cells wide however long: cut by what is decoded, and marked.
    assert len(shown["NCCL_MARKS"]) <= 4 * MAX_ENV_VALUE and shown["NCCL_MARKS"].endswith(cells.ELLIPSIS)


def test_the_number_of_variables_is_bounded() -> None:
    env: dict[str | bytes, str | bytes] = {f"NCCL_VAR_{i:03d}": str(i) for i in range(MAX_ENV_VARS + 36)}
    with sleeper({**env, "RANK": "0"}) as proc:
        d = detail_of(proc)
    assert len(d.training_env) == MAX_ENV_VARS
    assert d.training_env_more == len(env) + 1 - MAX_ENV_VARS
    assert d.training_env[0] == ("NCCL_VAR_000", "0")  # the first of the sorted names


def test_a_huge_environment_is_read_only_up_to_its_bound() -> None:
    # 1.5 MiB of environment (execve() takes up to a quarter of the stack limit): RANK is past the
    # bound, NCCL_DEBUG before it.
    filler: dict[str | bytes, str | bytes] = {f"FILLER_{i}": "z" * 100_000 for i in range(15)}
    assert MAX_ENVIRON < 15 * 100_000  # the filler alone is past the bound
    env: dict[str | bytes, str | bytes] = {"NCCL_DEBUG": "WARN", **filler, "RANK": "7"}
    with sleeper(env) as proc:
        start = time.thread_time()  # CPU time, not wall: the cost, whatever else the box runs
        d = detail_of(proc)
        took = time.thread_time() - start
    assert d.environ_readable and d.environ_cut, d
    assert dict(d.training_env) == {"NCCL_DEBUG": "WARN"}
    assert took < 1.0, f"describe() took {took:.2f} s over a 1.5 MiB environment"


def test_a_variable_cut_by_the_bound_is_left_out(tmp_path: Path) -> None:
    # RANK=12345 straddles the bound: `RANK=12` would be a wrong rank, so it is not shown at all.
    with sleeper({"RANK": "12345"}) as proc:
        data = Path(f"/proc/{proc.pid}/environ").read_bytes()
        start = data.index(b"RANK=12345")
        cut = read_environ(proc.pid, limit=start + len(b"RANK=12"))
        whole = read_environ(proc.pid, limit=start + len(b"RANK=12345\0"))
        exact = read_environ(proc.pid, limit=len(data))
    assert cut is not None and cut.cut and cut.training == ()
    assert whole is not None and dict(whole.training) == {"RANK": "12345"}
    assert exact is not None and not exact.cut and dict(exact.training) == {"RANK": "12345"}


def test_cuda_visible_devices_comes_from_the_same_read() -> None:
    with sleeper({"CUDA_VISIBLE_DEVICES": "1,0", "RANK": "1"}) as proc:
        d = detail_of(proc)
    assert d.cuda_visible_devices == "1,0"
    assert "CUDA_VISIBLE_DEVICES" not in dict(d.training_env)  # it has its own line


def test_another_users_environment_is_not_readable() -> None:
    with sleeper(TRAINING) as proc:
        d = describe_as_another_user(proc.pid)
    assert d.error is None and d.command is not None  # the process is there: its environ is not ours
    assert not d.environ_readable and d.training_env == () and d.cuda_visible_devices is None


def test_a_gone_process_is_gone_not_unreadable() -> None:
    with sleeper({"RANK": "0"}) as proc:
        pid, started = proc.pid, psutil.Process(proc.pid).create_time()
    assert read_environ(pid) is None
    assert describe(pid, started, Path("/dev")).error == "the process is gone"
