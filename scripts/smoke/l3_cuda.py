#!/usr/bin/env python3
"""L3 CUDA + framework: torch sees the GPUs, carries kernels for them, and computes right.

Checks torch.cuda.is_available(), that every device's sm_XY is covered by
torch.cuda.get_arch_list() (the same SASS/PTX rule as compat.rules, re-implemented in
smokelib because compat is not installed on hosts), a real matmul on each GPU checked
against the CPU result, and fp16/bf16 matmuls where the device supports them.

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import smokelib as sl

NO_KERNEL = "no kernel image is available for execution on the device"


def import_torch() -> Any:  # torch is optional on the host
    """Narrow seam: unit tests replace this function with a fake torch."""
    import torch

    return torch


def probe(size: int = 512) -> dict[str, Any]:
    """Everything L3 judges, measured with torch; no verdict logic here."""
    try:
        torch = import_torch()
    except ImportError as exc:
        return {"torch": None, "import_error": str(exc)}
    out: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda_build": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
        "devices": [],
    }
    if not out["cuda_available"]:
        return out
    out["arch_list"] = list(torch.cuda.get_arch_list())
    torch.manual_seed(0)
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    ref = a @ b
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        major, minor = torch.cuda.get_device_capability(i)
        entry: dict[str, Any] = {
            "index": i,
            "name": sl.strip_vendor(torch.cuda.get_device_name(i)),
            "capability": f"{major}.{minor}",
        }
        try:
            got = (a.to(dev) @ b.to(dev)).cpu()
            entry["fp32_max_abs_err"] = float((got - ref).abs().max())
            entry["fp32_ok"] = bool(torch.allclose(got, ref, rtol=1e-3, atol=1e-2))
            if (major, minor) >= (5, 3):
                half = (a.half().to(dev) @ b.half().to(dev)).float().cpu()
                entry["fp16_ok"] = bool(torch.allclose(half, ref, rtol=5e-2, atol=1.0))
            if torch.cuda.is_bf16_supported() and major >= 8:
                bf = (a.bfloat16().to(dev) @ b.bfloat16().to(dev)).float().cpu()
                entry["bf16_ok"] = bool(torch.allclose(bf, ref, rtol=1e-1, atol=2.0))
            torch.cuda.synchronize(dev)
        except Exception as exc:  # a kernel launch error is the finding, not a crash
            entry["error"] = f"{type(exc).__name__}: {exc}"
        out["devices"].append(entry)
    return out


def judge(p: Mapping[str, Any], pci_count: int, started: float | None = None) -> dict[str, Any]:
    details = dict(p)
    devices: list[Mapping[str, Any]] = list(p.get("devices") or [])
    if p.get("torch") is None:
        if pci_count == 0:
            return sl.verdict("L3", "cuda", sl.SKIPPED, sl.NO_DEVICE, details, None, started)
        return sl.verdict(
            "L3",
            "cuda",
            sl.FAIL,
            f"torch is not importable: {p.get('import_error')}",
            details,
            "run the pytorch role (playbooks/pytorch.yml) on this host",
            started,
        )
    if not p.get("cuda_available"):
        if pci_count == 0:
            return sl.verdict("L3", "cuda", sl.SKIPPED, sl.NO_DEVICE, details, None, started)
        if p.get("cuda_build") is None:
            return sl.verdict(
                "L3",
                "cuda",
                sl.FAIL,
                f"torch {p['torch']} is a CPU-only build (torch.version.cuda is None) on a host "
                f"with {pci_count} NVIDIA device(s)",
                details,
                sl.explain_hint("Torch not compiled with CUDA enabled"),
                started,
            )
        return sl.verdict(
            "L3",
            "cuda",
            sl.FAIL,
            f"torch.cuda.is_available() is False (torch {p['torch']}, CUDA {p['cuda_build']}) "
            f"with {pci_count} NVIDIA device(s) on the bus: driver missing or too old?",
            details,
            sl.explain_hint("Found no NVIDIA driver on your system"),
            started,
        )
    problems: list[str] = []
    arch_list = list(p.get("arch_list") or [])
    for d in devices:
        label = f"cuda:{d['index']} {d.get('name')} (sm_{str(d['capability']).replace('.', '')})"
        how = sl.coverage(arch_list, sl.parse_cc(str(d["capability"])))
        d_cov = f"{how[0]} {how[1]}" if how else None
        details.setdefault("coverage", {})[str(d["index"])] = d_cov
        if how is None:
            problems.append(f"{label}: {NO_KERNEL} (arch list {' '.join(arch_list)})")
            continue
        if d.get("error"):
            problems.append(f"{label}: {d['error']}")
        elif not d.get("fp32_ok"):
            problems.append(
                f"{label}: fp32 matmul differs from the CPU ({d.get('fp32_max_abs_err')})"
            )
        for kind in ("fp16", "bf16"):
            if d.get(f"{kind}_ok") is False:
                problems.append(f"{label}: {kind} matmul differs from the CPU")
    if not devices:
        problems.append("torch.cuda.is_available() is True but device_count() is 0")
    if problems:
        return sl.verdict(
            "L3",
            "cuda",
            sl.FAIL,
            "; ".join(problems),
            details,
            sl.explain_hint(NO_KERNEL if NO_KERNEL in problems[0] else problems[0]),
            started,
        )
    return sl.verdict(
        "L3",
        "cuda",
        sl.PASS,
        f"torch {p['torch']} (CUDA {p.get('cuda_build')}) runs matmuls on {len(devices)} GPU(s)",
        details,
        None,
        started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L3 CUDA + framework")
    parser.add_argument("--sysfs-root", default="/sys")
    args = parser.parse_args(argv)
    started = time.monotonic()
    v = judge(probe(), len(sl.scan_pci(args.sysfs_root)), started)
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
