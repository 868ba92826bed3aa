"""`families()` and `Exporter.collect()` through real exposition: each collector is registered in a
CollectorRegistry, written with generate_latest and read back with prometheus-client's own parser."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gputui import __version__
from gputui.analyze.classify import SUSPICIOUS
from gputui.analyze.dips import Dip
from gputui.collect.agents.reply import parse as agent_reply_parse
from gputui.export.exporter import Exporter
from gputui.export.metrics import (
    DCGM_COUNTERS,
    EXTRA_FIELDS,
    HEALTH_FIELDS,
    PROF_FIELDS,
    DipCounters,
    families,
    retype_counters,
)
from gputui.model import Category, GpuSample, ProcessRow, Snapshot
from tests.builders import process_row

HOST = "node-7"
DRIVER = "580.95.05"
MIB = 1 << 20
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "agent_stats_cuda.json"
GPU_LABEL_NAMES = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
PROCESS_LABEL_NAMES = {"gpu", "UUID", "Hostname", "pid", "user", "command", "class"}
# A plain process off MIG: dcgm-exporter's owner and instance labels, empty (see test_owner_labels.py).
NO_OWNER = dict.fromkeys(("container", "pod", "namespace", "hpc_job", "GPU_I_PROFILE", "GPU_I_ID"), "")
DCGM_NAMES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
)


# -- exposition -----------------------------------------------------------------------------------------


@dataclass
class Scrape:
    """One scrape, as Prometheus would read it: samples by name, and each sample name's family type."""

    text: str
    samples: dict[str, list[tuple[dict[str, str], float]]]
    types: dict[str, str]

    def series(self, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
        return [
            (labels, value)
            for labels, value in self.samples.get(name, [])
            if all(labels.get(k) == v for k, v in match.items())
        ]

    def value(self, name: str, **match: str) -> float:
        found = self.series(name, **match)
        assert len(found) == 1, (name, match, found)
        return found[0][1]

    def by(self, name: str, label: str, **match: str) -> dict[str, float]:
        """label value -> sample value, for the series of `name` that match."""
        out = {}
        for labels, value in self.series(name, **match):
            assert labels[label] not in out, (name, labels)
            out[labels[label]] = value
        return out


class _Families:
    """families() as a collector."""

    def __init__(self, snap: Snapshot, dips: DipCounters | None = None) -> None:
        self.snap, self.dips = snap, dips

    def collect(self) -> Iterator[Any]:
        return families(self.snap, self.dips)


def scrape(collector: object) -> Scrape:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    text = retype_counters(generate_latest(registry), openmetrics=False).decode()  # as the exporter serves it
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    types: dict[str, str] = {}
    seen = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            # prometheus-client's parser names a counter's samples `<name>_total`; Prometheus keeps
            # dcgm-exporter's names, and so does this reader.
            name = s.name[: -len("_total")] if fam.name in DCGM_COUNTERS else s.name
            s = s._replace(name=name)
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in seen, f"duplicate series {key}: Prometheus rejects the scrape"
            seen.add(key)
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
            types[s.name] = fam.type
    return Scrape(text, samples, types)


def scrape_snapshot(snap: Snapshot, dips: DipCounters | None = None) -> Scrape:
    return scrape(_Families(snap, dips))


# -- snapshots made by hand -------------------------------------------------------------------------------


def gpu0(**changes: Any) -> GpuSample:
    g = GpuSample(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-0b5c8a64-1e27-4bd5-9f1c-0a2a6c3b7d11",
        pci_bus_id="00000000:18:00.0",
        minor=3,  # minor differs from index: device still says nvidia0, as dcgm-exporter writes it
        util_gpu=97,
        util_mem=41,
        mem_total=81559 * MIB,
        mem_used=40000 * MIB + 123_456,
        mem_reserved=515 * MIB,
        temperature=61,
        power=512.3,
        energy=123_456.789,
        sm_clock=1980,
        mem_clock=2619,
        enc_util=3,
        dec_util=12,
    )
    return replace(g, **changes)


def gpu1(**changes: Any) -> GpuSample:
    g = GpuSample(
        index=1,
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-77e0d2f4-93aa-4c1e-8d5e-2f1b0c9e6a42",
        pci_bus_id="00000000:3B:00.0",
        minor=0,
        util_gpu=0,
        util_mem=0,
        mem_total=40960 * MIB,
        mem_used=1024 * MIB,
        mem_reserved=None,
        temperature=34,
        power=61.0,
        energy=0.5,
        sm_clock=210,
        mem_clock=1215,
        enc_util=0,
        dec_util=0,
    )
    return replace(g, **changes)


def proc(
    pid: int,
    gpu: int | None = 0,
    used: int | None = 2 * 1024 * MIB,
    category: Category = "ok",
    command: str | None = "/opt/conda/bin/python train.py --epochs 90",
    user: str | None = "alice",
    name: str | None = "python",
    kinds: str = "C",
) -> ProcessRow:
    return process_row(
        gpu,
        pid,
        kinds=kinds,
        used_memory=used,
        sm_util=50,
        mem_util=20,
        user=user,
        name=name,
        command=command,
        category=category,
    )


def snapshot(
    gpus: Iterable[GpuSample] = (), processes: Iterable[ProcessRow] = (), time: float = 1000.0, **changes: Any
) -> Snapshot:
    gpus = tuple(gpus) or (gpu0(), gpu1())
    if "agents" in changes:  # replies as an agent sends them: through the boundary, as the sampler does
        changes["agents"] = {pid: agent_reply_parse(pid, reply) for pid, reply in changes["agents"].items()}
    return Snapshot(
        time=time,
        hostname=HOST,
        source="nvml",
        driver_version=DRIVER,
        nvml_version="13.580.95.05",
        cuda_driver_version="13.0",
        gpus=gpus,
        processes=tuple(processes),
        **changes,
    )


def agent_reply() -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(FIXTURE.read_text())
    return reply


# -- DCGM fields ------------------------------------------------------------------------------------------


def test_every_dcgm_field_for_every_gpu_with_dcgm_exporters_labels() -> None:
    s = scrape_snapshot(snapshot())
    expected_labels = {
        "0": {
            "gpu": "0",
            "UUID": "GPU-0b5c8a64-1e27-4bd5-9f1c-0a2a6c3b7d11",
            "pci_bus_id": "00000000:18:00.0",
            "device": "nvidia0",  # dcgm-exporter's: the index, though /dev/nvidia3 is its device file
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": HOST,
            "DCGM_FI_DRIVER_VERSION": DRIVER,
        },
        "1": {
            "gpu": "1",
            "UUID": "GPU-77e0d2f4-93aa-4c1e-8d5e-2f1b0c9e6a42",
            "pci_bus_id": "00000000:3B:00.0",
            "device": "nvidia1",
            "modelName": "NVIDIA A100-SXM4-40GB",
            "Hostname": HOST,
            "DCGM_FI_DRIVER_VERSION": DRIVER,
        },
    }
    for name in DCGM_NAMES:
        got = s.series(name)
        assert sorted(labels["gpu"] for labels, _ in got) == ["0", "1"], name
        for labels, _ in got:
            assert labels == expected_labels[labels["gpu"]], name
        assert s.types[name] == ("counter" if name in DCGM_COUNTERS else "gauge"), name
    health = {name for name, _, _ in HEALTH_FIELDS} | {"DCGM_FI_DEV_XID_ERRORS"}  # test_health_metrics.py
    more = {name for name, *_ in (*EXTRA_FIELDS, *PROF_FIELDS)}  # test_dcgm_dropin.py
    assert not [
        n for n in s.samples if n.startswith("DCGM_") and n not in DCGM_NAMES and n not in health | more
    ]


def test_dcgm_values_in_dcgm_units() -> None:
    s = scrape_snapshot(snapshot())
    want = {
        "DCGM_FI_DEV_GPU_UTIL": (97, 0),
        "DCGM_FI_DEV_MEM_COPY_UTIL": (41, 0),
        "DCGM_FI_DEV_FB_USED": (40000, 1024),  # whole MiB: the 123456 stray bytes are dropped
        # total - used - reserved, in whole MiB (rounded down); no reserved reading counts as none
        "DCGM_FI_DEV_FB_FREE": ((81559 * MIB - (40000 * MIB + 123_456) - 515 * MIB) // MIB, 40960 - 1024),
        "DCGM_FI_DEV_GPU_TEMP": (61, 34),
        "DCGM_FI_DEV_POWER_USAGE": (512.3, 61.0),
        "DCGM_FI_DEV_SM_CLOCK": (1980, 210),
        "DCGM_FI_DEV_MEM_CLOCK": (2619, 1215),
        "DCGM_FI_DEV_ENC_UTIL": (3, 0),
        "DCGM_FI_DEV_DEC_UTIL": (12, 0),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (123_456_789.0, 500.0),  # joules -> mJ
    }
    assert want["DCGM_FI_DEV_FB_FREE"][0] == 41043
    for name, (v0, v1) in want.items():
        assert s.by(name, "gpu") == {"0": pytest.approx(v0), "1": pytest.approx(v1)}, name


def test_fb_free_never_goes_negative() -> None:
    full = gpu0(mem_total=1000 * MIB, mem_used=900 * MIB, mem_reserved=200 * MIB)
    s = scrape_snapshot(snapshot([full]))
    assert s.value("DCGM_FI_DEV_FB_FREE", gpu="0") == 0
    assert s.value("DCGM_FI_DEV_FB_USED", gpu="0") == 900


def test_device_is_the_index_with_or_without_a_minor() -> None:
    s = scrape_snapshot(snapshot([gpu0(), gpu1(minor=None)]))
    assert s.by("DCGM_FI_DEV_GPU_UTIL", "gpu") == {"0": 97, "1": 0}
    assert {labels["gpu"]: labels["device"] for labels, _ in s.series("DCGM_FI_DEV_GPU_UTIL")} == {
        "0": "nvidia0",
        "1": "nvidia1",
    }


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ("util_gpu", "DCGM_FI_DEV_GPU_UTIL"),
        ("util_mem", "DCGM_FI_DEV_MEM_COPY_UTIL"),
        ("mem_used", "DCGM_FI_DEV_FB_USED"),
        ("temperature", "DCGM_FI_DEV_GPU_TEMP"),
        ("power", "DCGM_FI_DEV_POWER_USAGE"),
        ("sm_clock", "DCGM_FI_DEV_SM_CLOCK"),
        ("mem_clock", "DCGM_FI_DEV_MEM_CLOCK"),
        ("enc_util", "DCGM_FI_DEV_ENC_UTIL"),
        ("dec_util", "DCGM_FI_DEV_DEC_UTIL"),
        ("energy", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
    ],
)
def test_an_unavailable_field_gives_no_sample_for_that_gpu_only(field: str, name: str) -> None:
    s = scrape_snapshot(snapshot([gpu0(), gpu1(**{field: None})]))
    assert [labels["gpu"] for labels, _ in s.series(name)] == ["0"]
    # the other fields of that GPU are still there
    others = [n for n in DCGM_NAMES if n != name and not (field == "mem_used" and n == "DCGM_FI_DEV_FB_FREE")]
    for other in others:
        assert sorted(labels["gpu"] for labels, _ in s.series(other)) == ["0", "1"], other


def test_fb_free_needs_total_and_used() -> None:
    s = scrape_snapshot(snapshot([gpu0(mem_total=None), gpu1(mem_used=None)]))
    assert s.series("DCGM_FI_DEV_FB_FREE") == []
    assert s.by("DCGM_FI_DEV_FB_USED", "gpu") == {"0": 40000}


def test_a_lost_gpu_has_no_dcgm_samples_but_is_flagged_lost() -> None:
    lost = gpu1(lost=True)  # readings left in on purpose: a lost GPU must not report them
    s = scrape_snapshot(snapshot([gpu0(), lost], unaccounted_memory={0: 5 * MIB, 1: 7 * MIB}))
    for name in DCGM_NAMES:
        assert [labels["gpu"] for labels, _ in s.series(name)] == ["0"], name
    assert s.by("gputui_gpu_lost", "gpu") == {"0": 0, "1": 1}
    labels, _ = s.series("gputui_gpu_lost", gpu="1")[0]
    assert labels == {
        "gpu": "1",
        "UUID": lost.uuid,
        "pci_bus_id": lost.pci_bus_id,
        "device": "nvidia1",
        "modelName": lost.name,
        "Hostname": HOST,
    }
    assert s.by("gputui_unaccounted_memory_bytes", "gpu") == {"0": 5 * MIB}


# -- processes --------------------------------------------------------------------------------------------


def test_process_memory_series_and_their_labels() -> None:
    procs = [
        proc(4101, gpu=0, used=3 * 1024 * MIB),
        proc(4102, gpu=1, used=512 * MIB, command=None, name="ollama", user=None, category="unseen"),
    ]
    s = scrape_snapshot(snapshot(processes=procs))
    got = sorted(s.series("gputui_process_gpu_memory_bytes"), key=lambda lv: lv[0]["pid"])
    assert got == [
        (
            {
                "gpu": "0",
                "UUID": gpu0().uuid,
                "Hostname": HOST,
                "pid": "4101",
                "user": "alice",
                "command": "python train.py --epochs 90",
                "class": "ok",
                **NO_OWNER,
            },
            3 * 1024 * MIB,
        ),
        (
            {
                "gpu": "1",
                "UUID": gpu1().uuid,
                "Hostname": HOST,
                "pid": "4102",
                "user": "",
                "command": "ollama",
                "class": "unseen",
                **NO_OWNER,
            },
            512 * MIB,
        ),
    ]
    assert s.types["gputui_process_gpu_memory_bytes"] == "gauge"


def test_a_process_on_two_gpus_has_a_series_on_each() -> None:
    s = scrape_snapshot(
        snapshot(
            processes=[
                proc(77, gpu=0, used=MIB),
                proc(77, gpu=1, used=2 * MIB),
                proc(77, gpu=1, used=2 * MIB),
            ]
        )
    )  # listed twice on GPU 1
    assert s.by("gputui_process_gpu_memory_bytes", "gpu", pid="77") == {"0": MIB, "1": 2 * MIB}


def test_processes_without_memory_or_gpu_are_not_exported() -> None:
    procs = [
        proc(10, used=None, kinds=""),  # a device holder NVML does not list
        proc(11, gpu=None),  # holds only nvidiactl: GPU unknown
        proc(12, gpu=5),  # a GPU not in the snapshot
        proc(13, used=0),
    ]  # zero is a reading, not "unavailable"
    s = scrape_snapshot(snapshot(processes=procs))
    assert s.by("gputui_process_gpu_memory_bytes", "pid") == {"13": 0}


def test_an_exited_process_disappears_from_the_next_scrape() -> None:
    first = snapshot(processes=[proc(100), proc(200, gpu=1)], time=1000.0)
    second = snapshot(processes=[proc(100)], time=1001.0)
    sampler = FakeSampler([first, second])
    exporter = Exporter(sampler)  # type: ignore[arg-type]
    exporter.tick()
    assert set(scrape(exporter).by("gputui_process_gpu_memory_bytes", "pid")) == {"100", "200"}
    exporter.tick()
    after = scrape(exporter)
    assert set(after.by("gputui_process_gpu_memory_bytes", "pid")) == {"100"}
    assert 'pid="200"' not in after.text


def test_long_commands_are_cut_to_60_characters() -> None:
    long = "/usr/bin/python3 " + "x" * 30 + " --config " + "y" * 40
    exact = "/bin/" + "z" * 60  # 60 characters once the directory is dropped
    s = scrape_snapshot(snapshot(processes=[proc(1, command=long), proc(2, command=exact)]))
    commands = {labels["pid"]: labels["command"] for labels, _ in s.series("gputui_process_gpu_memory_bytes")}
    short = "python3 " + "x" * 30 + " --config " + "y" * 40
    assert len(commands["1"]) == 60
    assert commands["1"] == short[:59] + "…"
    assert commands["2"] == "z" * 60


def test_label_values_with_quotes_and_newlines_survive_the_round_trip() -> None:
    command = 'python -c "print(1)\nprint(2)" \\n'
    s = scrape_snapshot(snapshot(processes=[proc(5, command=command, user='o"brien')]))
    labels, _ = s.series("gputui_process_gpu_memory_bytes")[0]
    assert labels["command"] == command
    assert labels["user"] == 'o"brien'


# -- zombies, unaccounted memory, host-wide gauges ---------------------------------------------------------


def test_zombie_counts_per_class_with_zeros() -> None:
    procs = [
        proc(1, category="defunct", used=None),
        proc(2, category="defunct", used=None),
        proc(3, gpu=0, category="orphan"),
        proc(3, gpu=1, category="orphan"),  # one process, two GPUs
        proc(4, category="nvml-only"),
        proc(5, category="ok"),
        proc(6, category="worker", used=None),
    ]
    s = scrape_snapshot(snapshot(processes=procs))
    counts = s.by("gputui_zombie_processes", "class", Hostname=HOST)
    assert counts == {
        "defunct": 2,
        "orphan": 1,
        "nvml-only": 1,
        "stuck": 0,
        "unseen": 0,
        "no-permission": 0,
        "hung": 0,
    }
    assert set(counts) == set(SUSPICIOUS)
    assert all(labels.keys() == {"Hostname", "class"} for labels, _ in s.series("gputui_zombie_processes"))


def test_no_processes_still_gives_every_zombie_class_at_zero() -> None:
    s = scrape_snapshot(snapshot())
    assert s.by("gputui_zombie_processes", "class") == dict.fromkeys(SUSPICIOUS, 0)


def test_unaccounted_memory_per_gpu() -> None:
    s = scrape_snapshot(snapshot(unaccounted_memory={0: 1610612736, 1: None}))
    assert s.by("gputui_unaccounted_memory_bytes", "gpu") == {"0": 1610612736}
    labels, _ = s.series("gputui_unaccounted_memory_bytes")[0]
    assert labels.keys() == GPU_LABEL_NAMES and labels["device"] == "nvidia0"
    zero = scrape_snapshot(snapshot(unaccounted_memory={0: 0, 1: 0}))
    assert zero.by("gputui_unaccounted_memory_bytes", "gpu") == {"0": 0, "1": 0}


def test_unreadable_processes_and_sample_errors() -> None:
    s = scrape_snapshot(snapshot(unreadable_fds=3, errors=("gpu 0: power: NotSupported", "gpu 1: fan")))
    assert s.series("gputui_unreadable_processes") == [({"Hostname": HOST}, 3)]
    assert s.series("gputui_sample_errors") == [({"Hostname": HOST}, 2)]
    clean = scrape_snapshot(snapshot())
    assert clean.value("gputui_unreadable_processes") == 0
    assert clean.value("gputui_sample_errors") == 0


# -- dips ----------------------------------------------------------------------------------------------------


def dip(gpu: int, start: float, seconds: float, ongoing: bool = False) -> Dip:
    return Dip(gpu, start, start + seconds, baseline=95.0, lowest=20.0, ongoing=ongoing)


def test_dip_counters_by_kind_seconds_and_in_dip() -> None:
    counters = DipCounters()
    counters.add(
        [dip(0, 100, 3.0), dip(0, 200, 12.0), dip(1, 300, 4.5), dip(1, 400, 5.0)],
        [dip(1, 500, 2.5, ongoing=True)],
    )
    s = scrape_snapshot(snapshot(), counters)
    assert s.types["gputui_dips_total"] == "counter"
    assert s.by("gputui_dips_total", "kind", gpu="0") == {"stall": 1, "long": 1}
    assert s.by("gputui_dips_total", "kind", gpu="1") == {"stall": 1, "long": 1}  # 5.0 s is long
    assert s.by("gputui_dip_seconds_total", "gpu") == {"0": pytest.approx(15.0), "1": pytest.approx(9.5)}
    assert s.by("gputui_gpu_in_dip", "gpu") == {"0": 0, "1": 1}
    labels, _ = s.series("gputui_dips_total", gpu="1", kind="long")[0]
    assert labels.keys() == GPU_LABEL_NAMES | {"kind"} and labels["device"] == "nvidia1"

    counters.add([dip(1, 500, 3.0)], [])  # the ongoing one ended: counted, and no GPU is in a dip
    s = scrape_snapshot(snapshot(), counters)
    assert s.by("gputui_dips_total", "kind", gpu="1") == {"stall": 2, "long": 1}
    assert s.by("gputui_dips_total", "kind", gpu="0") == {"stall": 1, "long": 1}
    assert s.by("gputui_gpu_in_dip", "gpu") == {"0": 0, "1": 0}


def test_dip_counters_start_at_zero_for_every_gpu_and_kind() -> None:
    s = scrape_snapshot(snapshot(), DipCounters())
    assert sorted((labels["gpu"], labels["kind"], v) for labels, v in s.series("gputui_dips_total")) == [
        ("0", "long", 0),
        ("0", "stall", 0),
        ("1", "long", 0),
        ("1", "stall", 0),
    ]
    assert s.by("gputui_dip_seconds_total", "gpu") == {"0": 0, "1": 0}
    assert s.by("gputui_gpu_in_dip", "gpu") == {"0": 0, "1": 0}


def test_without_dip_counters_there_are_no_dip_metrics() -> None:
    s = scrape_snapshot(snapshot())
    assert not [n for n in s.samples if "dip" in n]


def test_the_exporter_counts_a_dip_its_detector_sees() -> None:
    """Busy at 95 %, then 3 s at 10 %, then busy again: one stall, in_dip while it lasts."""
    utils = [95] * 12 + [10, 10, 10] + [95]
    snaps = [snapshot([gpu0(util_gpu=u), gpu1()], [proc(4101)], time=1000.0 + i) for i, u in enumerate(utils)]
    exporter = Exporter(FakeSampler(snaps))  # type: ignore[arg-type]
    for _ in range(14):  # up to the second low sample: 1 s into the dip
        exporter.tick()
    assert scrape(exporter).by("gputui_gpu_in_dip", "gpu") == {"0": 0, "1": 0}
    exporter.tick()  # 2 s into it: a dip now
    during = scrape(exporter)
    assert during.by("gputui_gpu_in_dip", "gpu") == {"0": 1, "1": 0}
    assert during.by("gputui_dips_total", "kind", gpu="0") == {"stall": 0, "long": 0}
    exporter.tick()  # back to busy: the dip ended after 3 s
    after = scrape(exporter)
    assert after.by("gputui_gpu_in_dip", "gpu") == {"0": 0, "1": 0}
    assert after.by("gputui_dips_total", "kind", gpu="0") == {"stall": 1, "long": 0}
    assert after.value("gputui_dip_seconds_total", gpu="0") == pytest.approx(3.0)


# -- agents ----------------------------------------------------------------------------------------------


AGENT_COMMAND = "python3 train.py --config big.yaml"


def agent_snapshot(*replies: tuple[int, Any]) -> Snapshot:
    procs = [proc(pid, command=f"/usr/bin/{AGENT_COMMAND}") for pid, _ in replies]
    return snapshot(processes=procs, agents=dict(replies))


def test_agent_allocator_metrics_from_a_real_reply() -> None:
    s = scrape_snapshot(agent_snapshot((4101, agent_reply())))
    labels = {"Hostname": HOST, "pid": "4101", "command": AGENT_COMMAND, "cuda_device": "0"}
    want = {
        "gputui_agent_allocated_bytes": 52613349376,
        "gputui_agent_allocated_peak_bytes": 61203283968,
        "gputui_agent_reserved_bytes": 66571993088,
        "gputui_agent_reserved_peak_bytes": 70866960384,
        "gputui_agent_largest_free_block_bytes": 2147483648,
        "gputui_agent_fragmentation_percent": 84.6,
        "gputui_agent_alloc_retries_total": 3,
        "gputui_agent_ooms_total": 0,
    }
    for name, value in want.items():
        approx: list[tuple[dict[str, str], object]] = [(labels, pytest.approx(value))]
        assert s.series(name) == approx, name
    assert s.types["gputui_agent_alloc_retries_total"] == "counter"
    assert s.types["gputui_agent_ooms_total"] == "counter"
    assert s.types["gputui_agent_reserved_bytes"] == "gauge"
    wait_ratio: list[tuple[dict[str, str], object]] = [
        ({"Hostname": HOST, "pid": "4101", "command": AGENT_COMMAND}, pytest.approx(0.071))
    ]
    assert s.series("gputui_agent_data_wait_ratio") == wait_ratio


def test_an_agent_without_a_process_row_has_an_empty_command() -> None:
    s = scrape_snapshot(snapshot(agents={4101: agent_reply()}))
    labels, value = s.series("gputui_agent_reserved_bytes")[0]
    assert labels["command"] == "" and labels["pid"] == "4101" and value == 66571993088


def test_agent_command_labels_are_cut_too() -> None:
    command = "/usr/bin/python3 " + "w" * 100
    snap = snapshot(processes=[proc(4101, command=command)], agents={4101: agent_reply()})
    labels, _ = scrape_snapshot(snap).series("gputui_agent_allocated_bytes")[0]
    assert len(labels["command"]) == 60 and labels["command"].endswith("…")


def test_no_agents_no_agent_samples() -> None:
    s = scrape_snapshot(snapshot())
    assert not [n for n in s.samples if n.startswith("gputui_agent_")]


def _device(reply: dict[str, Any]) -> dict[str, Any]:
    dev: dict[str, Any] = reply["allocator"]["devices"][0]
    return dev


def _mutate(change: str) -> dict[str, Any]:
    reply = copy.deepcopy(agent_reply())
    reply["pid"] = 4242
    if change == "devices of the wrong kind":
        reply["allocator"]["devices"] = ["cuda:0", 3, None, [1, 2]]
    elif change == "devices as a string":
        reply["allocator"]["devices"] = "cuda:0"
    elif change == "devices as a dict":
        reply["allocator"]["devices"] = {"0": _device(reply)}
    elif change == "no allocator":
        del reply["allocator"]
    elif change == "strings for numbers":
        _device(reply).update(allocated="52613349376", reserved="lots", fragmentation="84.6")
        reply["progress"]["data_wait_share"] = "0.071"
    elif change == "bools for numbers":
        _device(reply).update(num_ooms=True, num_alloc_retries=False)
    elif change == "devices as a number":
        reply["allocator"]["devices"] = 5
    elif change == "allocator as a string":
        reply["allocator"] = "unavailable: torch is not imported"
    elif change == "allocator as a list":
        reply["allocator"] = [{"index": 0}]
    elif change == "progress as a string":
        reply["progress"] = "warming up"
    elif change == "bool data wait share":
        reply["progress"]["data_wait_share"] = True
    else:
        raise AssertionError(change)
    return reply


@pytest.mark.parametrize(
    "change",
    [
        "devices of the wrong kind",
        "devices as a string",
        "devices as a dict",
        "no allocator",
        "strings for numbers",
        "bools for numbers",
        "devices as a number",
        "allocator as a string",
        "allocator as a list",
        "progress as a string",
        "bool data wait share",
    ],
)
def test_a_malformed_agent_reply_gives_no_series(change: str) -> None:
    """A well-formed agent beside it keeps all its series; the malformed one gives no wrong numbers."""
    snap = agent_snapshot((4101, agent_reply()), (4242, _mutate(change)))
    s = scrape_snapshot(snap)  # raises if families() does
    good = {"Hostname": HOST, "pid": "4101", "command": AGENT_COMMAND, "cuda_device": "0"}
    assert s.series("gputui_agent_allocated_bytes", pid="4101") == [(good, 52613349376)]
    assert s.value("gputui_agent_data_wait_ratio", pid="4101") == pytest.approx(0.071)
    bad = {
        name: [v for _, v in s.series(name, pid="4242")]
        for name in s.samples
        if name.startswith("gputui_agent_")
    }
    bad = {name: values for name, values in bad.items() if values}
    if change == "no allocator":  # valid: an agent in a process that has not imported torch
        assert bad == {"gputui_agent_data_wait_ratio": [pytest.approx(0.071)]}
    else:  # an unreadable agent: none of what it said is exported, not even the parts that looked fine
        assert snap.agents[4242].status == "unreadable" and "pid" not in snap.agents[4242].error
        assert bad == {}


def test_a_non_dict_agent_reply_is_skipped() -> None:
    s = scrape_snapshot(snapshot(agents={1: "not a reply", 2: None, 4101: agent_reply()}))
    assert {labels["pid"] for labels, _ in s.series("gputui_agent_reserved_bytes")} == {"4101"}


def test_a_malformed_agent_reply_during_a_dip_does_not_stop_the_exporter() -> None:
    reply = agent_reply()
    reply["progress"]["data_wait_share"] = "n/a"
    utils = [95] * 12 + [10, 10, 10] + [95]
    snaps = [
        snapshot([gpu0(util_gpu=u), gpu1()], [proc(4101)], time=1000.0 + i, agents={4101: reply})
        for i, u in enumerate(utils)
    ]
    exporter = Exporter(FakeSampler(snaps))  # type: ignore[arg-type]
    for _ in utils:
        exporter.tick()
    s = scrape(exporter)
    assert s.value("gputui_exporter_last_sample_timestamp_seconds") == 1000.0 + len(utils) - 1
    assert s.by("gputui_dips_total", "kind", gpu="0") == {"stall": 1, "long": 0}


# -- Exporter: tick() and collect() ------------------------------------------------------------------------


class FakeSource:
    name = "nvml"


class FakeSampler:
    """Answers tick() with the next snapshot, or raises it when it is an exception."""

    def __init__(self, outcomes: list[Snapshot | Exception], hostname: str = HOST) -> None:
        self.outcomes = list(outcomes)
        self.source = FakeSource()
        self.hostname = hostname
        self.ticks = 0

    def tick(self) -> Snapshot:
        self.ticks += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_exporter_info_and_sample_timestamp() -> None:
    exporter = Exporter(FakeSampler([snapshot(time=1234.5)], hostname="dgx-3"))  # type: ignore[arg-type]
    assert exporter.tick() is not None
    s = scrape(exporter)
    assert s.series("gputui_exporter_info") == [
        ({"version": __version__, "source": "nvml", "Hostname": "dgx-3"}, 1.0)
    ]
    assert s.series("gputui_exporter_sample_failures_total") == [({}, 0)]
    assert s.value("gputui_exporter_last_sample_timestamp_seconds") == 1234.5
    assert s.value("gputui_exporter_sample_seconds") >= 0
    assert s.by("DCGM_FI_DEV_GPU_UTIL", "gpu") == {"0": 97, "1": 0}


def test_a_failing_sample_is_counted_and_the_last_good_one_served() -> None:
    good = snapshot(processes=[proc(4101)], time=1000.0)
    newer = snapshot([gpu0(util_gpu=50), gpu1()], time=1003.0)
    sampler = FakeSampler([good, RuntimeError("NVML: GPU is lost"), OSError("no /proc"), newer])
    exporter = Exporter(sampler)  # type: ignore[arg-type]
    assert exporter.tick() is good
    before = scrape(exporter)

    assert exporter.tick() is None  # does not raise
    assert exporter.failures == 1
    assert exporter.last_error == "RuntimeError: NVML: GPU is lost"
    s = scrape(exporter)
    assert s.value("gputui_exporter_sample_failures_total") == 1
    assert s.value("gputui_exporter_last_sample_timestamp_seconds") == 1000.0
    for name in (*DCGM_NAMES, "gputui_process_gpu_memory_bytes", "gputui_zombie_processes"):
        assert s.series(name) == before.series(name), name

    assert exporter.tick() is None
    assert scrape(exporter).value("gputui_exporter_sample_failures_total") == 2
    assert exporter.last_error == "OSError: no /proc"

    assert exporter.tick() is newer
    after = scrape(exporter)
    assert after.value("gputui_exporter_sample_failures_total") == 2  # a counter: never goes back
    assert after.value("gputui_exporter_last_sample_timestamp_seconds") == 1003.0
    assert after.by("DCGM_FI_DEV_GPU_UTIL", "gpu") == {"0": 50, "1": 0}
    assert after.series("gputui_process_gpu_memory_bytes") == []
    assert sampler.ticks == 4


def test_before_any_good_sample_only_info_and_failures_are_served() -> None:
    exporter = Exporter(FakeSampler([RuntimeError("driver not loaded")]))  # type: ignore[arg-type]
    assert exporter.tick() is None
    s = scrape(exporter)
    assert set(s.samples) == {"gputui_exporter_info", "gputui_exporter_sample_failures_total"}
    assert s.value("gputui_exporter_sample_failures_total") == 1
