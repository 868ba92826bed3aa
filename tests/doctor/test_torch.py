"""PyTorch as the user's Python sees it: torch_probe.probe() run against stand-in Pythons (tests/doctor/
pythons.py) that print the facts a check asks for, checks_torch's verdicts on them, and run.diagnose()
putting the areas together. One test runs the real PROBE with this venv's own Python and its CPU torch."""

from __future__ import annotations

import sys
import time
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest

from gputui.doctor import checks_torch, run
from gputui.doctor.checks_torch import runs_on, wheel_for
from gputui.doctor.facts import GpuFact, SystemFacts
from gputui.doctor.report import EXIT_OK, EXIT_PROBLEM, OK, PROBLEM, WARNING, Check, exit_code
from gputui.doctor.torch_probe import PROBE, TorchFacts, probe
from tests.doctor import pythons
from tests.doctor.pythons import ARCHS_CU121, torch_doc

INDEX = "pip install torch --index-url https://download.pytorch.org/whl/"
NO_KERNEL = "no kernel image is available for execution on the device"
DRIVER_TOO_OLD = (
    "CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). "
    "Please update your GPU driver by downloading and installing a new version from the URL: "
    "http://www.nvidia.com/Download/index.aspx"
)


def gpu(
    index: int = 0,
    name: str = "NVIDIA H100 80GB HBM3",
    capability: tuple[int, int] | None = (9, 0),
    clock: int = 1980,
) -> GpuFact:
    return GpuFact(
        index,
        name,
        f"GPU-{index:08x}-1111-2222-3333-444455550000",
        f"00000000:{0x1B + 0x10 * index:02X}:00.0",
        minor=index,
        mig=False,
        capability=capability,
        sm_clock_max=clock,
    )


def system(
    cuda: str | None = "12.4", gpus: tuple[GpuFact, ...] | None = None, nvml_error: str | None = None
) -> SystemFacts:
    gpus = (gpu(0),) if gpus is None else gpus
    return SystemFacts(
        kernel_module="550.54.15",
        nvml_error=nvml_error,
        library="/usr/lib/libnvidia-ml.so.1",
        driver_version="550.54.15" if nvml_error is None else None,
        cuda_version=cuda if nvml_error is None else None,
        gpus=gpus if nvml_error is None else (),
        device_files={"/dev/nvidiactl": "ok", "/dev/nvidia-uvm": "ok", "/dev/nvidia0": "ok"},
    )


def judged(
    tmp_path: Path,
    doc: dict[str, Any],
    sys_facts: SystemFacts | None = None,
    seen: tuple[GpuFact, ...] | None = None,
) -> list[Check]:
    """The torch checks for a Python whose probe prints `doc`."""
    sys_facts = sys_facts or system()
    facts = probe(pythons.printing(tmp_path, doc))
    assert facts.error is None, facts.error
    return checks_torch.checks(facts, sys_facts, sys_facts.gpus if seen is None else seen)


def problems(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == PROBLEM]


def warnings_(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == WARNING]


# -- the probe ----------------------------------------------------------------------------------------


def test_probe_reads_the_json_line(tmp_path: Path) -> None:
    doc = torch_doc(device_count=2, capabilities=[[9, 0], [8, 0]], warnings=["a warning"])
    python = pythons.printing(tmp_path, doc)
    assert probe(python) == TorchFacts(
        python,
        torch="2.3.0+cu121",
        cuda="12.1",
        hip=None,
        available=True,
        device_count=2,
        arch_list=tuple(ARCHS_CU121),
        capabilities=((9, 0), (8, 0)),
        warnings=("a warning",),
    )


def test_probe_runs_python_dash_c_probe_with_the_env(tmp_path: Path) -> None:
    python, args, mark = pythons.recording(tmp_path, torch_doc())
    facts = probe(python, env={"MARK": "from the doctor"})
    assert facts.torch == "2.3.0+cu121"
    assert args.read_text() == f"-c\n{PROBE}\n"
    assert mark.read_text() == "from the doctor"


def test_probe_uses_this_environment_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARK", "inherited")
    python, _args, mark = pythons.recording(tmp_path, torch_doc())
    probe(python)
    assert mark.read_text() == "inherited"


def test_probe_skips_noise_before_the_json_line(tmp_path: Path) -> None:
    # A sitecustomize that logs JSON of its own: the probe's line is the last one.
    python = pythons.printing(
        tmp_path, torch_doc(torch="2.4.1"), before='Welcome to conda\n{"event": "sitecustomize loaded"}'
    )
    assert probe(python).torch == "2.4.1"


def test_probe_torch_not_importable(tmp_path: Path) -> None:
    facts = probe(pythons.printing(tmp_path, torch_doc(torch=None)))
    assert facts.error is None and facts.torch is None
    assert facts.import_error == "ModuleNotFoundError: No module named 'torch'"


def test_probe_tolerates_odd_values(tmp_path: Path) -> None:
    doc = {
        "python": "3.12.0",
        "torch": "2.5.0",
        "cuda": 12.4,
        "available": "yes",
        "device_count": "2",
        "arch_list": ["sm_90", 90, None],
        "capabilities": [[9, 0], [8], "9.0", [8, 6]],
        "warnings": ["real one", 3],
    }
    facts = probe(pythons.printing(tmp_path, doc))
    assert facts.error is None
    assert (facts.torch, facts.cuda, facts.available, facts.device_count) == ("2.5.0", None, None, None)
    assert facts.arch_list == ("sm_90",)
    assert facts.capabilities == ((9, 0), (8, 6))
    assert facts.warnings == ("real one",)


def test_probe_no_such_python(tmp_path: Path) -> None:
    missing = str(tmp_path / "venv/bin/python")
    facts = probe(missing)
    assert facts.python == missing and facts.torch is None
    assert facts.error == f"cannot run {missing}: No such file or directory"


def test_probe_python_that_crashes(tmp_path: Path) -> None:
    python = pythons.crashing(
        tmp_path,
        [
            "Traceback (most recent call last):",
            '  File "<string>", line 5',
            "ImportError: libcudart.so.12: cannot open shared object file",
        ],
    )
    facts = probe(python)
    assert (
        facts.error == f"{python} could not run the probe: ImportError: libcudart.so.12: cannot open "
        "shared object file"
    )


def test_probe_python_that_dies_silently(tmp_path: Path) -> None:
    python = pythons.crashing(tmp_path, [], code=139)
    assert probe(python).error == f"{python} could not run the probe: exit status 139"


def test_probe_timeout(tmp_path: Path) -> None:
    python = pythons.sleeping(tmp_path, 20)
    start = time.monotonic()
    facts = probe(python, timeout=0.3)
    assert time.monotonic() - start < 5
    assert facts.error == f"{python} did not answer within 0.3 s"


@pytest.mark.parametrize("text", ["Python 3.11.7", "{not json at all", ""], ids=["text", "broken", "empty"])
def test_probe_output_not_json(tmp_path: Path, text: str) -> None:
    python = pythons.printing_text(tmp_path, text)
    assert probe(python).error == f"{python} could not run the probe: exit status 0"


def test_probe_failure_is_a_warning(tmp_path: Path) -> None:
    checks = checks_torch.checks(probe(str(tmp_path / "nope")), system(), (gpu(0),))
    assert len(checks) == 1
    c = checks[0]
    assert (c.area, c.status) == ("torch", WARNING)
    assert c.found.startswith("could not ask PyTorch: cannot run")
    assert "--python" in c.fix


# -- the torch checks ---------------------------------------------------------------------------------


def test_torch_not_importable_is_a_warning(tmp_path: Path) -> None:
    checks = judged(tmp_path, torch_doc(torch=None))
    assert len(checks) == 1
    c = checks[0]
    assert c.status == WARNING
    assert "torch is not importable by" in c.found and "No module named 'torch'" in c.found
    assert f"{INDEX}cu124" in c.fix and "--python" in c.fix


@pytest.mark.parametrize(("driver", "wheel"), [("12.4", "cu124"), ("12.8", "cu128"), ("11.8", "cu118")])
def test_cpu_only_build_is_a_problem(tmp_path: Path, driver: str, wheel: str) -> None:
    checks = judged(tmp_path, torch_doc(torch="2.13.0+cpu", cuda=None, available=False), system(driver))
    assert [c.status for c in checks] == [OK, PROBLEM]
    assert checks[0].found.startswith("torch 2.13.0+cpu in ")
    assert checks[1].found == "torch 2.13.0+cpu is a CPU-only build: it never uses a GPU"
    assert checks[1].fix == f"{INDEX}{wheel}"


def test_cpu_only_build_with_the_driver_unknown(tmp_path: Path) -> None:
    checks = judged(
        tmp_path, torch_doc(torch="2.13.0+cpu", cuda=None, available=False), system(nvml_error="library")
    )
    assert problems(checks)[0].fix == f"{INDEX}cu126"


def test_rocm_build_is_a_problem(tmp_path: Path) -> None:
    checks = judged(tmp_path, torch_doc(torch="2.5.1+rocm6.2", cuda=None, hip="6.2.41133", available=False))
    assert [c.status for c in checks] == [OK, PROBLEM]
    assert "ROCm (AMD) build" in checks[1].found and "cannot use NVIDIA GPUs" in checks[1].found
    assert checks[1].fix == f"{INDEX}cu124"


def test_cuda_newer_major_than_the_driver_is_a_problem(tmp_path: Path) -> None:
    checks = judged(
        tmp_path, torch_doc(torch="2.9.0+cu130", cuda="13.0", available=False, warnings=[DRIVER_TOO_OLD])
    )
    c = checks[1]
    assert c.status == PROBLEM
    assert c.found == (
        "torch is built with CUDA 13.0, the driver supports only up to 12.4: CUDA cannot start"
    )
    assert "upgrade the NVIDIA driver" in c.fix and f"{INDEX}cu124" in c.fix


def test_cuda_newer_minor_than_the_driver_is_a_warning(tmp_path: Path) -> None:
    checks = judged(tmp_path, torch_doc(torch="2.6.0+cu126", cuda="12.6"))
    c = checks[1]
    assert c.status == WARNING
    assert c.found.startswith("torch is built with CUDA 12.6, the driver supports up to 12.4")
    assert "minor-version compatibility" in c.found
    assert f"{INDEX}cu124" in c.fix
    assert problems(checks) == []


@pytest.mark.parametrize("built", ["12.1", "12.4", "11.8"])
def test_cuda_versions_that_fit(tmp_path: Path, built: str) -> None:
    checks = judged(tmp_path, torch_doc(cuda=built))
    assert checks[1] == Check("torch", OK, f"built with CUDA {built}; the driver supports up to 12.4")


def test_healthy_torch_every_check_ok(tmp_path: Path) -> None:
    checks = judged(tmp_path, torch_doc())
    assert [c.status for c in checks] == [OK] * 4
    assert checks[2].found == "torch.cuda.is_available() is True: 1 GPU"
    assert checks[3].found == f"kernels for sm_90 in this build ({' '.join(ARCHS_CU121)})"


def test_not_available_carries_the_driver_warning(tmp_path: Path) -> None:
    checks = judged(tmp_path, torch_doc(available=False, warnings=[DRIVER_TOO_OLD]))
    c = problems(checks)[0]
    assert c.found == f"torch.cuda.is_available() is False: {DRIVER_TOO_OLD}"
    assert "torch.cuda.init()" in c.fix and "/dev/nvidia-uvm" in c.fix


def test_not_available_prefers_the_cuda_error(tmp_path: Path) -> None:
    doc = torch_doc(
        available=False,
        warnings=[DRIVER_TOO_OLD],
        cuda_error="RuntimeError: CUDA driver initialization failed",
    )
    c = problems(judged(tmp_path, doc))[0]
    assert c.found == "torch.cuda.is_available() is False: RuntimeError: CUDA driver initialization failed"


def test_not_available_without_a_word(tmp_path: Path) -> None:
    c = problems(judged(tmp_path, torch_doc(available=False)))[0]
    assert c.found == "torch.cuda.is_available() is False"


def test_not_available_points_at_the_driver_problems(tmp_path: Path) -> None:
    c = problems(judged(tmp_path, torch_doc(available=False), system(nvml_error="mismatch")))[0]
    assert c.fix == "fix the driver problems above first"


def test_not_available_points_at_cuda_visible_devices(tmp_path: Path) -> None:
    c = problems(judged(tmp_path, torch_doc(available=False), seen=()))[0]
    assert c.fix == "CUDA_VISIBLE_DEVICES leaves no GPU (see above)"


def test_device_count_differs_from_the_selection(tmp_path: Path) -> None:
    two = (gpu(0), gpu(1))
    checks = judged(tmp_path, torch_doc(device_count=1), system(gpus=two), seen=two)
    w = warnings_(checks)
    assert len(w) == 1
    assert w[0].found == "torch sees 1 GPU, CUDA_VISIBLE_DEVICES leaves 2"
    assert "CUDA_VISIBLE_DEVICES" in w[0].fix


def test_device_count_matching_the_selection(tmp_path: Path) -> None:
    two = (gpu(0), gpu(1))
    assert warnings_(judged(tmp_path, torch_doc(device_count=2), system(gpus=two), seen=two)) == []
    assert warnings_(judged(tmp_path, torch_doc(device_count=1), system(gpus=two), seen=two[1:])) == []


BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def test_missing_arch_is_a_problem(tmp_path: Path) -> None:
    blackwell = (gpu(0, BLACKWELL, (12, 0)),)
    checks = judged(tmp_path, torch_doc(capabilities=[[12, 0]]), system("12.8", blackwell))
    p = problems(checks)
    assert len(p) == 1
    assert p[0].found.startswith(f"GPU 0 ({BLACKWELL}) is sm_120, and torch 2.3.0+cu121 has no kernels")
    assert NO_KERNEL in p[0].found
    assert "sm_90" in p[0].found
    assert "sm_120" in p[0].fix and f"{INDEX}cu128" in p[0].fix


def test_missing_arch_names_the_gpu_without_kernels(tmp_path: Path) -> None:
    gpus = (gpu(0, "NVIDIA H100 80GB HBM3", (9, 0)), gpu(1, "Tesla K80", (3, 7)))
    p = problems(judged(tmp_path, torch_doc(device_count=2), system(gpus=gpus)))
    assert len(p) == 1 and p[0].found.startswith("GPU 1 (Tesla K80) is sm_37") and NO_KERNEL in p[0].found


def test_missing_arch_from_torch_capabilities_when_nvml_has_none(tmp_path: Path) -> None:
    unknown = (gpu(0, capability=None),)
    checks = judged(tmp_path, torch_doc(capabilities=[[12, 0]]), system(gpus=unknown))
    p = problems(checks)
    assert len(p) == 1 and p[0].found.startswith("cuda:0 is sm_120") and NO_KERNEL in p[0].found


@pytest.mark.parametrize(
    ("capability", "archs", "sm"),
    [
        ((9, 0), ["sm_80", "sm_90"], "sm_90"),  # exact cubin
        ((8, 6), ["sm_70", "sm_80"], "sm_86"),  # sm_80 cubin runs on 8.6
        ((9, 0), ["sm_70", "sm_80", "compute_80"], "sm_90"),  # PTX, compiled by the driver
        ((9, 0), ["sm_80", "sm_90a"], "sm_90"),  # arch-specific cubin on its own arch
    ],
    ids=["exact", "lower-minor", "ptx", "arch-specific"],
)
def test_arch_present(tmp_path: Path, capability: tuple[int, int], archs: list[str], sm: str) -> None:
    gpus = (gpu(0, capability=capability),)
    checks = judged(tmp_path, torch_doc(arch_list=archs, capabilities=[list(capability)]), system(gpus=gpus))
    assert problems(checks) == []
    assert checks[-1] == Check("torch", OK, f"kernels for {sm} in this build ({' '.join(archs)})")


def test_arch_specific_cubin_only_on_its_own_arch(tmp_path: Path) -> None:
    gpus = (gpu(0, "NVIDIA B200", (10, 0)),)
    p = problems(judged(tmp_path, torch_doc(arch_list=["sm_80", "sm_90a"]), system("12.8", gpus)))
    assert len(p) == 1 and "is sm_100" in p[0].found and NO_KERNEL in p[0].found


def test_no_arch_list_no_arch_verdict(tmp_path: Path) -> None:
    checks = judged(tmp_path, torch_doc(arch_list=[]))
    assert not any("kernels" in c.found for c in checks)


# -- runs_on and wheel_for --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "archs", "expected"),
    [
        ((9, 0), ("sm_90",), True),
        ((8, 6), ("sm_80",), True),
        ((8, 9), ("sm_86",), True),
        ((8, 0), ("sm_86",), False),  # a cubin for a newer minor does not run
        ((9, 0), ("sm_80", "sm_86"), False),  # nor one of another major
        ((12, 0), ("sm_100",), False),
        ((10, 0), ("sm_100",), True),
        ((12, 0), ("sm_120",), True),
        ((9, 0), ("compute_80",), True),
        ((12, 0), ("compute_90",), True),
        ((8, 0), ("compute_90",), False),  # PTX of a newer version
        ((9, 0), ("sm_90a",), True),
        ((10, 0), ("sm_90a",), False),
        ((10, 0), ("sm_100a",), True),
        ((10, 3), ("sm_100a",), False),
        ((9, 0), (), False),
        ((9, 0), ("sm_9", "gfx90a", "compute_", "sm_90x1"), False),  # not arch names
    ],
    ids=lambda v: str(v),
)
def test_runs_on(capability: tuple[int, int], archs: tuple[str, ...], expected: bool) -> None:
    assert runs_on(capability, archs) is expected


def test_arch_specific_ptx_does_not_run_forward() -> None:
    assert runs_on((10, 0), ("compute_90a",)) is False


@pytest.mark.parametrize(
    ("driver", "wheel"),
    [
        ("12.4", "cu124"),
        ("12.5", "cu124"),
        ("12.8", "cu128"),
        ("12.9", "cu129"),
        ("13.0", "cu130"),
        ("13.2", "cu130"),
        ("12.2", "cu121"),
        ("12.0", "cu118"),
        ("11.8", "cu118"),
        ("11.4", "cu118"),  # older than every wheel: the oldest one
        (None, "cu126"),
        ("", "cu126"),
        ("unknown", "cu126"),
    ],
)
def test_wheel_for(driver: str | None, wheel: str) -> None:
    assert wheel_for(driver) == wheel


# -- the real thing: this venv's Python and its CPU-only torch --------------------------------------------


def test_real_probe_of_this_python() -> None:
    facts = probe(sys.executable)
    assert facts.error is None, facts.error
    if facts.torch is None:
        pytest.skip(f"torch is not importable by {sys.executable}: {facts.import_error}")
    assert facts.cuda is None, f"expected the CPU-only torch of the dev venv, got CUDA {facts.cuda}"
    assert facts.hip is None
    assert facts.available is False
    assert facts.device_count == 0
    assert facts.arch_list == () and facts.capabilities == ()
    assert facts.cuda_error is None
    checks = checks_torch.checks(facts, system(), (gpu(0),))
    assert checks[-1].status == PROBLEM
    assert checks[-1].found == f"torch {facts.torch} is a CPU-only build: it never uses a GPU"


# -- diagnose(): the areas in order, the exit code ----------------------------------------------------------


def areas(checks: list[Check]) -> list[str]:
    return [area for area, _ in groupby(c.area for c in checks)]


def test_diagnose_healthy_machine(tmp_path: Path) -> None:
    python = pythons.printing(tmp_path, torch_doc())
    checks = run.diagnose(python=python, env={}, system=system())
    assert areas(checks) == ["driver", "gpus", "cuda", "torch"]
    assert [c.status for c in checks] == [OK] * len(checks), checks
    assert exit_code(checks) == EXIT_OK


def test_diagnose_warnings_only_exit_zero(tmp_path: Path) -> None:
    python = pythons.printing(tmp_path, torch_doc(cuda="12.6"))
    mixed = (gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0), 1410), gpu(1))
    checks = run.diagnose(python=python, env={"CUDA_VISIBLE_DEVICES": "0,0"}, system=system(gpus=mixed))
    assert areas(checks) == ["driver", "gpus", "cuda", "torch"]
    statuses = {c.status for c in checks}
    assert WARNING in statuses and PROBLEM not in statuses
    assert exit_code(checks) == EXIT_OK


def test_diagnose_a_problem_exits_one(tmp_path: Path) -> None:
    python = pythons.printing(tmp_path, torch_doc(torch="2.13.0+cpu", cuda=None, available=False))
    checks = run.diagnose(python=python, env={}, system=system())
    assert areas(checks) == ["driver", "gpus", "cuda", "torch"]
    assert [c.found for c in problems(checks)] == [
        "torch 2.13.0+cpu is a CPU-only build: it never uses a GPU"
    ]
    assert exit_code(checks) == EXIT_PROBLEM


def test_diagnose_without_nvml_skips_the_cuda_area(tmp_path: Path) -> None:
    python = pythons.printing(tmp_path, torch_doc(available=False))
    checks = run.diagnose(python=python, env={}, system=system(nvml_error="driver"))
    assert areas(checks) == ["driver", "torch"]
    assert problems(checks)[-1].fix == "fix the driver problems above first"
    assert exit_code(checks) == EXIT_PROBLEM


def test_diagnose_passes_env_to_the_probe(tmp_path: Path) -> None:
    python, _args, mark = pythons.recording(tmp_path, torch_doc())
    run.diagnose(python=python, env={"MARK": "job env"}, system=system())
    assert mark.read_text() == "job env"


@pytest.mark.parametrize(
    ("env", "verdict"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, PROBLEM),  # CUDA's id 0: the Blackwell (fastest first)
        ({"CUDA_VISIBLE_DEVICES": "1"}, OK),  # the A100
        ({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, OK),  # NVML GPU 0: the A100
    ],
    ids=["fastest-first-0", "fastest-first-1", "pci-0"],
)
def test_diagnose_judges_the_archs_of_the_gpus_cuda_sees(
    tmp_path: Path, env: dict[str, str], verdict: str
) -> None:
    gpus = (gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0), 1410), gpu(1, BLACKWELL, (12, 0), 2600))
    python = pythons.printing(tmp_path, torch_doc(capabilities=[[8, 0]]))
    checks = run.diagnose(python=python, env=env, system=system("12.8", gpus))
    arch = [c for c in checks if "kernels" in c.found]
    assert len(arch) == 1 and arch[0].status == verdict
    if verdict == PROBLEM:
        assert BLACKWELL in arch[0].found and NO_KERNEL in arch[0].found
