"""One step of the check, in a child process: `python -m bench.gpucheck.steps NAME`."""

from __future__ import annotations

import importlib
import sys
import traceback

from bench.gpucheck.common import Result, cleanup


def main() -> int:
    name = sys.argv[1]
    result = Result(name)
    result.save()
    try:
        importlib.import_module(f"bench.gpucheck.step_{name}").run(result)
    except Exception as err:
        traceback.print_exc()
        result.check("step ran to its end", False, f"{type(err).__name__}: {err}", "no exception")
        return 1
    finally:
        cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
