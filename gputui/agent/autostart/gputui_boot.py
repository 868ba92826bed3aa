"""Starts the gputui agent in this Python process when GPUTUI_AGENT=1.

Run by `gputui run` (through the sitecustomize beside it) and by the hook `gputui agent install` writes
into a Python environment. Either way the job's Python may belong to another environment, even another
Python version, than gputui's: this file puts nothing on sys.path. It uses the environment's own gputui if
it has one, else it loads the `gputui` package this file ships in, which is standard library only as far
as the agent goes (the agent never imports psutil, rich or textual)."""

import importlib.util
import os
import sys

MIN_PYTHON = (3, 10)


def _ours() -> None:
    """Make `import gputui` find the package this file belongs to, and only that package."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "gputui", os.path.join(package, "__init__.py"), submodule_search_locations=[package]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no gputui package at {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gputui"] = module
    # Another Python's bytecode has no place in gputui's own environment.
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
        import gputui.agent.server  # noqa: F401  (loaded now, while bytecode writing is off)
    except BaseException:
        for name in [n for n in sys.modules if n == "gputui" or n.startswith("gputui.")]:
            del sys.modules[name]
        raise
    finally:
        sys.dont_write_bytecode = saved


def start() -> None:
    if os.environ.get("GPUTUI_AGENT") == "1":
        start_now()


def start_now() -> None:
    """Start the agent here and now: `gputui attach` runs this file in a process that is already running."""
    try:
        if sys.version_info < MIN_PYTHON:
            raise RuntimeError(f"it needs Python 3.10 or later, this is {sys.version.split()[0]}")
        if importlib.util.find_spec("gputui") is None:
            _ours()
        import gputui.agent

        gputui.agent.start()
    except Exception as err:  # never stop the user's program over the monitor
        sys.stderr.write(f"gputui agent not started: {err}\n")


if __name__ in ("__main__", "<run_path>"):
    start()
elif __name__ == "gputui_attach":  # runpy.run_path(this file, run_name="gputui_attach"): `gputui attach`
    start_now()
