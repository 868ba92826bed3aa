"""The agent's answer to `profile_status`, validated like every agent reply (agent_reply.py): bounded
numbers, short printable strings, a state and a verdict from fixed lists; anything else is a BadReply."""

from __future__ import annotations

from dataclasses import dataclass

from gputui.collect.agents.reply import BadReply, _count, _list, _object, _real, _text
from gputui.units import printable

STATES = ("idle", "waiting", "recording", "processing", "done", "failed")
VERDICTS = ("input-bound", "launch-bound", "host-bound", "gpu-bound", "no-gpu")
MAX_OPS = 10
MAX_STEPS = 1000
MAX_US = 1e13  # a day of self time, in microseconds, is far more than a profile of MAX_STEPS records
MAX_PATH = 4096


@dataclass(frozen=True, slots=True)
class ProfileOp:
    name: str
    count: int | None
    self_cpu_us: float | None
    self_device_us: float | None


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    steps: int | None
    wall_s: float | None
    steps_per_s: float | None
    data_wait_share: float | None
    cuda: bool
    kernels: int | None
    short_kernel_share: float | None
    gpu_idle_share: float | None
    verdict: str
    explanation: str
    top_ops: tuple[ProfileOp, ...]
    top_device_ops: tuple[ProfileOp, ...]


@dataclass(frozen=True, slots=True)
class ProfileStatus:
    state: str
    steps: int | None = None
    steps_done: int | None = None
    elapsed_s: float | None = None
    path: str | None = None
    error: str | None = None
    summary: ProfileSummary | None = None


def _share(value: object, where: str) -> float | None:
    return _real(value, where, 0.0, 1.0)


def _op(value: object, where: str) -> ProfileOp:
    op = _object(value, where)
    return ProfileOp(
        name=_text(op.get("name"), f"{where}.name") or "?",
        count=_count(op.get("count"), f"{where}.count"),
        self_cpu_us=_real(op.get("self_cpu_us"), f"{where}.self_cpu_us", 0.0, MAX_US),
        self_device_us=_real(op.get("self_device_us"), f"{where}.self_device_us", 0.0, MAX_US),
    )


def _ops(value: object, where: str) -> tuple[ProfileOp, ...]:
    return tuple(_op(v, f"{where}[{i}]") for i, v in enumerate(_list(value, where, MAX_OPS)))


def _summary(value: object) -> ProfileSummary | None:
    if value is None:
        return None
    s = _object(value, "profile.summary")
    verdict = s.get("verdict")
    if verdict not in VERDICTS:
        raise BadReply("profile.summary.verdict: not one of " + ", ".join(VERDICTS))
    cuda = s.get("cuda", False)
    if not isinstance(cuda, bool):
        raise BadReply("profile.summary.cuda: not true or false")
    return ProfileSummary(
        steps=_count(s.get("steps"), "profile.summary.steps", MAX_STEPS),
        wall_s=_real(s.get("wall_s"), "profile.summary.wall_s", 0.0, 1e7),
        steps_per_s=_real(s.get("steps_per_s"), "profile.summary.steps_per_s", 0.0, 1e6),
        data_wait_share=_share(s.get("data_wait_share"), "profile.summary.data_wait_share"),
        cuda=cuda,
        kernels=_count(s.get("kernels"), "profile.summary.kernels"),
        short_kernel_share=_share(s.get("short_kernel_share"), "profile.summary.short_kernel_share"),
        gpu_idle_share=_share(s.get("gpu_idle_share"), "profile.summary.gpu_idle_share"),
        verdict=verdict,
        explanation=_text(s.get("explanation"), "profile.summary.explanation") or "",
        top_ops=_ops(s.get("top_ops"), "profile.summary.top_ops"),
        top_device_ops=_ops(s.get("top_device_ops"), "profile.summary.top_device_ops"),
    )


def parse_status(value: object) -> ProfileStatus:
    """The `profile` object of a profile_status reply; raises BadReply saying what is wrong."""
    p = _object(value, "profile")
    state = p.get("state")
    if state not in STATES:
        raise BadReply("profile.state: not one of " + ", ".join(STATES))
    path = p.get("path")
    if path is not None and (not isinstance(path, str) or len(path) > MAX_PATH):
        raise BadReply("profile.path: not a string of at most 4096 characters")
    return ProfileStatus(
        state=state,
        steps=_count(p.get("steps"), "profile.steps", MAX_STEPS),
        steps_done=_count(p.get("steps_done"), "profile.steps_done", MAX_STEPS),
        elapsed_s=_real(p.get("elapsed_s"), "profile.elapsed_s", 0.0, 1e7),
        # A path is shown whole (a user copies it), made printable; not cut to MAX_TEXT.
        path=printable(path) if path is not None else None,
        error=_text(p.get("error"), "profile.error"),
        summary=_summary(p.get("summary")),
    )
