"""The import wall: the core (model, units, cells, settings, the agent, the analysis, the collectors, the
actions, the doctor, the exporters, the one-shot output) never imports Textual, Rich or gputui.ui. It
runs headless (`gputui export`, `--json`, the agent inside a training process), where the UI's import
time and memory are pure cost. `gputui --version` stays as light.

`make lint` holds the wall on the source (import-linter, [tool.importlinter] in pyproject.toml: every
import statement, inside functions too, and through any chain of gputui's own modules). What only running
can show is checked here: what the modules really load (a third-party library that pulls in Rich, an
import by a computed name), and that `gputui --version` stays light (the CLI may import the UI, lazily).
One fresh interpreter imports every module of the core; only when it loads a forbidden module is each
module imported alone, to name the one that did. The modules are found with pkgutil, so a new module is
under the wall as soon as it exists. gputui/agent/autostart, which is no package (import-linter does not
see it), is read here."""

from __future__ import annotations

import ast
import importlib.util
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import gputui

# The same list as the first contract of [tool.importlinter] (test_the_lists_agree keeps them so).
CORE = (
    "gputui.model",
    "gputui.units",
    "gputui.cells",
    "gputui.settings",
    "gputui.agent",
    "gputui.analyze",
    "gputui.collect",
    "gputui.actions",
    "gputui.doctor",
    "gputui.export",
    "gputui.output",
)
FORBIDDEN = ("textual", "rich", "gputui.ui")
ROOT = Path(gputui.__file__).parent
TIMEOUT = 60

# Prints the forbidden modules (argv[1], JSON) loaded after importing argv[2:], or after `gputui --version`.
_CHILD = """
import contextlib, importlib, io, json, sys
forbidden, targets = tuple(json.loads(sys.argv[1])), sys.argv[2:]
if targets == ["--version"]:
    from gputui.cli import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["--version"])
else:
    for target in targets:
        importlib.import_module(target)
dotted = tuple(name + "." for name in forbidden)
print(json.dumps(sorted(m for m in sys.modules if m in forbidden or m.startswith(dotted))))
"""


def is_forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN)


def core_modules() -> list[str]:
    """Every module of the core, subpackages included."""
    found: list[str] = []
    for name in CORE:
        found.append(name)
        spec = importlib.util.find_spec(name)
        assert spec is not None, name
        if spec.submodule_search_locations is not None:  # a package
            found += [m.name for m in pkgutil.walk_packages(spec.submodule_search_locations, name + ".")]
    return sorted(found)


def forbidden_after(*targets: str) -> list[str]:
    """The forbidden modules a fresh interpreter holds after importing `targets`."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(FORBIDDEN), *targets],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"importing {targets} failed:\n{done.stderr}"
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_discovery_finds_the_modules() -> None:
    """A pkgutil that found nothing would make the test below pass."""
    modules = core_modules()
    for known in (
        "gputui.model",
        "gputui.settings",
        "gputui.analyze.hung",
        "gputui.collect.procs.join",
        "gputui.collect.sampler",
        "gputui.actions.signals",
        "gputui.output.jsonout",
        "gputui.export.exporter",
        "gputui.doctor.run",
        "gputui.agent.server",
        "gputui.agent.torchstats",
    ):
        assert known in modules
    assert not any(is_forbidden(m) for m in modules)


def test_the_core_loads_no_ui() -> None:
    modules = core_modules()
    if forbidden_after(*modules):  # which one: each alone, in a fresh interpreter
        culprits = {m: loaded for m in modules if (loaded := forbidden_after(m))}
        pytest.fail(f"these modules load the UI: {culprits}")


def test_gputui_version_imports_no_ui() -> None:
    assert forbidden_after("--version") == []


def test_the_child_sees_a_forbidden_import() -> None:
    """The check itself: a module that does import the UI is reported."""
    assert "textual" in forbidden_after("gputui.model", "gputui.ui.widgets.canvas")


def test_the_lists_agree() -> None:
    """CORE here and the contract's source modules in pyproject.toml: one wall."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    wall = config["tool"]["importlinter"]["contracts"][0]
    assert (sorted(wall["source_modules"]), sorted(wall["forbidden_modules"])) == (
        sorted(CORE),
        sorted(FORBIDDEN),
    )


def _imported_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = node.module or ""  # the autostart files are top-level modules: no relative imports
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


@pytest.mark.parametrize("path", sorted((ROOT / "agent" / "autostart").glob("*.py")), ids=lambda p: p.name)
def test_no_import_of_the_ui_in_the_autostart_files(path: Path) -> None:
    """They run in every Python of a training environment, before its script: no package, so import-linter
    does not read them. Imports inside functions too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    offending = [
        f"line {node.lineno}: {name}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for name in _imported_names(node)
        if is_forbidden(name)
    ]
    assert offending == []
