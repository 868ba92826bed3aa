"""What an Xid means and what to do about it: the common ones a GPU node sees, after NVIDIA's public Xid
documentation (the Xid catalog's description and resolution buckets), said in a line each.

`action` is what an operator does, from the least to the most drastic:
- "fix_app": the application faulted (a bad pointer, an illegal instruction); the GPU is fine;
- "restart_app": the GPU stopped the application's work; restart it, nothing to do on the GPU;
- "reset": reset the GPU when no process uses it (nvidia-smi -r -i N), or reboot the node;
- "drain": take the GPU out of service now (no new jobs), then reset it;
- "rma": the GPU needs servicing or replacing: drain it and open an RMA.
`severity`: "error" (act now: jobs on the GPU are or will be hurt), "warning" (act when convenient), "info"
(the application's own fault, or the echo of an earlier error).
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIONS = ("fix_app", "restart_app", "reset", "drain", "rma")
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class XidInfo:
    xid: int
    name: str  # a few words: "GPU fallen off the bus"
    what: str  # what happened, one line
    fix: str  # what to do, one line
    action: str  # one of ACTIONS
    severity: str  # one of SEVERITIES


def _x(xid: int, name: str, what: str, fix: str, action: str, severity: str) -> XidInfo:
    return XidInfo(xid, name, what, fix, action, severity)


XIDS: dict[int, XidInfo] = {
    x.xid: x
    for x in (
        _x(
            13,
            "graphics engine exception",
            "a kernel faulted on the GPU: most often an out-of-bounds access or an illegal instruction",
            "fix the application (run it under compute-sanitizer); if many programs hit it, test the GPU",
            "fix_app",
            "info",
        ),
        _x(
            31,
            "GPU memory page fault",
            "a kernel touched GPU memory it does not own (an illegal address); the context was stopped",
            "fix the application (compute-sanitizer); if it follows no code change, suspect the driver",
            "fix_app",
            "info",
        ),
        _x(
            43,
            "GPU stopped processing",
            "the driver stopped one application's work after it faulted; other work on the GPU goes on",
            "restart the application; nothing to do on the GPU unless other Xids come with it",
            "restart_app",
            "info",
        ),
        _x(
            45,
            "preemptive cleanup",
            "the driver tore down a context after an earlier error, or because its process was killed",
            "look at the Xid that came before it: that one says what went wrong",
            "restart_app",
            "info",
        ),
        _x(
            48,
            "double-bit ECC error",
            "an uncorrectable memory error: data in GPU memory was lost, and applications using it crash",
            "drain the GPU and reset it when no process uses it (the page is retired); if it recurs, RMA",
            "drain",
            "error",
        ),
        _x(
            61,
            "internal micro-controller warning",
            "the GPU's internal micro-controller hit a breakpoint or warning",
            "reset the GPU when no process uses it; if it recurs, update the driver, then RMA",
            "reset",
            "warning",
        ),
        _x(
            62,
            "internal micro-controller halt",
            "the GPU's internal micro-controller halted: the GPU cannot be trusted until it is reset",
            "drain the GPU and reset it; if it recurs, RMA",
            "drain",
            "error",
        ),
        _x(
            63,
            "row remap or page retirement recorded",
            "a memory row was marked for remapping (page retirement before Ampere) after a memory error",
            "reset the GPU when no process uses it, so the remap takes effect; no RMA needed",
            "reset",
            "warning",
        ),
        _x(
            64,
            "row remap or page retirement failed",
            "a bad memory row could not be remapped or retired: the error will come back",
            "drain the GPU and open an RMA",
            "rma",
            "error",
        ),
        _x(
            74,
            "NVLink error",
            "an NVLink link reported an error; transfers over it may have failed",
            "drain and reset the GPU (or the node, for NVSwitch systems); if it recurs, check the link, RMA",
            "drain",
            "error",
        ),
        _x(
            79,
            "GPU fallen off the bus",
            "the GPU stopped answering on PCIe: every application on it is gone and NVML cannot reach it",
            "drain the node and reboot it; check power, cooling and seating; if it recurs, RMA",
            "drain",
            "error",
        ),
        _x(
            92,
            "high single-bit ECC error rate",
            "corrected memory errors arrive unusually often: the memory may be wearing out",
            "watch the ECC counts; reset the GPU when idle; if the rate persists, RMA",
            "reset",
            "warning",
        ),
        _x(
            94,
            "contained ECC error",
            "an uncorrectable memory error hit only the applications that used the bad memory",
            "restart those applications; reset the GPU when no process uses it so the row is remapped",
            "reset",
            "warning",
        ),
        _x(
            95,
            "uncontained ECC error",
            "an uncorrectable memory error could not be contained: every application on the GPU is affected",
            "drain the GPU and reset it; if it recurs, RMA",
            "drain",
            "error",
        ),
        _x(
            119,
            "GSP RPC timeout",
            "the GPU System Processor firmware did not answer the driver in time",
            "drain the GPU and reset it (or reboot); if it recurs, update the driver or open an RMA",
            "drain",
            "error",
        ),
        _x(
            120,
            "GSP error",
            "the GPU System Processor firmware reported an error",
            "drain the GPU and reset it (or reboot); if it recurs, update the driver or open an RMA",
            "drain",
            "error",
        ),
    )
}


def describe(xid: int) -> XidInfo:
    """The table's entry, or a generic one: an Xid NVML reported critical and this table does not know."""
    known = XIDS.get(xid)
    if known is not None:
        return known
    return XidInfo(
        xid,
        "Xid error",
        f"the driver reported Xid {xid}, which gputui does not describe",
        "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors); check the kernel log",
        "drain",
        "error",
    )


def xid_name(xid: int) -> str:
    """ "GPU fallen off the bus" for 79: what a list of events shows next to the number."""
    return describe(xid).name
