#!/usr/bin/env python3
"""Run the smoke layers on this host and print one JSON report of all verdicts.

    run_all.py [--layers L0,L1,L2,L3,PERF,L4] [--required L0,L1,L3,L4] [--allow-cpu]
               [--sysfs-root /sys] [--expected-count N] [--expected-model NAME]
               [--expected-pci-id ID] [--allowed-branches 470,535] [--floors FILE]
               [--image IMAGE] [--python PY] [--no-torch REASON] [--gpu 'NAME=X.Y' ...]
               [--wait-lock FILE [--wait-timeout S]] [--out FILE]

Each layer runs in a process of its own, so one crashing layer cannot take the others
down; a crash becomes that layer's fail verdict. L0-L2 and L5 each run their script in a
subprocess; L3, PERF, L4 and L6 run under --python (e.g. the pytorch role's venv), in
children that one layer_host.py process forks after importing torch once, one after the other
where the first of them is listed (the report keeps the order asked). L5 needs all
hosts of a group at once, so the gpu_smoke role runs l5_distributed.py separately;
run_all.py includes it only when asked with --layers ...,L5 (a one-host run, --nnodes 1).

--no-torch REASON (a host without a PyTorch environment) reports the torch layers
(L3, PERF, L4, L5, L6) skipped with REASON instead of running them.

--wait-lock FILE (the torch environment's install lock, which the pytorch role's background
install holds while it writes the environment; an interrupted site.yml leaves it running)
waits, at most --wait-timeout seconds, until no install holds it before the torch layers
run, so that smoke.yml run alone does not judge a half-installed torch (l5_distributed.py
takes the same options). A lock that stays held fails the torch layers, naming the file. No
such file: no install since boot.

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
# The torch layers that run in the torch interpreter's own process, sharing its one import of
# torch (layer_host.py). L5 starts torchrun, whose workers import torch themselves.
SHARED_LAYERS = ("L3", "PERF", "L4", "L6")


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


def crashed(
    layer: str, rc: int, output: str, cmd: list[str], started: float, script: str = ""
) -> dict[str, Any]:
    """The fail verdict of a process that printed no verdict: the last lines it printed."""
    tail = " | ".join(output.strip().splitlines()[-3:])
    return sl.verdict(
        layer,
        NAMES[layer],
        sl.FAIL,
        f"{script or SCRIPTS[layer]} crashed (exit {rc}): {tail[-400:]}",
        {"command": cmd},
        None,
        started,
    )


def judge_output(
    layer: str, rc: int, stdout: str, stderr: str, cmd: list[str], started: float
) -> dict[str, Any]:
    """The layer's verdict from what its process printed; a crash is its fail verdict."""
    try:
        v: dict[str, Any] = json.loads(stdout)
    except json.JSONDecodeError:
        return crashed(layer, rc, stdout + stderr, cmd, started)
    return v


def ran_over(
    layer: str, cmd: list[str], timeout: float, started: float, script: str = ""
) -> dict[str, Any]:
    return sl.verdict(
        layer,
        NAMES[layer],
        sl.FAIL,
        f"{script or SCRIPTS[layer]} ran over {timeout:.0f}s",
        {"command": cmd},
        None,
        started,
    )


def cannot_run(
    layer: str, python: str, exc: OSError, cmd: list[str], started: float
) -> dict[str, Any]:
    return sl.verdict(
        layer, NAMES[layer], sl.FAIL, f"cannot run {python}: {exc}", {"command": cmd}, None, started
    )


def run_layer(layer: str, python: str, args: list[str], timeout: float) -> dict[str, Any]:
    """One layer in its own interpreter."""
    started = time.monotonic()
    cmd = [python, str(HERE / SCRIPTS[layer]), *args]
    try:
        proc = sl.run(cmd, timeout)
    except subprocess.TimeoutExpired:
        return ran_over(layer, cmd, timeout, started)
    except OSError as exc:
        return cannot_run(layer, python, exc, cmd, started)
    return judge_output(layer, proc.returncode, proc.stdout, proc.stderr, cmd, started)


def parse_shared(stdout: str, layers: list[str]) -> list[dict[str, Any]] | None:
    """layer_host.py's results, one per layer in order; None when it printed anything else."""
    try:
        results: list[dict[str, Any]] = json.loads(stdout)
    except ValueError:
        return None
    ok = isinstance(results, list) and all(isinstance(r, dict) for r in results)
    if not ok or [r.get("layer") for r in results] != layers:
        return None
    return results


def run_shared(
    jobs: list[tuple[str, list[str]]], python: str, timeout: float
) -> list[dict[str, Any]]:
    """Several layers under one interpreter of ``python`` that imports torch once
    (layer_host.py), each still in a process of its own: the verdicts of ``jobs`` (layer,
    args), in order, as run_layer would give them."""
    started = time.monotonic()
    spec = [{"layer": lay, "module": Path(SCRIPTS[lay]).stem, "argv": args} for lay, args in jobs]
    cmd = [python, str(HERE / "layer_host.py"), "--timeout", f"{timeout:g}", json.dumps(spec)]
    # Each layer has its own timeout in layer_host.py; this one catches layer_host itself.
    overall = timeout * len(jobs) + 60
    try:
        proc = sl.run(cmd, overall)
    except subprocess.TimeoutExpired:
        return [ran_over(lay, cmd, overall, started, "layer_host.py") for lay, _ in jobs]
    except OSError as exc:
        return [cannot_run(lay, python, exc, cmd, started) for lay, _ in jobs]
    results = parse_shared(proc.stdout, [lay for lay, _ in jobs])
    if results is None:
        output = proc.stdout + proc.stderr
        return [
            crashed(lay, proc.returncode, output, cmd, started, "layer_host.py") for lay, _ in jobs
        ]
    verdicts = []
    for (lay, args), r in zip(jobs, results):  # parse_shared: one result per job, in order
        layer_cmd = [python, str(HERE / SCRIPTS[lay]), *args]
        began = time.monotonic() - float(r.get("seconds", 0))
        if r["timed_out"]:
            verdicts.append(ran_over(lay, layer_cmd, timeout, began))
        else:
            verdicts.append(judge_output(lay, r["rc"], r["stdout"], r["stderr"], layer_cmd, began))
    return verdicts


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
        help="this host has no torch: the torch layers (L3, PERF, L4, L5, L6) report skipped "
        "with REASON instead of running",
    )
    parser.add_argument("--layer-timeout", type=float, default=600)
    sl.add_install_wait(parser)
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
    twice = sorted({x for x in layers if layers.count(x) > 1})
    if twice:
        parser.error(f"layer(s) listed twice: {', '.join(twice)}")
    required = [x.strip().upper() for x in a.required.split(",") if x.strip()]
    by_layer: dict[str, dict[str, Any]] = {}
    waited, held = None, ""
    if a.wait_lock and not a.no_torch and set(TORCH_LAYERS) & set(layers):
        waited, held = sl.install_wait(a.wait_lock, a.wait_timeout)
    shared = [x for x in layers if x in SHARED_LAYERS and not a.no_torch and not held]
    for layer in layers:
        if a.no_torch and layer in TORCH_LAYERS:
            by_layer[layer] = sl.verdict(layer, NAMES[layer], sl.SKIPPED, a.no_torch)
        elif held and layer in TORCH_LAYERS:
            by_layer[layer] = sl.verdict(layer, NAMES[layer], sl.FAIL, held, hint=sl.INSTALL_HINT)
        elif layer in shared:
            if layer == shared[0]:
                jobs = [(x, layer_args(x, a)) for x in shared]
                by_layer.update(zip(shared, run_shared(jobs, a.python, a.layer_timeout)))
        else:
            python = a.python if layer in TORCH_LAYERS else sys.executable
            by_layer[layer] = run_layer(layer, python, layer_args(layer, a), a.layer_timeout)
    verdicts = [by_layer[x] for x in layers]
    summary = sl.summarize(verdicts, required, a.allow_cpu)
    report = {
        "host": socket.gethostname(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": a.python,
        "allow_cpu": a.allow_cpu,
        "waited_for_install_s": waited,
        **summary,
        "layers": verdicts,
    }
    sl.emit(report, a.out)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
