"""The smoke scripts (scripts/smoke/) run as the gpu_smoke role runs them: one process each,
on this machine, reading a PCI tree written here (--sysfs-root), printing one JSON verdict and
exiting 0 (pass, skipped) or 1 (fail).

This machine is a host without a GPU and without torch, and that is what most runs here are:
the layers that need torch must fail naming the missing module (or be skipped where no GPU is
expected), in bounded time, never with a traceback. Where a script calls a tool this machine
cannot have (nvidia-smi without a GPU) or must not run here (docker, torchrun), a stand-in
executable answers on PATH or as --python/--launcher, as that tool answers (each test says
which). The real stacks run on the lab hosts (tests/lab/test_pytorch_smoke.py,
tests/lab/test_model_serving.py, tests/lab/test_launch_monitoring.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fatbin_builders import write_torch
from pci_tree import K40M, write_pci
from smoke_modules import SMOKE, smoke

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "roles" / "dist_launch" / "files" / "gpuprov_launch.py"
NO_TORCH = "No module named 'torch'"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None,
    reason="these runs are a host without torch; this interpreter has one",
)


def run(
    script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> tuple[int, dict[str, Any], str]:
    """Run scripts/smoke/<script> as the role does; (exit status, the JSON it printed, stderr)."""
    proc = subprocess.run(
        [sys.executable, str(SMOKE / script), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def no_gpu(tmp_path: Path) -> Path:
    return write_pci(tmp_path / "sys-empty")


@pytest.fixture
def k40m(tmp_path: Path) -> Path:
    return write_pci(tmp_path / "sys-k40m", K40M)


# ---------------------------------------------------------------------------
# L4 and L6: torch layers on a host without torch


def test_l4_asked_to_train_on_the_cpu_without_torch_fails_naming_the_import(
    no_gpu: Path, tmp_path: Path
) -> None:
    out = tmp_path / "l4.json"
    rc, v, err = run("l4_train.py", "--allow-cpu", "--sysfs-root", str(no_gpu), "--out", str(out))
    assert (rc, v["layer"], v["status"]) == (1, "L4", "fail")
    assert v["reason"] == f"torch is not importable: {NO_TORCH}"
    assert json.loads(out.read_text()) == v  # --out holds the printed verdict
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "flags",
    [["--allow-cpu"], ["--device", "cpu"]],
    ids=["allow-cpu", "device-cpu"],
)
def test_l6_export_on_the_cpu_without_torch_fails_naming_the_import(
    flags: list[str], tmp_path: Path
) -> None:
    opsets = tmp_path / "onnx_opsets.json"
    opsets.write_text(json.dumps({"runtimes": [{"onnxruntime": "1.18", "max_opset": 21}]}))
    rc, v, _ = run("l6_export.py", *flags, "--onnx-opsets", str(opsets))
    assert (rc, v["layer"], v["status"]) == (1, "L6", "fail")
    assert v["reason"] == f"torch is not importable: {NO_TORCH}"
    assert v["details"] == {"torch": None, "import_error": NO_TORCH}


def test_l6_without_cuda_and_without_allow_cpu_is_skipped_saying_how_to_run_it() -> None:
    rc, v, _ = run("l6_export.py")
    assert (rc, v["status"]) == (0, "skipped")
    assert "gpu_smoke_allow_cpu: true" in v["reason"]


# ---------------------------------------------------------------------------
# L5: torchrun under timeout(1)


def test_l5_with_an_interpreter_without_torch_fails_fast_and_names_the_module(
    tmp_path: Path,
) -> None:
    rc, v, _ = run(
        "l5_distributed.py",
        *("--python", sys.executable, "--nnodes", "2", "--master", "10.0.0.1"),
        *("--port", "29511", "--timeout", "20", "--result", str(tmp_path / "r.json")),
    )
    assert (rc, v["status"]) == (1, "fail")
    assert v["reason"].startswith("torchrun failed (exit 1 after ")
    assert "2 hosts expected at 10.0.0.1:29511, join timeout 60s" in v["reason"]
    assert v["reason"].endswith(f"(ModuleNotFoundError: {NO_TORCH})")
    cmd = v["details"]["command"].split()
    assert cmd[:3] == ["timeout", "--kill-after=10", "20"]
    assert cmd[4:6] == ["-m", "torch.distributed.run"]
    assert "--rdzv-conf=join_timeout=60,is_host=false" in cmd
    assert v["details"]["rc"] == 1


def test_l5_a_torchrun_that_never_returns_is_killed_at_the_timeout(tmp_path: Path) -> None:
    """The stand-in for torchrun waiting on a host that never joins: an "interpreter" that
    sleeps. timeout(1), which the script runs it under, is the real one."""
    hang = executable(tmp_path / "python", "#!/bin/sh\nexec /bin/sleep 60\n")
    began = time.monotonic()
    rc, v, _ = run(
        "l5_distributed.py",
        *("--python", str(hang), "--nnodes", "2", "--master", "10.0.0.1", "--port", "29512"),
        *("--timeout", "1", "--is-host", "--result", str(tmp_path / "r.json")),
    )
    assert time.monotonic() - began < 30
    assert (rc, v["status"], v["details"]["rc"]) == (1, "fail", 124)
    assert v["reason"] == (
        "torchrun did not finish within 1s and was killed: not all 2 hosts joined the "
        "rendezvous at 10.0.0.1:29512, or a host stopped mid-run"
    )
    assert "port 29512" in v["hint"]
    assert "--rdzv-conf=join_timeout=60,is_host=true" in v["details"]["command"]


def test_l5_launch_on_a_host_the_dist_launch_role_has_not_configured(tmp_path: Path) -> None:
    """gpuprov-launch installed as the role installs it (the file, executable), with this
    interpreter; no /etc/gpuprov/launch.json here, so both launchers fail, named."""
    if Path("/etc/gpuprov/launch.json").exists():
        pytest.skip("this machine has a launch configuration")
    text = LAUNCHER.read_text().split("\n", 1)[1]
    launcher = executable(tmp_path / "gpuprov-launch", f"#!{sys.executable}\n{text}")
    rc, doc, _ = run(
        "l5_launch.py",
        *("--launcher", str(launcher), "--python", sys.executable, "--timeout", "30"),
    )
    assert (rc, doc["ok"]) == (1, False)
    assert [(v["name"], v["status"]) for v in doc["layers"]] == [
        ("distributed-torchrun", "fail"),
        ("distributed-mpirun", "fail"),
    ]
    missing = (
        "gpuprov-launch: cannot read /etc/gpuprov/launch.json: No such file or directory "
        "(the dist_launch role writes it)"
    )
    for v, which in zip(doc["layers"], ("torchrun", "mpirun"), strict=True):
        assert v["reason"].startswith(f"{which} failed (exit 2 after ")
        assert v["reason"].endswith(missing)
        assert v["details"]["command"].startswith(f"{launcher} {which} ")


# ---------------------------------------------------------------------------
# PERF


def test_perf_on_a_gpu_host_without_cuda_is_skipped_pointing_at_l3(
    k40m: Path, tmp_path: Path
) -> None:
    floors = tmp_path / "floors.json"
    floors.write_text(json.dumps({"floors": [{"gpu": "Tesla K40m", "matmul_tflops_fp32": 3.0}]}))
    rc, v, _ = run("perf.py", "--sysfs-root", str(k40m), "--floors", str(floors))
    assert (rc, v["layer"], v["status"]) == (0, "PERF", "skipped")
    assert v["reason"] == "CUDA unavailable (see L3): nothing to measure"


def test_perf_without_a_gpu_is_skipped_as_no_device(no_gpu: Path) -> None:
    rc, v, _ = run("perf.py", "--sysfs-root", str(no_gpu))
    assert (rc, v["status"], v["reason"]) == (0, "skipped", "no NVIDIA device on this host")


def test_perf_cuda_with_no_devices_is_a_fail_not_a_pass() -> None:
    v = smoke("perf").judge([], [{"gpu": "A100-SXM4-40GB"}], 1)
    assert (v["status"], v["reason"]) == ("fail", "CUDA is available but shows 0 devices")


# ---------------------------------------------------------------------------
# L3


def test_l3_refuses_a_malformed_gpu_argument_as_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(SMOKE / "l3_cuda.py"), "--gpu", "Tesla K40m"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "--gpu wants NAME=X.Y, got 'Tesla K40m'" in proc.stderr


def test_l3_without_torch_on_a_gpu_host_fails_and_says_nothing_was_measured(k40m: Path) -> None:
    rc, v, _ = run("l3_cuda.py", "--sysfs-root", str(k40m), "--gpu", "Tesla K40m=3.5")
    assert (rc, v["status"]) == (1, "fail")
    assert v["reason"] == f"torch is not importable: {NO_TORCH}"
    assert v["details"]["measured"] == {"error": "no torch package in this environment"}


def test_l3_measures_the_installed_torch_files_even_when_torch_cannot_import(
    k40m: Path, tmp_path: Path
) -> None:
    """--torch-path names a torch package tree (tests/unit/fatbin_builders.py: torch's own
    kernels in its CUDA library are sm_80 sm_86 sm_90 and PTX compute_90, none of which runs on
    a K40m's sm_35)."""
    torch_dir = write_torch(tmp_path / "site")
    rc, v, _ = run(
        "l3_cuda.py",
        *("--sysfs-root", str(k40m), "--gpu", "Tesla K40m=3.5", "--torch-path", str(torch_dir)),
    )
    assert (rc, v["status"]) == (1, "fail")
    measured = v["details"]["measured"]
    assert (measured["torch_version"], measured["cuda"], measured["cpu_only"]) == (
        "2.9.1+cu128",
        "12.8",
        False,
    )
    assert (measured["sass"], measured["ptx"]) == (["sm_80", "sm_86", "sm_90"], ["compute_90"])
    assert [(g["name"], g["result"]) for g in v["details"]["gpus"]] == [
        ("Tesla K40m", "no kernel image")
    ]
    assert "has no kernels for Tesla K40m sm_35" in v["reason"]
    assert f"torch is not importable: {NO_TORCH}" in v["reason"]


# ---------------------------------------------------------------------------
# L2: nvidia-smi and docker stand-ins on PATH

SMI_LIST = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1f2e3d4c-0000-1111-2222-333344445555)\n"
    "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-9a8b7c6d-0000-1111-2222-333344445555)\n"
)


def l2_path(tmp_path: Path, *, docker: str | None, toolkit: bool = True) -> dict[str, str]:
    """PATH holding only the stand-ins: nvidia-smi lists two GPUs (`nvidia-smi -L`'s format);
    docker, when given, is that shell body (it gets `run --rm --gpus all IMAGE nvidia-smi -L`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "nvidia-smi", f"#!/bin/sh\n/bin/cat <<'EOF'\n{SMI_LIST}EOF\n")
    if docker is not None:
        executable(bin_dir / "docker", f"#!/bin/sh\n{docker}\n")
    if toolkit:
        executable(bin_dir / "nvidia-ctk", "#!/bin/sh\nexit 0\n")
    return {"PATH": str(bin_dir)}


def test_l2_passes_when_the_container_lists_the_hosts_gpus(tmp_path: Path) -> None:
    args = tmp_path / "docker-args"
    docker = f"echo \"$@\" > {args}\n/bin/cat <<'EOF'\n{SMI_LIST}EOF"
    rc, v, _ = run(
        "l2_container.py", "--image", "nvcr.io/x:1", env=l2_path(tmp_path, docker=docker)
    )
    assert (rc, v["status"]) == (0, "pass")
    assert v["reason"] == "the container sees the same 2 GPU(s) as the host"
    assert args.read_text() == "run --rm --gpus all nvcr.io/x:1 nvidia-smi -L\n"


def test_l2_fails_with_what_docker_said_when_the_runtime_refuses(tmp_path: Path) -> None:
    docker = (
        'echo \'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].' >&2\nexit 125"
    )
    rc, v, _ = run("l2_container.py", env=l2_path(tmp_path, docker=docker))
    assert (rc, v["status"]) == (1, "fail")
    assert v["reason"].startswith("docker run --gpus all ubuntu:22.04 nvidia-smi -L exited 125: ")
    assert "could not select device driver" in v["reason"]


def test_l2_a_docker_run_that_hangs_fails_at_the_timeout(tmp_path: Path) -> None:
    env = l2_path(tmp_path, docker="exec /bin/sleep 60")
    rc, v, _ = run("l2_container.py", "--timeout", "1", "--image", "big:1", env=env)
    assert (rc, v["status"]) == (1, "fail")
    assert v["reason"] == "docker run did not finish within 1s (image pull?)"
    assert v["details"] == {"image": "big:1"}


@pytest.mark.parametrize(
    ("docker", "toolkit", "why"),
    [
        (None, True, "docker CLI not installed"),
        ("exit 0", False, "NVIDIA container toolkit not installed"),
    ],
    ids=["no-docker", "no-toolkit"],
)
def test_l2_is_skipped_not_passed_without_docker_or_the_toolkit(
    tmp_path: Path, docker: str | None, toolkit: bool, why: str
) -> None:
    rc, v, _ = run("l2_container.py", env=l2_path(tmp_path, docker=docker, toolkit=toolkit))
    assert (rc, v["status"], v["reason"]) == (0, "skipped", why)


def test_l2_a_gpu_host_whose_nvidia_smi_fails_is_skipped_pointing_at_l1(
    tmp_path: Path, k40m: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(
        bin_dir / "nvidia-smi",
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA driver.'\nexit 9\n",
    )
    rc, v, _ = run("l2_container.py", "--sysfs-root", str(k40m), env={"PATH": str(bin_dir)})
    assert (rc, v["status"], v["reason"]) == (0, "skipped", "no working NVIDIA driver (see L1)")
