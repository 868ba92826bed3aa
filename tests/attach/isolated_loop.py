"""train_loop.py's CPU-torch loop in a Python that cannot import gputui, as a real job's cannot:

    python -I isolated_loop.py STEPS_FILE TORCH_DIR

Run with -I (no PYTHONPATH, no current directory, no user site) from a directory outside the checkout, by
an interpreter that is not gputui's virtual environment (whose .pth files would find the checkout). Only
TORCH_DIR, the directory torch is installed in, is added to sys.path, and as a plain entry: the .pth files
in it (an editable gputui's among them) are not run. It exits with status 3 if `gputui` is importable all
the same, and prints "ready" once the loop may be attached to.
"""

import importlib.util
import os
import sys


def gputui_importable() -> bool:
    return importlib.util.find_spec("gputui") is not None


if __name__ == "__main__":
    if gputui_importable():
        sys.stderr.write("isolated_loop: gputui is importable before torch's directory is added\n")
        sys.exit(3)
    sys.path.append(sys.argv[2])
    import torch  # noqa: F401

    if gputui_importable():
        sys.stderr.write("isolated_loop: gputui is importable from torch's directory\n")
        sys.exit(3)
    # train_loop.py beside this file (its directory holds no gputui: it is not the checkout's root).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    train_loop = importlib.import_module("train_loop")  # by name: a module of this directory, not tests.*

    if gputui_importable():
        sys.stderr.write("isolated_loop: gputui is importable from this file's directory\n")
        sys.exit(3)
    print("ready", flush=True)
    train_loop.main(sys.argv[1])
