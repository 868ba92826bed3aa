"""`sudo gputui agent status|install|uninstall --python ~alice/venv/bin/python`: root never runs alice's code
(her interpreter, the .pth files of her site-packages) as root, never reads or writes a file through a
path she controls, and believes nothing her interpreter prints without checking it. `nobody` plays alice.

Each environment is a directory of its own in /tmp (pytest's directories are 0700: nobody could not reach
them), removed afterwards."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gputui.agent import hook
from tests.agent.test_hook import agent_cli
from tests.users import NOBODY, alice_fixture, top_fixture  # noqa: F401 - the fixtures alice and top

IS_ROOT = os.geteuid() == 0
NEEDS_ROOT = pytest.mark.skipif(not IS_ROOT, reason="plays another user (chown, setuid): needs root")
SYSTEM_PYTHON = "/usr/bin/python3"  # a real interpreter that nobody may run (the test venv's is in /root)
VERSION = [3, 11, 7]


def _no_account() -> int:
    """A uid without a passwd entry."""
    for uid in range(4242, 5242):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("no free uid")


def chown_tree(root: Path, uid: int, gid: int | None = None) -> None:
    """`chown -hR`: links themselves, never what they point to."""
    gid = uid if gid is None else gid
    os.lchown(root, uid, gid)
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(where, name), uid, gid)


def fake_python(venv: Path, marker: Path, answer: dict[str, Any] | None = None, *, cfg: bool = True) -> Path:
    """A venv whose `python` is a shell script: it appends the uid it runs as to `marker`, then answers
    as an interpreter would (or with `answer`)."""
    purelib = venv / "lib" / "python3.11" / "site-packages"
    purelib.mkdir(parents=True)
    if cfg:
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n")
    answer = answer or {"purelib": str(purelib), "version": VERSION, "prefix": str(venv)}
    python = venv / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\nid -u >> '{marker}'\necho '{json.dumps(answer)}'\n")
    python.chmod(0o755)
    return python


def ran_as(marker: Path) -> list[int]:
    return [int(uid) for uid in marker.read_text().split()] if marker.exists() else []


@pytest.fixture
def victim(top: Path) -> Path:
    """A root-only file in a root-owned directory: what alice would like root to overwrite."""
    path = top / "root-only"
    path.write_text("precious\n")
    path.chmod(0o600)
    return path


# -- the interpreter runs as the environment's owner ---------------------------------------------------


@NEEDS_ROOT
def test_root_runs_a_users_interpreter_only_as_that_user(alice: Path) -> None:
    marker = alice / "ran-as"
    python = fake_python(alice / "venv", marker)
    chown_tree(alice, NOBODY)
    env = hook.environment(str(python))
    assert ran_as(marker) == [NOBODY]
    assert env.owner == NOBODY and env.purelib == alice / "venv" / "lib" / "python3.11" / "site-packages"
    assert env.owner_name == "nobody"


@NEEDS_ROOT
@pytest.mark.parametrize("whose", ["venv", "pyvenv.cfg", "bin", "link"])
def test_any_part_of_the_environment_makes_it_the_users(top: Path, whose: str) -> None:
    """The interpreter is root's, but the venv directory, its pyvenv.cfg, its bin directory, or the link
    `python` is the user's: still the user's environment, run as the user."""
    marker = top / "ran-as"
    marker.touch(mode=0o666)
    marker.chmod(0o666)
    venv = top / "venv"
    python = fake_python(venv, marker)
    real = top / "python-real"
    python.rename(real)
    python.symlink_to(real)
    target = {"venv": venv, "pyvenv.cfg": venv / "pyvenv.cfg", "bin": venv / "bin", "link": python}[whose]
    os.lchown(target, NOBODY, NOBODY)
    env = hook.environment(str(python))
    assert ran_as(marker) == [NOBODY] and env.owner == NOBODY


@NEEDS_ROOT
def test_a_real_venvs_pth_files_never_run_as_root(alice: Path, tmp_path: Path) -> None:
    """The finding itself: -I does not stop `site`, so every .pth of alice's venv ran as root."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON} that another user may run")
    venv = alice / "venv"
    made = subprocess.run(
        [SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], capture_output=True, timeout=120
    )
    if made.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} -m venv failed: {made.stderr.decode(errors='replace')[-200:]}")
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    marker = alice / "pth-ran-as"
    (purelib / "alice.pth").write_text(
        f"import os; open({str(marker)!r}, 'a').write(f'{{os.getuid()}}\\n')\n"
    )
    chown_tree(alice, NOBODY)
    for action in ("status", "install", "status", "uninstall"):
        done = agent_cli(action, "--python", str(python), cwd=tmp_path)
        assert set(ran_as(marker)) == {NOBODY}, f"a .pth of the user's venv ran as root ({action})"
        assert done.returncode == 0, done.stderr
        assert "nobody" in done.stdout, done.stdout
    assert not (purelib / hook.NAME).exists()


# -- files are read and written as the owner, never through a planted link ------------------------------


@NEEDS_ROOT
def test_root_writes_no_file_through_a_link_in_a_users_site_packages(alice: Path, victim: Path) -> None:
    marker = alice / "ran-as"
    python = fake_python(alice / "venv", marker)
    purelib = alice / "venv" / "lib" / "python3.11" / "site-packages"
    # The temporary names of this process (and its next pids), and the hook's own name: links to a
    # root-only file, planted by alice.
    for pid in range(os.getpid(), os.getpid() + 64):
        (purelib / f".{hook.NAME}.{pid}").symlink_to(victim)
    (purelib / hook.NAME).symlink_to(victim)
    chown_tree(alice, NOBODY)
    env = hook.environment(str(python))
    assert hook.status(env) != "installed"
    assert victim.read_text() == "precious\n"
    path = hook.install(env)
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == NOBODY, "the hook was not written by its owner"
    assert path.read_text() == hook.line() and hook.status(env) == "installed"
    assert hook.uninstall(env) == path and not os.path.lexists(path)
    assert victim.read_text() == "precious\n"
    assert set(ran_as(marker)) == {NOBODY}


@NEEDS_ROOT
def test_status_reads_no_root_file_through_a_users_link(alice: Path, victim: Path) -> None:
    """The hook's name, linked by alice to a root-only file holding exactly the hook's line: root must not
    read it for her (it would say "installed": one bit of a file she cannot read)."""
    python = fake_python(alice / "venv", alice / "ran-as")
    victim.write_text(hook.line())
    (alice / "venv" / "lib" / "python3.11" / "site-packages" / hook.NAME).symlink_to(victim)
    chown_tree(alice, NOBODY)
    env = hook.environment(str(python))
    assert hook.status(env) != "installed"


@NEEDS_ROOT
def test_uninstall_removes_a_link_not_what_it_points_to(alice: Path, victim: Path) -> None:
    python = fake_python(alice / "venv", alice / "ran-as")
    (alice / "venv" / "lib" / "python3.11" / "site-packages" / hook.NAME).symlink_to(victim)
    chown_tree(alice, NOBODY)
    env = hook.environment(str(python))
    assert hook.uninstall(env) is not None
    assert victim.read_text() == "precious\n"


# -- refusals: one line, nothing run ---------------------------------------------------------------------


@NEEDS_ROOT
def test_an_owner_without_an_account_is_refused(top: Path) -> None:
    uid = _no_account()
    marker = top / "ran-as"
    python = fake_python(top / "venv", marker)
    chown_tree(top / "venv", uid)
    with pytest.raises(hook.HookError, match=rf"uid {uid}.*run it as") as err:
        hook.environment(str(python))
    assert "\n" not in str(err.value)
    assert ran_as(marker) == []


@NEEDS_ROOT
def test_an_environment_of_two_users_is_refused(top: Path) -> None:
    marker = top / "ran-as"
    python = fake_python(top / "venv", marker)
    chown_tree(top / "venv", NOBODY)
    os.chown(top / "venv" / "pyvenv.cfg", 1, 1)  # daemon
    with pytest.raises(hook.HookError, match=r"nobody.*daemon|daemon.*nobody") as err:
        hook.environment(str(python))
    assert "\n" not in str(err.value)
    assert ran_as(marker) == []


@NEEDS_ROOT
@pytest.mark.parametrize("what", ["venv", "bin", "python", "purelib"])
def test_a_root_environment_that_others_can_write_is_refused(top: Path, what: str) -> None:
    """Root's own files, but a directory on the way (or the interpreter) writable by a group: its members
    could plant code for root to run, or a link for root to write through."""
    marker = top / "ran-as"
    venv = top / "venv"
    python = fake_python(venv, marker)
    purelib = venv / "lib" / "python3.11" / "site-packages"
    target = {"venv": venv, "bin": python.parent, "python": python, "purelib": purelib}[what]
    os.chown(target, 0, NOBODY)
    target.chmod(stat.S_IMODE(target.stat().st_mode) | stat.S_IWGRP)
    with pytest.raises(hook.HookError, match=r"writable by group nogroup|writable by group 65534") as err:
        env = hook.environment(str(python))
        hook.install(env)
    assert "\n" not in str(err.value)
    if what != "purelib":  # refused before it ran
        assert ran_as(marker) == []
    assert not (purelib / hook.NAME).exists()


@NEEDS_ROOT
def test_root_acts_in_a_users_directory_for_no_root_interpreter(top: Path, alice: Path) -> None:
    """Root's interpreter, but it says its packages are in alice's directory: refused, nothing written."""
    purelib = alice / "lib" / "python3.11" / "site-packages"
    purelib.mkdir(parents=True)
    chown_tree(alice, NOBODY)
    python = fake_python(
        top / "venv",
        top / "ran-as",
        {"purelib": str(purelib), "version": VERSION, "prefix": str(alice)},
        cfg=False,
    )
    with pytest.raises(hook.HookError, match="nobody") as err:
        hook.install(hook.environment(str(python)))
    assert "\n" not in str(err.value)
    assert os.listdir(purelib) == []


@NEEDS_ROOT
def test_the_cli_says_whose_environment_it_acted_in(alice: Path) -> None:
    python = fake_python(alice / "venv", alice / "ran-as")
    chown_tree(alice, NOBODY)
    done = agent_cli("install", "--python", str(python))
    assert done.returncode == 0, done.stderr
    assert "nobody" in done.stdout and "installed" in done.stdout
    hook_file = alice / "venv" / "lib" / "python3.11" / "site-packages" / hook.NAME
    assert hook_file.stat().st_uid == NOBODY
    assert ran_as(alice / "ran-as") == [NOBODY]


# -- what the interpreter prints is checked (any user) -----------------------------------------------------


def _answer(venv: Path, **changes: object) -> dict[str, Any]:
    purelib = venv / "lib" / "python3.11" / "site-packages"
    return {"purelib": str(purelib), "version": VERSION, "prefix": str(venv), **changes}


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"purelib": "lib/python3.11/site-packages"}, "not an absolute path"),
        ({"purelib": "/tmp/\x1b]0;pwned\x07/site-packages"}, "not printable"),
        ({"purelib": "/" + "x" * 5000}, "too long"),
        ({"purelib": "/usr/lib/python3/dist-packages"}, "not in its environment"),
        ({"purelib": "{venv}/../../etc"}, "not a plain path"),
        ({"prefix": "/usr", "purelib": "/usr/lib/python3.11/site-packages"}, "not the environment"),
        ({"version": [3, "11", 7]}, "not a Python interpreter"),
        ({"purelib": ["/x"]}, "not a Python interpreter"),
    ],
)
def test_what_the_interpreter_says_is_checked(top: Path, changes: dict[str, Any], why: str) -> None:
    venv = top / "venv"
    changes = {k: v.format(venv=venv) if isinstance(v, str) else v for k, v in changes.items()}
    python = fake_python(venv, top / "ran-as", _answer(venv, **changes))
    with pytest.raises(hook.HookError, match=why) as err:
        hook.environment(str(python))
    assert "\n" not in str(err.value) and str(err.value).isprintable()


def test_an_interpreter_that_says_too_much_is_cut_short(top: Path) -> None:
    """Its answer is a few hundred bytes: gputui reads no more than 64 KiB of it."""
    python = top / "bin" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\nhead -c 10000000 /dev/zero\n")
    python.chmod(0o755)
    with pytest.raises(hook.HookError, match="said too much"):
        hook.environment(str(python))


@NEEDS_ROOT
def test_an_interpreter_beside_a_directory_anyone_can_write_is_refused(top: Path) -> None:
    """/tmp/python: Python looks for pyvenv.cfg in /tmp too, where anyone could put one for root to read."""
    marker = top / "ran-as"
    python = Path(tempfile.mkdtemp(prefix="gputui-hook-", dir="/tmp")) / "python"
    try:
        python.write_text(f"#!/bin/sh\nid -u >> '{marker}'\n")
        python.chmod(0o755)
        with pytest.raises(hook.HookError, match="/tmp is writable by everyone"):
            hook.environment(str(python))
        assert ran_as(marker) == []
    finally:
        shutil.rmtree(python.parent)
