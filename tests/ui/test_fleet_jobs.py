"""The fleet's drill-down shows a host's jobs (gputui_job_gpu_memory_bytes): one row per SLURM job, pod or
container with its GPUs and memory, read in the query that reads its processes. What Prometheus says is
hostile: the rows stay printable, bounded and inside the widget. MIG instances' series (GPU_I_ID) never
pass for their GPU's."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from textual.app import App, ComposeResult

from gputui.cells import width
from gputui.export.fleet import FleetGpu, FleetHost, FleetJob, FleetReader, FleetView, HostDetail
from gputui.export.promql import Prometheus
from gputui.ui.screens.fleet_host import HostView
from gputui.ui.widgets.canvas import CellCanvas
from tests.export.fake_prometheus import FB_TOTAL, FakePrometheus

NOW = 1_700_000_100.0
GIB = 2.0**30
CJK = "訓練ジョブ"


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    with FakePrometheus() as server:
        yield server


def read(fake: FakePrometheus, focus: str | None = None) -> FleetView:
    reader = FleetReader(Prometheus(fake.url), clock=lambda: NOW)
    view = reader.refresh()
    if focus is not None:
        reader.focus = focus
        view = reader.refresh()
    assert view.error is None, view.error
    return view


def job(gpu: int, memory: float, kind: str = "slurm", **labels: str) -> dict[str, object]:
    base = {"container": "", "pod": "", "namespace": "", "hpc_job": "", "user": "", "GPU_I_ID": ""}
    return {"gpu": gpu, "kind": kind, **base, **labels, "memory": memory}


def test_a_hosts_jobs_are_read_with_its_processes(fake: FakePrometheus) -> None:
    host = fake.add_host("node-a", gpus=4, gputui=True)
    host.processes = [
        {"gpu": 0, "pid": 11, "user": "alice", "command": "python", "class": "ok", "memory": GIB}
    ]
    host.jobs = [
        job(0, 2 * GIB, hpc_job="81234", user="uid_1000"),
        job(1, 3 * GIB, hpc_job="81234", user="uid_1000"),
        job(2, 8 * GIB, "kubernetes", pod="trainer-0", namespace="ml"),
        job(3, GIB, "docker", container="vllm"),
        job(3, GIB, "kubernetes", pod="0f6c1a52-uid"),  # a pod known by its UID: no namespace
    ]
    fake.add_host("node-b", gpus=1, gputui=True).jobs = [job(0, GIB, hpc_job="1")]  # not opened
    view = read(fake, focus="node-a")
    assert view.queries == 8  # five for the fleet, three for the host: the jobs cost none more
    assert view.detail is not None
    assert view.detail.jobs == (
        FleetJob("kubernetes", "ml/trainer-0", ("2",), 8 * GIB),
        FleetJob("slurm", "81234", ("0", "1"), 5 * GIB, "uid_1000"),
        FleetJob("docker", "vllm", ("3",), GIB),
        FleetJob("kubernetes", "0f6c1a52-uid", ("3",), GIB),
    )
    assert [p.pid for p in view.detail.processes] == ["11"]  # the job series are no processes


def test_hostile_job_series_stay_printable_and_bounded(fake: FakePrometheus) -> None:
    host = fake.add_host("node-a", gpus=2, gputui=True)
    evil = "\x1b]0;pwned\x07" + "x" * 5000
    host.jobs = [
        job(0, math.inf, hpc_job=evil),
        job(1, 1e300, hpc_job=evil),  # more than a PiB: no byte count
        job(1, math.nan, "docker", container="c1"),
        job(0, -5.0, "\x1b[31mkind", container="c2"),
    ]
    detail = read(fake, focus="node-a").detail
    assert detail is not None
    by_name = {j.name[:20]: j for j in detail.jobs}
    slurm = by_name["?]0;pwned?" + "x" * 10]
    assert slurm.memory == 0.0 and slurm.gpus == ("0", "1")  # listed on both GPUs, with no memory known
    assert len(slurm.name) <= 1024  # promql's bound on a label value
    assert all(j.name.isprintable() and j.kind.isprintable() and j.memory == 0.0 for j in detail.jobs)


def test_mig_instance_series_are_not_taken_for_the_gpus(fake: FakePrometheus) -> None:
    both = fake.add_host("gputui-mig", gpus=1)
    both.gpus[0].mem_used = 20_000.0
    both.gpus[0].mem_free = FB_TOTAL - 20_000.0
    both.instances = [
        {"gpu": 0, "GPU_I_ID": 3, "GPU_I_PROFILE": "3g.40gb", "mem_used": 15_000.0, "mem_free": 25_000.0},
        {"gpu": 0, "GPU_I_ID": 5, "GPU_I_PROFILE": "1g.10gb", "mem_used": 5_000.0, "mem_free": 4_000.0},
    ]
    only = fake.add_host("dcgm-mig", gpus=1, whole_gpus=False)  # dcgm-exporter: the instances alone
    only.instances = both.instances
    view = read(fake)
    [whole] = next(h for h in view.hosts if h.name == "gputui-mig").gpus
    assert (whole.mem_used, whole.mem_free) == (20_000.0, FB_TOTAL - 20_000.0)
    [summed] = next(h for h in view.hosts if h.name == "dcgm-mig").gpus
    assert (summed.mem_used, summed.mem_free) == (20_000.0, 29_000.0)


class HostApp(App[None]):
    def compose(self) -> ComposeResult:
        yield HostView("node-a")


def _text(canvas: CellCanvas, y: int) -> str:
    return "".join(c for c, _ in canvas._lines[y])


@pytest.mark.parametrize("cols", [60, 100, 160])
async def test_the_host_view_lists_its_jobs_inside_its_width(cols: int) -> None:
    host = FleetHost("node-a", "node-a:9400", "gputui", (FleetGpu("0", util=90.0),), gputui=True)
    jobs = (
        FleetJob("kubernetes", f"ml/{CJK * 20}", ("0",), 8 * GIB),
        FleetJob("slurm", "81234", tuple(str(i) for i in range(64)), 5 * GIB, "学生" * 8),
        FleetJob("docker", "vllm", ("0:3", "0:5"), GIB),
    )
    app = HostApp()
    async with app.run_test(size=(cols, 30)) as pilot:
        view = app.query_one(HostView)
        view.view = FleetView(hosts=(host,), end=900.0, detail=HostDetail("node-a", jobs=jobs))
        await pilot.pause()
        lines = [_text(view, y) for y in range(len(view._lines))]
        assert all(width(line) == cols for line in lines)
        head = next(i for i, line in enumerate(lines) if line.startswith(" KIND"))
        rows = lines[head + 1 : head + 4]
        assert rows[0].split()[:2] == ["kubernetes", "0"] and "8.0 GiB" in rows[0] and CJK in rows[0]
        assert rows[1].split()[:2] == ["slurm", "0,1,2,3,4,…"] and "81234" in rows[1]  # 64 GPUs, cut
        assert rows[2].split()[:3] == ["docker", "0:3,0:5", "1.0"] and "vllm" in rows[2]
        assert not any("no GPU processes" in line for line in lines[:head])  # jobs come first


async def test_no_jobs_no_jobs_section() -> None:
    host = FleetHost("node-a", "node-a:9400", "gputui", (FleetGpu("0"),), gputui=True)
    app = HostApp()
    async with app.run_test(size=(100, 20)) as pilot:
        view = app.query_one(HostView)
        view.view = FleetView(hosts=(host,), end=900.0, detail=HostDetail("node-a"))
        await pilot.pause()
        lines = [_text(view, y) for y in range(len(view._lines))]
        assert not any(line.startswith(" KIND") for line in lines)
        assert any("no GPU processes" in line for line in lines)
