"""The serving stack: ONNX opsets, TensorRT, Triton containers and TorchServe.

Pure functions over ``compat/data/{onnx,triton,tensorrt,torchserve}.yaml`` (loaded and
validated by :mod:`compat.serving_data`; nothing here touches a host). The Ansible filters in
``plugins/filter/gpu_compat.py`` and, through ``compat.serving_onnx`` /
``compat.serving_triton``, ``gpu-compat serving`` call them.

- :func:`onnx_check`: can torch X's exporter write opset N, and does onnxruntime Y run it?
- :func:`triton_images` / :func:`triton_check`: which NGC tritonserver tags run on a host
  with driver branch B and GPUs of compute capability C (each refusal names the tag, its
  minimum driver and the host's branch).
- :func:`tensorrt_for`, :func:`torchserve_check`: the other two tables.
"""

from __future__ import annotations

from compat.model import CompatError
from compat.serving_data import base as _base
from compat.serving_data import branch as _branch
from compat.serving_data import cc as _cc
from compat.serving_data import load as load  # re-exported: serving.load() is the tables
from compat.serving_data import load_tables as load_tables
from compat.serving_data import major_minor as _major_minor
from compat.serving_data import validate as validate
from compat.serving_data import version as _version

# Nothing heavy at import (typing, packaging load lazily, as in compat/data.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


# ONNX Runtime runs every ai.onnx opset from 7 up to the release's own (its version matrix).
ONNX_MIN_OPSET = 7


# --------------------------------------------------------------------------- ONNX


def exporter_row(tables: dict[str, Any], torch: str) -> dict[str, Any] | None:
    """The exporter row of torch's major.minor, or None when the data has none."""
    want = _major_minor(_base(torch, "torch version"))
    for row in tables["onnx.yaml"]["exporters"]:
        if _major_minor(_version(row["torch"], "torch")) == want:
            return dict(row)
    return None


def runtime_row(tables: dict[str, Any], onnxruntime: str) -> dict[str, Any] | None:
    """The row of onnxruntime's major.minor, else the newest older row (opsets only grow:
    a lower bound, marked ``inferred_from``); None when older than every row."""
    want = _major_minor(_base(onnxruntime, "onnxruntime version"))
    best: dict[str, Any] | None = None
    for row in tables["onnx.yaml"]["runtimes"]:
        have = _major_minor(_version(row["onnxruntime"], "onnxruntime"))
        if have <= want:
            best = dict(row)
    if best is not None and _major_minor(_version(best["onnxruntime"], "onnxruntime")) != want:
        best["inferred_from"] = best["onnxruntime"]
    return best


def onnx_check(
    tables: dict[str, Any],
    torch: str,
    onnxruntime: str,
    opset: int | None = None,
    exporter: str = "torchscript",
) -> dict[str, Any]:
    """Can this torch export ``opset`` (default: its exporter's default) and does this
    onnxruntime run it? ``ok`` is False with a reason naming both versions when not;
    ``known`` is False when the data has no row for one of them (then ``ok`` is None)."""
    if exporter not in ("torchscript", "dynamo"):
        raise CompatError(f"invalid exporter {exporter!r}: torchscript or dynamo")
    exp = exporter_row(tables, torch)
    rt = runtime_row(tables, onnxruntime)
    out: dict[str, Any] = {
        "torch": torch,
        "onnxruntime": onnxruntime,
        "exporter": exporter,
        "opset": opset,
        "default_opset": None,
        "export_max_opset": None,
        "runtime_max_opset": None,
        "reasons": [],
        "known": exp is not None and rt is not None,
        "ok": None,
    }
    reasons: list[str] = out["reasons"]
    if exp is not None:
        out["default_opset"] = exp["torchscript_default"]
        out["export_max_opset"] = (
            exp["torchscript_max"] if exporter == "torchscript" else exp.get("dynamo_max")
        )
        if opset is None:
            opset = out["opset"] = int(exp["torchscript_default"])
    if rt is not None:
        out["runtime_max_opset"] = int(rt["max_opset"])
        if "inferred_from" in rt:
            reasons.append(
                f"onnxruntime {onnxruntime}: no row of its own; opsets of onnxruntime "
                f"{rt['inferred_from']} used (a lower bound)"
            )
    if opset is None:
        reasons.append(f"torch {torch}: no exporter row in compat/data/onnx.yaml; give --opset")
        return out
    problems: list[str] = []
    if out["export_max_opset"] is None and exp is not None:
        problems.append(f"torch {torch} has no {exporter} ONNX exporter")
    elif out["export_max_opset"] is not None and opset > int(out["export_max_opset"]):
        problems.append(
            f"torch {torch}'s {exporter} exporter writes opsets up to {out['export_max_opset']}, "
            f"not {opset}"
        )
    if rt is not None and not ONNX_MIN_OPSET <= opset <= int(rt["max_opset"]):
        problems.append(
            f"ONNX opset {opset} (exported by torch {torch}) is not supported by onnxruntime "
            f"{onnxruntime}, which runs opsets {ONNX_MIN_OPSET}-{rt['max_opset']}: install an "
            f"onnxruntime that runs opset {opset}, or export with opset_version <= "
            f"{rt['max_opset']}"
        )
    if rt is None:
        reasons.append(f"onnxruntime {onnxruntime}: older than every row of compat/data/onnx.yaml")
    reasons[:0] = problems
    if problems:
        out["ok"] = False
    elif out["known"]:
        out["ok"] = True
        reasons.append(
            f"torch {torch} exports opset {opset}; onnxruntime {onnxruntime} runs opsets "
            f"{ONNX_MIN_OPSET}-{out['runtime_max_opset']}"
        )
    return out


# --------------------------------------------------------------------------- Triton


def triton_row(tables: dict[str, Any], tag: str) -> dict[str, Any]:
    for row in tables["triton.yaml"]["triton"]:
        if str(row["tag"]) == str(tag):
            return dict(row)
    known = ", ".join(str(r["tag"]) for r in tables["triton.yaml"]["triton"])
    raise CompatError(f"unknown Triton tag {tag!r}: compat/data/triton.yaml has {known}")


def triton_check(
    tables: dict[str, Any],
    tag: str,
    driver: str | int | None,
    compute_capabilities: list[str],
    forward_compat: bool = False,
) -> dict[str, Any]:
    """Does the NGC tritonserver image ``tag`` run on this host? Each refusal names the tag,
    its minimum driver and the host's branch, or the GPU below its floor."""
    row = triton_row(tables, tag)
    need = _branch(row["min_driver"])
    branch = None if driver in (None, "") else _branch(driver)
    reasons: list[str] = []
    ok = True
    if branch is None:
        ok = False
        reasons.append(
            f"tritonserver:{tag} needs driver branch >= {need}; the host has no NVIDIA driver"
        )
    elif branch < need:
        fc = [int(b) for b in row.get("forward_compat_branches") or []]
        if forward_compat and branch in fc:
            reasons.append(
                f"driver branch {branch} < {need} (CUDA {row['cuda']}) is allowed through CUDA "
                f"forward compatibility (data-center GPUs only)"
            )
        else:
            ok = False
            reasons.append(
                f"tritonserver:{tag} (CUDA {row['cuda']}) needs driver branch >= {need}; "
                f"this host's branch is {branch}"
                + (
                    f" (branch {branch} can run it through CUDA forward compatibility on "
                    "data-center GPUs only, when asked: --forward-compat)"
                    if branch in fc
                    else (f" (forward compatibility covers only {fc})" if fc else "")
                )
            )
    floor = _cc(row["min_compute_capability"])
    for text in compute_capabilities:
        if _cc(text) < floor:
            ok = False
            reasons.append(
                f"tritonserver:{tag} needs compute capability >= {row['min_compute_capability']}; "
                f"this host has a {text} GPU"
            )
    if ok:
        reasons.append(
            f"tritonserver:{tag} (CUDA {row['cuda']}, driver >= {need}) runs on branch {branch}"
        )
    return {
        "tag": str(row["tag"]),
        "image": row["image"],
        "triton": row.get("triton"),
        "cuda": row["cuda"],
        "min_driver": need,
        "driver_branch": branch,
        "min_compute_capability": row["min_compute_capability"],
        "ok": ok,
        "reasons": reasons,
    }


def triton_images(
    tables: dict[str, Any],
    driver: str | int | None,
    compute_capabilities: list[str],
    forward_compat: bool = False,
) -> list[dict[str, Any]]:
    """Every tag's verdict for this host, newest first (the first ``ok`` one is the pick)."""
    rows = sorted(
        tables["triton.yaml"]["triton"], key=lambda r: _version(r["tag"], "tag"), reverse=True
    )
    return [
        triton_check(tables, str(r["tag"]), driver, compute_capabilities, forward_compat)
        for r in rows
    ]


def triton_pick(
    tables: dict[str, Any], driver: str | int | None, compute_capabilities: list[str]
) -> dict[str, Any] | None:
    """The newest tag that runs on the host, or None."""
    return next((v for v in triton_images(tables, driver, compute_capabilities) if v["ok"]), None)


# --------------------------------------------------------------------------- TensorRT, TorchServe


def tensorrt_for(
    tables: dict[str, Any], cuda: str | None, compute_capabilities: list[str]
) -> dict[str, Any]:
    """TensorRT releases whose build fits this CUDA (major.minor) and every GPU; and the
    Torch-TensorRT releases built for the same CUDA. Empty lists say why in ``reasons``."""
    trt: list[str] = []
    reasons: list[str] = []
    if cuda in (None, ""):
        reasons.append("no CUDA on this host (a CPU build of torch): TensorRT needs a GPU")
        return {"tensorrt": [], "torch_tensorrt": [], "reasons": reasons}
    want = _major_minor(_version(cuda, "CUDA version"))
    for row in tables["tensorrt.yaml"]["tensorrt"]:
        cudas = {_major_minor(_version(c, "CUDA")) for c in row["cuda"]}
        floor = _cc(row["min_compute_capability"])
        low = [c for c in compute_capabilities if _cc(c) < floor]
        if want not in cudas:
            reasons.append(f"TensorRT {row['version']}: no build for CUDA {cuda}")
        elif low:
            reasons.append(
                f"TensorRT {row['version']}: needs compute capability >= "
                f"{row['min_compute_capability']}, the host has {', '.join(low)}"
            )
        else:
            trt.append(str(row["version"]))
    ttrt = [
        str(r["version"])
        for r in tables["tensorrt.yaml"]["torch_tensorrt"]
        if _major_minor(_version(r["cuda"], "CUDA")) == want and str(r["tensorrt"]) in trt
    ]
    return {"tensorrt": trt, "torch_tensorrt": ttrt, "reasons": reasons}


def torchserve_check(
    tables: dict[str, Any], version: str, torch: str, java: int | None
) -> dict[str, Any]:
    """Does TorchServe ``version`` fit this torch and Java? Names its maintenance status."""
    rows = tables["torchserve.yaml"]["torchserve"]
    row = next(
        (r for r in rows if _version(r["version"], "torchserve") == _base(version, "torchserve")),
        None,
    )
    if row is None:
        known = ", ".join(str(r["version"]) for r in rows)
        raise CompatError(
            f"unknown TorchServe {version!r}: compat/data/torchserve.yaml has {known}"
        )
    reasons: list[str] = []
    ok = True
    if _major_minor(_base(torch, "torch version")) < _major_minor(
        _version(row["torch_min"], "torch")
    ):
        ok = False
        reasons.append(
            f"torchserve {version} needs torch >= {row['torch_min']}; the host has {torch}"
        )
    if java is None or int(java) < int(row["java"]):
        ok = False
        reasons.append(
            f"torchserve {version} needs Java >= {row['java']}; the host has "
            + ("no Java" if java is None else f"Java {java}")
        )
    if row["status"] != "active":
        reasons.append(f"torchserve is in {row['status']}: no further fixes or security patches")
    return {
        "version": str(row["version"]),
        "ok": ok,
        "java": int(row["java"]),
        "token_auth": bool(row["token_auth"]),
        "status": row["status"],
        "reasons": reasons,
    }
