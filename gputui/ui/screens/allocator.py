"""The allocator panel: PyTorch's CUDA caching allocator in one process, through its gputui agent.

A profile's verdict (input-, launch-, host- or gpu-bound) comes from the agent; on a GPU with GPM (Hopper
and newer) the panel adds what the counters said of the process's GPU (or MIG instance) while the profile
recorded: SM activity, occupancy, tensor activity, and gputui.analyze.dip_causes.gpm_findings' verdicts
("tensor cores idle: fp32 matmuls?", "SM occupancy 12%: small kernels or batch"). It reads them from the
snapshots the app forwards; no NVML call of its own."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import get_current_worker

from gputui.analyze.dip_causes import ProfileNote, gpm_findings, gpm_of, gpm_reading, mean_gpm
from gputui.collect.agents.client import AgentHistory, AgentPoller
from gputui.collect.agents.profile_reply import ProfileOp, ProfileStatus
from gputui.model import (
    AGENT_SLOW,
    AGENT_UNREADABLE,
    AgentReport,
    AllocatorDevice,
    GpmMetrics,
    Snapshot,
    TrainingProgress,
)
from gputui.ui.screens.detail import MODAL_CSS, Modal
from gputui.ui.widgets.spark import glyph
from gputui.units import NA, fmt_bytes, printable

PROFILE_STEPS = 20
PROFILE_SECONDS = 60.0  # the agent stops at the first batch after this, whatever the steps
PROFILE_POLL_S = 0.5
PROFILE_TOP = 5

_ACTIONS = {
    "h": ("record_history", "start/stop recording allocation history (it slows allocations a little)"),
    "s": ("dump_snapshot", "write a memory snapshot file (open it at https://pytorch.org/memory_viz)"),
    "e": ("empty_cache", "release the cached, unused blocks (torch.cuda.empty_cache())"),
    "P": (
        "profile",
        f"profile the next {PROFILE_STEPS} steps with torch.profiler (they run slower while it records)",
    ),
}


def _spark(values: list[float], scale: float) -> str:
    return "".join(glyph(100.0 * v / scale if scale else None) for v in values)


def segment_map(fill: list[float], width: int = 60) -> str:
    """One character per segment (or group of segments): how full it is."""
    if not fill:
        return NA
    step = max(1, -(-len(fill) // width))
    groups = [fill[i : i + step] for i in range(0, len(fill), step)]
    return "".join(glyph(100.0 * sum(g) / len(g)) for g in groups)


READ_ONLY = "read-only: actions disabled"


class AllocatorScreen(Modal[None]):
    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [
        Binding("escape,q,a", "dismiss", "Close"),
        Binding("h", "act('h')", "History on/off"),
        Binding("s", "act('s')", "Dump snapshot"),
        Binding("e", "act('e')", "empty_cache"),
        Binding("P", "act('P')", "Profile"),
    ]

    def __init__(
        self,
        pid: int,
        poller: AgentPoller | None,
        snapshot: Snapshot,
        history: AgentHistory,
        on_profile: Callable[[ProfileNote], None] | None = None,
    ) -> None:
        """`poller` None: read-only (--readonly, a replay): the panel shows and never acts. `on_profile`:
        told of each profile that finishes (the Events pane names its verdict as a dip's reason)."""
        super().__init__()
        self.body = Static(id="allocator", markup=False)
        self.on_profile = on_profile
        self.pid = pid
        self.poller = poller
        self.snapshot = snapshot
        self.history = history
        self.first: dict[int, AllocatorDevice] = {}  # the counters when the panel opened
        self.previous: dict[int, AllocatorDevice] = {}
        self.recording = False
        self.armed: str | None = None  # the action key pressed once: a second press runs it
        self.profile: ProfileStatus | None = None  # the last profile_status answer, once P was confirmed
        # GPM of the process's GPU, with NVML's utilization, from each snapshot while the profile recorded.
        self.profile_gpm: list[tuple[GpmMetrics, float | None]] = []
        self._gpm_seen: Snapshot | None = None  # the last snapshot looked at (follow() may repeat one)
        self.message = (
            "h: history on/off · s: dump a snapshot · e: empty_cache · P: profile (press twice to confirm)"
            if poller is not None
            else READ_ONLY
        )

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield self.body

    def on_mount(self) -> None:
        self.follow(self.snapshot)

    def follow(self, snap: Snapshot) -> None:
        """A new snapshot (the app forwards each one while the panel is open)."""
        self.snapshot = snap
        self.watch_gpm(snap)
        report = snap.agents.get(self.pid)
        devices = report.devices if report is not None and report.ok else ()
        for d in devices:
            self.first.setdefault(d.index, d)
        # Held, not queried: an app that quits as the panel opens runs on_mount after its children left.
        self.body.update(self.render_panel(report))
        if devices:
            self.previous = {d.index: d for d in devices}

    def gpm_now(self, snap: Snapshot) -> tuple[GpmMetrics | None, float | None]:
        """The GPM reading of the process's GPU (its MIG instance's when it runs in one) and NVML's
        utilization of the same, in `snap`; (None, None) where there is none."""
        row = next((r for r in snap.processes if r.pid == self.pid and r.gpu is not None and r.kinds), None)
        sample = next((g for g in snap.gpus if row is not None and g.index == row.gpu), None)
        if row is None or sample is None or sample.lost:
            return None, None
        gpm = gpm_of(sample, row.gpu_instance)
        if row.gpu_instance is not None and sample.mig:
            inst = next((i for i in sample.mig if i.gpu_instance == row.gpu_instance), None)
            return gpm, float(inst.util) if inst is not None and inst.util is not None else None
        return gpm, float(sample.util_gpu) if sample.util_gpu is not None else None

    def watch_gpm(self, snap: Snapshot) -> None:
        """Keep the GPU's GPM reading of each snapshot that comes while the profile records."""
        if snap is self._gpm_seen or self.profile is None or self.profile.state != "recording":
            return
        self._gpm_seen = snap
        gpm, util = self.gpm_now(snap)
        if gpm is not None:
            self.profile_gpm.append((gpm, util))

    def profile_gpm_verdict(self) -> tuple[GpmMetrics | None, float | None, str]:
        """The GPM a finished profile is judged with: the mean over its recording, else (a profile shorter
        than a tick) the latest reading; with NVML's utilization and which of the two it is."""
        if self.profile_gpm:
            utils = [u for _, u in self.profile_gpm if u is not None]
            mean = mean_gpm(m for m, _ in self.profile_gpm)
            n = len(self.profile_gpm)
            return (
                mean,
                sum(utils) / len(utils) if utils else None,
                f"{n} reading{'s' * (n > 1)} while profiled",
            )
        gpm, util = self.gpm_now(self.snapshot)
        return gpm, util, "now"

    def render_panel(self, report: AgentReport | None) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        grid.add_row(Text(f"PyTorch allocator · pid {self.pid}", style="bold"), Text(""))
        if report is None:
            grid.add_row(
                "agent", Text("not answering (the process ended, or its agent stopped)", style="red")
            )
            return grid
        if report.status == AGENT_UNREADABLE:
            grid.add_row("agent", Text(f"unreadable: {report.error}", style="red"))
            return grid
        if report.status == AGENT_SLOW:
            grid.add_row("agent", Text(f"{report.error}: below is its last answer", style="yellow"))
        grid.add_row(
            "torch / CUDA",
            Text(f"{report.torch or NA} / {report.cuda or NA}  backend {report.allocator_backend or NA}"),
        )
        grid.add_row("ALLOC_CONF", Text(report.alloc_conf or "(unset)"))
        progress = report.progress
        if progress.steps_per_s is not None:
            grid.add_row("training", Text(f"{progress.steps_per_s:.2f} steps/s{_window(progress)}"))
        if progress.data_wait_share is not None:
            # The panel's one data-wait number: the agent's, over its window, as the Events pane and the
            # exporter give it. A profile's own wait (its steps, slowed by profiling) stays in its verdict.
            grid.add_row(
                "data wait",
                Text(f"{_share(progress.data_wait_share)} of step time waiting for data{_window(progress)}"),
            )
        if not report.cuda_initialized:
            grid.add_row("CUDA", Text("not initialized in this process (yet)", style="dim"))
        nvml = sum(p.used_memory or 0 for p in self.snapshot.processes if p.pid == self.pid and p.kinds)
        for d in report.devices:
            self._device(grid, d, nvml if len(report.devices) == 1 else None)
        for event in report.oom_events[-3:]:
            grid.add_row(
                Text("OOM", style="bold red"),
                Text(
                    f"device {event.device if event.device is not None else NA}: asked "
                    f"{fmt_bytes(event.requested)}, {fmt_bytes(event.free)} free",
                    style="red",
                ),
            )
        self._profile_rows(grid)
        grid.add_row("", Text(self.message, style="yellow" if self.armed else "dim"))
        return grid

    def _profile_rows(self, grid: Table) -> None:
        p = self.profile
        if p is None or p.state == "idle":
            return
        steps = f"{p.steps_done or 0}/{p.steps or PROFILE_STEPS} steps"
        if p.state == "waiting":
            grid.add_row(
                "profile", Text("profiling: waiting for the next DataLoader batch …", style="yellow")
            )
        elif p.state == "recording":
            grid.add_row("profile", Text(f"profiling: {steps} …", style="yellow"))
        elif p.state == "processing":
            grid.add_row("profile", Text(f"profiling: {steps}, writing the trace …", style="yellow"))
        elif p.state == "failed":
            grid.add_row("profile", Text(f"failed: {p.error or 'no reason given'}", style="red"))
        elif p.summary is not None:
            s = p.summary
            grid.add_row(
                "profile",
                Text(
                    f"{s.verdict}: {s.explanation}", style="bold red" if s.verdict != "gpu-bound" else "bold"
                ),
            )
            self._gpm_rows(grid)
            rate = f" ({s.steps_per_s:.1f}/s while profiled)" if s.steps_per_s is not None else ""
            wall = f" in {s.wall_s:.2f} s" if s.wall_s is not None else ""
            grid.add_row(
                "", Text(f"over {s.steps if s.steps is not None else NA} profiled steps{wall}{rate}")
            )
            if s.gpu_idle_share is None:
                grid.add_row(
                    "GPU idle", Text("no GPU activity recorded (CPU-only run, or no CUPTI)", style="dim")
                )
            else:
                short = _share(s.short_kernel_share)
                grid.add_row(
                    "GPU idle",
                    Text(
                        f"{_share(s.gpu_idle_share)} of wall time with no kernel running · "
                        f"{s.kernels if s.kernels is not None else NA} kernels, {short} under 10 µs"
                    ),
                )
            grid.add_row("trace", Text(f"{p.path or NA}  (open at ui.perfetto.dev or chrome://tracing)"))
            width = self._name_width()
            for label, ops, device in (
                ("top ops (CPU)", s.top_ops, False),
                ("top ops (GPU)", s.top_device_ops, True),
            ):
                for i, op in enumerate(ops[:PROFILE_TOP]):
                    grid.add_row(label if i == 0 else "", Text(_op_line(op, width, device)))

    def _gpm_rows(self, grid: Table) -> None:
        """What GPM said of the GPU meanwhile: its numbers, then each verdict with its fix. Nothing on a
        GPU without GPM (before Hopper, DCGM holding the counters): the agent's verdict stands alone."""
        gpm, util, when = self.profile_gpm_verdict()
        if gpm is None:
            return
        grid.add_row("GPM", Text(f"{gpm_reading(gpm)} ({when})"))
        for finding in gpm_findings(gpm, util):
            grid.add_row("", Text.assemble((finding.text, "bold yellow"), (f" — {finding.fix}", "dim")))

    def _name_width(self) -> int:
        """Operator names are cut to what is left of the panel's width after the labels and times."""
        try:
            width = self.app.size.width
        except Exception:  # not mounted (a test renders the panel alone)
            width = 120
        return max(16, min(80, width - 72))  # the label column, the time and the count

    def _device(self, grid: Table, d: AllocatorDevice, nvml: int | None) -> None:
        grid.add_row(Text(f"cuda:{d.index}", style="bold"), Text(""))
        points = self.history.points(self.pid, d.index)[-60:]
        scale = max([r for _, r in points] + [d.reserved_peak or 0]) or 1
        for label, i, value, peak in (
            ("allocated", 0, d.allocated, d.allocated_peak),
            ("reserved", 1, d.reserved, d.reserved_peak),
        ):
            grid.add_row(
                label,
                Text(f"{_spark([p[i] for p in points], scale)}  {fmt_bytes(value)} (peak {fmt_bytes(peak)})"),
            )
        frag = d.fragmentation
        grid.add_row(
            "cached, unused",
            Text(
                f"{fmt_bytes(d.reserved_unallocated)}"
                f" · non-releasable {fmt_bytes(d.inactive_split)}"
                f" · fragmentation {f'{frag:.0f}%' if frag is not None else NA}"
                f" · largest free block {fmt_bytes(d.largest_free_block)}"
            ),
        )
        counters = Text()
        before, first = self.previous.get(d.index), self.first.get(d.index)
        for key, label in (
            ("num_alloc_retries", "retries"),
            ("num_ooms", "OOMs"),
            ("num_device_alloc", "cudaMalloc"),
            ("num_device_free", "cudaFree"),
            ("num_sync_all_streams", "syncs"),
        ):
            value = getattr(d, key)
            grew = value is not None and value > (getattr(before, key, None) or 0)
            bad = key in ("num_alloc_retries", "num_ooms") and grew
            counters.append(f"{label} {value if value is not None else NA}", style="bold red" if bad else "")
            since = (value or 0) - (getattr(first, key, None) or 0)
            if since and key in ("num_alloc_retries", "num_ooms"):
                counters.append(f" (+{since})", style="red")
            counters.append("  ")
        grid.add_row("counters", counters)
        grid.add_row(
            "segments",
            Text(f"{d.segments if d.segments is not None else NA}  {segment_map(list(d.segment_fill))}"),
        )
        if nvml is not None and d.reserved is not None:
            grid.add_row(
                "outside torch",
                Text(
                    f"{fmt_bytes(max(0, nvml - d.reserved))} (NVML's {fmt_bytes(nvml)} for this process"
                    " minus reserved: CUDA context, NCCL, other libraries)"
                ),
            )

    def action_act(self, key: str) -> None:
        if self.poller is None:  # nothing is ever sent: not to a live agent, nor to a recorded pid's
            self.message = READ_ONLY
            self.follow(self.snapshot)
            return
        op, description = _ACTIONS[key]
        if self.armed != key:
            self.armed = key
            self.message = f"press {key} again to {description} in process {self.pid}; any other key cancels"
            self.follow(self.snapshot)
            return
        self.armed = None
        params: dict[str, Any] = {}
        if op == "record_history":
            self.recording = not self.recording
            params["enabled"] = self.recording
        if op == "profile":
            params = {"steps": PROFILE_STEPS, "max_seconds": PROFILE_SECONDS}
            self.profile_gpm = []  # a new profile: its own readings
        self.message = f"{op} …"
        self.follow(self.snapshot)
        self._run(op, params)

    @work(thread=True, exclusive=True)
    def _run(self, op: str, params: dict[str, Any]) -> None:
        if self.poller is None:  # read-only: action_act never starts this; and if it did, nothing goes
            return
        reply = self.poller.act(self.pid, op, **params)
        text = reply.get("message") or reply.get("error") or str(reply)
        self.app.call_from_thread(self._done, f"{op}: {text}" if reply.get("ok") else f"{op} failed: {text}")
        if op == "profile" and reply.get("ok"):
            self.app.call_from_thread(self._watch_profile)

    def _done(self, message: str) -> None:
        self.message = printable(message)
        self.follow(self.snapshot)

    @work(thread=True, exclusive=True, group="profile")
    def _watch_profile(self) -> None:
        """Ask how the profile goes until it is done (or failed), while the panel is open."""
        worker = get_current_worker()
        give_up = time.monotonic() + PROFILE_SECONDS + 60.0  # the agent stops only on a batch
        try:
            while not worker.is_cancelled and self.poller is not None:
                reply = self.poller.act(self.pid, "profile_status")
                status = reply.get("profile")
                if not reply.get("ok") or not isinstance(status, ProfileStatus):
                    self.app.call_from_thread(
                        self._profiled, None, f"profile_status failed: {reply.get('message')}"
                    )
                    return
                finished = status.state in ("idle", "done", "failed")
                late = not finished and time.monotonic() > give_up
                note = "profile: no batch came to end it (has the training loop stopped?)" if late else None
                self.app.call_from_thread(self._profiled, status, note)
                if finished or late:
                    return
                time.sleep(PROFILE_POLL_S)
        except Exception:  # the app is closing under us: nothing left to show it on
            return

    def _profiled(self, status: ProfileStatus | None, message: str | None) -> None:
        if status is not None:
            if status.state == "recording" and (self.profile is None or self.profile.state != "recording"):
                self._gpm_seen = self.snapshot  # its GPM was measured before the recording began
            self.profile = status
            if status.state == "done":
                self.message = "profile: done"
                self._note_profile(status)
        if message is not None:
            self.message = printable(message)
        self.follow(self.snapshot)

    def _note_profile(self, status: ProfileStatus) -> None:
        s = status.summary
        if s is None or self.on_profile is None:
            return
        gpu = next((r.gpu for r in self.snapshot.processes if r.pid == self.pid and r.gpu is not None), None)
        end = time.time()
        start = end - (s.wall_s or status.elapsed_s or 0.0)
        gpm, util, _ = self.profile_gpm_verdict()
        found = "; ".join(f.text for f in gpm_findings(gpm, util)) if gpm is not None else ""
        self.on_profile(ProfileNote(self.pid, gpu, start, end, s.verdict, gpm=found))


def _window(progress: TrainingProgress) -> str:
    """over the last 30 s (212 batches)": the agent's window, which its numbers are measured over."""
    if progress.window_s is None:
        return ""
    batches = f" ({progress.batches} batches)" if progress.batches is not None else ""
    return f" over the last {progress.window_s:.0f} s{batches}"


def _share(value: float | None) -> str:
    return f"{100 * value:.0f}%" if value is not None else NA


def fmt_us(us: float | None) -> str:
    if us is None:
        return NA
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 1e6:
        return f"{us / 1000:.1f} ms"
    return f"{us / 1e6:.2f} s"


def _op_line(op: ProfileOp, width: int, device: bool) -> str:
    """One operator: its name cut to `width` (printable already), its self time and its calls."""
    name = op.name if len(op.name) <= width else op.name[: width - 1] + "…"
    time_us = op.self_device_us if device else op.self_cpu_us
    calls = f"{op.count} calls" if op.count is not None else ""
    return f"{name:<{width}}  {fmt_us(time_us):>9} self  {calls}"
