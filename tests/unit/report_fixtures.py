"""Report trees for the fleet page's tests: what playbooks/plan.yml, smoke.yml, serving.yml,
jupyterlab.yml, storage.yml and monitoring.yml write under reports/, shaped like the lab's and
a real fleet's (reports/smoke/lab-m40.json of a real `make lab` is the model).

    write_case("mixed", root)   # root/plan, root/smoke, ... root/history; returns the hosts

Cases: empty (nothing yet), all-pass (two real GPU hosts), mixed (the lab: expected L1 and
L3, a host without torch, a failing required layer, a failure outside the required layers,
an undeclared torch difference, a host without verdicts) and unreachable (hosts of the
inventory without verdicts, and one whose verdicts are a day old).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from smoke_modules import smoke

sl = smoke("smokelib")
l1_driver = smoke("l1_driver")

TIME = "2026-12-02T06:43:36Z"
LAB_TORCH_REASON = (
    "the lab's GPUs are simulated (no driver, no CUDA), so it installs the CPU build from its "
    "wheelhouse"
)
NO_TORCH = "no PyTorch environment on this host (pytorch_method: none)"
NO_DRIVER = (
    "2 NVIDIA device(s) on the PCI bus but no driver answers (Failed to initialize NVML: "
    "Unknown Error)"
)
L5_FAIL = (
    "torchrun did not finish within 90s and was killed: not all 3 hosts joined the rendezvous "
    "at 172.18.0.4:29500, or a host stopped mid-run"
)
L5_HINT = "check that every host of the group is up and that port 29500 is open between them"


def v(layer: str, name: str, status: str, reason: str, hint: str | None = None, **details: Any):
    return {
        "layer": layer,
        "name": name,
        "status": status,
        "reason": reason,
        "hint": hint,
        "details": details,
        "duration_s": 0.1,
    }


def gpu(index: int, name: str, pci: str, cc: str) -> dict[str, Any]:
    bus = f"0000:{0x3B + index * 0x9D:02x}:00.0"
    return {"index": index, "name": name, "pci_id": pci, "bus_id": bus, "compute_capability": cc}


def plan(host: str, gpus: list[dict[str, Any]], torch: str, variant: str, branch: int, **facts):
    return {
        "host": host,
        "gpu_info": {"driver_version": facts.pop("driver_version", None), "gpus": gpus, **facts},
        "plan": {"ok": True, "torch": torch, "variant": variant, "driver": {"branch": branch}},
    }


def smoke_doc(host: str, required: list[str], layers: list[dict[str, Any]], **extra: Any):
    passing = ("pass", "pass (cpu)")
    by = {x["layer"]: x for x in layers}
    not_passed = [
        {"layer": r, "status": by[r]["status"], "reason": by[r]["reason"]}
        for r in required
        if r in by and by[r]["status"] not in passing
    ]
    doc = {
        "host": host,
        "time": extra.pop("time", TIME),
        "ok": not not_passed,
        "required": required,
        "not_passed": not_passed,
        "layers": layers,
        "driver": extra.pop("driver", {"packages": {}, "kernel_module": False}),
        "torch_expected": extra.pop("torch_expected", {"torch": "", "reason": ""}),
    }
    doc.update(extra)
    return doc


LAB_DRIVER = {
    "packages": {"libnvidia-ml1": "550.163.01-2", "nvidia-smi": "550.163.01-2"},
    "kernel_module": False,
}
K40 = gpu(0, "Tesla K40m", "10de:1023", "3.5")
M40 = [gpu(0, "Tesla M40", "10de:17fd", "5.2"), gpu(1, "Tesla M40", "10de:17fd", "5.2")]


def lab_torch_host(host: str, gpus: list[dict[str, Any]], l5: dict[str, Any], **extra: Any):
    """A bookworm lab host: the CPU build on simulated GPUs (L1 and L3 cannot pass)."""
    hint = sl.explain_hint(l1_driver.NO_DRIVER_ERROR)
    layers = [
        v("L0", "hardware", "pass", f"{len(gpus)} NVIDIA GPU(s) as expected via pci"),
        v("L1", "driver", "fail", NO_DRIVER.replace("2 NVIDIA", f"{len(gpus)} NVIDIA"), hint),
        v("L2", "container", "skipped", "no working NVIDIA driver (see L1)"),
        v(
            "L3",
            "cuda",
            "fail",
            f"torch 2.13.0+cpu is a CPU-only build (torch.version.cuda is None) on a host with "
            f"{len(gpus)} NVIDIA device(s)",
            sl.explain_hint("Torch not compiled with CUDA enabled"),
            torch="2.13.0+cpu",
        ),
        v("PERF", "perf", "skipped", "no CUDA device usable by torch"),
        v(
            "L4",
            "train",
            "pass (cpu)",
            "cubic fit of sin(x) converged on the CPU",
            torch="2.13.0+cpu",
        ),
        l5,
        v("L6", "export", "pass (cpu)", "TorchScript and ONNX (opset 18) match eager torch"),
    ]
    expected = {"torch": "2.13.0+cpu", "reason": LAB_TORCH_REASON}
    return smoke_doc(
        host, ["L0", "L5", "L6"], layers, driver=LAB_DRIVER, torch_expected=expected, **extra
    )


L5_OK = v(
    "L5", "distributed", "pass (cpu)", "all_reduce across 3 hosts ok: gloo 16 MiB busbw 1.2 GB/s"
)
SERVING = {
    "export": {"layer": "L6", "status": "pass (cpu)"},
    "endpoints": [
        {
            "stack": "flask",
            "endpoint": "http://172.18.0.4:5000",
            "health": "ready",
            "inference": {"ok": True},
            "latency": {"requests": 20, "median_ms": 3.25},
        },
        {
            "stack": "triton",
            "endpoint": "http://172.18.0.4:8000",
            "health": "not ready",
            "error": "TimeoutError: not ready after 180s",
        },
    ],
}
NOTEBOOK = {
    "verdict": "pass",
    "url": "http://127.0.0.1:8888/lab",
    "tunnel": "ssh -N -L 8888:127.0.0.1:8888 -p 22200 root@127.0.0.1",
    "display_name": "PyTorch 2.13.0 (CPU)",
    "torch": "2.13.0+cpu",
    "cuda": None,
    "cuda_available": False,
    "token": "must-never-be-copied",
}
STORAGE = {
    "profiles": [
        {"profile": "lab-a", "verdict": "pass", "reason": "put, get (sha256 equal), list, delete"},
        {
            "profile": "lab-b",
            "verdict": "fail",
            "reason": "profile lab-b at http://172.18.0.3:5000: probe failed: AccessDenied",
        },
    ]
}
SCRAPE = """scrape_configs:
- job_name: gpuprov
  static_configs:
  - labels:
      host: lab-k40m
    targets:
    - 172.18.0.4:9100
  - labels:
      host: lab-m40
    targets:
    - 172.18.0.5:9100
"""
HISTORY = {
    "lab-mixed": [
        {"time": "2026-11-30T09:00:00Z", "ok": True, "failed": [], "expected": ["L1"]},
        {"time": "2026-12-01T09:00:00Z", "ok": True, "failed": [], "expected": ["L1"]},
        {"time": "2026-12-01T18:00:00Z", "ok": False, "failed": ["L5"], "expected": ["L1"]},
    ],
    "lab-k40m": [
        {"time": "2026-12-01T09:00:00Z", "ok": False, "failed": ["L6"], "expected": ["L1"]},
        {"time": "2026-12-01T18:00:00Z", "ok": True, "failed": [], "expected": ["L1", "L3"]},
    ],
}


def mixed() -> dict[str, dict[str, Any]]:
    container = {"virtualization": "docker", "nvidia_module_loaded": False}
    m40_layers = [
        v("L0", "hardware", "pass", "2 NVIDIA GPU(s) as expected via pci"),
        v("L1", "driver", "fail", NO_DRIVER, sl.explain_hint(l1_driver.NO_DRIVER_ERROR)),
        v("L2", "container", "skipped", "no working NVIDIA driver (see L1)"),
        *(
            v(x, n, "skipped", NO_TORCH)
            for x, n in (("L3", "cuda"), ("PERF", "perf"), ("L4", "train"))
        ),
        v("L5", "distributed", "skipped", f"lab-m40 is not in gpu_smoke_dist_hosts; {NO_TORCH}"),
        v("L6", "export", "skipped", NO_TORCH),
    ]
    cpu_layers = [
        v("L0", "hardware", "pass", "no NVIDIA GPU, as expected"),
        v("L1", "driver", "skipped", sl.NO_DEVICE),
        v(
            "L2",
            "container",
            "fail",
            "docker run --gpus all failed: could not select device driver with capabilities gpu",
            "run playbooks/container_runtime.yml on this host",
        ),
        v("L3", "cuda", "skipped", sl.NO_DEVICE),
        v("PERF", "perf", "skipped", sl.NO_DEVICE),
        v(
            "L4",
            "train",
            "pass (cpu)",
            "cubic fit of sin(x) converged on the CPU",
            torch="2.12.0+cpu",
        ),
        L5_OK,
        v("L6", "export", "pass (cpu)", "TorchScript and ONNX (opset 18) match eager torch"),
    ]
    declared = {
        "L1": "userspace only: no kernel module (a lab host is a container)",
        "L3": "the CPU build on simulated GPUs (gpu_smoke_expected_torch)",
    }
    l5_fail = v("L5", "distributed", "fail", L5_FAIL, L5_HINT)
    return {
        "plan": {
            "lab-k40m": plan("lab-k40m", [K40], "1.3.0", "cu101", 470, **container),
            "lab-m40": plan("lab-m40", M40, "2.15.0", "cu126", 550, **container),
            "lab-mixed": plan("lab-mixed", [K40, M40[1]], "1.3.0", "cu101", 470, **container),
            "lab-cpu": plan("lab-cpu", [], "2.13.0", "cpu", 0, virtualization="docker"),
            "gpu-a100": plan(
                "gpu-a100", [gpu(0, "A100-SXM4-40GB", "10de:20b0", "8.0")], "2.15.0", "cu126", 580
            ),
        },
        "smoke": {
            "lab-k40m": lab_torch_host("lab-k40m", [K40], L5_OK),
            "lab-m40": smoke_doc("lab-m40", ["L0"], m40_layers, driver=LAB_DRIVER),
            "lab-mixed": lab_torch_host("lab-mixed", [K40, M40[1]], l5_fail, cannot_pass=declared),
            "lab-cpu": smoke_doc("lab-cpu", ["L0", "L4", "L5", "L6"], cpu_layers),
        },
        "serving": {"lab-k40m": SERVING},
        "jupyterlab": {"lab-k40m": NOTEBOOK},
        "storage": {"lab-k40m": STORAGE, "lab-m40": {"profiles": STORAGE["profiles"][:1]}},
        "history": HISTORY,
        "scrape": SCRAPE,
    }


def real_host(host: str) -> dict[str, Any]:
    layers = [
        v("L0", "hardware", "pass", "8 NVIDIA GPU(s) as expected via nvml"),
        v("L1", "driver", "pass", "driver 550.163.01 (branch 550 drives A100-SXM4-80GB)"),
        v("L2", "container", "pass", "docker run --gpus all sees 8 GPU(s)"),
        v(
            "L3",
            "cuda",
            "pass",
            "sm_80 in the build's arch list; matmul matches the CPU",
            torch="2.15.0+cu126",
        ),
        v("PERF", "perf", "pass", "fp16 matmul 250 TFLOPS >= floor 200"),
        v("L4", "train", "pass", "cubic fit of sin(x) converged on cuda:0", torch="2.15.0+cu126"),
        v("L5", "distributed", "pass", "all_reduce across 2 hosts ok: nccl 16 MiB busbw 90 GB/s"),
        v("L6", "export", "pass", "TorchScript, ONNX and TensorRT match eager torch"),
    ]
    driver = {"packages": {"nvidia-driver": "550.163.01-1"}, "kernel_module": True}
    return smoke_doc(host, ["L0", "L1", "L3", "PERF", "L4", "L5"], layers, driver=driver)


def case(name: str) -> dict[str, Any]:
    a100 = [gpu(i, "A100-SXM4-80GB", "10de:20b2", "8.0") for i in range(8)]
    if name == "empty":
        return {}
    if name == "all-pass":
        hosts = ("gpu-a01", "gpu-a02")
        return {
            "plan": {
                h: plan(
                    h,
                    a100,
                    "2.15.0",
                    "cu126",
                    550,
                    driver_version="550.163.01",
                    virtualization="none",
                )
                for h in hosts
            },
            "smoke": {h: real_host(h) for h in hosts},
        }
    if name == "mixed":
        return mixed()
    if name == "unreachable":
        old = real_host("gpu-a03") | {"time": "2026-12-01T06:00:00Z"}
        return {
            "plan": {h: plan(h, a100, "2.15.0", "cu126", 550) for h in ("gpu-a01", "gpu-a02")},
            "smoke": {"gpu-a01": real_host("gpu-a01"), "gpu-a03": old},
        }
    raise ValueError(name)


CASES = ("empty", "all-pass", "mixed", "unreachable")
# The inventory of each case (the unreachable case's gpu-a02 has a plan and no verdicts).
INVENTORY = {
    "empty": ["gpu-a01"],
    "all-pass": ["gpu-a01", "gpu-a02"],
    "mixed": ["gpu-a100", "lab-cpu", "lab-k40m", "lab-m40", "lab-mixed"],
    "unreachable": ["gpu-a01", "gpu-a02", "gpu-a03"],
}


def write_case(name: str, root: Path) -> Path:
    """Write the case's reports under root; returns an inventory file of its hosts."""
    data = case(name)
    root.mkdir(parents=True, exist_ok=True)
    for kind in ("plan", "smoke", "serving", "jupyterlab", "storage"):
        for host, doc in (data.get(kind) or {}).items():
            (root / kind).mkdir(exist_ok=True)
            (root / kind / f"{host}.json").write_text(json.dumps({"host": host, **doc}))
    for host, runs in (data.get("history") or {}).items():
        (root / "history").mkdir(exist_ok=True)
        (root / "history" / f"{host}.json").write_text(json.dumps({"host": host, "runs": runs}))
    if data.get("scrape"):
        (root / "monitoring").mkdir(exist_ok=True)
        (root / "monitoring" / "prometheus-gpuprov.yml").write_text(data["scrape"])
    inventory = root.parent / f"{root.name}-hosts.yml"
    hosts = "".join(f"        {h}:\n" for h in INVENTORY[name])
    inventory.write_text(f"all:\n  children:\n    fleet:\n      hosts:\n{hosts}")
    return inventory
