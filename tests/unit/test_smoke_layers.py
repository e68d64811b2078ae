"""Verdict logic of the standalone smoke scripts (scripts/smoke/), one layer at a time.

Hardware and frameworks are FAKED at the function boundary: NVML through a fake pynvml
module returned by smokelib.import_pynvml, nvidia-smi through its CSV text, torch through
the probe dicts that l3_cuda.probe / l4_train.probe / perf.measure would return, and
torchrun through its exit code and output. The sysfs PCI scan reads a real temporary tree.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from pci_tree import K40M, write_pci
from smoke_modules import smoke

sl = smoke("smokelib")
l0 = smoke("l0_hardware")
l1 = smoke("l1_driver")
l2 = smoke("l2_container")
l3 = smoke("l3_cuda")
l4 = smoke("l4_train")
l5 = smoke("l5_distributed")
perf = smoke("perf")
run_all = smoke("run_all")


# --- helpers -------------------------------------------------------------------------


OTHER_VGA = ("0000:00:02.0", "0x1234", "0x1111", "0x030000")
NV_AUDIO = ("0000:3b:00.1", "0x10de", "0x0e0f", "0x040300")


class FakeNVML:
    """A fake pynvml: one healthy GPU unless told otherwise."""

    def __init__(
        self, gpus: list[dict[str, object]], driver: str = "470.256.02", init_error: bool = False
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.init_error = init_error

    def nvmlInit(self) -> None:
        if self.init_error:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return self.driver.encode()

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, object]:
        return self.gpus[i]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(pciDeviceId=h["combined"], busId=b"00000000:3B:00.0")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=12 * 1024**3)

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1234"

    def nvmlDeviceGetCudaComputeCapability(self, h):
        if h.get("no_cc"):
            raise RuntimeError("Not Supported")
        return (3, 5)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h.get("temp", 40)

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return h.get("ecc", 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return h.get("pending", 0)


# --- smokelib ---------------------------------------------------------------------------


def test_verdict_rejects_unknown_status():
    with pytest.raises(ValueError, match="unknown status 'ok'"):
        sl.verdict("L0", "hardware", "ok", "x")


def test_fail_verdict_gets_explain_hint():
    v = sl.verdict("L3", "cuda", sl.FAIL, "no kernel image is available")
    assert v["hint"] == "gpu-compat explain 'no kernel image is available'"


@pytest.mark.parametrize(
    ("status", "allow_cpu", "passes"),
    [
        ("pass", False, True),
        ("skipped", False, False),
        ("skipped", True, False),
        ("fail", True, False),
        ("pass (cpu)", False, False),
        ("pass (cpu)", True, True),
    ],
    ids=["pass", "skipped", "skipped-allow-cpu", "fail", "cpu-not-allowed", "cpu-allowed"],
)
def test_skipped_never_counts_as_pass(status, allow_cpu, passes):
    assert sl.counts_as_pass({"status": status}, allow_cpu) is passes


def test_summarize_names_missing_and_skipped_layers():
    verdicts = [
        {"layer": "L0", "status": "pass", "reason": ""},
        {"layer": "L1", "status": "skipped", "reason": sl.NO_DEVICE},
    ]
    s = sl.summarize(verdicts, ["L0", "L1", "L5"])
    assert not s["ok"]
    assert s["not_passed"] == [
        {"layer": "L1", "status": "skipped", "reason": sl.NO_DEVICE},
        {"layer": "L5", "status": "missing", "reason": "layer not run"},
    ]


def test_scan_pci_keeps_nvidia_display_devices_only(tmp_path):
    root = write_pci(tmp_path, K40M, OTHER_VGA, NV_AUDIO)
    assert sl.scan_pci(str(root)) == [
        {"index": 0, "bus_id": "0000:3b:00.0", "pci_id": "10de:1023", "name": None, "source": "pci"}
    ]
    assert sl.scan_pci(str(tmp_path / "missing")) == []


def test_query_nvml_reads_a_fake_nvml(monkeypatch):
    fake = FakeNVML([{"name": b"NVIDIA Tesla K40m", "combined": 0x102310DE, "no_cc": True}])
    monkeypatch.setattr(sl, "import_pynvml", lambda: fake)
    got = sl.query_nvml()
    assert got is not None
    assert got["driver_version"] == "470.256.02"
    gpu = got["gpus"][0]
    assert gpu["name"] == "Tesla K40m"
    assert gpu["pci_id"] == "10de:1023"
    assert gpu["bus_id"] == "0000:3b:00.0"
    assert gpu["compute_capability"] is None  # not supported: null, never guessed
    assert gpu["memory_mib"] == 12288


def test_query_nvml_none_without_driver(monkeypatch):
    monkeypatch.setattr(sl, "import_pynvml", lambda: FakeNVML([], init_error=True))
    assert sl.query_nvml() is None


SMI_CSV = (  # the health query: gpu_probe.smi_fields(health=True, compute_cap=False)
    "0, 00000000:07:00.0, 0x20B010DE, NVIDIA A100-SXM4-40GB, 40960 MiB, 550.54.15, GPU-aaaa,"
    " 33, 5 %, Enabled, 0, No\n"
    "1, 00000000:0F:00.0, 0x20B010DE, NVIDIA A100-SXM4-40GB, 40960 MiB, 550.54.15, GPU-bbbb,"
    " [N/A], [N/A], Disabled, 2, Yes\n"
)


def test_query_smi_reads_the_health_query(monkeypatch):
    """nvidia-smi is faked where it runs (gpu_probe.run_command): the compute_cap query fails
    as on R470, the retry answers with canned CSV."""
    gp = sl.probe_module()
    calls = []

    def fake_run(argv, timeout=60):
        calls.append(argv)
        if "compute_cap" in argv[1]:
            return 2, "", 'Field "compute_cap" is not a valid field to query.'
        return 0, SMI_CSV, ""

    monkeypatch.setattr(gp, "run_command", fake_run)
    got = sl.query_smi("/usr/bin/nvidia-smi")
    assert [argv[0] for argv in calls] == ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"]
    assert got["driver_version"] == "550.54.15"
    assert got["error"] is None
    a, b = got["gpus"]
    assert (a["name"], a["pci_id"], a["bus_id"]) == ("A100-SXM4-40GB", "10de:20b0", "0000:07:00.0")
    assert (a["temperature_c"], a["persistence_mode"], a["ecc_uncorrected"]) == (33, True, 0)
    assert (a["memory_mib"], a["utilization_pct"], a["uuid"]) == (40960, 5, "GPU-aaaa")
    assert (b["temperature_c"], b["ecc_uncorrected"], b["retired_pages_pending"]) == (None, 2, True)
    assert b["compute_capability"] is None  # R470: not reported, never guessed


def test_query_smi_reports_what_a_failing_nvidia_smi_said(monkeypatch):
    gp = sl.probe_module()
    mismatch = "Failed to initialize NVML: Driver/library version mismatch"
    monkeypatch.setattr(gp, "run_command", lambda argv, timeout=60: (18, mismatch + "\n", ""))
    got = sl.query_smi("/usr/bin/nvidia-smi")
    assert (got["gpus"], got["error"]) == ([], mismatch)


def test_query_smi_none_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(sl.shutil, "which", lambda name: None)
    assert sl.query_smi() is None


# --- L0 ---------------------------------------------------------------------------------------


def pci_seen(n: int) -> dict[str, object]:
    gpus = [
        {"index": i, "bus_id": f"0000:{i:02x}:00.0", "pci_id": "10de:1023", "name": None}
        for i in range(n)
    ]
    return {"source": "pci", "gpus": gpus, "pci": gpus}


def test_l0_passes_on_the_simulated_k40m():
    v = l0.judge(pci_seen(1), 1, ["Tesla K40m"], ["10de:1023"])
    assert v["status"] == "pass"
    assert v["reason"] == "1 NVIDIA GPU(s) as expected via pci"


def test_l0_fails_on_a_missing_gpu():
    v = l0.judge(pci_seen(7), 8, [], [])
    assert v["status"] == "fail"
    assert v["reason"].startswith("expected 8 NVIDIA GPU(s), detected 7 via pci")


def test_l0_fails_on_the_wrong_model():
    seen = {
        "source": "nvml",
        "gpus": [
            {"index": 0, "bus_id": "0000:07:00.0", "pci_id": "10de:20b0", "name": "A100-SXM4-40GB"}
        ],
    }
    v = l0.judge(seen, 1, ["Tesla K40m"], ["10de:1023"])
    assert v["status"] == "fail"
    assert "found 0000:07:00.0=A100-SXM4-40GB" in v["reason"]


def test_l0_cpu_node_expected_empty_passes_and_unknown_is_skipped():
    assert l0.judge(pci_seen(0), 0, [], [])["status"] == "pass"
    v = l0.judge(pci_seen(0), None, [], [])
    assert (v["status"], v["reason"]) == ("skipped", sl.NO_DEVICE)


def test_l0_main_on_a_sysfs_tree(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sl, "query_nvml", lambda: None)
    monkeypatch.setattr(sl, "query_smi", lambda smi=None: None)
    root = write_pci(tmp_path, K40M)
    rc = l0.main(
        ["--sysfs-root", str(root), "--expected-count", "1", "--expected-pci-id", "10de:1023"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["status"] == "pass"
    assert out["details"]["gpus"][0]["pci_id"] == "10de:1023"


# --- L1 ---------------------------------------------------------------------------------------


def nvml_answer(**gpu: object) -> dict[str, object]:
    base = {
        "index": 0,
        "name": "Tesla K40m",
        "bus_id": "0000:3b:00.0",
        "ecc_uncorrected": 0,
        "retired_pages_pending": False,
        "temperature_c": 40,
        "persistence_mode": True,
    }
    base.update(gpu)
    return {"driver_version": "470.256.02", "gpus": [base], "source": "nvml"}


def test_l1_skipped_without_devices():
    v = l1.judge(None, [])
    assert (v["status"], v["reason"]) == ("skipped", sl.NO_DEVICE)


def test_l1_fails_when_devices_but_no_driver():
    v = l1.judge(None, [{"pci_id": "10de:1023"}])
    assert v["status"] == "fail"
    assert v["reason"] == (
        "1 NVIDIA device(s) on the PCI bus but no driver answers "
        "(NVML unavailable and nvidia-smi not found)"
    )
    assert v["hint"].startswith("gpu-compat explain 'NVIDIA-SMI has failed")


def test_l1_passes_a_healthy_gpu():
    v = l1.judge(nvml_answer(), [{"pci_id": "10de:1023"}], [470])
    assert v["status"] == "pass"
    assert v["details"]["branch"] == 470


@pytest.mark.parametrize(
    ("gpu", "allowed", "needle"),
    [
        ({"ecc_uncorrected": 3}, (), "3 uncorrected volatile ECC errors"),
        ({"retired_pages_pending": True}, (), "retired pages pending"),
        ({"temperature_c": 93}, (), "93 C is above 85 C"),
        ({}, (525, 535), "driver branch 470 does not drive every GPU here; allowed: 525, 535"),
    ],
    ids=["ecc", "retired-pages", "hot", "branch"],
)
def test_l1_fails_on_health_problems(gpu, allowed, needle):
    v = l1.judge(nvml_answer(**gpu), [{"pci_id": "10de:1023"}], allowed)
    assert v["status"] == "fail"
    assert needle in v["reason"]


# --- L2 ---------------------------------------------------------------------------------------

LIST = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa-1111)\nGPU 1: NVIDIA A100 (UUID: GPU-bbbb)\n"


def test_l2_parse_and_judge():
    assert l2.parse_list(LIST) == ["GPU-aaaa-1111", "GPU-bbbb"]
    assert l2.judge(["GPU-aaaa-1111", "GPU-bbbb"], 0, LIST, "ubuntu:22.04")["status"] == "pass"
    v = l2.judge(["GPU-aaaa-1111", "GPU-bbbb"], 0, LIST.splitlines()[0], "ubuntu:22.04")
    assert (v["status"], v["reason"]) == ("fail", "the container sees 1 GPU(s), the host 2")
    v = l2.judge(
        ["GPU-a"],
        125,
        'could not select device driver "" with capabilities: [[gpu]]',
        "ubuntu:22.04",
    )
    assert v["status"] == "fail"
    assert "could not select device driver" in v["reason"]


# --- L3 ---------------------------------------------------------------------------------------


def test_l3_skipped_on_a_host_without_devices():
    v = l3.judge({"torch": "2.13.0+cpu", "cuda_build": None, "cuda_available": False}, 0)
    assert (v["status"], v["reason"]) == ("skipped", sl.NO_DEVICE)


def test_l3_fails_a_cpu_build_on_a_gpu_host():
    v = l3.judge({"torch": "2.13.0+cpu", "cuda_build": None, "cuda_available": False}, 1)
    assert v["status"] == "fail"
    assert v["reason"] == (
        "torch 2.13.0+cpu is a CPU-only build (torch.version.cuda is None) "
        "on a host with 1 NVIDIA device(s)"
    )
    assert v["hint"] == "gpu-compat explain 'Torch not compiled with CUDA enabled'"


def test_l3_fails_without_driver():
    v = l3.judge({"torch": "2.5.1+cu124", "cuda_build": "12.4", "cuda_available": False}, 2)
    assert v["status"] == "fail"
    assert "driver missing or too old?" in v["reason"]


def test_l3_fails_a_build_without_kernels_for_the_gpu():
    p = {
        "torch": "2.5.1+cu124",
        "cuda_build": "12.4",
        "cuda_available": True,
        "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
        "devices": [{"index": 0, "name": "Tesla K40m", "capability": "3.5"}],
    }
    v = l3.judge(p, 1)
    assert v["status"] == "fail"
    assert v["reason"].startswith("cuda:0 Tesla K40m (sm_35): no kernel image is available")
    assert (
        v["hint"] == "gpu-compat explain 'no kernel image is available for execution on the device'"
    )


def test_l3_passes_with_ptx_coverage_and_checked_matmuls():
    p = {
        "torch": "2.5.1+cu124",
        "cuda_build": "12.4",
        "cuda_available": True,
        "arch_list": ["sm_80", "sm_90", "compute_90"],
        "devices": [
            {
                "index": 0,
                "name": "H200",
                "capability": "9.0",
                "fp32_ok": True,
                "fp16_ok": True,
                "bf16_ok": True,
            },
            {"index": 1, "name": "B200", "capability": "10.0", "fp32_ok": True},
        ],
    }
    v = l3.judge(p, 2)
    assert v["status"] == "pass"
    assert v["details"]["coverage"] == {"0": "sass sm_90", "1": "ptx compute_90"}


def test_l3_fails_a_wrong_matmul():
    p = {
        "torch": "2.5.1",
        "cuda_build": "12.4",
        "cuda_available": True,
        "arch_list": ["sm_80"],
        "devices": [
            {
                "index": 0,
                "name": "A100",
                "capability": "8.0",
                "fp32_ok": False,
                "fp32_max_abs_err": 3.5,
            }
        ],
    }
    assert "fp32 matmul differs from the CPU (3.5)" in l3.judge(p, 1)["reason"]


def test_l3_probe_without_torch(monkeypatch):
    def no_torch():
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(l3, "import_torch", no_torch)
    assert l3.probe() == {"torch": None, "import_error": "No module named 'torch'"}
    assert l3.judge(l3.probe(), 1)["status"] == "fail"


# --- PERF -------------------------------------------------------------------------------------

FLOORS = [
    {
        "gpu": "Tesla K40m",
        "matmul_tflops_fp32": 2.15,
        "matmul_tflops_fp16": None,
        "memory_bandwidth_gbs": 173,
    }
]


def test_perf_fails_a_degraded_card_with_measured_vs_expected():
    m = [
        {
            "index": 0,
            "name": "Tesla K40m",
            "matmul_tflops_fp32": 1.2,
            "matmul_tflops_fp16": 1.0,
            "memory_bandwidth_gbs": 180.0,
        }
    ]
    v = perf.judge(m, FLOORS, 1)
    assert v["status"] == "fail"
    assert v["reason"] == (
        "cuda:0 Tesla K40m: fp32 matmul measured 1.2 TFLOPS, expected >= 2.15 TFLOPS"
    )


def test_perf_passes_and_notes_unknown_models():
    m = [
        {
            "index": 0,
            "name": "Tesla K40m",
            "matmul_tflops_fp32": 3.0,
            "matmul_tflops_fp16": None,
            "memory_bandwidth_gbs": 200.0,
        },
        {"index": 1, "name": "Mystery GPU", "matmul_tflops_fp32": 1.0},
    ]
    v = perf.judge(m, FLOORS, 2)
    assert v["status"] == "pass"
    assert v["details"]["notes"] == ["cuda:1 Mystery GPU: no floor in perf.yaml"]


def test_perf_skipped_without_cuda():
    assert perf.judge(None, FLOORS, 0)["reason"] == sl.NO_DEVICE
    assert perf.judge(None, FLOORS, 1)["status"] == "skipped"


def test_perf_floors_file_shapes(tmp_path):
    f = tmp_path / "floors.json"
    f.write_text(json.dumps({"floors": FLOORS}))
    assert perf.load_floors(str(f)) == FLOORS
    f.write_text(json.dumps(FLOORS))
    assert perf.load_floors(str(f)) == FLOORS


def test_perf_floor_file_of_the_matrix_matches_names():
    import yaml

    from compat.data import DATA_DIR

    floors = yaml.safe_load((Path(DATA_DIR) / "perf.yaml").read_text())["floors"]
    assert perf.floor_for("NVIDIA Tesla K40m", floors) is not None


# --- L4 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "pci", "allow", "device"),
    [
        (True, 1, False, "cuda:0"),
        (False, 0, True, "cpu"),
        (False, 0, False, None),
        (False, 1, True, None),
    ],
    ids=["gpu", "cpu-allowed", "cpu-not-allowed", "gpu-host-without-cuda"],
)
def test_l4_plan_device(cuda, pci, allow, device):
    got, why = l4.plan_device(cuda, pci, allow)
    assert got == device
    if device is None:
        assert why


def fit(loss: float) -> dict[str, object]:
    return {"final_loss": loss, "initial_loss": 1e5, "steps": 2000, "coefficients": []}


def test_l4_pass_cpu_only_on_cpu():
    p = {
        "torch": "2.13.0+cpu",
        "device": "cpu",
        "fit": fit(12.3),
        "export": {"torchscript_ok": True, "onnxruntime_ok": True},
    }
    v = l4.judge(p)
    assert v["status"] == "pass (cpu)"
    assert v["reason"] == "loss 12.29 <= 50.0 on cpu; TorchScript ok; onnxruntime ok".replace(
        "12.29", "12.30"
    )
    p["device"] = "cuda:0"
    assert l4.judge(p)["status"] == "pass"


def test_l4_fails_a_bad_fit_and_a_bad_export():
    p = {
        "torch": "2.5.1",
        "device": "cuda:0",
        "fit": fit(4000.0),
        "export": {"torchscript_ok": False, "onnxruntime_ok": None, "onnx_note": "x"},
    }
    v = l4.judge(p)
    assert v["status"] == "fail"
    assert v["reason"] == (
        "cubic fit of sin(x): loss 4000.00 after 2000 steps, want <= 50.0; "
        "TorchScript round trip differs from eager output"
    )


def test_l4_main_skips_a_gpu_host_without_cuda(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(l4, "cuda_available", lambda: False)
    root = write_pci(tmp_path, K40M)
    assert l4.main(["--sysfs-root", str(root), "--allow-cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "skipped"
    assert out["reason"].startswith("CUDA unavailable on a host with 1 NVIDIA device(s)")


# --- L5 ---------------------------------------------------------------------------------------


def test_l5_command_is_bounded_and_uses_c10d():
    cmd = l5.torchrun_command(
        "/v/bin/python",
        "/s/l5.py",
        2,
        "10.0.0.1",
        29500,
        "id1",
        45,
        True,
        "/tmp/r.json",
        16,
        5,
        45,
        90,
    )
    assert cmd[:4] == ["timeout", "--kill-after=10", "90", "/v/bin/python"]
    assert "--rdzv-backend=c10d" in cmd
    assert "--rdzv-endpoint=10.0.0.1:29500" in cmd
    assert "--rdzv-conf=join_timeout=45,is_host=true" in cmd
    assert "--max-restarts=0" in cmd


RESULT = {
    "world_size": 2,
    "rank": 0,
    "backends": {
        "gloo": {
            "sum_ok": True,
            "size_mib": 16,
            "busbw_gbs": 1.5,
            "sum_expected": 3.0,
            "sum_got": 3.0,
        },
        "nccl": {"skipped": "not every rank has a CUDA device"},
        "mpi": {"skipped": "this torch build has no MPI backend"},
    },
}


def test_l5_pass_reports_bandwidth():
    v = l5.judge(0, "", RESULT, 2, "10.0.0.1", 29500, 90, 45, 8.0)
    assert v["status"] == "pass"
    assert v["reason"] == "all_reduce across 2 hosts ok: gloo 16 MiB busbw 1.5 GB/s"


def test_l5_timeout_is_a_clear_fail():
    v = l5.judge(124, "", None, 2, "10.0.0.1", 29500, 90, 45, 90.2)
    assert v["status"] == "fail"
    assert v["reason"] == (
        "torchrun did not finish within 90s and was killed: not all 2 hosts "
        "joined the rendezvous at 10.0.0.1:29500, or a host stopped mid-run"
    )


def test_l5_rendezvous_timeout_is_named():
    out = "...\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    v = l5.judge(1, out, None, 2, "10.0.0.1", 29500, 90, 45, 47.0)
    assert v["status"] == "fail"
    assert v["reason"].startswith(
        "the rendezvous timed out: not every host joined (exit 1 after 47s"
    )


def test_l5_wrong_sum_fails():
    bad = json.loads(json.dumps(RESULT))
    bad["backends"]["gloo"]["sum_ok"] = False
    assert l5.judge(0, "", bad, 2, "h", 1, 90, 45, 5.0)["reason"] == "all_reduce sums wrong on gloo"


# --- run_all ----------------------------------------------------------------------------------


def test_run_all_turns_a_crash_into_a_fail(tmp_path):
    bad_python = tmp_path / "python"
    bad_python.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    bad_python.chmod(0o755)
    v = run_all.run_layer("L3", str(bad_python), [], 30)
    assert v["status"] == "fail"
    assert v["reason"] == "l3_cuda.py crashed (exit 3): boom"


def test_run_all_missing_python_is_a_fail(tmp_path):
    v = run_all.run_layer("L4", str(tmp_path / "nope"), [], 30)
    assert v["status"] == "fail"
    assert v["reason"].startswith("cannot run ")


def test_run_all_lab_like_host_is_honest(tmp_path, capsys):
    """A real run of L0-L2 in subprocesses on a simulated K40m tree (no NVML, no driver here)."""
    root = write_pci(tmp_path, K40M)
    rc = run_all.main(
        [
            "--layers",
            "L0,L1,L2",
            "--required",
            "L0,L1",
            "--sysfs-root",
            str(root),
            "--expected-count",
            "1",
            "--expected-pci-id",
            "10de:1023",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    status = {v["layer"]: v["status"] for v in report["layers"]}
    assert status["L0"] == "pass"
    assert status["L1"] in ("fail", "skipped")
    assert status["L2"] == "skipped"
    assert rc == 1
    assert report["not_passed"][0]["layer"] == "L1"


def _run_all_on_a_k40m(tmp_path: Path, layers: str, *more: str) -> int:
    """run_all.py's main on a simulated K40m tree, L0 required, with no torch interpreter."""
    root = write_pci(tmp_path, K40M)
    argv = ["--layers", layers, "--required", "L0", "--sysfs-root", str(root)]
    return run_all.main([*argv, "--python", str(tmp_path / "no-such-python"), *more])


def test_run_all_without_torch_skips_the_torch_layers(tmp_path, capsys):
    """--no-torch (pytorch_method: none): L3, PERF and L4 are skipped with the reason, unrun."""
    reason = "no PyTorch environment on this host (pytorch_method: none)"
    rc = _run_all_on_a_k40m(tmp_path, "L0,L3,PERF,L4", "--no-torch", reason)
    report = json.loads(capsys.readouterr().out)
    got = {v["layer"]: (v["status"], v["reason"]) for v in report["layers"]}
    assert got["L0"][0] == "pass"
    for layer in ("L3", "PERF", "L4"):
        assert got[layer] == ("skipped", reason), layer
    assert rc == 0


def test_run_for_result_reads_the_workers_json_and_never_a_stale_one(tmp_path: Path) -> None:
    import sys

    result = tmp_path / "r.json"
    result.write_text('{"stale": true}')
    write = f"import json,sys; json.dump({{'ok': 1}}, open({str(result)!r}, 'w')); print('hi')"
    rc, output, got = sl.run_for_result([sys.executable, "-c", write], result, 60)
    assert (rc, output.strip(), got) == (0, "hi", {"ok": 1})
    fail = "import sys; sys.exit(3)"
    assert sl.run_for_result([sys.executable, "-c", fail], result, 60)[::2] == (3, None)
    rc, output, got = sl.run_for_result(
        [sys.executable, "-c", "import time; time.sleep(5)"], result, 0.5
    )
    assert (rc, got) == (124, None)
    assert "timed out" in output


def _held(path):
    """An exclusive flock on ``path`` through an open file of its own, as flock(1) in the
    pytorch role's background job takes it; close the returned descriptor to let go."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_the_wait_returns_once_no_install_holds_the_lock(tmp_path):
    """A real flock: the wait returns once the holder lets go, not before."""
    lock = tmp_path / "pip.lock"
    fd = _held(lock)
    let_go = []
    timer = threading.Timer(0.6, lambda: (let_go.append(time.monotonic()), os.close(fd)))
    timer.start()
    try:
        waited, problem = sl.install_wait(str(lock), 30)
        returned = time.monotonic()
    finally:
        timer.join()
    assert returned >= let_go[0]
    assert problem == ""
    assert waited is not None
    assert waited >= 0.5
    assert sl.install_wait(str(lock), 30) == (0.0, "")  # free: no wait at all


def test_no_lock_file_is_no_install_and_an_unreadable_one_is_named(tmp_path):
    assert sl.install_wait(str(tmp_path / "none.lock"), 30) == (None, "")
    (tmp_path / "file").write_text("")
    waited, problem = sl.install_wait(str(tmp_path / "file" / "pip.lock"), 30)
    assert waited is None
    assert problem == (
        f"cannot open the torch environment's install lock {tmp_path}/file/pip.lock: "
        "Not a directory"
    )


def test_run_all_a_lock_held_past_the_timeout_fails_the_torch_layers(tmp_path, capsys):
    """The torch layers fail naming the lock file, unrun; the others run as always."""
    lock = tmp_path / "pip.lock"
    fd = _held(lock)
    try:
        rc = _run_all_on_a_k40m(
            tmp_path, "L0,L3,L4", "--wait-lock", str(lock), "--wait-timeout", "0.2"
        )
    finally:
        os.close(fd)
    report = json.loads(capsys.readouterr().out)
    got = {v["layer"]: (v["status"], v["reason"]) for v in report["layers"]}
    assert got["L0"][0] == "pass"
    for layer in ("L3", "L4"):
        assert got[layer][0] == "fail", layer
        assert f"still holds {lock} after 0.2 s" in got[layer][1], layer
    hints = {v["layer"]: v["hint"] for v in report["layers"]}
    assert "background pip install of torch still runs" in hints["L3"]
    assert report["waited_for_install_s"] >= 0.2
    assert rc == 0  # neither torch layer was required here


def test_l5_fails_without_starting_torchrun_while_an_install_holds_the_lock(tmp_path, capsys):
    """The other hosts then fail L5 at the rendezvous, bounded by its join timeout."""
    lock = tmp_path / "pip.lock"
    fd = _held(lock)
    try:
        wait = ["--wait-lock", str(lock), "--wait-timeout", "0.2"]
        rc = l5.main(["--python", str(tmp_path / "no-such-python"), *wait])
    finally:
        os.close(fd)
    v = json.loads(capsys.readouterr().out)
    assert (v["layer"], v["status"]) == ("L5", "fail")
    assert v["reason"] == f"an install into the torch environment still holds {lock} after 0.2 s"
    assert "command" not in v["details"]  # torchrun never ran
    assert rc == 1
