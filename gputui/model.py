"""The data model: one immutable Snapshot per tick.

Every measured field may be ``None``, which always means "unavailable" (not supported by this GPU or
driver, no permission, the process vanished, ...). Nothing here imports Textual, NVML or psutil.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class GpmMetrics:
    """How busy a GPU (or a MIG instance) really was between two GPM samples (NVML's GPU Performance
    Monitoring, Hopper and newer). NVML's utilization says only that *a* kernel ran; these say how much of
    the GPU it used. Ratios in percent (0..100), rates in bytes/s; None: this metric failed or is not
    supported (never 0 for unknown). dcgm-exporter serves the same counters as DCGM_FI_PROF_* (ratios 0..1).
    """

    interval: float | None = None  # seconds between the two samples
    graphics: float | None = None  # time any context was active (DCGM_FI_PROF_GR_ENGINE_ACTIVE)
    sm_active: float | None = None  # SMs with at least one warp resident (DCGM_FI_PROF_SM_ACTIVE)
    sm_occupancy: float | None = None  # resident warps vs the maximum (DCGM_FI_PROF_SM_OCCUPANCY)
    tensor: float | None = None  # any tensor pipe active (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    hmma: float | None = None  # fp16/bf16 tensor pipe (DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE)
    imma: float | None = None  # int8 tensor pipe (DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE)
    dfma: float | None = None  # fp64 tensor pipe (DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE)
    dram: float | None = None  # DRAM interface busy (DCGM_FI_PROF_DRAM_ACTIVE)
    fp16: float | None = None  # non-tensor fp16 pipe (DCGM_FI_PROF_PIPE_FP16_ACTIVE)
    fp32: float | None = None
    fp64: float | None = None
    integer: float | None = None  # integer pipe (DCGM_FI_PROF_PIPE_INT_ACTIVE)
    pcie_tx: float | None = None  # bytes/s (DCGM_FI_PROF_PCIE_TX_BYTES)
    pcie_rx: float | None = None
    nvlink_tx: float | None = None  # bytes/s over all links (DCGM_FI_PROF_NVLINK_TX_BYTES)
    nvlink_rx: float | None = None


# GpmMetrics' ratio fields (percent), in the order the detail and --once list them.
GPM_RATIOS = (
    "graphics",
    "sm_active",
    "sm_occupancy",
    "tensor",
    "hmma",
    "imma",
    "dfma",
    "dram",
    "fp16",
    "fp32",
    "fp64",
    "integer",
)
GPM_RATES = ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")
# --gpm and the settings' `gpm`: arm GPM unless DCGM runs (auto), always (on), never (off).
GPM_MODES = ("auto", "on", "off")
GPM_OFF_NOTE = 'GPM is off (--gpm off, or gpm = "off" in the settings): SM and tensor activity n/a'
# GPM's metrics are measured between two samples; between two closer than this (seconds) the counters
# hold too few cycles to mean anything, so none are asked for.
GPM_MIN_INTERVAL_S = 0.05


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance of a GPU: a GPU instance (memory slice) with one compute instance (its SMs).
    Memory in bytes; utilization in percent where the driver reports it per instance, else None."""

    gpu_instance: int  # NVML's gpuInstanceId (GPU_I_ID in dcgm-exporter)
    compute_instance: int  # computeInstanceId
    profile: str | None = None  # "3g.40gb", "1g.10gb", ...
    uuid: str | None = None  # MIG-..., as CUDA_VISIBLE_DEVICES may name it
    mem_total: int | None = None
    mem_used: int | None = None
    util: int | None = None
    gpm: GpmMetrics | None = None  # this instance's GPM metrics (nvmlGpmMigSampleGet); None: none


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """What says a GPU is failing or degraded. Counts since the driver loaded (volatile) or over the GPU's
    life (aggregate); None: not supported, or not readable."""

    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_sbe: int | None = None  # pages retired for single-bit errors (pre-Ampere)
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None  # row remapping (Ampere and later)
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None  # the GPU needs a reset for a remap to take effect
    remap_failed: bool | None = None  # a remap failed: the GPU needs servicing
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    """A critical Xid error NVML reported (an event, seen once)."""

    gpu: int
    xid: int
    time: float  # the wall clock when gputui received it
    pid: int | None = None  # NVML's event data names no process; kept for a driver that does


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment. Memory in bytes, power in watts, clocks in MHz, rates in bytes/s."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    minor: int | None = None  # N of /dev/nvidiaN; not the same as the NVML index
    lost: bool = False
    util_gpu: int | None = None
    util_mem: int | None = None
    mem_total: int | None = None
    mem_used: int | None = None
    mem_reserved: int | None = None
    temperature: int | None = None
    power: float | None = None
    power_limit: float | None = None
    power_limit_max: float | None = (
        None  # the most the limit may be set to (DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX)
    )
    energy: float | None = None  # joules since the driver loaded
    fan: int | None = None
    sm_clock: int | None = None
    sm_clock_max: int | None = None
    mem_clock: int | None = None
    mem_clock_max: int | None = None
    pstate: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    enc_util: int | None = None
    dec_util: int | None = None
    pcie_rx: float | None = None
    pcie_tx: float | None = None
    compute_mode: str | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_errors: int | None = None  # volatile uncorrected ECC errors since the driver loaded
    nvlink_rx: float | None = None  # bytes/s over all NVLink links
    nvlink_tx: float | None = None
    mig: tuple[MigInstance, ...] = ()  # the instances of a MIG-enabled GPU (empty: MIG off, or unknown)
    health: GpuHealth | None = None  # ECC counts, retired pages, row remapping, PCIe link (slow tier)
    gpm: GpmMetrics | None = None  # SM, tensor and DRAM activity (Hopper+, GPM armed); None: absent

    @property
    def mem_percent(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return 100.0 * self.mem_used / self.mem_total


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process as the GPU source reports it (NVML's lists, merged by pid on one GPU)."""

    gpu: int
    pid: int
    kinds: str  # any of "C" (compute), "G" (graphics), "M" (MPS), e.g. "C" or "CG"
    used_memory: int | None = None
    sm_util: int | None = None
    mem_util: int | None = None
    gpu_instance: int | None = None  # on a MIG GPU, the instance it runs in (NVML's process info)
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose job a process is, from its cgroup (and names found without new privileges).

    kind: "docker", "containerd", "cri-o", "podman", "kubernetes" (a pod's container), "slurm", "systemd"
    is never one: a plain service is no job. id: the container id (64 hex), the pod UID, or the SLURM job id.
    """

    kind: str
    id: str
    name: str | None = None  # container name, pod name, SLURM job name
    namespace: str | None = None  # the pod's namespace
    container: str | None = None  # in a pod: its container id
    step: str | None = None  # SLURM step ("0", "batch", "extern")
    qos: str | None = None  # the pod's QoS class: guaranteed, burstable, besteffort
    user: str | None = None  # the SLURM job's user (from its cgroup path's uid_N)

    @property
    def label(self) -> str:
        """A short name for a column: `slurm 81234`, `pod ns/name`, `docker name` (or short ids)."""
        if self.kind == "slurm":
            return f"slurm {self.id}" + (f".{self.step}" if self.step and self.step.isdigit() else "")
        if self.kind == "kubernetes":
            if self.name:
                return f"pod {self.namespace}/{self.name}" if self.namespace else f"pod {self.name}"
            return f"pod {self.id[:8]}"
        return f"{self.kind} {self.name or self.id[:12]}"


# A process's class (gputui.analyze.classify says what each means); the strings are the --json schema's.
Category = Literal[
    "ok", "worker", "defunct", "stuck", "orphan", "unseen", "nvml-only", "no-permission", "hung"
]


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """A process on a GPU: in NVML's lists, or holding its device file, or both; joined with what the
    host knows of it (psutil)."""

    gpu: int | None  # None: holds only /dev/nvidiactl or /dev/nvidia-uvm, so its GPU is unknown
    pid: int
    kinds: str  # NVML's lists it is in ("C", "G", "M"); "" for a device holder NVML does not list
    used_memory: int | None
    sm_util: int | None
    mem_util: int | None
    visible: bool  # False: not in this PID namespace (a container's host PID) or already gone
    user: str | None = None
    name: str | None = None
    command: str | None = None
    cpu_percent: float | None = None
    rss: int | None = None
    create_time: float | None = None
    state: str | None = None  # psutil status: running, sleeping, disk-sleep, stopped, zombie, ...
    ppid: int | None = None
    devices: tuple[str, ...] | None = None  # the nvidia device files it holds; None: not readable
    category: Category = "ok"  # see gputui.analyze.classify: ok, worker, defunct, orphan, unseen, ...
    reason: str = ""  # one line: why it is in its category
    ns_pid: int | None = None  # its PID inside its own (container's) PID namespace, when different
    owner: Owner | None = None  # its container, pod or SLURM job; None: none found (a plain process)
    memory_growth: float | None = None  # bytes/s, the robust trend of its GPU memory; None: no trend known
    full_in: float | None = None  # seconds until its GPU is full at that rate; None: not growing, or unknown
    hung: str | None = None  # why it looks hung ("stalled at step 41,230 for 3 min ..."); None: it does not
    gpu_instance: int | None = None  # on a MIG GPU: the instance it runs in
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class HostProcess:
    """A process that is not on a GPU but related to one (a parent, a data-loader worker)."""

    pid: int
    ppid: int | None
    user: str | None
    name: str | None
    command: str | None
    cpu_percent: float | None
    rss: int | None
    create_time: float | None
    state: str | None


@dataclass(frozen=True, slots=True)
class ProcessDetail:
    """What the detail view shows of one process, read on demand."""

    pid: int
    command: str | None
    cwd: str | None
    cuda_visible_devices: str | None  # None: unset, or the environment is not readable
    environ_readable: bool
    device_files: tuple[str, ...] | None  # None: /proc/PID/fd is not readable
    children: tuple[HostProcess, ...]
    error: str | None = None  # "process is gone", "create time changed", ...
    # Its distributed-training variables (NCCL_*, RANK, MASTER_ADDR, ... only: never the rest of an
    # environment, which may hold secrets), sorted by name, printable and cut; see collect.procs.
    training_env: tuple[tuple[str, str], ...] = ()
    training_env_more: int = 0  # matching variables left out beyond those
    environ_cut: bool = False  # larger than gputui reads: variables past its first bytes are unseen


# What a gputui agent (gputui.agent, inside a training process) said, validated at the boundary by
# gputui.collect.agents.reply: every number finite and in range, every string short and printable.
AGENT_OK = "ok"
AGENT_SLOW = "slow"  # no answer within this tick's deadline: the last good numbers, marked
AGENT_UNREADABLE = "unreadable"  # it answered something that is not a valid stats reply


@dataclass(frozen=True, slots=True)
class AllocatorDevice:
    """PyTorch's CUDA caching allocator on one device of the process. Bytes and counts; None: not sent."""

    index: int
    allocated: int | None = None
    allocated_peak: int | None = None
    reserved: int | None = None
    reserved_peak: int | None = None
    active: int | None = None
    active_peak: int | None = None
    inactive_split: int | None = None  # "non-releasable" in memory_summary()
    inactive_split_peak: int | None = None
    reserved_unallocated: int | None = None
    num_alloc_retries: int | None = None
    num_ooms: int | None = None
    num_device_alloc: int | None = None
    num_device_free: int | None = None
    num_sync_all_streams: int | None = None
    segments: int | None = None
    largest_free_block: int | None = None
    free_in_segments: int | None = None
    fragmentation: float | None = None  # percent: how far the free memory is from one block
    segment_fill: tuple[float, ...] = ()  # per segment in address order, 0..1 full


@dataclass(frozen=True, slots=True)
class OomEvent:
    time: float | None
    device: int | None
    requested: int | None
    allocated: int | None
    free: int | None


@dataclass(frozen=True, slots=True)
class TrainingProgress:
    batches: int | None = None
    steps_per_s: float | None = None
    data_wait_share: float | None = None  # 0..1 of step time spent waiting for the DataLoader
    window_s: float | None = None
    steps: int | None = None  # batches since the agent started timing them
    last_step_age_s: float | None = None  # seconds since the last batch, when the agent answered
    usual_step_s: float | None = None  # the median time between batches over the window


@dataclass(frozen=True, slots=True)
class AgentReport:
    pid: int
    status: str = AGENT_OK  # AGENT_OK, AGENT_SLOW or AGENT_UNREADABLE
    error: str = ""  # why it is slow or unreadable
    time: float | None = None  # the agent's clock when it answered
    torch: str | None = None
    cuda: str | None = None
    cuda_initialized: bool = False
    allocator_backend: str | None = None
    alloc_conf: str | None = None
    devices: tuple[AllocatorDevice, ...] = ()
    oom_events: tuple[OomEvent, ...] = ()
    progress: TrainingProgress = TrainingProgress()

    @property
    def ok(self) -> bool:
        return self.status == AGENT_OK


@dataclass(frozen=True, slots=True)
class HostStats:
    """The host as htop and nvitop show it. Bytes, percent of all CPUs, load averages, seconds."""

    cpu_percent: float | None = None  # None on the first tick: a percentage needs two readings
    cpu_count: int | None = None
    mem_total: int | None = None
    mem_used: int | None = None  # total minus available, as htop counts it
    swap_total: int | None = None
    swap_used: int | None = None
    load: tuple[float, float, float] | None = None  # 1, 5 and 15 minutes
    uptime: float | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    time: float
    hostname: str
    source: str  # "nvml" or "demo"
    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[GpuSample, ...]
    processes: tuple[ProcessRow, ...]
    # Per GPU index: memory used minus the sum of its processes' memory (None when either is unknown).
    unaccounted_memory: dict[int, int | None] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    # Parents and children of the GPU processes; filled only when asked (the UI's tree view).
    host_processes: tuple[HostProcess, ...] = ()
    # Processes whose /proc/PID/fd could not be read: device holders among them are not shown.
    unreadable_fds: int = 0
    # pid -> what the gputui agent running in that process said (validated; see AgentReport).
    agents: dict[int, AgentReport] = field(default_factory=dict)
    # CPU, memory, swap, load and uptime of the host; None in recordings made before it was sampled.
    host: HostStats | None = None
    # Xid errors received since the last snapshot (an event thread waits on NVML's event set).
    xids: tuple[XidEvent, ...] = ()
    # Why GPM metrics are absent although a GPU could serve them (one line: "DCGM is running ..."); None:
    # armed where supported, or no GPU supports it.
    gpm_note: str | None = None

    def processes_on(self, gpu: int | None) -> tuple[ProcessRow, ...]:
        return tuple(p for p in self.processes if p.gpu == gpu)


def unaccounted_memory(
    gpus: tuple[GpuSample, ...], procs: tuple[GpuProcess, ...] | tuple[ProcessRow, ...]
) -> dict[int, int | None]:
    """Used memory that no listed process accounts for: leaks, contexts of invisible processes, ..."""
    out: dict[int, int | None] = {}
    for gpu in gpus:
        mine = [p.used_memory for p in procs if p.gpu == gpu.index and p.kinds]  # NVML's own lists
        if gpu.mem_used is None or any(m is None for m in mine):
            out[gpu.index] = None
        else:
            out[gpu.index] = max(0, gpu.mem_used - sum(m for m in mine if m is not None))
    return out
