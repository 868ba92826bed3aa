"""CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, judged against the GPUs NVML sees.

CUDA's rules: ids in CUDA_VISIBLE_DEVICES are read left to right and the first one that matches no GPU
ends the list (what follows it is ignored); an id is an ordinal in CUDA's order or a (prefix of a) GPU
or MIG UUID: `MIG-<uuid>`, or the older `MIG-GPU-<gpu uuid>/<GPU instance>/<compute instance>`. CUDA's
order is "fastest first" unless CUDA_DEVICE_ORDER=PCI_BUS_ID, while nvidia-smi and NVML number GPUs in
PCI bus order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gputui.doctor.facts import GpuFact
from gputui.doctor.report import Check, ok, problem, warning
from gputui.model import MigInstance

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
    mig: tuple[str, ...] = ()  # MIG ids
    repeated: tuple[str, ...] = ()
    # What each of `mig` names ("MIG 3g.40gb (GPU instance 1, compute instance 0) on NVML GPU 0"); None:
    # not checked (the GPUs' MIG instances are not known)
    mig_named: tuple[str | None, ...] = ()


def parse_visible(value: str, order: list[GpuFact]) -> Visible:
    selected: list[GpuFact] = []
    mig: list[str] = []
    named: list[str | None] = []
    repeated: list[str] = []
    # A MIG id is judged only when every MIG-enabled GPU's instances are known (NVML listed them).
    known = any(g.mig_instances for g in order) and all(g.mig_instances for g in order if g.mig)
    ids = [part.strip() for part in value.split(",")]
    for i, item in enumerate(ids):
        if item.startswith("MIG-"):
            found = _match_mig(item, order)
            if found is not None or not known:
                mig.append(item)
                named.append(_mig_name(*found) if found is not None else None)
                continue
            gpu = None  # names no MIG instance there is: it ends the list, as an unknown GPU id does
        else:
            gpu = _match(item, order)
        if gpu is None:
            return Visible(
                tuple(selected), item, tuple(ids[i + 1 :]), tuple(mig), tuple(repeated), tuple(named)
            )
        if gpu in selected:
            repeated.append(item)
            continue
        selected.append(gpu)
    return Visible(tuple(selected), mig=tuple(mig), repeated=tuple(repeated), mig_named=tuple(named))


def _match_mig(item: str, order: list[GpuFact]) -> tuple[GpuFact, MigInstance] | None:
    """The instance a MIG id names: `MIG-GPU-<gpu uuid>/<gi>/<ci>` (the form of older drivers) or
    `MIG-<uuid>` (or a unique prefix of one, as for GPUs)."""
    if item.startswith("MIG-GPU-"):
        gpu_uuid, _, rest = item[len("MIG-") :].partition("/")
        gi, _, ci = rest.partition("/")
        if not (gi.isdigit() and ci.isdigit()):
            return None
        return next(
            (
                (g, m)
                for g in order
                if g.uuid == gpu_uuid
                for m in g.mig_instances
                if (m.gpu_instance, m.compute_instance) == (int(gi), int(ci))
            ),
            None,
        )
    if len(item) <= len("MIG-"):
        return None
    found = [(g, m) for g in order for m in g.mig_instances if m.uuid and m.uuid.startswith(item)]
    return found[0] if len(found) == 1 else None  # a prefix matching two instances is invalid


def _mig_name(gpu: GpuFact, m: MigInstance) -> str:
    return (
        f"MIG {m.profile or 'instance'} (GPU instance {m.gpu_instance}, compute instance "
        f"{m.compute_instance}) on NVML GPU {gpu.index}"
    )


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
    unchecked = [m for m, name in zip(seen.mig, seen.mig_named, strict=True) if name is None]
    parts += [f"{m} = {name}" for m, name in zip(seen.mig, seen.mig_named, strict=True) if name is not None]
    if unchecked:
        parts.append(f"MIG instances {', '.join(unchecked)} (not checked)")
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
