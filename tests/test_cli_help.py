"""The command line explains itself: every command and option has help, `--help` works everywhere, and
the shell can complete it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputui import cli

COMMANDS = ("run", "agent", "attach", "record", "replay", "export", "fleet", "doctor", "completion")


def gputui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputui", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every parser under `parser`, by the command line that reaches it."""
    found = {parser.prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                found.update(parsers(sub))
    return found


ALL = parsers(cli.build_parser())


def test_every_command_is_reached() -> None:
    assert {f"gputui {name}" for name in COMMANDS} <= set(ALL)
    assert {"gputui agent install", "gputui agent uninstall", "gputui agent status"} <= set(ALL)


def test_top_help_lists_every_command_with_a_line_of_its_own() -> None:
    result = gputui("--help")
    assert result.returncode == 0 and result.stderr == ""
    listed = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("    ")}
    for name in COMMANDS:
        assert name in listed, result.stdout
        assert len(listed[name].split()) > 3, f"{name} has no description: {listed[name]!r}"


@pytest.mark.parametrize("prog", sorted(ALL))
def test_every_option_and_argument_has_help(prog: str) -> None:
    for action in ALL[prog]._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        if isinstance(action, argparse._SubParsersAction):  # each command's line is its help
            assert all(choice.help for choice in action._choices_actions), prog
            continue
        assert action.help and action.help != argparse.SUPPRESS, (
            f"{prog}: {action.option_strings or action.dest}"
        )


@pytest.mark.parametrize("prog", sorted(ALL))
def test_every_command_has_its_own_help(prog: str) -> None:
    result = gputui(*prog.split()[1:], "--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith(f"usage: {prog} "), result.stdout
    if prog != "gputui":
        description = ALL[prog].description
        assert description and description.split()[0] in result.stdout


def test_run_help_is_help_but_after_the_separator_it_is_the_commands() -> None:
    assert "usage: gputui run" in gputui("run", "--help").stdout
    result = gputui("run", "--", sys.executable, "-c", "import sys; print(sys.argv[1:])", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['--help']"
    # Without the separator, the command's own options are still the command's.
    result = gputui("run", sys.executable, "-c", "import sys; print(sys.argv[1:])", "--help", "-x")
    assert result.stdout.strip() == "['--help', '-x']", result.stderr


@pytest.mark.parametrize(
    "args, prog",
    [
        (["agent"], "gputui agent"),
        (["agent", "reinstall"], "gputui agent"),
        (["export", "--frobnicate"], "gputui export"),
        (["agent", "install", "--pithon", "x"], "gputui agent install"),
        (["fleet"], "gputui fleet"),
        (["completion", "tcsh"], "gputui completion"),
        (["frobnicate"], "gputui"),
    ],
)
def test_a_mistake_is_one_line_from_the_command_it_was_made_in(args: list[str], prog: str) -> None:
    result = gputui(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"{prog}: error: ") and f"see {prog} --help" in result.stderr


@pytest.mark.parametrize("flag", ["--demo", "--demo-gpus=2", "--seed=3"])
def test_source_flags_go_before_or_after_the_command(flag: str) -> None:
    before = cli.build_parser().parse_args([flag, "record", "x"])
    after = cli.build_parser().parse_args(["record", "x", flag])
    name = flag.lstrip("-").split("=")[0].replace("-", "_")
    assert getattr(before, name) == getattr(after, name) != cli.SOURCE_DEFAULTS[name]


# -- shell completion --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    result = gputui("completion", shell)
    assert result.returncode == 0, result.stderr
    assert "_ARGCOMPLETE" in result.stdout and "gputui" in result.stdout


def complete(line: str, tmp_path: Path) -> list[str]:
    """What the shell's completion function gets back for `line` (argcomplete's protocol)."""
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    result = gputui(env=env)
    assert result.returncode == 0, result.stderr
    return out.read_text().split()


def test_the_shell_completes_commands_and_their_options(tmp_path: Path) -> None:
    assert set(COMMANDS) <= set(complete("gputui ", tmp_path))
    assert complete("gputui rec", tmp_path) == ["record"]
    assert {"--bearer-token-file", "--ca-file"} <= set(complete("gputui fleet --", tmp_path))
    assert complete("gputui agent ins", tmp_path) == ["install"]
