"""CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, judged against the GPUs NVML sees.

CUDA's rules: ids in CUDA_VISIBLE_DEVICES are read left to right and the first one that matches no GPU
ends the list (what follows it is ignored); an id is an ordinal in CUDA's order or a (prefix of a) GPU
or MIG UUID. CUDA's order is "fastest first" unless CUDA_DEVICE_ORDER=PCI_BUS_ID, while nvidia-smi and
NVML number GPUs in PCI bus order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gputui.doctor.facts import GpuFact
from gputui.doctor.report import Check, ok, problem, warning

PCI_ORDER = "PCI_BUS_ID"
FASTEST_FIRST = "FASTEST_FIRST"


def fastest_first(gpus: tuple[GpuFact, ...]) -> list[GpuFact]:
    """CUDA's default order as it is likely to be: newest architecture and highest clock first, PCI bus
    order between equals (the exact heuristic is CUDA's own)."""
    return sorted(
        gpus,
        key=lambda g: (
            -(g.capability or (0, 0))[0],
            -(g.capability or (0, 0))[1],
            -(g.sm_clock_max or 0),
            g.pci_bus_id or "",
            g.index,
        ),
    )


def cuda_order(gpus: tuple[GpuFact, ...], env: Mapping[str, str]) -> list[GpuFact]:
    usable = tuple(g for g in gpus if not g.lost)
    if env.get("CUDA_DEVICE_ORDER") == PCI_ORDER:
        return sorted(usable, key=lambda g: (g.pci_bus_id or "", g.index))
    return fastest_first(usable)


@dataclass(frozen=True)
class Visible:
    selected: tuple[GpuFact, ...]  # in CUDA's numbering: selected[0] is cuda:0
    stopped_at: str | None = None  # the first id that matches no GPU; it and the rest are ignored
    ignored: tuple[str, ...] = ()
    mig: tuple[str, ...] = ()  # MIG ids (not resolved against MIG instances here)
    repeated: tuple[str, ...] = ()


def parse_visible(value: str, order: list[GpuFact]) -> Visible:
    selected: list[GpuFact] = []
    mig: list[str] = []
    repeated: list[str] = []
    ids = [part.strip() for part in value.split(",")]
    for i, item in enumerate(ids):
        gpu = _match(item, order)
        if item.startswith("MIG-"):
            mig.append(item)
            continue
        if gpu is None:
            return Visible(tuple(selected), item, tuple(ids[i + 1 :]), tuple(mig), tuple(repeated))
        if gpu in selected:
            repeated.append(item)
            continue
        selected.append(gpu)
    return Visible(tuple(selected), mig=tuple(mig), repeated=tuple(repeated))


def _match(item: str, order: list[GpuFact]) -> GpuFact | None:
    if item.isdigit():
        n = int(item)
        return order[n] if n < len(order) else None
    if item.startswith("GPU-") and len(item) > 4:
        found = [g for g in order if g.uuid and g.uuid.startswith(item)]
        return found[0] if len(found) == 1 else None  # a prefix matching two GPUs is invalid
    return None


def _names(gpus: tuple[GpuFact, ...]) -> str:
    return ", ".join(f"cuda:{n} = NVML GPU {g.index}" for n, g in enumerate(gpus))


def visible_devices(env: Mapping[str, str], gpus: tuple[GpuFact, ...], whose: str = "") -> Check:
    """CUDA_VISIBLE_DEVICES of this shell (or, with `whose`, of a process)."""
    name = f"{whose}CUDA_VISIBLE_DEVICES"
    value = env.get("CUDA_VISIBLE_DEVICES")
    order = cuda_order(gpus, env)
    if value is None:
        return ok("cuda", f"{name} is unset: CUDA sees all {len(order)} GPUs")
    if not value.strip():
        return problem(
            "cuda",
            f"{name} is set but empty: CUDA sees no GPU",
            "`unset CUDA_VISIBLE_DEVICES`, or list the GPUs to use (CUDA_VISIBLE_DEVICES=0,1)",
        )
    seen = parse_visible(value, order)
    if not seen.selected and not seen.mig:
        why = (
            "-1 hides every GPU" if value.strip().startswith("-1") else f"{seen.stopped_at!r} matches no GPU"
        )
        return problem(
            "cuda",
            f"{name}={value}: {why}, so CUDA sees no GPU",
            f"use ids 0..{len(order) - 1} or UUIDs from `nvidia-smi -L`, or unset it",
        )
    if seen.stopped_at is not None:
        rest = f" and the ids after it ({', '.join(seen.ignored)})" if seen.ignored else ""
        return problem(
            "cuda",
            f"{name}={value}: {seen.stopped_at!r} matches no GPU, so CUDA ignores it"
            f"{rest}; "
            f"CUDA sees only {_names(seen.selected)}",
            f"use ids 0..{len(order) - 1} or UUIDs from `nvidia-smi -L`",
        )
    if seen.repeated:
        return warning(
            "cuda",
            f"{name}={value} names the same GPU twice ({', '.join(seen.repeated)})",
            "list each GPU once",
        )
    parts = [_names(seen.selected)] if seen.selected else []
    if seen.mig:
        parts.append(f"MIG instances {', '.join(seen.mig)} (not checked)")
    return ok("cuda", f"{name}={value}: {'; '.join(parts)}")


def device_order(env: Mapping[str, str], gpus: tuple[GpuFact, ...]) -> Check:
    setting = env.get("CUDA_DEVICE_ORDER")
    if setting == PCI_ORDER:
        return ok("cuda", "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA numbers GPUs as nvidia-smi does")
    if setting not in (None, FASTEST_FIRST):
        return warning(
            "cuda",
            f"CUDA_DEVICE_ORDER={setting} is not a value CUDA knows: it uses FASTEST_FIRST",
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID (or unset it)",
        )
    usable = tuple(g for g in gpus if not g.lost)
    fast = fastest_first(usable)
    pci = sorted(usable, key=lambda g: (g.pci_bus_id or "", g.index))
    if [g.index for g in fast] == [g.index for g in pci]:
        return ok("cuda", "CUDA's default order (fastest first) is nvidia-smi's PCI order on this machine")
    differ = ", ".join(
        f"cuda:{n} = NVML GPU {g.index} ({g.name or '?'})"
        for n, g in enumerate(fast)
        if g.index != pci[n].index
    )
    return warning(
        "cuda",
        f"CUDA's default order (fastest first) is not nvidia-smi's here: {differ}",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA's ids are nvidia-smi's",
    )
