#!/usr/bin/env python3
"""Run the smoke layers on this host and print one JSON report of all verdicts.

    run_all.py [--layers L0,L1,L2,L3,PERF,L4] [--required L0,L1,L3,L4] [--allow-cpu]
               [--sysfs-root /sys] [--expected-count N] [--expected-model NAME]
               [--expected-pci-id ID] [--allowed-branches 470,535] [--floors FILE]
               [--image IMAGE] [--python PY] [--no-torch REASON] [--gpu 'NAME=X.Y' ...]
               [--out FILE]

Each layer runs as its own script in a subprocess (with --python, e.g. the pytorch
role's venv, for the torch layers), so one crashing layer cannot take the others
down; a crash becomes that layer's fail verdict. L5 needs all hosts of a group at
once, so the gpu_smoke role runs l5_distributed.py separately; run_all.py includes it
only when asked with --layers ...,L5 (a one-host run, --nnodes 1).

--no-torch REASON (a host without a PyTorch environment) reports the torch layers
(L3, PERF, L4, L5) skipped with REASON instead of running them.

Exit 0 when every required layer passed (skipped never counts as a pass), 1 otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

HERE = Path(__file__).resolve().parent
SCRIPTS = {
    "L0": "l0_hardware.py",
    "L1": "l1_driver.py",
    "L2": "l2_container.py",
    "L3": "l3_cuda.py",
    "PERF": "perf.py",
    "L4": "l4_train.py",
    "L5": "l5_distributed.py",
    "L6": "l6_export.py",
}
NAMES = {
    "L0": "hardware",
    "L1": "driver",
    "L2": "container",
    "L3": "cuda",
    "PERF": "perf",
    "L4": "train",
    "L5": "distributed",
    "L6": "export",
}
TORCH_LAYERS = ("L3", "PERF", "L4", "L5", "L6")


def layer_args(layer: str, a: Any) -> list[str]:  # argparse.Namespace
    sysfs = ["--sysfs-root", a.sysfs_root]
    if layer == "L0":
        out = list(sysfs)
        if a.expected_count is not None:
            out += ["--expected-count", str(a.expected_count)]
        for m in a.expected_model:
            out += ["--expected-model", m]
        for p in a.expected_pci_id:
            out += ["--expected-pci-id", p]
        return out
    if layer == "L1":
        return [*sysfs, "--allowed-branches", a.allowed_branches, "--max-temp", str(a.max_temp)]
    if layer == "L2":
        return [*sysfs, "--image", a.image]
    if layer == "PERF":
        return [*sysfs, *(["--floors", a.floors] if a.floors else [])]
    if layer == "L3":
        return [*sysfs, *(f"--gpu={g}" for g in a.gpu)]
    if layer == "L4":
        return [*sysfs, *(["--allow-cpu"] if a.allow_cpu else [])]
    if layer == "L6":
        opsets = ["--onnx-opsets", a.onnx_opsets] if a.onnx_opsets else []
        return [*sysfs, *(["--allow-cpu"] if a.allow_cpu else []), *opsets]
    if layer == "L5":
        return ["--nnodes", "1", "--is-host", "--port", "29531", "--timeout", "120"]
    return sysfs


def run_layer(layer: str, python: str, args: list[str], timeout: float) -> dict[str, Any]:
    started = time.monotonic()
    cmd = [python, str(HERE / SCRIPTS[layer]), *args]
    try:
        proc = sl.run(cmd, timeout)
    except subprocess.TimeoutExpired:
        return sl.verdict(
            layer,
            NAMES[layer],
            sl.FAIL,
            f"{SCRIPTS[layer]} ran over {timeout:.0f}s",
            {"command": cmd},
            None,
            started,
        )
    except OSError as exc:
        return sl.verdict(
            layer,
            NAMES[layer],
            sl.FAIL,
            f"cannot run {python}: {exc}",
            {"command": cmd},
            None,
            started,
        )
    try:
        v: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        return sl.verdict(
            layer,
            NAMES[layer],
            sl.FAIL,
            f"{SCRIPTS[layer]} crashed (exit {proc.returncode}): {tail[-400:]}",
            {"command": cmd},
            None,
            started,
        )
    return v


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("gpuprov smoke: all layers")
    parser.add_argument("--layers", default="L0,L1,L2,L3,PERF,L4")
    parser.add_argument("--required", default="L0,L1,L3,L4")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--expected-count", type=int)
    parser.add_argument("--expected-model", action="append", default=[])
    parser.add_argument("--expected-pci-id", action="append", default=[])
    parser.add_argument("--allowed-branches", default="")
    parser.add_argument("--max-temp", type=int, default=85)
    parser.add_argument("--floors", default="")
    parser.add_argument(
        "--onnx-opsets", default="", help="L6: JSON of the opsets each onnxruntime runs"
    )
    parser.add_argument("--image", default="ubuntu:22.04")
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch")
    parser.add_argument(
        "--no-torch",
        default="",
        metavar="REASON",
        help="this host has no torch: the torch layers (L3, PERF, L4, L5) report skipped "
        "with REASON instead of running",
    )
    parser.add_argument("--layer-timeout", type=float, default=600)
    parser.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="NAME=X.Y",
        help="a GPU of this host and its compute capability (the controller's gpu_info facts "
        "or matrix), for L3's measured kernel coverage; repeatable",
    )
    a = parser.parse_args(argv)
    layers = [x.strip().upper() for x in a.layers.split(",") if x.strip()]
    unknown = [x for x in layers if x not in SCRIPTS]
    if unknown:
        parser.error(f"unknown layer(s) {', '.join(unknown)}; known: {', '.join(SCRIPTS)}")
    required = [x.strip().upper() for x in a.required.split(",") if x.strip()]
    verdicts = []
    for layer in layers:
        if a.no_torch and layer in TORCH_LAYERS:
            verdicts.append(sl.verdict(layer, NAMES[layer], sl.SKIPPED, a.no_torch))
            continue
        python = a.python if layer in TORCH_LAYERS else sys.executable
        verdicts.append(run_layer(layer, python, layer_args(layer, a), a.layer_timeout))
    summary = sl.summarize(verdicts, required, a.allow_cpu)
    report = {
        "host": socket.gethostname(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": a.python,
        "allow_cpu": a.allow_cpu,
        **summary,
        "layers": verdicts,
    }
    sl.emit(report, a.out)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
