"""The agent's copy that `gputui attach` puts beside the target holds every module the agent imports: a real
job's Python has no gputui of its own, so a module left out of the copy fails the bootstrap. Checked from
the modules' own import statements (relative ones included), then for real: a training loop in a Python
that cannot import gputui (-I, outside the checkout) is attached through gdb and its agent answers."""

from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import gputui
from gputui.actions.attach import Plan, attach, check
from gputui.actions.attach.run import BOOT, payload
from gputui.collect.agents.client import AgentPoller

HERE = Path(__file__).resolve().parent
SOURCE = Path(gputui.__file__).resolve().parent


@pytest.fixture(scope="module")
def modules() -> dict[str, str]:
    """Module name -> its source text, as copied."""
    with payload(os.getuid()) as boot:
        root = boot.parents[len(Path(BOOT).parts)]
        out = {}
        for path in (root / "gputui").rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path.read_text()
        return out


def imported(name: str, text: str, is_package: bool) -> Iterator[tuple[str, bool]]:
    """(module, at module level) for each import in the module `name`: `from X import y` gives X, and X.y
    too (it may be a submodule); relative imports are resolved against the module's package."""
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(text)
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{anchor}.{base}" if base else anchor
            yield base, id(node) in top
            for alias in node.names:
                yield f"{base}.{alias.name}", id(node) in top


def is_gputui_module(name: str) -> bool:
    """A module of the checkout's gputui (not an attribute that `from gputui.x import y` names)."""
    if not (name == "gputui" or name.startswith("gputui.")):
        return False
    path = SOURCE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_gputui_module_the_agent_imports_is_in_the_copy(modules: dict[str, str]) -> None:
    assert "gputui.agent.server" in modules and "gputui.agent.autostart.gputui_boot" in modules
    missing = set()
    for name, text in modules.items():
        is_package = (SOURCE.parent.joinpath(*name.split(".")) / "__init__.py").is_file()
        for module, _top in imported(name, text, is_package):
            if not is_gputui_module(module):
                continue
            # The module and every package above it: importing gputui.agent.x runs gputui/agent/__init__.py.
            parts = module.split(".")
            for i in range(1, len(parts) + 1):
                if ".".join(parts[:i]) not in modules:
                    missing.add(f"{'.'.join(parts[:i])} (imported by {name})")
    assert not missing, f"modules the agent imports that the copy lacks: {sorted(missing)}"


def test_the_copy_needs_nothing_but_the_standard_library(modules: dict[str, str]) -> None:
    """At module level every import is the standard library's or the copy's own; torch only inside a
    function (the host's torch, once it has imported it)."""
    foreign = set()
    for name, text in modules.items():
        is_package = (SOURCE.parent.joinpath(*name.split(".")) / "__init__.py").is_file()
        for module, top in imported(name, text, is_package):
            root = module.partition(".")[0]
            if root in ("", "__future__", "gputui") or root in sys.stdlib_module_names:
                continue
            if not top and root == "torch":
                continue
            foreign.add(f"{module} (in {name})")
    assert not foreign, f"the agent's copy imports what a job's Python may not have: {sorted(foreign)}"


def test_the_copy_is_the_agent_package_whole(modules: dict[str, str]) -> None:
    """Every .py file of gputui/agent (recursively) and gputui/__init__.py, and nothing else of gputui."""
    agent = {
        ".".join(p.relative_to(SOURCE.parent).with_suffix("").parts).removesuffix(".__init__")
        for p in (SOURCE / "agent").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert set(modules) == agent | {"gputui"}


# -- for real: a job whose Python has no gputui ------------------------------------------------------


def _ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


@dataclasses.dataclass
class Job:
    proc: subprocess.Popen[str]
    steps_file: Path

    def count(self) -> int:
        return sum(1 for line in self.steps_file.read_text().splitlines() if len(line.split()) == 2)


def wait_for(predicate, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    """isolated_loop.py under the interpreter this virtual environment was made from (the environment's
    own would run its .pth files, an editable gputui's among them), with -I, in a directory of its own."""
    torch = pytest.importorskip("torch")
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    torch_dir = str(Path(torch.__file__).resolve().parents[1])
    work = tmp_path / "job"
    work.mkdir()
    steps_file = work / "steps"
    steps_file.touch()
    stderr = open(work / "stderr", "w")  # noqa: SIM115 (closed below)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GPUTUI"))}
    proc = subprocess.Popen(
        [python, "-I", str(HERE / "isolated_loop.py"), str(steps_file), torch_dir],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    j = Job(proc, steps_file)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready == "ready\n", f"the loop did not start ({proc.wait()}): {(work / 'stderr').read_text()}"
        assert wait_for(lambda: j.count() >= 20), "the training loop did not step"
        yield j
    finally:
        proc.kill()
        proc.wait()
        stderr.close()
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.skipif(
    shutil.which("gdb") is None or (os.geteuid() != 0 and _ptrace_scope() > 0),
    reason="needs gdb (apt install gdb), and root or kernel.yama.ptrace_scope=0",
)
def test_a_job_whose_python_has_no_gputui_gets_the_whole_agent(job: Job) -> None:
    plan = check(job.proc.pid)
    assert isinstance(plan, Plan) and plan.mechanism == "gdb" and not plan.already, plan
    outcome = attach(job.proc.pid)
    stderr = (job.steps_file.parent / "stderr").read_text()
    assert outcome.ok, f"{outcome.message}; the job's stderr: {stderr}"
    assert "gputui agent not started" not in stderr, stderr
    report = AgentPoller().report(job.proc.pid)  # the stats op
    assert report is not None and report.ok and report.torch, report
    n = job.count()
    assert wait_for(lambda: job.count() > n + 20, 10.0), "the loop stopped stepping after the attach"
    assert job.proc.poll() is None
