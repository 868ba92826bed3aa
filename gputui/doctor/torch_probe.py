"""PyTorch as the user's Python sees it, asked in a subprocess: the doctor never creates a CUDA context
itself, and never imports torch into gputui."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass

# Run by the user's Python. Prints one JSON line; everything it touches is optional.
PROBE = r"""
import json, sys, warnings
out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as err:
    out["import_error"] = f"{type(err).__name__}: {err}"
else:
    out["torch"] = torch.__version__
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["hip"] = getattr(torch.version, "hip", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out["available"] = bool(torch.cuda.is_available())
            out["device_count"] = int(torch.cuda.device_count())
            out["arch_list"] = list(torch.cuda.get_arch_list()) if out["cuda"] else []
            out["capabilities"] = [list(torch.cuda.get_device_capability(i))
                                   for i in range(out["device_count"] if out["available"] else 0)]
        except Exception as err:
            out["cuda_error"] = f"{type(err).__name__}: {err}"
    out["warnings"] = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
print(json.dumps(out))
"""
TIMEOUT_S = 120.0  # importing torch can take a while on a cold disk
MAX_TEXT = 500  # characters kept of one string the probe sent (its Python may be another user's)
MAX_ITEMS = 64  # items kept of one list it sent


@dataclass(frozen=True, slots=True)
class TorchFacts:
    python: str
    error: str | None = None  # the probe itself failed: no such Python, a crash, a timeout
    torch: str | None = None  # its version; None: not importable
    import_error: str | None = None
    cuda: str | None = None  # the CUDA version torch was built with; None: a CPU (or ROCm) build
    hip: str | None = None
    available: bool | None = None
    device_count: int | None = None
    arch_list: tuple[str, ...] = ()
    capabilities: tuple[tuple[int, int], ...] = ()
    cuda_error: str | None = None
    warnings: tuple[str, ...] = ()


def probe(python: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT_S) -> TorchFacts:
    """`python -c` puts its current directory first on sys.path: run as root in a directory another user
    can write, a json.py there would run as root. So the probe runs in a fresh empty directory only we
    can write. Nothing else changes: PYTHONPATH and the user site stay (some find torch that way), and
    any Python version works (-P is 3.11+; -I would drop PYTHONPATH too)."""
    command = os.path.abspath(python) if os.sep in python else python  # ./venv/bin/python from here
    try:
        with tempfile.TemporaryDirectory(prefix="gputui-probe-") as empty:
            done = subprocess.run(
                [command, "-c", PROBE],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env if env is not None else dict(os.environ),
                stdin=subprocess.DEVNULL,
                cwd=empty,
            )
    except OSError as err:
        return TorchFacts(python, error=f"cannot run {python}: {err.strerror or err}")
    except subprocess.TimeoutExpired:
        return TorchFacts(python, error=f"{python} did not answer within {timeout:g} s")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    try:
        doc = json.loads(lines[-1])
        if not isinstance(doc, dict):
            raise ValueError(doc)
    except (IndexError, ValueError, RecursionError):
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return TorchFacts(python, error=f"{python} could not run the probe: {last[:MAX_TEXT]}")
    return TorchFacts(
        python,
        torch=_str(doc.get("torch")),
        import_error=_str(doc.get("import_error")),
        cuda=_str(doc.get("cuda")),
        hip=_str(doc.get("hip")),
        available=doc["available"] if isinstance(doc.get("available"), bool) else None,
        device_count=doc["device_count"] if _small_int(doc.get("device_count")) else None,
        arch_list=_strings(doc.get("arch_list")),
        capabilities=tuple(
            (c[0], c[1])
            for c in _items(doc.get("capabilities"))
            if isinstance(c, list) and len(c) == 2 and all(_small_int(n) for n in c)
        ),
        cuda_error=_str(doc.get("cuda_error")),
        warnings=_strings(doc.get("warnings")),
    )


def _str(value: object) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def _items(value: object) -> list[object]:
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def _strings(value: object) -> tuple[str, ...]:
    return tuple(s[:MAX_TEXT] for s in _items(value) if isinstance(s, str))


def _small_int(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1000
