"""Snapshots as JSON (the schema is gputui/schema/snapshot-v1.json, documented in the README)."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any

from gputui.collect.agents import reply as agent_reply
from gputui.model import (
    GPM_RATIOS,
    SCHEMA_VERSION,
    AgentReport,
    GpmMetrics,
    GpuHealth,
    GpuSample,
    HostStats,
    MigInstance,
    Owner,
    ProcessRow,
    Snapshot,
    XidEvent,
)
from gputui.units import printable

MAX_OWNER_TEXT = 253  # a Kubernetes name's longest


def snapshot_to_dict(snap: Snapshot) -> dict[str, Any]:
    """Every field of the schema, null where unknown (what `--json` prints)."""
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for f in dataclasses.fields(Snapshot):
        if f.name == "host_processes":  # a UI aid, not part of the schema
            continue
        value = getattr(snap, f.name)
        if f.name in ("gpus", "processes"):
            value = [_plain(dataclasses.asdict(item)) for item in value]
        elif f.name == "unaccounted_memory":
            value = {str(k): v for k, v in value.items()}
        elif f.name == "agents":
            value = {str(k): agent_reply.to_dict(v) for k, v in value.items()}
        elif f.name == "errors":
            value = list(value)
        elif f.name == "xids":
            value = [dataclasses.asdict(x) for x in value]
        elif f.name == "host":
            if value is None:
                continue  # optional: absent rather than null, as in recordings made before it existed
            value = _plain(dataclasses.asdict(value))
        out[f.name] = value
    return out


def snapshot_from_dict(data: dict[str, Any]) -> Snapshot:
    """The inverse of snapshot_to_dict; raises ValueError on a record it cannot read."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"unsupported schema_version {data.get('schema_version')!r}")
    try:
        gpus = tuple(
            GpuSample(
                **{
                    **g,
                    "throttle_reasons": None
                    if g.get("throttle_reasons") is None
                    else tuple(g["throttle_reasons"]),
                    "mig": tuple(MigInstance(**{**m, "gpm": _gpm(m.get("gpm"))}) for m in g.get("mig") or ()),
                    "health": GpuHealth(**g["health"]) if g.get("health") is not None else None,
                    "gpm": _gpm(g.get("gpm")),
                }
            )
            for g in data["gpus"]
        )
        procs = tuple(
            ProcessRow(
                **{
                    **p,
                    "devices": None if p.get("devices") is None else tuple(p["devices"]),
                    "owner": _owner(p.get("owner")),
                }
            )
            for p in data["processes"]
        )
        return Snapshot(
            time=data["time"],
            hostname=data["hostname"],
            source=data["source"],
            driver_version=data["driver_version"],
            nvml_version=data["nvml_version"],
            cuda_driver_version=data["cuda_driver_version"],
            gpus=gpus,
            processes=procs,
            unaccounted_memory={int(k): v for k, v in data["unaccounted_memory"].items()},
            errors=tuple(data["errors"]),
            unreadable_fds=data["unreadable_fds"],
            agents=_agents(data.get("agents", {})),
            host=_host(data.get("host")),
            xids=tuple(XidEvent(**x) for x in data.get("xids") or ()),
            gpm_note=_note(data.get("gpm_note")),
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"not a gputui snapshot: {err}") from None


def _gpm(data: Any) -> GpmMetrics | None:
    """Recorded GPM metrics: every field optional, a finite number not below 0, a ratio at most 100."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError("gpm: not an object")
    unknown = set(data) - {f.name for f in dataclasses.fields(GpmMetrics)}
    if unknown:
        raise ValueError(f"gpm: unknown field {sorted(unknown)[0][:40]!r}")
    values = {k: _finite(f"gpm.{k}", v) for k, v in data.items()}
    for key in GPM_RATIOS:
        if values.get(key) is not None and values[key] > 100:
            raise ValueError(f"gpm.{key}: above 100 %")
    return GpmMetrics(**values)


def _note(data: Any) -> str | None:
    if data is None:
        return None
    if not isinstance(data, str):
        raise ValueError("gpm_note: not a string")
    return printable(data)[:300]


def _agents(data: dict[str, Any]) -> dict[int, AgentReport]:
    """Recorded agent reports, through the same validation as a live agent's reply."""
    out = {}
    for key, value in data.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 10):
            raise ValueError(f"not a pid: {key[:20]!r}")
        out[int(key)] = agent_reply.parse(int(key), value)
    return out


def _owner(data: Any) -> Owner | None:
    """A recording's owner: its strings are someone else's (a pod name, a job name): printable and short."""
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {f.name for f in dataclasses.fields(Owner)}:
        raise ValueError("owner: not an owner object")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"owner.{key}: not a string")
        values[key] = None if value is None else printable(value)[:MAX_OWNER_TEXT]
    if not values.get("kind") or not values.get("id"):
        raise ValueError("owner: no kind or id")
    return Owner(**values)


def _host(data: Any) -> HostStats | None:
    """Recorded host stats: every field optional, numbers finite and not negative, or the record is bad."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError("host: not an object")
    unknown = set(data) - {f.name for f in dataclasses.fields(HostStats)}
    if unknown:
        raise ValueError(f"host: unknown field {sorted(unknown)[0][:40]!r}")
    values = {k: _finite(k, v) for k, v in data.items() if k != "load"}
    for key in ("cpu_count", "mem_total", "mem_used", "swap_total", "swap_used"):
        if values.get(key) is not None and not isinstance(values[key], int):
            raise ValueError(f"host.{key}: not an integer")
    if values.get("cpu_percent") is not None and values["cpu_percent"] > 100:
        raise ValueError("host.cpu_percent: over 100")
    load = data.get("load")
    if load is not None:
        if not isinstance(load, list) or len(load) != 3:
            raise ValueError("host.load: not three load averages")
        load = tuple(_finite("load", v) for v in load)
        if None in load:
            raise ValueError("host.load: not three load averages")
    return HostStats(**values, load=load)


def _finite(key: str, value: Any) -> Any:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{key if '.' in key else 'host.' + key}: not a number >= 0")
    return value


# What one reading cannot measure: rates from two readings of a counter (a process's and the host's CPU
# time, NVML's PCIe and NVLink byte counters) and trends over a window. NVML's own sampled values (GPU and
# per-process utilization, from its sample buffers) need no second reading.
ONE_READING_FIELDS = (
    ("processes", "cpu_percent"),
    ("processes", "memory_growth"),
    ("processes", "full_in"),
    ("processes", "hung"),
    ("host", "cpu_percent"),
    ("gpus", "pcie_rx"),
    ("gpus", "pcie_tx"),
    ("gpus", "nvlink_rx"),
    ("gpus", "nvlink_tx"),
)
ONE_READING_NOTE = (
    "one reading: these fields need a second one and are null; --interval S measures them over S"
)


def unmeasured(snap: Snapshot) -> tuple[str, ...]:
    """The ONE_READING_FIELDS that are null in all of `snap` that could have them (visible processes,
    GPUs not lost), as paths (`processes[].cpu_percent`): the ones its one reading left unknown."""
    out = []
    for where, name in ONE_READING_FIELDS:
        if where == "host":
            if snap.host is None or snap.host.cpu_percent is None:
                out.append(f"host.{name}")
            continue
        items: list[object] = (
            [g for g in snap.gpus if not g.lost]
            if where == "gpus"
            else [p for p in snap.processes if p.visible]
        )
        if items and all(getattr(item, name) is None for item in items):
            out.append(f"{where}[].{name}")
    return tuple(out)


def one_reading_to_dict(snap: Snapshot) -> dict[str, Any]:
    """A snapshot of one reading, with a note of what that reading could not measure."""
    out = snapshot_to_dict(snap)
    out["one_reading"] = {"note": ONE_READING_NOTE, "unmeasured": list(unmeasured(snap))}
    return out


def dumps(snap: Snapshot, indent: int | None = None) -> str:
    return json.dumps(snapshot_to_dict(snap), indent=indent)


def record_to_dict(snap: Snapshot) -> dict[str, Any]:
    """A snapshot as a recording keeps it: the schema's optional fields are left out where null, at every
    depth (a reader takes them as null anyway, as in recordings made before they existed). A process
    that is in no container and has no trend saves ~100 bytes, and an 8-GPU demo record stays inside
    gzip's 32 KiB window, which spans the previous record only when a record is shorter than it."""
    out: dict[str, Any] = _without_absent(snapshot_to_dict(snap), _schema())
    return out


def _without_absent(value: Any, node: dict[str, Any]) -> Any:
    """`value` without the nulls of the keys that `node` (its schema) lists but does not require."""
    if isinstance(value, dict) and "properties" in node:
        props, required = node["properties"], node.get("required", ())
        return {
            k: _without_absent(v, props.get(k, {}))
            for k, v in value.items()
            if v is not None or k in required or k not in props
        }
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_without_absent(v, node["items"]) for v in value]
    return value


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return schema()


def schema() -> dict[str, Any]:
    text = resources.files("gputui").joinpath(f"schema/snapshot-v{SCHEMA_VERSION}.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
