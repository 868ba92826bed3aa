"""The import wall: the collectors, the exporters, the doctor, the agent and the model never import
Textual, Rich or gputui.ui. They run headless (`gputui export`, `--json`, the agent inside a training
process), where the UI's import time and memory are pure cost. `gputui --version` stays as light.

Each module is imported alone in a fresh interpreter: one imported earlier would hide what the next
one pulls in. The modules are found with pkgutil, so a new module is under the wall as soon as it
exists. Imports inside functions are found by reading the source (an import run later, on some path,
is still a wall broken)."""

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

WALLED_PACKAGES = ("gputui.collect", "gputui.export", "gputui.doctor", "gputui.agent")
WALLED_MODULES = ("gputui.model",)
FORBIDDEN = ("textual", "rich", "gputui.ui")
ROOT = Path(gputui.__file__).parent
TIMEOUT = 60

# Prints the forbidden modules (argv[2], JSON) loaded after importing argv[1], or after `gputui --version`.
_CHILD = """
import contextlib, importlib, io, json, sys
target, forbidden = sys.argv[1], tuple(json.loads(sys.argv[2]))
if target == "--version":
    from gputui.cli import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["--version"])
else:
    importlib.import_module(target)
dotted = tuple(name + "." for name in forbidden)
print(json.dumps(sorted(m for m in sys.modules if m in forbidden or m.startswith(dotted))))
"""


def is_forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN)


def walled_modules() -> list[str]:
    """Every module of the walled packages, subpackages included."""
    found = list(WALLED_MODULES)
    for package in WALLED_PACKAGES:
        found.append(package)
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations is not None, package
        found += [m.name for m in pkgutil.walk_packages(spec.submodule_search_locations, package + ".")]
    return sorted(found)


def forbidden_after(target: str) -> list[str]:
    """The forbidden modules a fresh interpreter holds after importing `target`."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, target, json.dumps(FORBIDDEN)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"importing {target} failed:\n{done.stderr}"
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_discovery_finds_the_modules() -> None:
    """A pkgutil that found nothing would make every test below pass."""
    modules = walled_modules()
    for known in (
        "gputui.model",
        "gputui.collect.procs.join",
        "gputui.collect.sampler",
        "gputui.export.exporter",
        "gputui.doctor.run",
        "gputui.agent.server",
        "gputui.agent.torchstats",
    ):
        assert known in modules
    assert not any(is_forbidden(m) for m in modules)


@pytest.mark.parametrize("module", walled_modules())
def test_module_imports_no_ui(module: str) -> None:
    assert forbidden_after(module) == [], f"{module} imports the UI"


def test_gputui_version_imports_no_ui() -> None:
    assert forbidden_after("--version") == []


def test_the_child_sees_a_forbidden_import() -> None:
    """The check itself: a module that does import the UI is reported."""
    assert "textual" in forbidden_after("gputui.ui.widgets.canvas")


def _imported_names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: resolved against the file's package
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        module = f"{base}.{node.module}" if node.module else base
    else:
        module = node.module or ""
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _walled_files() -> list[Path]:
    files = [ROOT / "model.py"]
    for package in WALLED_PACKAGES:
        files += sorted((ROOT / package.split(".", 1)[1]).rglob("*.py"))
    return files


@pytest.mark.parametrize("path", _walled_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_of_the_ui_anywhere_in_the_source(path: Path) -> None:
    """Imports inside functions too (and in gputui/agent/autostart, which is no package)."""
    relative = path.relative_to(ROOT.parent).with_suffix("")
    package = ".".join(relative.parts[:-1])
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    offending = [
        f"line {node.lineno}: {name}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not _under_type_checking(node, parents)
        for name in _imported_names(node, package)
        if is_forbidden(name)
    ]
    assert offending == []
