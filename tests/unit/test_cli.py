"""The gpu-compat CLI contract: exit codes, JSON keys, human output, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat.cli import main

K40M_WARNING = (
    "UserWarning: Tesla K40m with CUDA capability sm_35 is not compatible with the current "
    "PyTorch installation. The current PyTorch install supports CUDA capabilities sm_37 sm_50 "
    "sm_60 sm_61 sm_70 sm_75 compute_37."
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code, out, _ = run(capsys, *argv, "--json")
    return code, json.loads(out)


@pytest.mark.parametrize(
    "query",
    ["K40m", "k40M", "Tesla K40m", "10de:1023", "0x1023", "1023"],
    ids=["short", "case", "full", "pci", "pci-hex", "pci-bare"],
)
def test_lookup_forms(capsys: pytest.CaptureFixture[str], query: str) -> None:
    code, data = run_json(capsys, "lookup", query)
    assert code == 0
    assert [g["name"] for g in data["gpus"]] == ["Tesla K40m"]
    assert data["gpus"][0]["compute_capability"] == "3.5"
    assert data["gpus"][0]["last_driver_branch"] == 470


@pytest.mark.parametrize(
    ("query", "name"),
    [("RTX3090", "GeForce RTX 3090"), ("GTX 1080Ti", "GeForce GTX 1080 Ti")],
)
def test_a_name_typed_without_its_spaces_is_found(
    capsys: pytest.CaptureFixture[str], query: str, name: str
) -> None:
    code, data = run_json(capsys, "resolve", "--gpu", query)
    assert code == 0
    assert [g["name"] for g in data["gpus"]] == [name]


def test_lookup_by_capability_lists_every_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "lookup", "sm_35")
    assert code == 0
    names = {g["name"] for g in data["gpus"]}
    assert {"Tesla K40m", "Tesla K40c"} <= names
    assert {g["compute_capability"] for g in data["gpus"]} == {"3.5"}
    code2, data2 = run_json(capsys, "lookup", "3.5")
    assert code2 == 0
    assert data2["gpus"] == data["gpus"]


def test_lookup_not_found_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "lookup", "K40x")
    assert code == 1
    assert "no GPU matches 'K40x'; did you mean" in out


def test_human_lookup_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "lookup", "M40")
    assert code == 0
    assert out.splitlines()[0].split() == [
        "GPU",
        "CC",
        "Architecture",
        "PCI",
        "IDs",
        "Driver",
        "branches",
        "Memory",
    ]
    assert "10de:17fd" in out
    assert "Maxwell" in out


def test_check_seed_1_7_1_conda_no_sm_35(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(
        capsys, "check", "--gpu", "K40m", "--torch", "1.7.1", "--channel", "conda"
    )
    assert code == 1
    assert data["compatible"] is False
    assert any("has no kernel image for Tesla K40m sm_35" in r for r in data["reasons"])
    assert any("compute_37" in r for r in data["reasons"])


def test_check_seed_1_2_0_cu100_on_r470(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(
        capsys, "check", "--gpu", "K40m", "--torch", "1.2.0+cu100", "--driver", "470.256.02"
    )
    assert code == 0
    assert (data["compatible"], data["torch"], data["variant"]) == (True, "1.2.0", "cu100")
    assert data["gpus"][0]["covered_by"] == "sm_35"
    assert data["driver"]["given"] == "470.256.02"


def test_check_branch_that_dropped_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(
        capsys, "check", "--gpu", "K40m", "--torch", "1.2.0+cu100", "--driver", "535.183.01"
    )
    assert code == 1
    assert any(
        r.startswith("driver branch 535 does not drive Tesla K40m (Kepler): allowed are branches")
        and r.endswith("to 470")
        for r in data["reasons"]
    )


def test_check_minor_version_compatibility(capsys: pytest.CaptureFixture[str]) -> None:
    # A100 on R470 (CUDA 11.4) with a CUDA 11.8 wheel: minor-version compatibility.
    code, data = run_json(
        capsys, "check", "--gpu", "A100", "--torch", "2.0.1+cu118", "--driver", "470.256.02"
    )
    assert code == 0
    assert data["driver"]["compatibility"] == "minor-version-compatibility"


def test_check_python_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(
        capsys, "check", "--gpu", "K40m", "--torch", "1.2.0+cu100", "--python", "3.11"
    )
    assert code == 1
    assert any("not 3.11" in r for r in data["reasons"])


def test_resolve_k40m(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan = run_json(capsys, "resolve", "--gpu", "Tesla K40m")
    assert code == 0
    for key in (
        "torch",
        "variant",
        "cuda",
        "torchvision",
        "torchaudio",
        "install",
        "driver",
        "reasons",
    ):
        assert key in plan
    # The newest official build carrying sm_35 is from the 1.x line, and the driver stays on
    # Kepler's last branch.
    assert plan["torch"].startswith("1.")
    assert plan["gpus"][0]["covered_by"] == "sm_35"
    assert plan["driver"]["branch"] == 470
    assert plan["install"]["commands"]["pip"].startswith("pip install torch==")


def test_resolve_k40m_python_3_11_has_no_official_build(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan = run_json(capsys, "resolve", "--gpu", "K40m", "--python", "3.11")
    assert code == 1
    assert plan["ok"] is False
    assert any("needs Python" in n for n in plan["notes"])


def test_resolve_mixed_host(capsys: pytest.CaptureFixture[str]) -> None:
    code, plan = run_json(capsys, "resolve", "--gpu", "K40m", "--gpu", "M40")
    assert code == 0
    assert {g["covered_by"] for g in plan["gpus"]} >= {"sm_35"}
    assert plan["driver"]["branch"] <= 470


def test_resolve_gtx_1080_ti_is_not_handed_a_build_without_sm_61(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, plan = run_json(capsys, "resolve", "--gpu", "GTX 1080 Ti", "--driver", "580.95.05")
    assert code == 0
    assert plan["gpus"][0]["covered_by"] in ("sm_60", "sm_61")


def test_resolve_h100_human(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "resolve", "--gpu", "H100")
    assert code == 0
    assert out.startswith("GPUs:       H100 (sm_90)")
    assert "Install:    pip install torch==" in out


def test_explain_k40m_warning(capsys: pytest.CaptureFixture[str]) -> None:
    code, ans = run_json(capsys, "explain", K40M_WARNING)
    assert code == 0
    assert ans["id"] == "capability-not-compatible"
    assert ans["parsed"]["capability"] == "sm_35"
    assert ans["parsed"]["arch_list"][0] == "sm_37"
    assert "compute_37" in ans["parsed"]["arch_list"]
    text = "\n".join(ans["matrix"])
    assert "nothing there runs on Tesla K40m sm_35" in text
    assert "branch 470 or older" in text


def test_explain_knows_the_capability_warning_by_its_first_sentence_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A log cut after the first sentence (or one line of it pasted) is the same warning; it was
    "not a known error message" without the second sentence listing the build's archs."""
    warning = (
        "NVIDIA GeForce RTX 4090 with CUDA capability sm_89 is not compatible with the current "
        "PyTorch installation."
    )
    code, ans = run_json(capsys, "explain", warning)
    assert code == 0
    assert ans["id"] == "capability-not-compatible"
    assert ans["parsed"]["capability"] == "sm_89"


@pytest.mark.parametrize(
    ("message", "error_id"),
    [
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            "no-kernel-image",
        ),
        ("CUDA driver version is insufficient for CUDA runtime version", "driver-insufficient"),
        ("Failed to initialize NVML: Driver/library version mismatch", "nvml-mismatch"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.",
            "smi-no-driver",
        ),
        ("forward compatibility was attempted on non supported HW", "forward-compat-unsupported"),
    ],
    ids=["no-kernel", "driver", "nvml", "smi", "forward-compat"],
)
def test_explain_recognises(
    capsys: pytest.CaptureFixture[str], message: str, error_id: str
) -> None:
    code, ans = run_json(capsys, "explain", message)
    assert code == 0
    assert ans["id"] == error_id
    assert ans["cause"]
    assert ans["fixes"]


def test_explain_no_kernel_image_with_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "explain",
        "no kernel image is available for execution on the device",
        "--gpu",
        "K40m",
    )
    assert code == 0
    assert "newest official pip build for Tesla K40m: torch 1." in out


def test_explain_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "the cake is a lie")
    assert code == 1
    assert "Not a known error message" in out


def test_matrix_markdown_and_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "matrix", "--markdown")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("| CC | Architecture |")
    assert any(line.startswith("| 3.5 | Kepler |") for line in lines)
    code, data = run_json(capsys, "matrix", "--gpu", "K40m")
    assert code == 0
    assert data["releases"]
    assert all(r["torch"].startswith("1.") for r in data["releases"])


@pytest.mark.parametrize(
    ("gpu", "channel"), [("3.0", "pip"), ("RTX 5090", "conda")], ids=["no-gpu-has-it", "no-build"]
)
def test_matrix_for_a_gpu_no_build_runs_on_says_so_and_exits_1(
    capsys: pytest.CaptureFixture[str], gpu: str, channel: str
) -> None:
    """An empty table with exit 0 read as "nothing wrong"."""
    code, out, _ = run(capsys, "matrix", "--gpu", gpu, "--channel", channel)
    assert code == 1
    assert out == f"no official {channel} build runs on {gpu}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lookup", ""], "empty GPU query"),
        (["resolve", "--gpu", "K41m"], "unknown GPU 'K41m'"),
        (["resolve", "--gpu", "K40m", "--driver", "banana"], "malformed driver version 'banana'"),
        (["check", "--gpu", "K40m", "--torch", "0.4.1"], "unknown torch version '0.4.1'"),
        (["check", "--gpu", "K40m", "--torch", "1.2.0+cu999"], "has no variant 'cu999'"),
        (["check", "--gpu", "K40m"], "check needs --torch"),
        (["resolve", "--gpu", "K40m", "--python", "3"], "malformed Python version '3'"),
    ],
    ids=["empty", "gpu", "driver", "torch", "variant", "no-torch", "python"],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert message in err
    assert "Traceback" not in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["resolve"])
    assert exc.value.code == 2
    assert "the following arguments are required: --gpu" in capsys.readouterr().err


def test_unreadable_data_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import compat.data

    (tmp_path / "gpus.yaml").write_text("gpus: [\n")
    monkeypatch.setenv("GPU_COMPAT_DATA", str(tmp_path))
    monkeypatch.setattr(compat.data, "_MATRIX", None)
    code, _out, err = run(capsys, "lookup", "K40m")
    assert code == 2
    assert "gpus.yaml is not valid YAML" in err
    assert err.count("\n") == 1


def test_console_script_and_module_agree(tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    args = ["resolve", "--gpu", "K40m", "--gpu", "M40", "--json"]
    script = subprocess.run(
        [str(bindir / "gpu-compat"), *args], capture_output=True, text=True, env=env, check=False
    )
    module = subprocess.run(
        [sys.executable, "-m", "compat", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert script.returncode == module.returncode == 0
    assert script.stdout == module.stdout
    assert script.stdout.startswith("{")


def test_resolve_unknown_python_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "resolve", "--gpu", "T4", "--python", "9.9")
    assert code == 2
    assert out == ""
    assert "unknown Python version '9.9'" in err
    assert "3.12" in err


def test_a_driver_floor_under_minor_version_compatibility_is_one_branch_470_meets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """K80: the last branch that drives Kepler is 470, and CUDA 11.8 itself needs 520.61.05;
    11.x runs on 450.80.02 and newer through minor-version compatibility (NVIDIA's CUDA
    compatibility guide). The text said ">= 520.61.05; branch 470", which no 470 driver is."""
    code, out, _ = run(capsys, "resolve", "--gpu", "Tesla K80")
    assert code == 0
    driver = next(line for line in out.splitlines() if line.startswith("Driver:"))
    assert driver.startswith(
        "Driver:     >= 450.80.02 through minor-version compatibility (CUDA 11.8 itself needs "
        "520.61.05); branch 470"
    ), driver


def test_a_mixed_host_with_a_driver_is_still_told_to_split(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """K40m (last branch 470) with an A100: the driver hint fits the A100 alone (a 595 driver
    drives no K40m); the advice that fits the host must not be dropped beside it."""
    code, out, _ = run(
        capsys,
        "resolve",
        "--gpu",
        "Tesla K40m",
        "--gpu",
        "A100-SXM4-40GB",
        "--driver",
        "470.256.02",
    )
    assert code == 1
    assert "no single official build covers all these GPUs together: split them" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpu", "A100-SXM4-40GB", "--gpu", "A100-SXM4-40GB", "--driver", "390.157"],
        ["--gpu", "Tesla K80", "--gpu", "Tesla K80", "--python", "3.13"],
        ["--gpu", "A100-SXM4-40GB", "--gpu", "A10", "--driver", "390.157"],
    ],
    ids=["8xA100-old-driver", "K80-board-python", "A100+A10-old-driver"],
)
def test_a_host_one_build_covers_is_not_told_to_split(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Only the driver or the Python stands in the way: splitting the GPUs fixes nothing."""
    code, out, _ = run(capsys, "resolve", *argv)
    assert code == 1
    assert "split them" not in out


def test_the_reason_a_build_beats_the_pypi_default_is_the_one_that_decided(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """K40m + M40 on torch 1.3.0: cu100 and the default cu101 both carry sm_35 and sm_50 and
    both run on branch 470; cu100 wins because the cu101 row is unverified. The reason said
    "better driver compatibility or kernel coverage", neither of which differed."""
    code, out, _ = run(capsys, "resolve", "--gpu", "Tesla K40m", "--gpu", "Tesla M40")
    assert code == 0
    assert (
        "cu100 chosen over the PyPI default cu101: its data is verified (the default rests on "
        "unverified rows: torch_*.yaml: 1.3.0 cu101)"
    ) in out
    code, out, _ = run(capsys, "resolve", "--gpu", "Tesla K80")
    assert "cu118 chosen over the PyPI default cu121: the default carries no kernel image" in out


def test_the_driver_hint_names_branches_that_drive_the_gpu_and_run_the_build(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """K40m with a 535 driver: the newest build for it, 1.3.0+cu101, needs CUDA 10.1's driver
    (>= 418.39) on a branch that drives Kepler (<= 470). The hint said "branch 384..470", the
    branch table's range, beside "allowed are branches 295 to 470"; 384 runs no CUDA 10.1."""
    code, out, _ = run(capsys, "resolve", "--gpu", "Tesla K40m", "--driver", "535.216.01")
    assert code == 1
    assert (
        "use a driver of branch 418..470: they drive Tesla K40m and run CUDA 10.1 of torch "
        "1.3.0+cu101"
    ) in out
