"""Settings kept between runs (gputui/settings.py): what survives a save and a load, what a bad file
costs (one warning line and the defaults for what is bad, never a traceback), the Python 3.10 reader, and
a save that never loses the old file nor writes into another user's directory."""

from __future__ import annotations

import errno
import inspect
import os
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import pytest

from gputui import settings
from gputui.settings import Settings, SettingsError, TomlSubsetError, load, read_toml_subset, render, save
from tests.users import NOBODY, as_user

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the subset reader is all there is
    tomllib: Any = None
# What a file the reader cannot read is called: TOML's own errors, or the 3.10 reader's narrower subset.
NOT_TOML = "not valid TOML" if tomllib is not None else "not understood on Python 3.10"
NEEDS_TOMLLIB = pytest.mark.skipif(tomllib is None, reason="compared with tomllib (Python 3.11+)")

COLUMNS = ("gpu", "pid", "user", "kinds", "gpu_mem", "sm", "bw", "cpu", "rss", "time", "state", "command")
ALLOWED = {
    "theme": ("textual-dark", "nord", "gruvbox"),
    "layout": ("auto", "panes", "columns", "lines"),
    "sort": COLUMNS,
    "hidden_columns": COLUMNS,
}
# Every field away from its default.
CHANGED = Settings(
    theme="nord",
    layout="lines",
    sort="gpu_mem",
    sort_descending=True,
    interval=0.25,
    zoom=1800.0,
    tree=True,
    folded_workers=False,
    hidden_columns=("bw", "state"),
    gpm="off",
)
IS_ROOT = os.geteuid() == 0


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".config" / "gputui" / "config.toml"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return path


def assert_one_line(warning: str | None, path: Path, *words: str) -> None:
    assert warning is not None
    assert "\n" not in warning and "Traceback" not in warning
    assert str(path) in warning
    assert all(ch.isprintable() for ch in warning), repr(warning)
    for word in words:
        assert word in warning, (word, warning)


# -- the defaults are today's app's ---------------------------------------------------------------------


def test_defaults_are_the_apps() -> None:
    pytest.importorskip("textual")
    from gputui.ui.app import INTERVALS, ZOOMS, GpuTuiApp
    from gputui.ui.widgets.process_rows import BY_KEY, View

    try:  # moving to the base app shared with the fleet view (issue 16)
        from gputui.ui.base_app import DEFAULT_THEME  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        from gputui.ui.app import DEFAULT_THEME  # type: ignore[attr-defined, no-redef, unused-ignore]

    default = Settings()
    view = View()
    assert default.theme == DEFAULT_THEME
    assert default.sort == view.sort and default.tree == view.tree
    # The absolute order of the app's default: the column's natural one, not reversed.
    assert default.sort_descending == (BY_KEY[view.sort].descending != view.reverse)
    assert default.interval == inspect.signature(GpuTuiApp.__init__).parameters["interval"].default
    assert default.interval in INTERVALS and default.zoom == ZOOMS[0]
    assert default.hidden_columns == () and default.layout == "auto"
    assert default.folded_workers  # issue 16: workers folded under their rank by default


def test_every_field_is_away_from_its_default_in_changed() -> None:
    """The round trips below test every field only if CHANGED changes every one."""
    default = asdict(Settings())
    assert all(value != default[key] for key, value in asdict(CHANGED).items())


# -- round trips ----------------------------------------------------------------------------------------


def test_round_trip_of_every_field(config: Path) -> None:
    assert save(CHANGED, config) is None
    assert load(config, ALLOWED) == (CHANGED, None)


@pytest.mark.parametrize("field", [f.name for f in fields(Settings)])
def test_round_trip_of_each_field_alone(config: Path, field: str) -> None:
    one = replace(Settings(), **{field: getattr(CHANGED, field)})
    assert save(one, config) is None
    assert load(config, ALLOWED) == (one, None)
    # Only the changed field is a setting; the others are there as comments.
    assert [line.split(" = ")[0] for line in config.read_text().splitlines() if not line.startswith("#")] == [
        field
    ]


def test_defaults_are_written_as_comments(config: Path) -> None:
    assert save(Settings(), config) is None
    text = config.read_text()
    assert settings.parse_toml(text) == {}
    for f in fields(Settings):
        assert f"# {f.name} = " in text
    assert load(config) == (Settings(), None)


def test_a_missing_file_is_the_defaults_without_a_word(config: Path) -> None:
    assert load(config) == (Settings(), None)
    assert not config.parent.exists()  # reading creates nothing


def test_a_hand_written_file(config: Path) -> None:
    write(config, 'interval = 2  # an int is a number of seconds too\ntheme = "gruvbox"\n\n# a comment\n')
    assert load(config, ALLOWED) == (Settings(interval=2.0, theme="gruvbox"), None)


def test_duplicate_names_are_kept_once(config: Path) -> None:
    write(config, 'hidden_columns = ["bw", "sm", "bw"]\n')
    assert load(config, ALLOWED)[0].hidden_columns == ("bw", "sm")


def test_names_with_quotes_and_backslashes_survive(config: Path) -> None:
    odd = Settings(theme='a "quoted\\" théme 主题', layout="x'y")
    assert save(odd, config) is None
    assert load(config) == (odd, None)
    assert read_toml_subset(config.read_text()) == settings.parse_toml(config.read_text())


# -- bad files: defaults and one warning line -----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("interval = \n", [NOT_TOML]),
        ("[[[\n", [NOT_TOML]),
        (b'theme = "\xff\xfe"\n', ["not UTF-8"]),
        (b"\x00\x01\x02binary", [NOT_TOML]),
        ("# padding\n" * 7000, ["larger than 64 KiB"]),
        ("theme = 'nord'\ntheme = 'nord'\n", [NOT_TOML]),
    ],
)
def test_a_file_that_is_not_settings_is_the_defaults(
    config: Path, content: str | bytes, words: list[str]
) -> None:
    write(config, content)
    loaded, warning = load(config, ALLOWED)
    assert loaded == Settings()
    assert_one_line(warning, config, *words, "using the defaults")


def test_64_kib_is_read_and_one_byte_more_is_not(config: Path) -> None:
    line = 'theme = "nord"\n'
    padding = "#" * (settings.MAX_BYTES - len(line) - 1) + "\n"
    write(config, padding + line)
    assert config.stat().st_size == settings.MAX_BYTES
    assert load(config, ALLOWED) == (Settings(theme="nord"), None)
    write(config, "#" + padding + line)
    assert_one_line(load(config)[1], config, "larger than 64 KiB")


def test_a_directory_is_the_defaults(config: Path) -> None:
    config.mkdir(parents=True)
    loaded, warning = load(config)
    assert loaded == Settings()
    assert_one_line(warning, config, "is a directory")


def test_a_fifo_is_refused_without_blocking(config: Path) -> None:
    config.parent.mkdir(parents=True)
    os.mkfifo(config)
    started = time.monotonic()
    loaded, warning = load(config)
    assert time.monotonic() - started < 2
    assert loaded == Settings()
    assert_one_line(warning, config, "not a regular file")


def test_a_symlinked_file_is_read(config: Path, tmp_path: Path) -> None:
    """Dotfile managers link the config file: reading follows the link (writing replaces it, below)."""
    target = write(tmp_path / "dotfiles" / "gputui.toml", "tree = true\n")
    config.parent.mkdir(parents=True)
    config.symlink_to(target)
    assert load(config) == (Settings(tree=True), None)


def test_an_unreadable_file_is_the_defaults(config: Path) -> None:
    write(config, 'theme = "nord"\n')
    config.chmod(0)
    if not IS_ROOT:
        loaded, warning = load(config)
        assert loaded == Settings()
        assert_one_line(warning, config, "cannot read it", "Permission denied")
        return

    # Root reads anything: the user who cannot read it is played by `nobody`, in a child.
    def load_as_nobody() -> str:
        loaded, warning = load(config)
        return f"{loaded == Settings()}\n{warning}"

    same, warning = as_user(load_as_nobody).split("\n", 1)
    assert same == "True"
    assert_one_line(warning, config, "cannot read it", "Permission denied")


@pytest.mark.parametrize(
    ("line", "key", "words"),
    [
        ('interval = "fast"', "interval", ["not a number of seconds"]),
        ("interval = true", "interval", ["not a number of seconds"]),
        ("interval = 0.05", "interval", ["not from 0.1 to 3600 seconds"]),
        ("interval = 3601", "interval", ["not from 0.1 to 3600 seconds"]),
        ("interval = nan", "interval", ["not from 0.1 to 3600 seconds"]),
        ("interval = inf", "interval", ["not from 0.1 to 3600 seconds"]),
        ("zoom = 10", "zoom", ["not from 60 to 3600 seconds"]),
        ("tree = 1", "tree", ["not true or false"]),
        ('folded_workers = "yes"', "folded_workers", ["not true or false"]),
        ("theme = 3", "theme", ["not a string"]),
        ('theme = ""', "theme", ["not a name"]),
        ('theme = "no such theme"', "theme", ["not one of"]),
        ('layout = "tow-columns"', "layout", ["not one of"]),
        ('sort = "vram"', "sort", ["not one of"]),
        ('hidden_columns = "bw"', "hidden_columns", ["not an array"]),
        ('hidden_columns = ["bw", "vram"]', "hidden_columns", ["'vram' is not one of"]),
        pytest.param("hidden_columns = [1]", "hidden_columns", ["not a string"], marks=NEEDS_TOMLLIB),
        pytest.param("[sort]\ncolumn = 'pid'", "sort", ["is not a string"], marks=NEEDS_TOMLLIB),
        ("colour = 'red'", "unknown key 'colour'", []),
    ],
)
def test_a_bad_value_is_its_default_and_one_line(config: Path, line: str, key: str, words: list[str]) -> None:
    write(config, line + "\n")
    loaded, warning = load(config, ALLOWED)
    assert loaded == Settings()
    assert_one_line(warning, config, key, *words, "using the defaults for what is bad")


def test_each_valid_key_is_kept_when_others_are_bad(config: Path) -> None:
    write(
        config,
        'theme = "nord"\ninterval = -1\nunknown = 1\ntree = true\nlayout = "nope"\nhidden_columns = ["bw"]\n',
    )
    loaded, warning = load(config, ALLOWED)
    assert loaded == Settings(theme="nord", tree=True, hidden_columns=("bw",))
    # The first problem in the file's order, and how many more.
    assert_one_line(warning, config, "interval: -1 is not from 0.1", "(and 2 more)")


def test_names_are_free_without_allowed_values(config: Path) -> None:
    """The command line loads without Textual's theme list: any short printable name passes there."""
    write(config, 'theme = "some-theme"\nsort = "whatever"\n')
    assert load(config) == (Settings(theme="some-theme", sort="whatever"), None)


def test_control_characters_never_reach_the_warning(config: Path) -> None:
    write(config, 'theme = "\\u001b]0;pwned\\u0007"\n')
    loaded, warning = load(config, ALLOWED)
    assert loaded == Settings()
    assert_one_line(warning, config, "theme:", "\\x1b")  # shown escaped, never sent
    assert warning is not None and "\x1b" not in warning and "\x07" not in warning


@NEEDS_TOMLLIB
def test_control_characters_in_a_key_never_reach_the_warning(config: Path) -> None:
    write(config, '"\\u001b[2J\\u0007" = 1\n')
    warning = load(config, ALLOWED)[1]
    assert_one_line(warning, config, "unknown key")
    assert warning is not None and "\x1b" not in warning and "\x07" not in warning


def test_a_long_list_of_known_names_is_cut_in_the_warning(config: Path) -> None:
    themes = tuple(f"theme-{i:02}" for i in range(20))
    write(config, 'theme = "nope"\n')
    warning = load(config, {"theme": themes})[1]
    assert_one_line(warning, config, "theme-00, theme-01", "theme-07, …")
    assert warning is not None and "theme-08" not in warning


def test_a_long_value_is_cut_in_the_warning(config: Path) -> None:
    write(config, f'theme = "{"x" * 60}"\n')
    warning = load(config, ALLOWED)[1]
    assert warning is not None and "x" * 60 not in warning and "…" in warning


def test_allowed_values_for_an_unknown_setting_are_the_callers_mistake(config: Path) -> None:
    with pytest.raises(ValueError, match="allowed values only for"):
        load(config, {"themes": ("nord",)})


def test_settings_refuse_what_load_would_refuse() -> None:
    with pytest.raises(SettingsError):
        Settings(interval=0)
    with pytest.raises(SettingsError):
        Settings(tree=1)  # type: ignore[arg-type]
    normalized = Settings(interval=2, hidden_columns=["bw"])  # type: ignore[arg-type]
    assert normalized.interval == 2.0 and isinstance(normalized.interval, float)
    assert normalized.hidden_columns == ("bw",)
    hash(normalized)


# -- where the file is ----------------------------------------------------------------------------------


def test_default_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert settings.default_path() == tmp_path / "xdg" / "gputui" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # the spec: a relative one is ignored
    assert settings.default_path() == tmp_path / "home" / ".config" / "gputui" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert settings.default_path() == tmp_path / "home" / ".config" / "gputui" / "config.toml"


def test_load_and_save_use_the_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert save(CHANGED) is None
    assert (tmp_path / "xdg" / "gputui" / "config.toml").is_file()
    assert load(allowed=ALLOWED) == (CHANGED, None)


# -- the Python 3.10 reader -----------------------------------------------------------------------------

VALID_SUBSET = [
    render(CHANGED),
    render(Settings()),
    render(Settings(theme='a"b\\c d', hidden_columns=())),
    'a = "x"  # trailing comment\r\nb = 1\r\n',
    "a = 'literal \\ no escapes'\nb = -0\nc = +12\n",
    "a = 1_000\nb = 1.5e3\nc = 2E-2\nd = -inf\ne = nan\nf = +inf\ng = 3.14_15\n",
    'a = []\nb = [ "x" , \'y\', ]\nc = ["\\u00e9\\U0001F600"]\n',
    'a=true\nb =false\n\t c\t=\t"tab"\t\n',
    '"' * 0 + "# only a comment\n\n   \n",
    "",
]


@NEEDS_TOMLLIB
@pytest.mark.parametrize("text", VALID_SUBSET)
def test_the_310_reader_reads_what_tomllib_reads(text: str) -> None:
    expected = tomllib.loads(text)
    got = read_toml_subset(text)
    assert repr(got) == repr(expected)  # repr: nan == nan, and 1 is not 1.0


INVALID_TOML = [
    "a = 01\n",
    "a = 1.\n",
    "a = .5\n",
    "a = truex\n",
    'a = "unterminated\n',
    'a = "bad \\q escape"\n',
    'a = "\\uD800"\n',
    'a = "raw \x1b escape"\n',
    "a = 1\na = 2\n",
    "a = 1 2\n",
    "a = [,]\n",
    'a = ["x" "y"]\n',
    "= 1\n",
    "a 1\n",
]


@pytest.mark.parametrize("text", INVALID_TOML)
def test_the_310_reader_refuses_what_tomllib_refuses(text: str) -> None:
    if tomllib is not None:
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(text)
    with pytest.raises(TomlSubsetError, match=r"^line \d+: "):
        read_toml_subset(text)


BEYOND_THE_SUBSET = [
    "[table]\na = 1\n",
    "a.b = 1\n",
    '"quoted key" = 1\n',
    'a = """multi\nline"""\n',
    'a = [\n  "x",\n]\n',
    "a = [1, 2]\n",
    "a = 1979-05-27\n",
    "a = 0x10\n",
    "a = {b = 1}\n",
]


@pytest.mark.parametrize("text", BEYOND_THE_SUBSET)
def test_the_310_reader_says_what_it_does_not_read(text: str) -> None:
    if tomllib is not None:
        tomllib.loads(text)  # valid TOML, just not what `save` writes
    with pytest.raises(TomlSubsetError, match=r"^line 1: "):
        read_toml_subset(text)


def test_load_through_the_310_reader(monkeypatch: pytest.MonkeyPatch, config: Path) -> None:
    monkeypatch.setattr(settings, "USE_TOMLLIB", False)
    assert save(CHANGED, config) is None
    assert load(config, ALLOWED) == (CHANGED, None)
    write(config, 'theme = "nord"\n[table]\n')
    loaded, warning = load(config, ALLOWED)
    assert loaded == Settings()
    assert_one_line(warning, config, "not understood on Python 3.10: line 2")


@pytest.mark.skipif(sys.version_info >= (3, 11), reason="only Python 3.10 lacks tomllib")
def test_python_310_uses_the_subset_reader(config: Path) -> None:
    assert not settings.USE_TOMLLIB
    assert save(CHANGED, config) is None
    assert load(config, ALLOWED) == (CHANGED, None)


# -- save: atomic, private, only into this user's directory ---------------------------------------------


def test_save_creates_private_directories_and_file(config: Path) -> None:
    assert save(CHANGED, config) is None
    for directory in (config.parent, config.parent.parent, config.parent.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert os.listdir(config.parent) == ["config.toml"]  # no temporary file left behind


def test_save_keeps_an_existing_directorys_mode(config: Path) -> None:
    config.parent.mkdir(parents=True)
    config.parent.chmod(0o755)
    assert save(CHANGED, config) is None
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o755


@pytest.mark.parametrize("failing", ["fsync", "replace", "write"])
def test_a_failed_write_leaves_the_old_file(
    monkeypatch: pytest.MonkeyPatch, config: Path, failing: str
) -> None:
    assert save(CHANGED, config) is None
    before = config.read_bytes()

    def no_space(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if failing == "write":
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, fd: int, mode: str) -> None:
                self.file = real_fdopen(fd, mode)

            def __enter__(self) -> Full:
                return self

            def __exit__(self, *exc: object) -> None:
                self.file.close()

            write = flush = fileno = no_space

        monkeypatch.setattr(os, "fdopen", Full)
    else:
        monkeypatch.setattr(os, failing, no_space)
    warning = save(Settings(), config)
    monkeypatch.undo()
    assert_one_line(warning, config, "not saved", "No space left on device")
    assert config.read_bytes() == before
    assert os.listdir(config.parent) == ["config.toml"]


def test_a_symlinked_file_is_replaced_not_followed(config: Path, tmp_path: Path) -> None:
    target = write(tmp_path / "elsewhere" / "victim", "precious\n")
    config.parent.mkdir(parents=True)
    config.symlink_to(target)
    assert save(CHANGED, config) is None
    assert target.read_text() == "precious\n"
    assert not config.is_symlink() and load(config, ALLOWED) == (CHANGED, None)


def test_the_temporary_file_never_follows_a_symlink(
    monkeypatch: pytest.MonkeyPatch, config: Path, tmp_path: Path
) -> None:
    """A link planted at the temporary name (here made predictable) is never written through."""
    victim = write(tmp_path / "elsewhere" / "victim", "precious\n")
    monkeypatch.setattr(settings, "_temporary_name", lambda name: f".{name}.fixed.tmp")
    config.parent.mkdir(parents=True)
    planted = config.parent / ".config.toml.fixed.tmp"
    planted.symlink_to(victim)
    warning = save(CHANGED, config)
    assert_one_line(warning, config, "not saved", "File exists")
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink() and not config.exists()


def test_save_into_a_path_that_is_a_directory_is_a_warning(config: Path) -> None:
    config.mkdir(parents=True)
    warning = save(CHANGED, config)
    assert_one_line(warning, config, "not saved")
    assert config.is_dir() and os.listdir(config.parent) == ["config.toml"]


def test_save_under_a_file_is_a_warning(tmp_path: Path) -> None:
    blocker = write(tmp_path / "xdg", "a file where a directory should be")
    path = blocker / "gputui" / "config.toml"
    assert_one_line(save(CHANGED, path), path, "not saved", "is not a directory")


def _another_users_directory(tmp_path: Path, name: str) -> Path:
    """A directory this process does not own: chowned to nobody as root, else the root-owned /."""
    if not IS_ROOT:
        return Path("/")
    directory = tmp_path / name
    directory.mkdir()
    os.chown(directory, NOBODY, NOBODY)
    return directory


def test_a_symlinked_config_dir_of_another_user_is_refused(config: Path, tmp_path: Path) -> None:
    theirs = _another_users_directory(tmp_path, "theirs")
    before = sorted(os.listdir(theirs))
    config.parent.parent.mkdir(parents=True)
    config.parent.symlink_to(theirs)
    warning = save(CHANGED, config)
    assert_one_line(
        warning, config, "not saved", f"belongs to uid {theirs.stat().st_uid}", "not to this user"
    )
    assert sorted(os.listdir(theirs)) == before  # neither the file nor a temporary one


def test_a_config_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = _another_users_directory(tmp_path, "gputui")
    path = theirs / "config.toml"
    before = sorted(os.listdir(theirs))
    assert_one_line(save(CHANGED, path), path, "not saved", "not to this user")
    assert sorted(os.listdir(theirs)) == before


def test_nothing_is_created_in_another_users_home(tmp_path: Path) -> None:
    """Root via sudo with the user's HOME: ~/.config/gputui is missing, and is not made by root."""
    home = _another_users_directory(tmp_path, "alice")
    path = home / ".config-gputui-test" / "gputui" / "config.toml"
    assert_one_line(save(CHANGED, path), path, "not saved", "not to this user")
    assert not path.parent.parent.exists()


@pytest.mark.skipif(not IS_ROOT, reason="plays another user: needs root")
def test_another_user_cannot_save_into_roots_directory() -> None:
    """The same rule from the other side: `nobody` with root's config path gets a warning, not a file.
    (Not under tmp_path: pytest's own directories are 0700, and nobody must reach this one to stat it.)"""
    top = Path(tempfile.mkdtemp(prefix="gputui-settings-"))
    try:
        top.chmod(0o755)
        config = top / "gputui" / "config.toml"
        config.parent.mkdir(mode=0o755)
        warning = as_user(lambda: str(save(CHANGED, config)))
        assert_one_line(warning, config, "not saved", "belongs to uid 0", "not to this user")
        assert os.listdir(config.parent) == []
    finally:
        shutil.rmtree(top)


def test_no_textual_no_rich() -> None:
    """The command line reads the settings before (or without) the UI: the module stays standard library."""
    import subprocess

    child = (
        "import sys, gputui.settings; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') "
        "or m.startswith('gputui.ui')))"
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
