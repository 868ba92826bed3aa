"""`gputui --once`: a compact table, every GPU on a line and its processes under it.

On GPUs with GPM (Hopper and newer) each GPU line has its SM and tensor activity beside NVML's
utilization (`SM`, `TC`); a GPU busy by NVML with its SMs nearly empty says `busy but starved: SM 6%` on a
line under it (which a narrow terminal does not cut); a GPM table after the GPUs lists every metric per
GPU and MIG instance. Where GPM is not armed (DCGM holds the counters, `--gpm off`) one line says why; a
box of older GPUs gets none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gputui import __version__, cells
from gputui.analyze.classify import SUSPICIOUS, UNACCOUNTED_MIN
from gputui.analyze.dip_causes import starved_sm
from gputui.model import GPM_RATES, GPM_RATIOS, GpmMetrics, GpuSample, MigInstance, ProcessRow, Snapshot
from gputui.units import NA, fmt_bytes, fmt_num, fmt_pct, printable

_NOTABLE_REASONS = {"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "sync_boost"}


def _gib(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return f"{fmt_bytes(used)} / {fmt_bytes(total)}"
    return f"{used / 2**30:.1f}/{total / 2**30:.1f} GiB"


def _power(g: GpuSample) -> str:
    if g.power is None:
        return NA
    return f"{g.power:.0f}/{g.power_limit:.0f} W" if g.power_limit is not None else f"{g.power:.0f} W"


_NAME = 24  # cells of the GPU name, when the terminal has room
_GPU_FIELDS = 56  # cells of UTIL to PST
_GPM_FIELDS = 10  # cells of SM and TC, on a box with GPM


def _name_cells(width: int | None, gpm: bool = False) -> int:
    """On a narrow terminal the GPU name gives up cells first (down to 12), then the line's tail is cut."""
    fields = _GPU_FIELDS + (_GPM_FIELDS if gpm else 0)
    return _NAME if width is None else max(12, min(_NAME, width - 5 - fields))


def gpu_header(width: int | None, gpm: bool = False) -> str:
    """`gpm`: a GPU of the box has GPM metrics: SM and TC columns after UTIL."""
    sm_tc = f"  {'SM':>4} {'TC':>4}" if gpm else ""
    return _fit(
        f"{'GPU':<3} {cells.pad('NAME', _name_cells(width, gpm))} {'UTIL':>4}{sm_tc}  {'MEMORY':>16}  "
        f"{'TEMP':>4}  {'POWER':>11}  {'SM CLK':>8}  {'PST':>3}",
        width,
    )


def gpu_line(g: GpuSample, width: int | None = None, gpm: bool = False) -> str:
    rest = _gpu_fields(g, gpm)
    name_w = _name_cells(width, gpm)
    name = g.name or NA
    if cells.width(name) > name_w:
        name = name.removeprefix("NVIDIA ")  # every GPU here is one: its model is what tells them apart
    name = cells.pad(name, name_w)
    if g.lost:
        return _fit(f"{g.index:<3} {name} LOST — the GPU fell off the bus or needs a reset", width)
    return _fit(f"{g.index:<3} {name} {rest}", width)


STARVED = "busy but starved:"
STARVED_WHY = "the GPU waits on the host (data loading, kernel launches) or on another rank"


def _gpu_fields(g: GpuSample, gpm: bool = False) -> str:
    sm_tc = ""
    if gpm:  # n/a on a GPU without GPM beside one that has it (a mixed box)
        m = g.gpm or GpmMetrics()
        sm_tc = f"  {fmt_pct(m.sm_active):>4} {fmt_pct(m.tensor):>4}"
    line = (
        f"{fmt_pct(g.util_gpu):>4}{sm_tc}  {_gib(g.mem_used, g.mem_total):>16}  "
        f"{fmt_num(g.temperature, 'C'):>4}  {_power(g):>11}  {fmt_num(g.sm_clock, ' MHz'):>8}  "
        f"{'P' + str(g.pstate) if g.pstate is not None else NA:>3}"
    )
    throttled = [r for r in g.throttle_reasons or () if r in _NOTABLE_REASONS]
    if throttled:
        line += "  throttled: " + ",".join(throttled)
    if g.enc_util or g.dec_util:
        line += f"  enc {fmt_pct(g.enc_util)} dec {fmt_pct(g.dec_util)}"
    return line


# -- GPM: every metric, per GPU and MIG instance -------------------------------------------------------

# Each GpmMetrics field: its column header in --once, and its name in words (the GPU detail's label).
GPM_LABELS: dict[str, tuple[str, str]] = {
    "graphics": ("GR", "graphics engine"),
    "sm_active": ("SM", "SM active"),
    "sm_occupancy": ("OCC", "SM occupancy"),
    "tensor": ("TENS", "tensor (any pipe)"),
    "hmma": ("HMMA", "tensor HMMA (fp16/bf16)"),
    "imma": ("IMMA", "tensor IMMA (int8)"),
    "dfma": ("DFMA", "tensor DFMA (fp64)"),
    "dram": ("DRAM", "DRAM"),
    "fp16": ("FP16", "FP16 pipe"),
    "fp32": ("FP32", "FP32 pipe"),
    "fp64": ("FP64", "FP64 pipe"),
    "integer": ("INT", "integer pipe"),
    "pcie_rx": ("PCIe rx", "PCIe rx (host→device)"),
    "pcie_tx": ("PCIe tx", "PCIe tx (device→host)"),
    "nvlink_rx": ("NVLink rx", "NVLink rx"),
    "nvlink_tx": ("NVLink tx", "NVLink tx"),
}
# What each one means, for the GPU detail (one line each).
GPM_MEANINGS: dict[str, str] = {
    "graphics": "time any kernel or context ran (about NVML's utilization)",
    "sm_active": "share of the SMs with at least one warp resident, over the interval",
    "sm_occupancy": "warps resident on the SMs, of the most they hold",
    "tensor": "time any tensor-core pipe was busy",
    "hmma": "half-precision matmuls: fp16, bf16 (and tf32)",
    "imma": "integer matmuls: int8",
    "dfma": "double-precision matmuls",
    "dram": "time the memory interface was busy: bandwidth used",
    "fp16": "fp16 arithmetic outside the tensor cores",
    "fp32": "fp32 arithmetic outside the tensor cores",
    "fp64": "fp64 arithmetic outside the tensor cores",
    "integer": "integer arithmetic",
    "pcie_rx": "bytes/s the GPU received over PCIe",
    "pcie_tx": "bytes/s the GPU sent over PCIe",
    "nvlink_rx": "bytes/s received over all NVLink links",
    "nvlink_tx": "bytes/s sent over all NVLink links",
}
_RATIO_CELLS = 5
_RATE_CELLS = 11  # `999.9 MiB/s`


def gpm_value(m: GpmMetrics, name: str) -> str:
    """One metric as shown: `61%`, `450.2 MiB/s`; `n/a` when this one failed or is not supported."""
    value = getattr(m, name)
    if name in GPM_RATES:
        return NA if value is None else f"{fmt_bytes(value)}/s"
    return fmt_pct(value)


def gpm_header(interval: float | None = None) -> str:
    """The GPM table's header; `interval`: the seconds the metrics span (`GPM 0.1 s`)."""
    ratios = "".join(f"{GPM_LABELS[n][0]:>{_RATIO_CELLS}}" for n in GPM_RATIOS)
    rates = "".join(f"  {GPM_LABELS[n][0]:>{_RATE_CELLS}}" for n in GPM_RATES)
    first = "GPM" if interval is None else f"GPM {interval:.2g} s"
    return f"{first:<13}{ratios}{rates}"


def gpm_row(label: str, m: GpmMetrics | None) -> str:
    """One GPU's (or MIG instance's) every metric, in gpm_header's columns."""
    if m is None:
        return f"{label:<13}" + f"{NA:>{_RATIO_CELLS}}"
    ratios = "".join(f"{gpm_value(m, n):>{_RATIO_CELLS}}" for n in GPM_RATIOS)
    rates = "".join(f"  {gpm_value(m, n):>{_RATE_CELLS}}" for n in GPM_RATES)
    return f"{label:<13}{ratios}{rates}"


GPM_LEGEND = (
    "GPM: SM = SMs with work, OCC = warps resident of the most, TENS = tensor cores (HMMA fp16/bf16, "
    "IMMA int8, DFMA fp64), GR = any kernel ran; UTIL (NVML) only says a kernel ran"
)


def _gpm_lines(snap: Snapshot) -> list[str]:
    """The GPM table (every GPU with GPM, and its MIG instances), or the one line that says why there is
    none; nothing on a box without GPM."""
    if not any(g.gpm is not None for g in snap.gpus):
        return [printable(snap.gpm_note)] if snap.gpm_note else []
    intervals = [g.gpm.interval for g in snap.gpus if g.gpm is not None and g.gpm.interval is not None]
    lines = [gpm_header(max(intervals) if intervals else None)]
    for g in snap.gpus:
        if g.gpm is None and not g.mig:
            continue
        lines.append(gpm_row(str(g.index), g.gpm))
        for m in g.mig:
            lines.append(gpm_row(f"{g.index} MIG {m.gpu_instance}/{m.compute_instance}", m.gpm))
    if snap.gpm_note:
        lines.append(printable(snap.gpm_note))
    lines.append(GPM_LEGEND)
    return lines


def _fit(line: str, width: int | None) -> str:
    return line if width is None else cells.cut(line, width)


@dataclass(frozen=True)
class _Column:
    header: str
    cells: int
    value: Callable[[ProcessRow], str]
    right: bool = True


def _gpu_value(text: Callable[[ProcessRow], str]) -> Callable[[ProcessRow], str]:
    return lambda p: text(p) if p.kinds else "-"  # NVML's numbers: none for a process it does not list


_COLUMNS = {
    "pid": _Column("PID", 7, lambda p: str(p.pid)),
    "user": _Column("USER", 10, lambda p: p.user or ("?" if p.visible else "-"), right=False),
    "kinds": _Column("TYP", 3, lambda p: p.kinds or "-", right=False),
    "gpu_mem": _Column("GPU MEM", 10, _gpu_value(lambda p: fmt_bytes(p.used_memory))),
    "sm": _Column("SM%", 4, _gpu_value(lambda p: fmt_pct(p.sm_util))),
    "cpu": _Column("CPU%", 5, lambda p: fmt_pct(p.cpu_percent)),  # None (a first reading): n/a, not 0 %
    "rss": _Column("RSS", 10, lambda p: fmt_bytes(p.rss)),
    "class": _Column("CLASS", 13, lambda p: p.category, right=False),
}
_DROPPED_FIRST = ("rss", "kinds", "sm")  # on a narrow terminal, so that COMMAND keeps some room
_MIN_COMMAND = 24
_INDENT = "    "


def process_columns(width: int | None) -> tuple[str, ...]:
    """The columns that leave COMMAND at least _MIN_COMMAND cells of `width` (all of them when None)."""
    keys = list(_COLUMNS)
    for key in _DROPPED_FIRST:
        if width is None or width - _row_cells(keys) >= _MIN_COMMAND:
            break
        keys.remove(key)
    return tuple(keys)


def _row_cells(keys: list[str]) -> int:
    return len(_INDENT) + sum(_COLUMNS[k].cells + 1 for k in keys)


def _row(values: list[str], keys: tuple[str, ...], command: str, width: int | None) -> str:
    parts = [
        cells.pad(v, _COLUMNS[k].cells, right=_COLUMNS[k].right) for v, k in zip(values, keys, strict=True)
    ]
    return _fit(_INDENT + " ".join(parts) + " " + command, width)


def process_header(width: int | None) -> str:
    keys = process_columns(width)
    return _row([_COLUMNS[k].header for k in keys], keys, "COMMAND", width)


def process_line(p: ProcessRow, width: int | None) -> str:
    keys = process_columns(width)
    command = p.command if p.visible else "(not visible here: another PID namespace, or gone)"
    return _row([printable(_COLUMNS[k].value(p)) for k in keys], keys, printable(command or NA), width)


def mig_line(m: MigInstance, procs: int) -> str:
    """One MIG instance, under its GPU: `MIG 1/0 3g.40gb  mem 12.1/39.2 GiB  util n/a  SM 86% TC 57%
    1 process` (SM and TC where GPM measured the instance)."""
    count = f"{procs} process{'es' if procs != 1 else ''}"
    ids = f"{m.gpu_instance}/{m.compute_instance}"
    gpm = f"SM {fmt_pct(m.gpm.sm_active)} TC {fmt_pct(m.gpm.tensor)}  " if m.gpm is not None else ""
    return (
        f"{_INDENT}MIG {ids:<5} {printable(m.profile or NA)[:12]:<8}  "
        f"mem {_gib(m.mem_used, m.mem_total)}  util {fmt_pct(m.util)}  {gpm}{count}"
    )


def _gpu_processes(snap: Snapshot, g: GpuSample, width: int | None) -> list[str]:
    """The GPU's processes; on a MIG GPU each instance's under its line, then those of no known instance
    (device holders such as DataLoader workers: /dev/nvidiaN does not say which instance)."""
    procs = snap.processes_on(g.index)
    lines = [process_header(width)] if procs else []
    if not g.mig_mode:
        return lines + [process_line(p, width) for p in procs]
    if not g.mig:
        lines.append(f"{_INDENT}MIG on: no instances")
    placed: set[int] = set()
    for m in g.mig:
        mine = [
            p
            for p in procs
            if p.gpu_instance == m.gpu_instance
            and (p.compute_instance is None or p.compute_instance == m.compute_instance)
        ]
        placed.update(id(p) for p in mine)
        lines.append(mig_line(m, len(mine)))
        lines.extend(process_line(p, width) for p in mine)
    rest = [p for p in procs if id(p) not in placed]
    if rest and g.mig:
        lines.append(f"{_INDENT}(in no listed MIG instance: device-file holders, or NVML did not say)")
    return lines + [process_line(p, width) for p in rest]


ONE_READING_LEGEND = "CPU% n/a: one reading (a rate needs two); `--once --interval 1` measures it over 1 s"


def render(snap: Snapshot, width: int | None = None, one_reading: bool = False) -> str:
    """`one_reading`: the snapshot is a first reading: a legend says why its CPU% is n/a."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.time))
    head = (
        f"gputui {__version__} · {snap.hostname} · driver {snap.driver_version or NA} · "
        f"CUDA {snap.cuda_driver_version or NA} · {stamp}"
    )
    if snap.source == "demo":
        head += " · DEMO (simulated GPUs)"
    gpm = any(g.gpm is not None for g in snap.gpus)
    lines = [head, gpu_header(width, gpm)]
    if not snap.gpus:
        lines.append("(no GPUs)")
    for g in snap.gpus:
        lines.append(gpu_line(g, width, gpm))
        if (sm := starved_sm(g)) is not None:  # under its line: a narrow terminal cuts the line's tail
            lines.append(f"{_INDENT}{STARVED} SM {sm:.0f}% while util {g.util_gpu}%: {STARVED_WHY}")
        lines.extend(_gpu_processes(snap, g, width))
        extra = snap.unaccounted_memory.get(g.index)
        if extra is not None and extra >= UNACCOUNTED_MIN:  # the TUI's threshold: the same rows
            lines.append(
                f"    {'':>7} {'unaccounted':<14} {fmt_bytes(extra):>10}  (used by no listed process)"
            )
    lines.extend(_gpm_lines(snap))
    others = snap.processes_on(None)
    if others:
        lines.append("(GPU unknown: holding only /dev/nvidiactl or /dev/nvidia-uvm)")
        lines.extend(process_line(p, width) for p in others)
    suspicious = [p for p in snap.processes if p.category in SUSPICIOUS]
    if suspicious:
        lines.append("suspicious:")
        for p in suspicious:
            lines.append(f"  ! {p.pid:>7} {p.category:<13} {printable(p.reason)}")
    if snap.unreadable_fds:
        lines.append(f"! {snap.unreadable_fds} processes not readable — run as root to see every holder")
    lines.extend(f"! {printable(e)}" for e in snap.errors)
    if one_reading and any(p.cpu_percent is None and p.visible for p in snap.processes):
        lines.append(ONE_READING_LEGEND)
    return "\n".join(_fit(line, width) for line in lines)
