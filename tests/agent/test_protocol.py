"""The wire protocol: versioned NDJSON objects, bounded in size; the private per-user runtime directory."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gputui.agent import protocol
from gputui.agent.protocol import MAX_MESSAGE, VERSION, ProtocolError, decode, encode

NOBODY = 65534


# -- encode / decode ------------------------------------------------------------------------------


def test_round_trip() -> None:
    message = {"op": "stats", "nested": {"a": [1, 2.5, None, True]}, "text": "ünïcode ✓"}
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line.rstrip(b"\n")) == {"v": VERSION, **message}
    assert decode(line) == {"v": VERSION, **message}  # a trailing newline is whitespace to JSON


def test_encode_is_compact_and_stringifies_the_unserializable() -> None:
    line = encode({"op": "hello", "path": Path("/x/y")})
    assert b" " not in line
    assert json.loads(line) == {"v": VERSION, "op": "hello", "path": "/x/y"}


@pytest.mark.parametrize(
    "line",
    [
        b'{"op":"hello"}',  # no version
        b'{"v":2,"op":"hello"}',  # a newer one
        b'{"v":0,"op":"hello"}',
        b'{"v":"1","op":"hello"}',  # the right number, as a string
        b'{"v":null,"op":"hello"}',
    ],
)
def test_version_mismatch(line: bytes) -> None:
    with pytest.raises(ProtocolError, match="version"):
        decode(line)


@pytest.mark.parametrize("line", [b"[1,2,3]", b'"hello"', b"42", b"null", b"true", b'[{"v":1}]'])
def test_not_an_object(line: bytes) -> None:
    with pytest.raises(ProtocolError, match="not a JSON object"):
        decode(line)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"   ",
        b"{",
        b'{"v":1,',
        b"{'v': 1}",
        b"garbage",
        b"\x00\x01\x02",
        b"\xff\xfe\xfd",  # invalid UTF-8
        b'{"v":1,"op":"\xc3("}',  # invalid UTF-8 inside a string
        b'{"v":1}{"v":1}',  # two objects on one line
        b'{"v":1,"n":' + b"9" * 5000 + b"}",  # an integer past Python's digit limit
    ],
)
def test_invalid_json(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(line)


def test_oversize() -> None:
    padding = "x" * MAX_MESSAGE
    line = encode({"op": "hello", "pad": padding})
    with pytest.raises(ProtocolError, match="too large"):
        decode(line)
    # Just at the limit is still fine.
    base = len(encode({"op": "hello", "pad": ""}).rstrip(b"\n"))
    exact = encode({"op": "hello", "pad": "x" * (MAX_MESSAGE - base)}).rstrip(b"\n")
    assert len(exact) == MAX_MESSAGE
    assert decode(exact)["op"] == "hello"
    with pytest.raises(ProtocolError, match="too large"):
        decode(exact + b" ")


def test_protocol_error_is_a_value_error() -> None:
    assert issubclass(ProtocolError, ValueError)


def test_deeply_nested_json_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        decode(b"[" * 50_000)


# -- runtime_dir ----------------------------------------------------------------------------------


def test_candidates_are_tmp_then_run_user_whatever_xdg_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The agent and the monitor must meet: neither follows XDG_RUNTIME_DIR, which one side may have set
    and the other not (sudo, systemd services, SLURM)."""
    for xdg in (str(tmp_path), ""):
        monkeypatch.setenv("XDG_RUNTIME_DIR", xdg)
        assert protocol.candidate_dirs(1234) == (Path("/tmp/gputui-1234"), Path("/run/user/1234/gputui"))
    assert protocol.candidate_dirs()[0] == Path(f"/tmp/gputui-{os.getuid()}")


@pytest.fixture
def candidates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "tmp-gputui", tmp_path / "run-user" / "gputui"
    (tmp_path / "run-user").mkdir()
    monkeypatch.setattr(protocol, "candidate_dirs", lambda uid=None: (first, second))
    return first, second


def test_runtime_dir_is_the_first_candidate_of_that_user(candidates: tuple[Path, Path]) -> None:
    first, _ = candidates
    assert protocol.runtime_dir() == first  # neither exists yet: where an agent will make it
    assert protocol.private_dir() == first
    assert protocol.runtime_dir() == first
    assert protocol.socket_path(7) == first / "7.sock"


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory owned by another uid")
def test_a_taken_tmp_directory_falls_back_to_run_user(candidates: tuple[Path, Path]) -> None:
    """Another user made /tmp/gputui-<uid> first: the agent goes to /run/user/<uid>/gputui, untouched."""
    first, second = candidates
    first.mkdir()
    os.chmod(first, 0o777)
    os.chown(first, NOBODY, NOBODY)
    assert protocol.private_dir() == second
    assert protocol.runtime_dir() == second
    assert first.stat().st_uid == NOBODY and _mode(first) == 0o777  # not taken over, not chmodded


def test_a_symlinked_candidate_is_passed_over(candidates: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = candidates
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    first.symlink_to(tmp_path / "elsewhere")
    assert protocol.private_dir() == second
    assert protocol.runtime_dir() == second


def test_no_usable_candidate_says_why_for_each(candidates: tuple[Path, Path]) -> None:
    first, second = candidates
    first.write_text("a file")
    second.parent.rmdir()  # /run/user/<uid> absent: never created by the agent
    with pytest.raises(PermissionError) as caught:
        protocol.private_dir()
    assert str(first) in str(caught.value) and str(second) in str(caught.value)
    assert not second.parent.exists()


def test_trusted_dir_wants_owner_and_no_group_or_world_write(tmp_path: Path) -> None:
    path = tmp_path / "d"
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    assert protocol.trusted_dir(path.lstat(), os.getuid())
    assert not protocol.trusted_dir(path.lstat(), os.getuid() + 1)
    for loose in (0o775, 0o757, 0o1777):
        os.chmod(path, loose)
        assert not protocol.trusted_dir(path.lstat(), os.getuid())
    (tmp_path / "link").symlink_to(path)
    os.chmod(path, 0o700)
    assert not protocol.trusted_dir((tmp_path / "link").lstat(), os.getuid())


@pytest.mark.parametrize(
    ("name", "pid"),
    [
        ("4242.sock", 4242),
        ("2.sock", 2),
        ("1.sock", None),
        ("0.sock", None),
        ("007.sock", None),  # init, no pid, not how a pid is written
        ("\u00b2.sock", None),
        ("\u0663\u0664.sock", None),  # '²' and Arabic-Indic digits: isdigit() true
        ("12", None),
        ("12.sock.tmp", None),
        (".sock", None),
        ("-5.sock", None),
        (" 5.sock", None),
        ("99999999999.sock", None),
    ],
)
def test_pid_of_a_socket_name(name: str, pid: int | None) -> None:
    assert protocol.pid_of(name) == pid


def test_socket_path_in_a_directory(tmp_path: Path) -> None:
    assert protocol.socket_path(42, tmp_path) == tmp_path / "42.sock"


# -- private_dir ----------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_private_dir_creates_0700(tmp_path: Path) -> None:
    path = tmp_path / "run"
    old = os.umask(0)  # even with a permissive umask
    try:
        assert protocol.private_dir(path) == path
    finally:
        os.umask(old)
    assert path.is_dir() and _mode(path) == 0o700
    assert path.stat().st_uid == os.getuid()


def test_private_dir_creates_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "run"
    assert protocol.private_dir(path) == path
    assert _mode(path) == 0o700


def test_private_dir_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "run"
    protocol.private_dir(path)
    (path / "keep").write_text("x")
    assert protocol.private_dir(path) == path
    assert (path / "keep").read_text() == "x"
    assert _mode(path) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o755, 0o711, 0o701, 0o770])
def test_private_dir_fixes_a_too_open_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "run"
    path.mkdir()
    os.chmod(path, mode)
    protocol.private_dir(path)
    assert _mode(path) == 0o700


def test_private_dir_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("not a directory")
    with pytest.raises((PermissionError, FileExistsError)):
        protocol.private_dir(path)


def test_private_dir_refuses_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "run"
    link.symlink_to(target)
    with pytest.raises(PermissionError):
        protocol.private_dir(link)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory owned by another uid")
def test_private_dir_refuses_another_users_dir(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="not a directory of ours"):
        protocol.private_dir(path)
    assert path.stat().st_uid == NOBODY  # left alone: neither taken over nor chmodded
    assert _mode(path) == 0o700
