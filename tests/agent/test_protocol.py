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


@pytest.mark.parametrize("line", [
    b'{"op":"hello"}',                 # no version
    b'{"v":2,"op":"hello"}',           # a newer one
    b'{"v":0,"op":"hello"}',
    b'{"v":"1","op":"hello"}',         # the right number, as a string
    b'{"v":null,"op":"hello"}',
])
def test_version_mismatch(line: bytes) -> None:
    with pytest.raises(ProtocolError, match="version"):
        decode(line)


@pytest.mark.parametrize("line", [b"[1,2,3]", b'"hello"', b"42", b"null", b"true", b'[{"v":1}]'])
def test_not_an_object(line: bytes) -> None:
    with pytest.raises(ProtocolError, match="not a JSON object"):
        decode(line)


@pytest.mark.parametrize("line", [
    b"", b"   ", b"{", b'{"v":1,', b"{'v': 1}", b"garbage", b"\x00\x01\x02",
    b"\xff\xfe\xfd",                   # invalid UTF-8
    b'{"v":1,"op":"\xc3("}',           # invalid UTF-8 inside a string
    b'{"v":1}{"v":1}',                 # two objects on one line
    b'{"v":1,"n":' + b"9" * 5000 + b"}",  # an integer past Python's digit limit
])
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


def test_runtime_dir_honours_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert protocol.runtime_dir() == tmp_path / "gputui"
    assert protocol.socket_path(123) == tmp_path / "gputui" / "123.sock"


def test_runtime_dir_without_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert protocol.runtime_dir() == Path(f"/tmp/gputui-{os.getuid()}")
    assert protocol.socket_path(7) == Path(f"/tmp/gputui-{os.getuid()}/7.sock")


def test_runtime_dir_ignores_a_missing_xdg_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "absent"))
    assert protocol.runtime_dir() == Path(f"/tmp/gputui-{os.getuid()}")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "")
    assert protocol.runtime_dir() == Path(f"/tmp/gputui-{os.getuid()}")


def test_runtime_dir_of_another_uid_never_uses_our_xdg(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    other = os.getuid() + 1
    assert protocol.runtime_dir(other) == Path(f"/tmp/gputui-{other}")


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
