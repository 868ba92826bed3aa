"""`gputui` (cli.main, the real program) sending itself a SIGTERM at one precise moment of its start-up, run
as a program by tests/test_start_signals.py:

    python -m tests.start_signal WHERE MARKER [gputui arguments...]

WHERE
  set_name       inside the first `__set_name__` of a Textual class (its reactives, as Textual is imported):
                 a SystemExit raised there became "RuntimeError: Error calling __set_name__" (exit 1, a
                 traceback)
  lock_callback  inside importlib's weakref callback of a module's lock, once Textual is being imported: a
                 SystemExit raised there is "Exception ignored", and the monitor started all the same

MARKER is written as the signal is sent (a test skips where this Python never passes there). Where it lands
is exact: the signal's handler runs at the next instruction, in the frame just entered.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from gputui import cli


def _moment(where: str, frame: FrameType) -> bool:
    code = frame.f_code
    if where == "set_name":
        return code.co_name == "__set_name__" and f"{os.sep}textual{os.sep}" in code.co_filename
    if where == "lock_callback":
        return (
            code.co_name == "cb"
            and code.co_filename.startswith("<frozen importlib")
            and "textual" in sys.modules
        )
    raise SystemExit(f"unknown moment {where!r}")


def main() -> int:
    where, marker, *args = sys.argv[1:]

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and _moment(where, frame):
            sys.setprofile(None)
            Path(marker).write_text(f"{frame.f_code.co_filename}:{frame.f_code.co_name}\n")
            os.kill(os.getpid(), signal.SIGTERM)

    sys.setprofile(profile)  # this thread's calls only: the one that imports Textual
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
