"""Put on PYTHONPATH by `gputui run`, alone: starts the agent in every Python process of the job
(torchrun's ranks included) when GPUTUI_AGENT=1, then runs the sitecustomize this one shadows, if any."""

import importlib
import os
import runpy
import sys

_here = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("GPUTUI_AGENT") == "1":
    try:
        runpy.run_path(os.path.join(_here, "gputui_boot.py"))
    except Exception as _err:  # never stop the user's program over the monitor
        sys.stderr.write(f"gputui agent not started: {_err}\n")

# Chain to the next sitecustomize on the path, as if this one were not there.
_path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_saved, sys.path[:] = sys.path[:], _path
_self = sys.modules.pop("sitecustomize", None)
try:
    importlib.import_module("sitecustomize")
except ImportError:
    pass
finally:
    sys.path[:] = _saved
    if _self is not None:
        sys.modules["sitecustomize"] = _self
