"""The serving stack: ONNX opsets, TensorRT, Triton containers and TorchServe.

Pure functions over ``compat/data/{onnx,triton,tensorrt,torchserve}.yaml`` (loaded and
validated by :func:`load`; nothing here touches a host). The Ansible filters in
``plugins/filter/gpu_serving.py`` and ``gpu-compat serving`` call them.

- :func:`onnx_check`: can torch X's exporter write opset N, and does onnxruntime Y run it?
- :func:`triton_images` / :func:`triton_check`: which NGC tritonserver tags run on a host
  with driver branch B and GPUs of compute capability C (each refusal names the tag, its
  minimum driver and the host's branch).
- :func:`tensorrt_for`, :func:`torchserve_check`: the other two tables.
"""

from __future__ import annotations

import os

from compat.model import CompatDataError, CompatError

# The CLI builds its parser from add_cli_arguments at every start: nothing heavy at import
# (typing, packaging load lazily, as in compat/data.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from packaging.version import Version

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
# File -> {top-level key: (required fields, sort field)}.
_TABLES: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "onnx.yaml": {
        "exporters": (("torch", "torchscript_default", "torchscript_max", "source"), "torch"),
        "runtimes": (("onnxruntime", "max_opset", "source"), "onnxruntime"),
    },
    "triton.yaml": {
        "triton": (
            ("tag", "image", "cuda", "min_driver", "min_compute_capability", "source"),
            "tag",
        ),
    },
    "tensorrt.yaml": {
        "tensorrt": (("version", "cuda", "min_compute_capability", "source"), "version"),
        "torch_tensorrt": (("version", "torch", "tensorrt", "cuda", "source"), "version"),
    },
    "torchserve.yaml": {
        "torchserve": (
            ("version", "torch_min", "java", "token_auth", "status", "source"),
            "version",
        ),
    },
}
# ONNX Runtime runs every ai.onnx opset from 7 up to the release's own (its version matrix).
ONNX_MIN_OPSET = 7


def _version(text: object, what: str) -> Version:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(text))
    except InvalidVersion as exc:
        raise CompatError(f"invalid {what} {text!r}: expected a version like 1.16.3") from exc


def _base(text: object, what: str) -> Version:
    """The release without a local label (2.13.0+cpu -> 2.13.0)."""
    v = _version(text, what)
    return _version(v.base_version, what)


def _major_minor(v: Version) -> tuple[int, int]:
    return (v.major, v.minor)


def _cc(text: object, what: str = "compute capability") -> tuple[int, int]:
    s = str(text).strip().removeprefix("sm_")
    if "." not in s and s.isdigit() and len(s) >= 2:
        s = f"{s[:-1]}.{s[-1]}"
    major, _, minor = s.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise CompatError(f"invalid {what} {text!r}: expected X.Y (e.g. 7.5) or sm_XY")
    return (int(major), int(minor))


def _branch(text: object) -> int:
    """A driver branch from a branch (535) or a driver version (535.183.01)."""
    head = str(text).strip().split(".")[0]
    if not head.isdigit():
        raise CompatError(
            f"invalid driver {text!r}: expected a branch (535) or a version (535.183.01)"
        )
    return int(head)


def validate(tables: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    """Raise :class:`CompatDataError` naming the first bad row: fields, sources, order."""
    for fname, keys in _TABLES.items():
        doc = tables.get(fname)
        if doc is None:
            raise CompatDataError(f"serving data file {fname} is missing")
        for key, (required, sort_field) in keys.items():
            rows = doc.get(key)
            if not isinstance(rows, list) or not rows:
                raise CompatDataError(f"{fname}: '{key}' must be a non-empty list")
            for i, row in enumerate(rows):
                if not isinstance(row, dict):
                    raise CompatDataError(f"{fname}: {key}[{i}] must be a mapping")
                missing = [f for f in required if row.get(f) in (None, "")]
                if missing:
                    raise CompatDataError(
                        f"{fname}: {key}[{i}] {row.get(sort_field, '')}: "
                        f"missing {', '.join(missing)}"
                    )
                if row.get("confidence") not in (None, "unverified"):
                    raise CompatDataError(
                        f"{fname}: {key}[{i}]: confidence is {row['confidence']!r}; "
                        "only 'unverified' is allowed"
                    )
                if row.get("confidence") == "unverified" and not row.get("notes"):
                    raise CompatDataError(
                        f"{fname}: {key}[{i}]: an unverified row needs notes: why"
                    )
            order = [_version(r[sort_field], f"{fname} {key} {sort_field}") for r in rows]
            if order != sorted(order) or len(set(order)) != len(order):
                raise CompatDataError(
                    f"{fname}: '{key}' must be sorted by {sort_field}, no duplicates"
                )
    for row in tables["triton.yaml"]["triton"]:
        _cc(row["min_compute_capability"])
        _branch(row["min_driver"])
    for row in tables["tensorrt.yaml"]["tensorrt"]:
        _cc(row["min_compute_capability"])


def load_tables(root: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    import yaml

    base = root or os.environ.get("GPU_COMPAT_DATA") or DATA_DIR
    tables: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for fname in _TABLES:
        path = os.path.join(base, fname)
        try:
            with open(path, encoding="utf-8") as fh:
                doc = yaml.safe_load(fh)
        except OSError as exc:
            raise CompatDataError(f"cannot read serving data {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise CompatDataError(f"serving data {path} is not valid YAML: {exc}") from exc
        if not isinstance(doc, dict):
            raise CompatDataError(f"serving data {path} must hold a mapping")
        tables[fname] = doc
    validate(tables)
    return tables


_LOADED: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}


def load() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The validated serving tables (once per process)."""
    if "tables" not in _LOADED:
        _LOADED["tables"] = load_tables()
    return _LOADED["tables"]


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


# --------------------------------------------------------------------------- gpu-compat serving


def add_cli_arguments(sp: Any) -> None:
    """Arguments of ``gpu-compat serving`` (compat/cli.py adds the subcommand)."""
    sp.add_argument("what", choices=("onnx", "triton"), help="the question to answer")
    sp.add_argument("--torch", metavar="VERSION", help="onnx: torch that exports, e.g. 2.13.0+cpu")
    sp.add_argument("--onnxruntime", metavar="VERSION", help="onnx: the runtime, e.g. 1.16.3")
    sp.add_argument("--opset", type=int, help="onnx: the opset (default: the exporter's default)")
    sp.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript")
    sp.add_argument(
        "--driver", metavar="BRANCH|VERSION", help="triton: the host's driver (535 or 535.183.01)"
    )
    sp.add_argument(
        "--gpu", action="append", default=[], metavar="G", help="triton: a GPU of the host (repeat)"
    )
    sp.add_argument("--tag", help="triton: judge this tag only (e.g. 24.04)")
    sp.add_argument(
        "--forward-compat",
        action="store_true",
        help="triton: accept the data-center branches of CUDA forward compatibility",
    )


def cli(args: Any) -> tuple[int, Any, list[str]]:
    """Run ``gpu-compat serving``: (exit code, JSON data, human lines)."""
    tables = load()
    if args.what == "onnx":
        if not (args.torch and args.onnxruntime):
            raise CompatError("serving onnx needs --torch VERSION and --onnxruntime VERSION")
        v = onnx_check(tables, args.torch, args.onnxruntime, args.opset, args.exporter)
        head = {True: "YES", False: "NO", None: "UNKNOWN"}[v["ok"]]
        human = [f"{head}: torch {args.torch} opset {v['opset']} on onnxruntime {args.onnxruntime}"]
        human += [f"  - {r}" for r in v["reasons"]]
        return (0 if v["ok"] else 1), v, human
    from compat import lookup

    ccs: list[str] = []
    for g in args.gpu:
        found = lookup(g)
        if not found:
            raise CompatError(f"unknown GPU {g!r} (gpu-compat lookup NAME)")
        ccs.append(str(found[0]["compute_capability"]))
    if args.tag:
        verdicts = [triton_check(tables, args.tag, args.driver, ccs, args.forward_compat)]
    else:
        verdicts = triton_images(tables, args.driver, ccs, args.forward_compat)
    pick = next((v for v in verdicts if v["ok"]), None)
    data = {"pick": pick, "images": verdicts}
    human = [
        f"Pick: {pick['image']}" if pick else "Pick: none of the known tritonserver tags runs here"
    ]
    for v in verdicts:
        human.append(f"  {'ok ' if v['ok'] else 'no '} {v['image']}: {'; '.join(v['reasons'])}")
    return (0 if pick else 1), data, human
