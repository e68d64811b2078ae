#!/usr/bin/env python3
"""L3 CUDA + framework: torch carries kernels for the GPUs, sees them, and computes right.

First, with no driver and no GPU needed, the CUDA arch list of the torch in this
environment is MEASURED from its binaries by gpuprov's stdlib-only fatbin reader
(compat.inspect_torch, copied next to the scripts by the gpu_smoke role) and each GPU of
the host (compute capability from NVML, else from the controller's --gpu NAME=X.Y: the
gpu_info facts or the matrix) is judged with compat.rules: covered by sm_XY, by PTX
compute_XY, or no kernel image. Then torch.cuda.is_available(), each device's sm_XY
against torch.cuda.get_arch_list() (the same rule), a real matmul on each GPU checked
against the CPU result, and fp16/bf16 matmuls where the device supports them.

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

NO_KERNEL = "no kernel image is available for execution on the device"
CPU_BUILD = "Torch not compiled with CUDA enabled"
MEASURED_KEYS = ("torch_version", "cuda", "sass", "ptx", "cpu_only", "main_library")


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


def find_torch() -> str | None:
    """The torch package directory this interpreter would import, found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in"):
        return str(Path(spec.origin).parent)
    locations = list(spec.submodule_search_locations or [])
    return str(locations[0]) if locations else None


def measure(torch_path: str | None) -> dict[str, Any]:
    """The arch list of the torch at ``torch_path``, read from its libraries by
    compat.inspect_torch (nothing imported, no driver, no GPU needed); ``{"error": ...}``
    when it cannot be measured."""
    if torch_path is None:
        return {"error": "no torch package in this environment"}
    try:
        inspect_torch, _ = sl.import_compat()
    except ImportError as exc:
        return {
            "path": torch_path,
            "error": f"gpuprov's compat modules are not next to the smoke scripts ({exc}); "
            "re-run the gpu_smoke role (tag gpu_smoke_install)",
        }
    try:
        r = inspect_torch.inspect_path(torch_path)
    except (ValueError, OSError, zipfile.BadZipFile) as exc:  # InspectError, FatbinError
        return {"path": torch_path, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "path": r.path,
        "torch_version": r.torch_version,
        "cuda": r.cuda,
        "sass": list(r.sass),
        "ptx": list(r.ptx),
        "cpu_only": bool(r.cpu_only),
        "main_library": r.main_library,
    }


def parse_gpu_arg(text: str) -> dict[str, Any]:
    """``--gpu 'Tesla K40m=3.5'`` (from the controller) -> {name, compute_capability, source}."""
    name, sep, cc = text.rpartition("=")
    cc = cc.strip()
    bad = ValueError(f"--gpu wants NAME=X.Y, got {text!r}")
    if not sep or not name.strip():
        raise bad
    try:
        if cc:
            sl.parse_cc(cc)
    except ValueError:
        raise bad from None
    return {"name": name.strip(), "compute_capability": cc or None, "source": "controller"}


def host_gpus(
    controller: Sequence[Mapping[str, Any]], nvml: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The GPUs to judge: NVML's when it answers with compute capabilities, else the
    controller's (gpu_info facts enriched from the matrix, or the expected models)."""
    found = [dict(g) for g in (nvml or {}).get("gpus") or []]
    if found and all(g.get("compute_capability") for g in found):
        return [
            {
                "name": g.get("name"),
                "compute_capability": g["compute_capability"],
                "source": "nvml",
            }
            for g in found
        ]
    return [dict(g) for g in controller]


def _carries(m: Mapping[str, Any]) -> str:
    if m.get("cpu_only"):
        return "no CUDA kernels (CPU-only build)"
    sass = " ".join(m.get("sass") or []) or "no SASS"
    ptx = " ".join(m.get("ptx") or [])
    return sass + (f" + PTX {ptx}" if ptx else "")


def _gpu_label(g: Mapping[str, Any]) -> str:
    cc = g.get("compute_capability")
    if not cc:
        return str(g.get("name"))
    major, minor = sl.parse_cc(str(cc))
    return f"{g.get('name')} sm_{major}{minor}"


def _measured_hint(gpus: Sequence[Mapping[str, Any]]) -> str:
    """``gpu-compat explain`` of the no-kernel error for these GPUs (it names the builds that
    run on them), then ``gpu-compat resolve`` for the whole stack."""
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    flags = " ".join(f"--gpu {shlex.quote(n)}" for n in names)
    hint = sl.explain_hint(NO_KERNEL) + (f" {flags}" if flags else "")
    return hint + (f"; gpu-compat resolve {flags}" if flags else "")


def judge_measured(
    rules: Any, m: Mapping[str, Any], gpus: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per GPU: ``covered_by`` (the sm_XY or compute_XY that runs on it, or None) and
    ``result`` ("covered by sm_80", "no kernel image", or "compute capability unknown")."""
    rows: list[dict[str, Any]] = []
    for g in gpus:
        row: dict[str, Any] = {
            "name": g.get("name"),
            "compute_capability": g.get("compute_capability"),
            "source": g.get("source"),
            "covered_by": None,
        }
        if not g.get("compute_capability"):
            row["result"] = "compute capability unknown"
            rows.append(row)
            continue
        cc = sl.parse_cc(str(g["compute_capability"]))
        row["sm"] = f"sm_{cc[0]}{cc[1]}"
        how = (
            None
            if m.get("cpu_only")
            else rules.coverage(tuple(m.get("sass") or ()), tuple(m.get("ptx") or ()), cc)
        )
        if how is None:
            row["result"] = "no kernel image"
        else:
            row["covered_by"] = how[1]
            row["result"] = f"covered by {how[1]}" + (
                " (PTX, JIT-compiled at first launch)" if how[0] == "ptx" else ""
            )
        rows.append(row)
    return rows


def _measured_problems(
    m: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], pci_count: int
) -> list[tuple[str, str]]:
    """(reason, hint) for each GPU model the measured build has no kernels for."""
    version = m.get("torch_version") or "(unknown version)"
    missing: list[Mapping[str, Any]] = []
    for r in rows:
        if r["result"] == "no kernel image" and _gpu_label(r) not in map(_gpu_label, missing):
            missing.append(r)
    if m.get("cpu_only"):
        targets = ", ".join(_gpu_label(r) for r in missing) or (
            f"the {pci_count} NVIDIA device(s) on this host"
        )
        return [
            (
                f"torch {version} is a CPU-only build: no CUDA kernels for {targets} "
                "(measured from its libraries: no .nv_fatbin section)",
                _measured_hint(missing),
            )
        ]
    where = f" (measured from {m['main_library']})" if m.get("main_library") else ""
    return [
        (
            f"the torch in this environment ({version}, CUDA {m.get('cuda')}) has no kernels "
            f"for {_gpu_label(r)}: it carries {_carries(m)}{where}",
            _measured_hint([r]),
        )
        for r in missing
    ]


def judge(
    p: Mapping[str, Any],
    pci_count: int,
    started: float | None = None,
    *,
    measured: Mapping[str, Any] | None = None,
    gpus: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The L3 verdict from the torch probe, the PCI count and, when given, the measured
    arch list of the environment's torch and the host's GPUs."""
    details = dict(p)
    devices: list[Mapping[str, Any]] = list(p.get("devices") or [])
    problems: list[tuple[str, str]] = []
    rules: Any = None
    needs_rules = (measured is not None and "error" not in measured) or p.get("cuda_available")
    if needs_rules:
        try:
            _, rules = sl.import_compat()
        except ImportError as exc:
            return sl.verdict(
                "L3",
                "cuda",
                sl.FAIL,
                f"cannot judge kernel coverage: gpuprov's compat modules are not next to the "
                f"smoke scripts ({exc})",
                details,
                "re-run the gpu_smoke role (tag gpu_smoke_install) to copy them",
                started,
            )
    if measured is not None:
        details["measured"] = {k: measured.get(k) for k in MEASURED_KEYS if k in measured}
        for k in ("path", "error"):
            if k in measured:
                details["measured"][k] = measured[k]
        if "error" not in measured:
            rows = judge_measured(rules, measured, gpus)
            details["gpus"] = rows
            if pci_count > 0:
                problems += _measured_problems(measured, rows, pci_count)
    measured_cpu_only = bool(measured and "error" not in measured and measured.get("cpu_only"))
    if p.get("torch") is None:
        if pci_count == 0:
            return sl.verdict("L3", "cuda", sl.SKIPPED, sl.NO_DEVICE, details, None, started)
        problems.append(
            (
                f"torch is not importable: {p.get('import_error')}",
                "run the pytorch role (playbooks/pytorch.yml) on this host",
            )
        )
        return _fail(problems, details, started)
    if not p.get("cuda_available"):
        if pci_count == 0:
            return sl.verdict("L3", "cuda", sl.SKIPPED, sl.NO_DEVICE, details, None, started)
        if p.get("cuda_build") is None:
            if not measured_cpu_only:
                problems.append(
                    (
                        f"torch {p['torch']} is a CPU-only build (torch.version.cuda is None) "
                        f"on a host with {pci_count} NVIDIA device(s)",
                        sl.explain_hint(CPU_BUILD),
                    )
                )
        else:
            problems.append(
                (
                    f"torch.cuda.is_available() is False (torch {p['torch']}, CUDA "
                    f"{p['cuda_build']}) with {pci_count} NVIDIA device(s) on the bus: driver "
                    "missing or too old?",
                    sl.explain_hint("Found no NVIDIA driver on your system"),
                )
            )
        return _fail(problems, details, started)
    flagged = {r.get("sm") for r in details.get("gpus") or [] if r["result"] == "no kernel image"}
    arch_list = list(p.get("arch_list") or [])
    sass = tuple(e for e in arch_list if e.startswith("sm_"))
    ptx = tuple(e for e in arch_list if e.startswith("compute_"))
    for d in devices:
        sm = f"sm_{str(d['capability']).replace('.', '')}"
        label = f"cuda:{d['index']} {d.get('name')} ({sm})"
        how = rules.coverage(sass, ptx, sl.parse_cc(str(d["capability"])))
        d_cov = f"{how[0]} {how[1]}" if how else None
        details.setdefault("coverage", {})[str(d["index"])] = d_cov
        if how is None:
            if sm not in flagged:
                problems.append(
                    (
                        f"{label}: {NO_KERNEL} (arch list {' '.join(arch_list)})",
                        sl.explain_hint(NO_KERNEL),
                    )
                )
            continue
        if d.get("error"):
            problems.append((f"{label}: {d['error']}", sl.explain_hint(str(d["error"]))))
        elif not d.get("fp32_ok"):
            reason = f"{label}: fp32 matmul differs from the CPU ({d.get('fp32_max_abs_err')})"
            problems.append((reason, sl.explain_hint(reason)))
        for kind in ("fp16", "bf16"):
            if d.get(f"{kind}_ok") is False:
                reason = f"{label}: {kind} matmul differs from the CPU"
                problems.append((reason, sl.explain_hint(reason)))
    if not devices:
        reason = "torch.cuda.is_available() is True but device_count() is 0"
        problems.append((reason, sl.explain_hint(reason)))
    if problems:
        return _fail(problems, details, started)
    return sl.verdict(
        "L3",
        "cuda",
        sl.PASS,
        f"torch {p['torch']} (CUDA {p.get('cuda_build')}) runs matmuls on {len(devices)} GPU(s)",
        details,
        None,
        started,
    )


def _fail(
    problems: Sequence[tuple[str, str]], details: Mapping[str, Any], started: float | None
) -> dict[str, Any]:
    """One fail verdict: every reason, the first one's hint."""
    return sl.verdict(
        "L3", "cuda", sl.FAIL, "; ".join(r for r, _ in problems), details, problems[0][1], started
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L3 CUDA + framework")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument(
        "--gpu",
        action="append",
        default=[],
        metavar="NAME=X.Y",
        help="a GPU of this host and its compute capability, from the controller (repeatable)",
    )
    parser.add_argument(
        "--torch-path",
        help="torch package, site-packages or venv to measure (default: the torch this "
        "interpreter would import)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        controller = [parse_gpu_arg(g) for g in args.gpu]
    except ValueError as exc:
        parser.error(str(exc))
    measured = measure(args.torch_path or find_torch())
    gpus = host_gpus(controller, sl.query_nvml())
    v = judge(
        probe(),
        len(sl.scan_pci(args.sysfs_root)),
        started,
        measured=measured,
        gpus=gpus,
    )
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
