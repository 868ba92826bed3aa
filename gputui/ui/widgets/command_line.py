"""A command line shortened for the process table: what runs, not where it is installed.

`/root/.pyenv/versions/3.11.7/bin/python3 -u train.py --lr 3e-4` reads as `python3 -u train.py --lr 3e-4`:
the program's path becomes its name, an `env VAR=value` prefix keeps its assignments, and a console
script run by its interpreter (`python /venv/bin/torchrun ...`, what torchrun's own command line looks
like) becomes the script's name. The script, the module of `-m` and every argument are kept as they are:
they say which job it is. The full line stays in the detail view. Pure: no Textual, no Rich.
"""

from __future__ import annotations

import re

# python, python3, python3.11, python3.13t, pypy3: the interpreters that run console scripts.
_PYTHON = re.compile(r"(python|pypy)(\d+(\.\d+)*[a-z]?)?(-dbg)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# Interpreter options that take a value as the next word (`python -W ignore train.py`).
_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def _name(word: str) -> str:
    """A path's last part; a word without a slash (or ending in one), or a kernel thread's `[name/0]`,
    is left alone."""
    if "/" not in word or word.startswith("["):
        return word
    name = word.rsplit("/", 1)[-1]
    return name or word


def _is_python(word: str) -> bool:
    return _PYTHON.fullmatch(_name(word)) is not None


def _script_index(words: list[str]) -> int | None:
    """The index of the script a Python interpreter (words[0]) runs, or None (`-m`, `-c`, no script)."""
    i = 1
    while i < len(words):
        word = words[i]
        if word in ("-m", "-c", "-") or (word.startswith(("-m", "-c")) and not word.startswith("--")):
            return None
        if not word.startswith("-"):
            return i
        i += 2 if word in _OPTIONS_WITH_VALUE else 1
    return None


def _is_console_script(path: str) -> bool:
    """A script that pip installed as a command (`.../bin/torchrun`): known by its name, not its path."""
    directory, _, name = path.rpartition("/")
    return bool(name) and directory.endswith("/bin") and not name.endswith(".py")


def _shorten_program(words: list[str]) -> list[str]:
    """`words` start with the program: its name instead of its path, a console script by its name."""
    if not words:
        return words
    if _is_python(words[0]):
        script = _script_index(words)
        if script is not None and _is_console_script(words[script]):
            return [_name(words[script]), *words[script + 1 :]]
    return [_name(words[0]), *words[1:]]


def shorten(command: str) -> str:
    """`command` as the process table shows it (see the module's docstring); "" stays ""."""
    words = command.split(" ")  # split on single spaces: joined back, the rest is byte for byte the same
    lead: list[str] = []
    if words and _name(words[0]) == "env":
        words = words[1:]  # `env A=1 python x.py` reads as `A=1 python x.py`, as a shell line would
        while words and _ASSIGNMENT.match(words[0]):
            lead.append(words.pop(0))
        if words and words[0].startswith("-"):  # env's own options (-i, -u NAME): show env as it was
            return " ".join(["env", *lead, *words])
    return " ".join([*lead, *_shorten_program(words)])
