"""Is a GPU healthy? One list of problems from what NVML said (GpuHealth, Xid events), shared by the GPU
panes' mark, the doctor and the exporter, so they never disagree.

Severity: "error" needs action now (drain, reset, RMA); "warning" degrades the job (a PCIe link that
trained narrow) or needs a reset when convenient.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gputui.analyze.xid import describe
from gputui.model import GpuSample, XidEvent

ERROR = "error"
WARNING = "warning"
BUSY_FOR_PCIE_GEN = 50  # % util: an idle link drops its generation to save power (ASPM); busy, it should not


@dataclass(frozen=True)
class Problem:
    gpu: int
    severity: str
    short: str  # for a pane's mark: "REMAP PENDING", "Xid 79"
    text: str  # one line: what was seen
    fix: str  # one line: what to do


def problems(g: GpuSample, xids: Iterable[XidEvent] = ()) -> list[Problem]:
    """`g`'s problems, the worst first. `xids`: the Xid events seen (recent ones: the caller keeps them)."""
    out: list[Problem] = []
    h = g.health

    def add(severity: str, short: str, text: str, fix: str) -> None:
        out.append(Problem(g.index, severity, short, text, fix))

    for x in sorted({x.xid for x in xids if x.gpu == g.index}):
        info = describe(x)
        add(ERROR, f"Xid {x}", f"GPU {g.index} reported Xid {x}: {info.name}", info.fix)
    if h is not None:
        if h.remap_failed:
            add(ERROR, "REMAP FAILED", f"GPU {g.index}: a memory row remap failed", "drain it, then RMA")
        if h.remap_pending:
            add(
                WARNING,
                "REMAP PENDING",
                f"GPU {g.index}: a memory row remap waits for a reset",
                "reset the GPU when no process uses it (nvidia-smi -r -i N)",
            )
        if h.retired_pages_pending:
            add(
                WARNING,
                "RETIRE PENDING",
                f"GPU {g.index}: a page retirement waits for a reset",
                "reset the GPU when no process uses it",
            )
        if h.ecc_uncorrected_volatile:
            add(
                ERROR,
                f"ECC {_errors(h.ecc_uncorrected_volatile)}",
                f"GPU {g.index}: {_errors(h.ecc_uncorrected_volatile, 'uncorrected ECC')} since the driver "
                "loaded",
                "drain it; reset it when idle; if they come back, RMA",
            )
        if h.pcie_width is not None and h.pcie_width_max and h.pcie_width < h.pcie_width_max:
            add(
                WARNING,
                f"PCIe x{h.pcie_width}",
                f"GPU {g.index}: PCIe link x{h.pcie_width}, the slot and GPU do x{h.pcie_width_max}",
                "reseat the GPU or check the riser/slot: host transfers run at a fraction of their speed",
            )
        busy = g.util_gpu is not None and g.util_gpu >= BUSY_FOR_PCIE_GEN
        if busy and h.pcie_gen is not None and h.pcie_gen_max and h.pcie_gen < h.pcie_gen_max:
            add(
                WARNING,
                f"PCIe gen{h.pcie_gen}",
                f"GPU {g.index}: PCIe gen {h.pcie_gen} while busy, it can do gen {h.pcie_gen_max}",
                "check the BIOS PCIe settings and the slot",
            )
    elif g.ecc_errors:
        add(
            ERROR,
            f"ECC {_errors(g.ecc_errors)}",
            f"GPU {g.index}: {_errors(g.ecc_errors, 'uncorrected ECC')} since the driver loaded",
            "drain it; reset it when idle; if they come back, RMA",
        )
    return sorted(out, key=lambda p: p.severity != ERROR)


def _errors(n: int, what: str = "") -> str:
    return f"{n} {what + ' ' if what else ''}error{'s' if n != 1 else ''}"
