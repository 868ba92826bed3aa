"""`gputui --once`: a compact table, every GPU on a line and its processes under it."""

from __future__ import annotations

import time

from gputui import __version__
from gputui.collect.classify import SUSPICIOUS
from gputui.model import GpuSample, ProcessRow, Snapshot
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


def gpu_line(g: GpuSample) -> str:
    name = (g.name or NA)[:24]
    if g.lost:
        return f"{g.index:<3} {name:<24} LOST — the GPU fell off the bus or needs a reset"
    line = (
        f"{g.index:<3} {name:<24} {fmt_pct(g.util_gpu):>4}  {_gib(g.mem_used, g.mem_total):>16}  "
        f"{fmt_num(g.temperature, 'C'):>4}  {_power(g):>11}  {fmt_num(g.sm_clock, ' MHz'):>8}  "
        f"{'P' + str(g.pstate) if g.pstate is not None else NA:>3}"
    )
    throttled = [r for r in g.throttle_reasons or () if r in _NOTABLE_REASONS]
    if throttled:
        line += "  throttled: " + ",".join(throttled)
    if g.enc_util or g.dec_util:
        line += f"  enc {fmt_pct(g.enc_util)} dec {fmt_pct(g.dec_util)}"
    return line


def process_line(p: ProcessRow, width: int | None) -> str:
    user = printable(p.user or ("?" if p.visible else "-"))
    cpu = fmt_pct(p.cpu_percent)
    command = p.command if p.visible else "(not visible here: another PID namespace, or gone)"
    on_nvml = bool(p.kinds)
    line = (
        f"    {p.pid:>7} {user[:10]:<10} {p.kinds or '-':<3} "
        f"{fmt_bytes(p.used_memory) if on_nvml else '-':>10} {fmt_pct(p.sm_util) if on_nvml else '-':>4} "
        f"{cpu:>5} {fmt_bytes(p.rss):>10} {p.category:<13} {printable(command or NA)}"
    )
    return line[:width] if width else line


def render(snap: Snapshot, width: int | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap.time))
    head = (
        f"gputui {__version__} · {snap.hostname} · driver {snap.driver_version or NA} · "
        f"CUDA {snap.cuda_driver_version or NA} · {stamp}"
    )
    if snap.source == "demo":
        head += " · DEMO (simulated GPUs)"
    lines = [
        head,
        f"{'GPU':<3} {'NAME':<24} {'UTIL':>4}  {'MEMORY':>16}  {'TEMP':>4}  {'POWER':>11}  "
        f"{'SM CLK':>8}  {'PST':>3}",
    ]
    if not snap.gpus:
        lines.append("(no GPUs)")
    for g in snap.gpus:
        lines.append(gpu_line(g))
        procs = snap.processes_on(g.index)
        if procs:
            lines.append(
                f"    {'PID':>7} {'USER':<10} {'TYP':<3} {'GPU MEM':>10} {'SM%':>4} {'CPU%':>5} "
                f"{'RSS':>10} {'CLASS':<13} COMMAND"
            )
        lines.extend(process_line(p, width) for p in procs)
        extra = snap.unaccounted_memory.get(g.index)
        if extra:
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
            lines.append(f"  ! {p.pid:>7} {p.category:<13} {printable(p.reason)}"[: width or None])
    if snap.unreadable_fds:
        lines.append(f"! {snap.unreadable_fds} processes not readable — run as root to see every holder")
    lines.extend(f"! {e}" for e in snap.errors)
    return "\n".join(lines)
