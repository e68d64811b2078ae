"""L3's measured kernel coverage: the arch list of the environment's torch read from its
binaries (compat.inspect_torch, no import of torch) and judged per GPU with compat.rules.

The torch install is a fake tree built by fatbin_builders.write_torch (2.9.1+cu128 with
sm_80 sm_86 sm_90 compute_90 in libtorch_cuda.so, or a CPU build without any fatbin).
NVML and torch.cuda are ABSENT, faked at the function boundary: smokelib.import_pynvml
raises ImportError and the torch probe is the dict l3_cuda.probe returns when
torch.cuda.is_available() is False (no driver, no GPU visible to CUDA). The GPUs'
compute capabilities come from the controller (--gpu NAME=X.Y), as the role passes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fatbin_builders import write_torch
from smoke_modules import smoke

sl = smoke("smokelib")
l3 = smoke("l3_cuda")
run_all = smoke("run_all")

K40M = {"name": "Tesla K40m", "compute_capability": "3.5", "source": "controller"}
A100 = {"name": "A100-SXM4-40GB", "compute_capability": "8.0", "source": "controller"}
NO_CUDA = {"torch": "2.9.1+cu128", "cuda_build": "12.8", "cuda_available": False, "devices": []}
CPU_PROBE = {"torch": "2.9.1+cpu", "cuda_build": None, "cuda_available": False, "devices": []}


@pytest.fixture
def cuda_build(tmp_path: Path) -> dict[str, Any]:
    write_torch(tmp_path / "site-packages")
    return l3.measure(str(tmp_path / "site-packages"))


@pytest.fixture
def cpu_build(tmp_path: Path) -> dict[str, Any]:
    write_torch(tmp_path / "site-packages", cuda=False)
    return l3.measure(str(tmp_path / "site-packages"))


def test_measure_reads_the_builds_arch_list(cuda_build: dict[str, Any]) -> None:
    assert {k: cuda_build[k] for k in l3.MEASURED_KEYS} == {
        "torch_version": "2.9.1+cu128",
        "cuda": "12.8",
        "sass": ["sm_80", "sm_86", "sm_90"],
        "ptx": ["compute_90"],
        "cpu_only": False,
        "main_library": "torch/lib/libtorch_cuda.so",
    }


def test_measure_of_a_cpu_build(cpu_build: dict[str, Any]) -> None:
    assert cpu_build["cpu_only"] is True
    assert (cpu_build["torch_version"], cpu_build["cuda"]) == ("2.9.1+cpu", None)
    assert (cpu_build["sass"], cpu_build["ptx"], cpu_build["main_library"]) == ([], [], None)


def test_measure_errors_are_soft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert l3.measure(None) == {"error": "no torch package in this environment"}
    assert "no torch package found" in l3.measure(str(tmp_path))["error"]

    def no_compat() -> Any:
        raise ImportError("No module named 'compat'")

    monkeypatch.setattr(sl, "import_compat", no_compat)
    assert "compat modules are not next to the smoke scripts" in l3.measure(str(tmp_path))["error"]


def test_k40m_has_no_kernel_image_without_driver(cuda_build: dict[str, Any]) -> None:
    v = l3.judge(NO_CUDA, 1, measured=cuda_build, gpus=[K40M])
    assert v["status"] == "fail"
    first, second = v["reason"].split("; ")
    assert first == (
        "the torch in this environment (2.9.1+cu128, CUDA 12.8) has no kernels for "
        "Tesla K40m sm_35: it carries sm_80 sm_86 sm_90 + PTX compute_90 "
        "(measured from torch/lib/libtorch_cuda.so)"
    )
    assert "driver missing or too old?" in second
    assert v["hint"] == (
        "gpu-compat explain 'no kernel image is available for execution on the device' "
        "--gpu 'Tesla K40m'; gpu-compat resolve --gpu 'Tesla K40m'"
    )
    assert v["details"]["measured"]["sass"] == ["sm_80", "sm_86", "sm_90"]
    assert v["details"]["gpus"] == [
        {
            "name": "Tesla K40m",
            "compute_capability": "3.5",
            "source": "controller",
            "covered_by": None,
            "sm": "sm_35",
            "result": "no kernel image",
        }
    ]


def test_a100_is_covered_by_sm_80(cuda_build: dict[str, Any]) -> None:
    v = l3.judge(NO_CUDA, 1, measured=cuda_build, gpus=[A100])
    row = v["details"]["gpus"][0]
    assert (row["covered_by"], row["result"]) == ("sm_80", "covered by sm_80")
    # Covered, but no driver: still a fail, for the driver only (never a pass without CUDA).
    assert v["status"] == "fail"
    assert "no kernels" not in v["reason"]
    assert "driver missing or too old?" in v["reason"]


def test_a100_passes_when_torch_cuda_works(cuda_build: dict[str, Any]) -> None:
    p = {
        "torch": "2.9.1+cu128",
        "cuda_build": "12.8",
        "cuda_available": True,
        "arch_list": ["sm_80", "sm_86", "sm_90", "compute_90"],
        "devices": [{"index": 0, "name": "A100-SXM4-40GB", "capability": "8.0", "fp32_ok": True}],
    }
    v = l3.judge(p, 1, measured=cuda_build, gpus=[A100])
    assert v["status"] == "pass"
    assert v["details"]["coverage"] == {"0": "sass sm_80"}


def test_ptx_coverage_names_the_jit(cuda_build: dict[str, Any]) -> None:
    h100_next = {"name": "B200", "compute_capability": "10.0", "source": "controller"}
    row = l3.judge(NO_CUDA, 1, measured=cuda_build, gpus=[h100_next])["details"]["gpus"][0]
    assert row["covered_by"] == "compute_90"
    assert row["result"] == "covered by compute_90 (PTX, JIT-compiled at first launch)"


def test_cpu_only_build_on_a_k40m(cpu_build: dict[str, Any]) -> None:
    v = l3.judge(CPU_PROBE, 1, measured=cpu_build, gpus=[K40M])
    assert v["status"] == "fail"
    assert v["reason"] == (
        "torch 2.9.1+cpu is a CPU-only build: no CUDA kernels for Tesla K40m sm_35 "
        "(measured from its libraries: no .nv_fatbin section)"
    )
    assert v["hint"] == (
        "gpu-compat explain 'no kernel image is available for execution on the device' "
        "--gpu 'Tesla K40m'; gpu-compat resolve --gpu 'Tesla K40m'"
    )
    assert v["details"]["measured"]["cpu_only"] is True
    assert v["details"]["gpus"][0]["result"] == "no kernel image"


def test_cpu_only_build_with_unknown_gpus(cpu_build: dict[str, Any]) -> None:
    v = l3.judge(CPU_PROBE, 2, measured=cpu_build, gpus=[])
    assert v["reason"].startswith(
        "torch 2.9.1+cpu is a CPU-only build: no CUDA kernels for the 2 NVIDIA device(s)"
    )


def test_no_device_is_still_skipped(cpu_build: dict[str, Any]) -> None:
    v = l3.judge(CPU_PROBE, 0, measured=cpu_build, gpus=[])
    assert (v["status"], v["reason"]) == ("skipped", sl.NO_DEVICE)
    assert v["details"]["measured"]["cpu_only"] is True
    assert not sl.counts_as_pass(v)


def test_runtime_check_without_compat_is_a_clear_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_compat() -> Any:
        raise ImportError("No module named 'compat'")

    monkeypatch.setattr(sl, "import_compat", no_compat)
    p = {**NO_CUDA, "cuda_available": True, "arch_list": ["sm_80"], "devices": []}
    v = l3.judge(p, 1, measured={"error": "x"}, gpus=[])
    assert v["status"] == "fail"
    assert v["reason"].startswith("cannot judge kernel coverage")


def test_nvml_capabilities_win_over_the_controller() -> None:
    nvml = {"gpus": [{"name": "Tesla K80", "compute_capability": "3.7"}]}
    assert l3.host_gpus([A100], nvml) == [
        {"name": "Tesla K80", "compute_capability": "3.7", "source": "nvml"}
    ]
    no_cc = {"gpus": [{"name": "Tesla K80", "compute_capability": None}]}
    assert l3.host_gpus([A100], no_cc) == [A100]
    assert l3.host_gpus([A100], None) == [A100]


def test_parse_gpu_arg() -> None:
    assert l3.parse_gpu_arg("Tesla K40m=3.5") == K40M
    assert l3.parse_gpu_arg("Odd=Name=8.6")["name"] == "Odd=Name"
    for bad in ("no-cc", "=3.5", "A100=eight"):
        with pytest.raises(ValueError, match=r"--gpu wants NAME=X\.Y"):
            l3.parse_gpu_arg(bad)


def test_run_all_forwards_the_gpus_to_l3() -> None:
    a = type("A", (), {"sysfs_root": "/sys", "gpu": ["Tesla K40m=3.5"]})()
    assert run_all.layer_args("L3", a) == ["--sysfs-root", "/sys", "--gpu=Tesla K40m=3.5"]


def test_main_on_a_host_without_driver_nvml_or_cuda(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """main() as the role runs it: torch.cuda without a driver, no NVML, a K40m on the bus."""
    write_torch(tmp_path / "venv" / "lib" / "python3.11" / "site-packages", cuda=False)
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x1023"), ("class", "0x030200")):
        (dev / name).write_text(value + "\n")

    def no_nvml() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(sl, "import_pynvml", no_nvml)
    monkeypatch.setattr(l3, "probe", lambda: dict(CPU_PROBE))
    rc = l3.main(
        [
            "--sysfs-root",
            str(tmp_path / "sys"),
            "--torch-path",
            str(tmp_path / "venv"),
            "--gpu",
            "Tesla K40m=3.5",
        ]
    )
    v = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert "CPU-only build: no CUDA kernels for Tesla K40m sm_35" in v["reason"]
    assert v["details"]["gpus"][0]["source"] == "controller"
