#!/usr/bin/env python3
"""PERF: measured matmul throughput and memory bandwidth per GPU vs the floors of its model.

The floors come from compat/data/perf.yaml; the gpu_smoke role passes the rows to the
host as a JSON file (--floors). A GPU below its floor (a degraded card: thermal
throttling, a slow PCIe link, a bad HBM stack) fails with measured vs expected. A GPU
model without a floor row passes with a note (nothing to compare against).

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

METRICS = (
    ("matmul_tflops_fp32", "fp32 matmul", "TFLOPS"),
    ("matmul_tflops_fp16", "fp16 matmul", "TFLOPS"),
    ("memory_bandwidth_gbs", "device copy bandwidth", "GB/s"),
)


def import_torch() -> Any:  # torch is optional on the host
    """Narrow seam: unit tests replace this function with a fake torch."""
    import torch

    return torch


def measure(n: int = 4096, iters: int = 10, copy_mib: int = 512) -> list[dict[str, Any]] | None:
    """Measured figures per CUDA device; None when torch or CUDA is unavailable."""
    try:
        torch = import_torch()
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    results: list[dict[str, Any]] = []
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        row: dict[str, Any] = {"index": i, "name": sl.strip_vendor(torch.cuda.get_device_name(i))}
        for key, dtype in (
            ("matmul_tflops_fp32", torch.float32),
            ("matmul_tflops_fp16", torch.float16),
        ):
            try:
                a = torch.randn(n, n, device=dev, dtype=dtype)
                b = torch.randn(n, n, device=dev, dtype=dtype)
                a @ b  # warm-up (cuBLAS handle, JIT of PTX-only builds)
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                for _ in range(iters):
                    a @ b
                torch.cuda.synchronize(dev)
                row[key] = round(2 * n**3 * iters / (time.perf_counter() - t0) / 1e12, 3)
            except Exception as exc:  # e.g. no fp16 kernels on this arch: report, do not guess
                row[key] = None
                row[f"{key}_error"] = f"{type(exc).__name__}: {exc}"
        src = torch.empty(copy_mib * 1024 * 1024 // 4, device=dev, dtype=torch.float32)
        dst = torch.empty_like(src)
        dst.copy_(src)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            dst.copy_(src)
        torch.cuda.synchronize(dev)
        moved = 2 * src.numel() * 4 * iters  # read + write, as the floors count it
        row["memory_bandwidth_gbs"] = round(moved / (time.perf_counter() - t0) / 1e9, 1)
        results.append(row)
    return results


def floor_for(name: str, floors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    key = sl.strip_vendor(name).lower()
    return next((f for f in floors if str(f.get("gpu", "")).lower() == key), None)


def judge(
    measured: Sequence[Mapping[str, Any]] | None,
    floors: Sequence[Mapping[str, Any]],
    pci_count: int,
    started: float | None = None,
) -> dict[str, Any]:
    if measured is None:
        reason = sl.NO_DEVICE if pci_count == 0 else "CUDA unavailable (see L3): nothing to measure"
        return sl.verdict("PERF", "perf", sl.SKIPPED, reason, {}, None, started)
    problems: list[str] = []
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    for m in measured:
        f = floor_for(str(m["name"]), floors)
        row = dict(m)
        row["floor"] = {k: f.get(k) for k, _, _ in METRICS} if f else None
        rows.append(row)
        if f is None:
            notes.append(f"cuda:{m['index']} {m['name']}: no floor in perf.yaml")
            continue
        for key, what, unit in METRICS:
            want, got = f.get(key), m.get(key)
            if want is None:
                continue
            if got is None or float(got) < float(want):
                problems.append(
                    f"cuda:{m['index']} {m['name']}: {what} measured {got} {unit}, "
                    f"expected >= {want} {unit}"
                )
    details = {"gpus": rows, "notes": notes}
    if problems:
        return sl.verdict(
            "PERF",
            "perf",
            sl.FAIL,
            "; ".join(problems),
            details,
            "a degraded card: check nvidia-smi -q -d PERFORMANCE,CLOCK (throttle reasons), "
            "PCIe link width, temperature",
            started,
        )
    if not measured:
        return sl.verdict(
            "PERF", "perf", sl.FAIL, "CUDA is available but shows 0 devices", details, None, started
        )
    return sl.verdict(
        "PERF",
        "perf",
        sl.PASS,
        f"{len(measured)} GPU(s) at or above their floors"
        + (f" ({len(notes)} without a floor)" if notes else ""),
        details,
        None,
        started,
    )


def load_floors(path: str | None) -> list[dict[str, Any]]:
    if not path:
        return []
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return list(data.get("floors", data) if isinstance(data, dict) else data)


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("PERF floors")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--floors", help="JSON file: the floors list of compat/data/perf.yaml")
    args = parser.parse_args(argv)
    started = time.monotonic()
    v = judge(measure(), load_floors(args.floors), len(sl.scan_pci(args.sysfs_root)), started)
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
