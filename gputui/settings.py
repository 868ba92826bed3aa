"""The user's settings, kept between runs in `$XDG_CONFIG_HOME/gputui/config.toml` (else
`~/.config/gputui/config.toml`; `gputui --config PATH` names another file).

Standard library only, no Textual and no Rich: the command line reads it too. The app passes the values
it knows (theme, layout and column names) to `load`, so this module never imports the UI.

- `load` never fails: a missing file is the defaults; a bad one (not TOML, too big, a wrong type or value,
  an unknown key, a directory, unreadable) is the defaults for what is bad, every valid key kept, and ONE
  warning line that names the file and the first problem.
- `save` writes atomically (a temporary file created with O_EXCL|O_NOFOLLOW, fsync, os.replace) into a
  directory created 0700 if missing, and only into a directory this user (the effective uid) owns. The path
  is walked one directory fd at a time (O_NOFOLLOW, mkdir relative to the fd); a symbolic link on the way is
  followed only when it is this user's or root's. It never raises: a failure is one warning line, and the
  app keeps running with the settings it has.
- Run as root through sudo, HOME and XDG_CONFIG_HOME are taken as sudo left them: root's own (sudo -H, or
  the distribution's env_reset) or the invoking user's. Reading the user's file is harmless (every value is
  validated); writing is refused, since the directory's owner is not root: root never creates or replaces
  files in another user's home, nor follows the user's link (`~/.config -> /etc`) to a directory of root's.
- TOML is read with tomllib on Python 3.11+. Python 3.10 has no TOML reader and gputui adds no dependency
  for one: there `read_toml_subset` reads exactly what `save` writes (`key = "string"`, a number, true or
  false, a one-line array of strings, comments, blank lines); anything else is reported as not understood.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from gputui.agent.fdwalk import NotADirectoryOnTheWay, TooManyLinks, walk
from gputui.model import GPM_MODES
from gputui.units import printable

MAX_BYTES = 64 * 1024  # a settings file is a few hundred bytes: anything bigger is not one
INTERVAL_RANGE = (0.1, 3600.0)  # as `--interval` accepts
ZOOM_RANGE = (60.0, 3600.0)  # sparkline window: a minute up to the hour the history keeps
MAX_NAME = 64  # theme, layout and column names are short identifiers
SHOW_ALLOWED = 8  # the known names a warning lists: it is one line (Textual has some 20 themes)
# The settings whose strings the app can restrict to the values it knows (load's `allowed`).
NAMED = ("theme", "layout", "sort", "hidden_columns")
USE_TOMLLIB = sys.version_info >= (3, 11)  # the tests turn it off to run the 3.10 reader's path


@dataclass(frozen=True)
class Settings:
    """What the user chose, with the app's defaults. `sort_descending` is the absolute order (biggest first),
    not "reversed from the column's natural order", so that a hand-written file means what it says."""

    theme: str = "textual-dark"
    layout: str = "auto"  # the layout engine chooses from the terminal's size and the number of GPUs
    sort: str = "gpu"
    sort_descending: bool = False
    interval: float = 1.0  # seconds between samples
    zoom: float = 300.0  # the sparklines show at least this many seconds
    tree: bool = False
    folded_workers: bool = True  # DataLoader workers folded under their rank
    hidden_columns: tuple[str, ...] = ()
    # GPM (SM and tensor activity, Hopper+): "auto" arms it unless DCGM runs on the host, "on", "off".
    gpm: str = "auto"

    def __post_init__(self) -> None:
        # The app builds these with dataclasses.replace: a value `load` would refuse is a bug, found here
        # rather than in the next start's warning. Normalized too: an int interval becomes a float, a list
        # of columns a tuple (hashable).
        for f in fields(self):
            object.__setattr__(self, f.name, _CHECKS[f.name](getattr(self, f.name), None))


class SettingsError(ValueError):
    """One problem with a settings file or one of its values, said in words for the warning line."""


class TomlSubsetError(ValueError):
    """A line the Python 3.10 reader does not understand."""


# -- where ---------------------------------------------------------------------------------------------


def default_path() -> Path:
    """$XDG_CONFIG_HOME/gputui/config.toml, else ~/.config/gputui/config.toml. The XDG spec says a relative
    XDG_CONFIG_HOME is ignored. Raises RuntimeError when there is no home directory at all."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "gputui" / "config.toml"


def _shown_path(path: Path | None) -> str:
    return printable(str(path)) if path is not None else "the settings file"


def _shown(value: object) -> str:
    """A value from the file, quoted for the warning line: short, and no control character reaches the
    terminal (repr escapes them; printable is the belt to its braces)."""
    text = printable(repr(value))
    return text if len(text) <= 40 else text[:39] + "…"


# -- validation ----------------------------------------------------------------------------------------


def _name(value: Any, allowed: Collection[str] | None) -> str:
    if not isinstance(value, str):
        raise SettingsError(f"{_shown(value)} is not a string")
    if not value or len(value) > MAX_NAME or not value.isprintable():
        raise SettingsError(f"{_shown(value)} is not a name")
    if allowed is not None and value not in allowed:
        known = sorted(allowed)
        listed = ", ".join(known[:SHOW_ALLOWED]) + (", …" if len(known) > SHOW_ALLOWED else "")
        raise SettingsError(f"{_shown(value)} is not one of {listed}")
    return value


def _names(value: Any, allowed: Collection[str] | None) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise SettingsError(f"{_shown(value)} is not an array of names")
    names = tuple(_name(item, allowed) for item in value)
    return tuple(dict.fromkeys(names))  # each once, in the order given


def _flag(value: Any, _allowed: Collection[str] | None) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"{_shown(value)} is not true or false")
    return value


def _seconds(low: float, high: float) -> Callable[[Any, Collection[str] | None], float]:
    def check(value: Any, _allowed: Collection[str] | None) -> float:
        # bool is an int to Python, not a number of seconds to anyone; nan fails every comparison.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingsError(f"{_shown(value)} is not a number of seconds")
        if not low <= value <= high:
            raise SettingsError(f"{_shown(value)} is not from {low:g} to {high:g} seconds")
        return float(value)

    return check


def _choice(*values: str) -> Callable[[Any, Collection[str] | None], str]:
    def check(value: Any, _allowed: Collection[str] | None) -> str:
        if value not in values:
            raise SettingsError(f"{_shown(value)} is not one of {', '.join(values)}")
        return str(value)

    return check


_CHECKS: dict[str, Callable[[Any, Collection[str] | None], Any]] = {
    "theme": _name,
    "layout": _name,
    "sort": _name,
    "sort_descending": _flag,
    "interval": _seconds(*INTERVAL_RANGE),
    "zoom": _seconds(*ZOOM_RANGE),
    "tree": _flag,
    "folded_workers": _flag,
    "hidden_columns": _names,
    "gpm": _choice(*GPM_MODES),
}


def _checked_allowed(allowed: Mapping[str, Collection[str]] | None) -> dict[str, Collection[str]]:
    unexpected = set(allowed or {}) - set(NAMED)
    if unexpected:  # the caller's mistake, not the user's: raised, never turned into a warning line
        raise ValueError(f"allowed values only for {NAMED}, not {sorted(unexpected)}")
    return dict(allowed or {})


def validate(
    data: Mapping[str, Any], allowed: Mapping[str, Collection[str]] | None = None
) -> tuple[Settings, list[str]]:
    """Settings from parsed TOML: each valid key kept, each bad or unknown one a problem (in file order)
    and its default."""
    allowed = _checked_allowed(allowed)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        check = _CHECKS.get(key)
        if check is None:
            problems.append(f"unknown key {_shown(key)}")
            continue
        try:
            values[key] = check(value, allowed.get(key))
        except SettingsError as err:
            problems.append(f"{key}: {err}")
    return Settings(**values), problems


# -- load ----------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str | None:
    """The file's text; None when it does not exist. stat before open: opening a FIFO would block and
    opening a device can have effects; fstat after open: what was opened is what was checked."""
    try:
        before = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SettingsError(f"cannot read it: {err.strerror or err}") from None
    _check_regular(before)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise SettingsError(f"cannot read it: {err.strerror or err}") from None
    try:
        _check_regular(os.fstat(fd))
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise SettingsError(f"cannot read it: {err.strerror or err}") from None
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise SettingsError("it is larger than 64 KiB: not a settings file")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as err:
        raise SettingsError(f"not UTF-8 text (byte {err.start})") from None


def _check_regular(st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise SettingsError("it is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise SettingsError("it is not a regular file")
    if st.st_size > MAX_BYTES:
        raise SettingsError("it is larger than 64 KiB: not a settings file")


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib where there is one (3.11+), else the reader of the subset `save` writes."""
    if USE_TOMLLIB and sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise SettingsError(f"not valid TOML: {err}") from None
    return read_toml_subset(text)


def load(
    path: Path | None = None, allowed: Mapping[str, Collection[str]] | None = None
) -> tuple[Settings, str | None]:
    """The settings in `path` (default: default_path()) and at most one warning line. `allowed` restricts
    the names to what the app knows, by setting: {"theme": (...), "layout": (...), "sort": columns,
    "hidden_columns": columns}; a setting not in it takes any short printable name."""
    allowed = _checked_allowed(allowed)
    try:
        path = path or default_path()
        text = _read_text(path)
        if text is None:
            return Settings(), None
        settings, problems = validate(_parse_for_load(text), allowed)
    except SettingsError as err:
        return Settings(), _warning(path, f"{err}; using the defaults")
    except (OSError, RuntimeError, ValueError) as err:  # no home directory (Path.home); a NUL in the path
        return Settings(), _warning(path, f"cannot read it: {err}; using the defaults")
    if not problems:
        return settings, None
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return settings, _warning(path, f"{problems[0]}{more}; using the defaults for what is bad")


def _warning(path: Path | None, problem: str) -> str:
    """One line: tomllib's messages and the file's values are quoted, but never trusted to be printable."""
    return printable(f"settings {_shown_path(path)}: {problem}")


def _parse_for_load(text: str) -> dict[str, Any]:
    try:
        return parse_toml(text)
    except TomlSubsetError as err:
        raise SettingsError(f"not understood on Python 3.10: {err}") from None


# -- the Python 3.10 reader ----------------------------------------------------------------------------

_KEY = re.compile(r"[A-Za-z0-9_-]+")
_NUMBER = re.compile(
    r"[+-]?(?:inf|nan|(?:0|[1-9](?:_?[0-9])*)(?:\.[0-9](?:_?[0-9])*)?(?:[eE][+-]?[0-9](?:_?[0-9])*)?)"
)
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def read_toml_subset(text: str) -> dict[str, Any]:
    """The TOML `save` writes, on Pythons without tomllib: one `key = value` per line, where a value is a
    basic or literal string, a decimal number, true, false or a one-line array of strings; `#` comments
    and blank lines. Raises TomlSubsetError naming the first line it does not understand."""
    data: dict[str, Any] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        try:
            parsed = _subset_line(line)
        except TomlSubsetError as err:
            raise TomlSubsetError(f"line {number}: {err}") from None
        if parsed is None:
            continue
        key, value = parsed
        if key in data:
            raise TomlSubsetError(f"line {number}: {key} is given twice")
        data[key] = value
    return data


def _subset_line(line: str) -> tuple[str, Any] | None:
    if any(_is_control(ch) and ch != "\t" for ch in line):
        raise TomlSubsetError("a control character")
    rest = line.lstrip(" \t")
    if not rest or rest.startswith("#"):
        return None
    key = _KEY.match(rest)
    if key is None:
        raise TomlSubsetError("expected key = value (tables and quoted or dotted keys are not read here)")
    rest = rest[key.end() :].lstrip(" \t")
    if not rest.startswith("="):
        raise TomlSubsetError("expected = after the key")
    value, rest = _subset_value(rest[1:].lstrip(" \t"))
    rest = rest.lstrip(" \t")
    if rest and not rest.startswith("#"):
        raise TomlSubsetError("more after the value")
    return key.group(), value


def _subset_value(text: str) -> tuple[Any, str]:
    """One value at the start of `text`, and what follows it."""
    if text[:1] in ('"', "'"):
        return _subset_string(text)
    if text.startswith("["):
        return _subset_array(text[1:])
    for word, value in (("true", True), ("false", False)):
        if text.startswith(word) and not _KEY.match(text[len(word) :]):
            return value, text[len(word) :]
    number = _NUMBER.match(text)
    if number is None or _KEY.match(text[number.end() :]) or text[number.end() :].startswith("."):
        raise TomlSubsetError("expected a string, a number, true, false or an array of strings")
    digits = number.group().replace("_", "")
    is_float = any(c in digits for c in ".eEn")  # n: inf and nan
    return (float(digits) if is_float else int(digits)), text[number.end() :]


def _subset_string(text: str) -> tuple[str, str]:
    quote = text[0]
    if text.startswith(quote * 3):
        raise TomlSubsetError("multi-line strings are not read here")
    out: list[str] = []
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), text[i + 1 :]
        if ch == "\\" and quote == '"':
            escaped, i = _subset_escape(text, i + 1)
            out.append(escaped)
            continue
        out.append(ch)
        i += 1
    raise TomlSubsetError("a string without its closing quote")


def _subset_escape(text: str, i: int) -> tuple[str, int]:
    """The character an escape stands for (text[i] follows the backslash), and where the string goes on."""
    code = text[i : i + 1]
    if code in _ESCAPES:
        return _ESCAPES[code], i + 1
    size = {"u": 4, "U": 8}.get(code)
    digits = text[i + 1 : i + 1 + size] if size else ""
    if size is None or len(digits) != size or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise TomlSubsetError(f"a bad escape \\{printable(code)}")
    value = int(digits, 16)
    if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
        raise TomlSubsetError(f"\\{code}{digits} is not a Unicode scalar value")
    return chr(value), i + 1 + size


def _subset_array(text: str) -> tuple[list[str], str]:
    items: list[str] = []
    rest = text.lstrip(" \t")
    while not rest.startswith("]"):
        if rest[:1] not in ('"', "'"):
            raise TomlSubsetError("an array here holds only strings, on one line")
        item, rest = _subset_string(rest)
        items.append(item)
        rest = rest.lstrip(" \t")
        if rest.startswith(","):
            rest = rest[1:].lstrip(" \t")
        elif not rest.startswith("]"):
            raise TomlSubsetError("expected , or ] in the array")
    return items, rest[1:]


def _is_control(ch: str) -> bool:
    return ch < " " or ch == "\x7f"


# -- save ----------------------------------------------------------------------------------------------

HEADER = """\
# gputui settings, written by gputui when you change them in the app (other comments are not kept).
# A line starting with # is a setting at its default: remove the # and edit the value to choose.
# A bad value is read as its default, with one warning line.
"""


def render(settings: Settings) -> str:
    """The file `save` writes. Only what differs from the defaults is a setting; the rest is written as
    comments. So a default improved in a later version reaches everyone who never chose otherwise, a
    value the user never chose cannot turn invalid (a layout renamed), and every key is still there to
    be found and edited."""
    defaults = asdict(Settings())
    lines = [HEADER.rstrip("\n")]
    for key, value in asdict(settings).items():
        prefix = "" if value != defaults[key] else "# "
        lines.append(f"{prefix}{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # 1.0, 0.25, 300.0: always a digit after the point, as TOML wants
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_string(item) for item in value) + "]"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _toml_string(text: str) -> str:
    """A TOML basic string. Not json.dumps: its \\uD83D\\uDE00 surrogate pairs are invalid TOML, and it leaves
    DEL unescaped."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif _is_control(ch):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def save(settings: Settings, path: Path | None = None) -> str | None:
    """Write `settings` to `path` (default: default_path()). None when written, else one warning line: the
    app keeps running with the settings it has."""
    try:
        path = path or default_path()
        directory = _open_own_directory(path.parent)
        try:
            _replace_atomically(directory, path.name, render(settings).encode("utf-8"))
        finally:
            os.close(directory)
    except SettingsError as err:
        return f"settings not saved to {_shown_path(path)}: {err}"
    except (OSError, RuntimeError, ValueError) as err:  # RuntimeError: no home; ValueError: a NUL in a path
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return f"settings not saved to {_shown_path(path)}: {printable(reason)}"
    return None


def _open_own_directory(directory: Path) -> int:
    """An fd of `directory`, created 0700 (with its missing parents) if missing; SettingsError unless it is
    a directory this user owns. The write then goes through this fd: what was checked is what is written
    into, even if a path component is swapped meanwhile.

    The path is walked one component at a time (gputui.agent.fdwalk), each opened with O_NOFOLLOW relative
    to its parent's fd, and each missing one made with mkdir relative to that fd, only in a directory this
    user owns. A symbolic link on the way is followed (read and walked there, not by the kernel) only when
    it belongs to this user or to root: a link planted by another user is never followed, so root run
    through sudo with the user's HOME creates nothing where the user's `~/.config -> /etc` points, even in
    a directory of root's."""
    euid = os.geteuid()

    def make(parent: int, where: str, name: str) -> None:
        # Nothing is created in a directory of another user (root via sudo, with the user's HOME).
        _check_owner(Path(where), os.fstat(parent), euid)
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked by the walk like any other
            os.mkdir(name, 0o700, dir_fd=parent)

    def follow(here: str, st: os.stat_result) -> None:
        if st.st_uid not in (euid, 0):
            raise SettingsError(
                f"{printable(here)} is a symbolic link of uid {st.st_uid}, not of this user "
                f"(uid {euid}): gputui follows no other user's link to save its settings"
            )

    try:
        fd, _ = walk(str(directory), on_missing=make, on_link=follow, directory_only=True)
    except TooManyLinks:
        raise SettingsError(f"{printable(str(directory))}: too many levels of symbolic links") from None
    except NotADirectoryOnTheWay as err:
        raise SettingsError(f"{printable(str(err.filename))} is not a directory") from None
    try:
        _check_owner(directory, os.fstat(fd), euid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_owner(path: Path, st: os.stat_result, euid: int) -> None:
    if not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise SettingsError(f"{printable(str(path))} is not a directory")
    if st.st_uid != euid:
        raise SettingsError(
            f"{printable(str(path))} belongs to uid {st.st_uid}, not to this user (uid {euid}): "
            "gputui writes only into its own user's directories"
        )


def _temporary_name(name: str) -> str:
    """Hidden, beside the file, and unguessable (os.urandom, not `secrets`: that import costs more)."""
    return f".{name}.{os.urandom(8).hex()}.tmp"


def _replace_atomically(directory: int, name: str, data: bytes) -> None:
    """A new file in full, or the old one untouched: write a temporary file, fsync, rename over. O_EXCL and
    O_NOFOLLOW: the temporary name is never an existing file or a symlink planted to redirect the write."""
    temporary = _temporary_name(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        # The rename replaces a symlink at `name`, never what it points to.
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash (an O_PATH fd cannot fsync)
        readable = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory)
        try:
            os.fsync(readable)
        finally:
            os.close(readable)
