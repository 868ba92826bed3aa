"""`gputui --once`: a compact table, every GPU on a line and its processes under it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gputui import __version__, cells
from gputui.collect.classify import SUSPICIOUS, UNACCOUNTED_MIN
from gputui.model import GpuSample, MigInstance, ProcessRow, Snapshot
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


def _name_cells(width: int | None) -> int:
    """On a narrow terminal the GPU name gives up cells first (down to 12), then the line's tail is cut."""
    return _NAME if width is None else max(12, min(_NAME, width - 5 - _GPU_FIELDS))


def gpu_header(width: int | None) -> str:
    return _fit(
        f"{'GPU':<3} {cells.pad('NAME', _name_cells(width))} {'UTIL':>4}  {'MEMORY':>16}  {'TEMP':>4}  "
        f"{'POWER':>11}  {'SM CLK':>8}  {'PST':>3}",
        width,
    )


def gpu_line(g: GpuSample, width: int | None = None) -> str:
    rest = _gpu_fields(g)
    name_w = _name_cells(width)
    name = g.name or NA
    if cells.width(name) > name_w:
        name = name.removeprefix("NVIDIA ")  # every GPU here is one: its model is what tells them apart
    name = cells.pad(name, name_w)
    if g.lost:
        return _fit(f"{g.index:<3} {name} LOST — the GPU fell off the bus or needs a reset", width)
    return _fit(f"{g.index:<3} {name} {rest}", width)


def _gpu_fields(g: GpuSample) -> str:
    line = (
        f"{fmt_pct(g.util_gpu):>4}  {_gib(g.mem_used, g.mem_total):>16}  "
        f"{fmt_num(g.temperature, 'C'):>4}  {_power(g):>11}  {fmt_num(g.sm_clock, ' MHz'):>8}  "
        f"{'P' + str(g.pstate) if g.pstate is not None else NA:>3}"
    )
    throttled = [r for r in g.throttle_reasons or () if r in _NOTABLE_REASONS]
    if throttled:
        line += "  throttled: " + ",".join(throttled)
    if g.enc_util or g.dec_util:
        line += f"  enc {fmt_pct(g.enc_util)} dec {fmt_pct(g.dec_util)}"
    return line


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
    """One MIG instance, under its GPU: `MIG 1/0 3g.40gb  mem 12.1/39.2 GiB  util n/a  1 process`."""
    count = f"{procs} process{'es' if procs != 1 else ''}"
    ids = f"{m.gpu_instance}/{m.compute_instance}"
    return (
        f"{_INDENT}MIG {ids:<5} {printable(m.profile or NA)[:12]:<8}  "
        f"mem {_gib(m.mem_used, m.mem_total)}  util {fmt_pct(m.util)}  {count}"
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
    lines = [head, gpu_header(width)]
    if not snap.gpus:
        lines.append("(no GPUs)")
    for g in snap.gpus:
        lines.append(gpu_line(g, width))
        lines.extend(_gpu_processes(snap, g, width))
        extra = snap.unaccounted_memory.get(g.index)
        if extra is not None and extra >= UNACCOUNTED_MIN:  # the TUI's threshold: the same rows
            lines.append(
                f"    {'':>7} {'unaccounted':<14} {fmt_bytes(extra):>10}  (used by no listed process)"
            )
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
