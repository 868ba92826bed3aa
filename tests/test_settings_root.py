"""Settings saved by root through sudo with the user's HOME (or XDG_CONFIG_HOME): no link the user planted
on the way is followed, so root creates nothing in a directory of the user's choosing, even a root-owned
one; the refusal is the one warning line of a failed save. `nobody` plays the user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputui import settings
from gputui.settings import Settings, load, save
from tests.users import NOBODY, alice_fixture, as_user, top_fixture  # noqa: F401 - the fixtures alice and top

IS_ROOT = os.geteuid() == 0
NEEDS_ROOT = pytest.mark.skipif(not IS_ROOT, reason="plays another user (lchown): needs root")
CHANGED = Settings(theme="nord", tree=True, interval=0.5)


@pytest.fixture
def roots(top: Path) -> Path:
    """A root-owned directory, e.g. /etc: where alice would like root to create gputui/config.toml."""
    directory = top / "etc"
    directory.mkdir(mode=0o755)
    return directory


def plant(link: Path, target: Path, uid: int = NOBODY) -> None:
    link.symlink_to(target)
    os.lchown(link, uid, uid)


def one_line(warning: str | None, path: Path, *words: str) -> None:
    assert warning is not None and "\n" not in warning and warning.isprintable()
    assert str(path) in warning and "not saved" in warning
    for word in words:
        assert word in warning, (word, warning)


@NEEDS_ROOT
@pytest.mark.parametrize("base", ["home", "xdg"])
def test_root_follows_no_users_link_to_a_root_directory(
    monkeypatch: pytest.MonkeyPatch, alice: Path, roots: Path, base: str
) -> None:
    """~/.config (or $XDG_CONFIG_HOME) is alice's link to a root-owned directory: root made gputui/ and
    wrote config.toml there."""
    if base == "home":
        plant(alice / ".config", roots)
        monkeypatch.setenv("HOME", str(alice))
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    else:
        plant(alice / "xdg", roots)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(alice / "xdg"))
    path = settings.default_path()
    warning = save(CHANGED)
    one_line(warning, path, "symbolic link", f"uid {NOBODY}")
    assert os.listdir(roots) == []


@NEEDS_ROOT
def test_root_follows_no_users_link_to_an_existing_root_directory(alice: Path, roots: Path) -> None:
    (roots / "gputui").mkdir()
    plant(alice / ".config", roots)
    path = alice / ".config" / "gputui" / "config.toml"
    one_line(save(CHANGED, path), path, "symbolic link")
    assert os.listdir(roots / "gputui") == []


@NEEDS_ROOT
def test_a_users_link_deeper_down_is_not_followed_either(alice: Path, roots: Path) -> None:
    """The link is the gputui directory itself, inside alice's own (real) ~/.config."""
    config = alice / ".config"
    config.mkdir()
    os.chown(config, NOBODY, NOBODY)
    plant(config / "gputui", roots)
    path = config / "gputui" / "config.toml"
    one_line(save(CHANGED, path), path)
    assert os.listdir(roots) == []


@NEEDS_ROOT
def test_roots_own_link_is_followed(top: Path, roots: Path) -> None:
    """A link of root's own (/home -> /var/home, a dotfiles link) is root's choice: followed."""
    plant(top / "dotfiles", roots, uid=0)
    path = top / "dotfiles" / "gputui" / "config.toml"
    assert save(CHANGED, path) is None
    assert load(roots / "gputui" / "config.toml")[0] == CHANGED


@NEEDS_ROOT
def test_a_user_follows_their_own_link(top: Path, alice: Path) -> None:
    """alice, not root: her ~/.config may be her link to her dotfiles, and her settings are saved there."""
    dotfiles = alice / "dotfiles"
    dotfiles.mkdir()
    os.chown(dotfiles, NOBODY, NOBODY)
    plant(alice / ".config", dotfiles)
    path = alice / ".config" / "gputui" / "config.toml"
    said = as_user(lambda: str(save(CHANGED, path)))
    assert said == "None"
    saved = dotfiles / "gputui" / "config.toml"
    assert saved.stat().st_uid == NOBODY and load(saved)[0] == CHANGED


@NEEDS_ROOT
def test_the_app_keeps_its_settings_when_the_save_is_refused(alice: Path, roots: Path) -> None:
    """save never raises: the refusal is its one warning line, the settings in memory are untouched."""
    plant(alice / ".config", roots)
    path = alice / ".config" / "gputui" / "config.toml"
    kept = CHANGED
    for _ in range(2):
        one_line(save(kept, path), path)
    assert kept == Settings(theme="nord", tree=True, interval=0.5)
    assert os.listdir(roots) == []
