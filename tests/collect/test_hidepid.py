"""/proc mounted with hidepid=: another user's GPU process is named as hidden, not as a container's."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path

import pytest

from gputui.analyze.classify import NVML_ONLY, Facts, classify
from gputui.collect.procs import procfs
from gputui.collect.procs.join import ProcessJoiner
from gputui.model import GpuProcess
from tests.users import NOBODY, become

CLONE_NEWNS = 0x00020000


def as_nobody_with_hidepid(result: int) -> None:
    """In a child: a private mount namespace, a fresh /proc with hidepid=2, then nobody joins root's pid."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "proc", "-o", "hidepid=2", "proc", "/proc"], check=True)
    become(NOBODY)
    root_pid = os.getppid()
    rows, _ = ProcessJoiner().join([GpuProcess(gpu=0, pid=root_pid, kinds="C", used_memory=1 << 30)])
    os.write(
        result,
        json.dumps(
            {
                "hidepid": procfs.hidepid(),
                "category": rows[0].category,
                "reason": rows[0].reason,
                "visible": rows[0].visible,
            }
        ).encode(),
    )


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to mount /proc and become another uid")
def test_another_users_process_under_hidepid_is_named_as_such() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            as_nobody_with_hidepid(write_end)
            code = 0
        except Exception as err:  # said through the pipe: the parent skips or fails with it
            os.write(write_end, json.dumps({"error": f"{type(err).__name__}: {err}"}).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    out = json.loads(data)
    if "error" in out:
        pytest.skip(f"cannot mount a private /proc here: {out['error']}")
    assert os.waitstatus_to_exitcode(status) == 0
    assert out["hidepid"] in ("hidepid=2", "hidepid=invisible")
    assert out["visible"] is False and out["category"] == NVML_ONLY
    assert f"hidden from this user by /proc's {out['hidepid']}" in out["reason"]
    assert "container" not in out["reason"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("rw,relatime", None),
        ("rw,hidepid=0", None),
        ("rw,hidepid=off", None),
        ("rw,relatime,hidepid=2", "hidepid=2"),
        ("rw,hidepid=invisible", "hidepid=invisible"),
    ],
)
def test_hidepid_from_the_mount_options(
    tmp_path: Path, options: str, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"sysfs /sys sysfs rw 0 0\nproc /proc proc {options} 0 0\n")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getegid", lambda: 1000)
    monkeypatch.setattr(os, "getgroups", lambda: [1000, 27])
    assert procfs.hidepid(str(mounts)) == expected
    mounts.write_text(f"proc /proc proc {options},gid=27 0 0\n")  # the exempt group sees everything
    assert procfs.hidepid(str(mounts)) is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # and so does root
    mounts.write_text(f"proc /proc proc {options} 0 0\n")
    assert procfs.hidepid(str(mounts)) is None


def test_without_hidepid_an_invisible_pid_is_still_a_container_or_gone() -> None:
    facts = Facts(
        visible=False,
        state=None,
        on_nvml=True,
        devices=None,
        ppid=None,
        parent_name=None,
        parent_on_gpu=False,
        idle_s=None,
    )
    assert "container" in classify(facts)[1]
