#!/usr/bin/env python3
"""L6 export: TorchScript (trace and script), ONNX (onnxsim where installed), TensorRT.

A small model (an MLP 8 -> 16 -> 2 with ReLU, seed 0, input 4 x 8) is built in the host's
torch and exported; each export is loaded back and its output compared with eager torch
within ATOL + RTOL * |eager| (1e-4 + 1e-4 |x|, float32):

- torchscript_trace / torchscript_script: torch.jit.trace / torch.jit.script, saved, loaded
  with torch.jit.load;
- onnx: torch.onnx.export (the TorchScript-based exporter, dynamo=False) at --opset (default:
  the exporter's own default), the file's opset read back with onnx;
- onnxsim: onnxsim.simplify where onnxsim is installed (else "skipped"); the simplified
  model is what onnxruntime runs;
- onnxruntime: with the CUDA execution provider where the host's torch has CUDA (else the
  CPU provider). Before running, the model's opset is checked against the opsets the
  installed onnxruntime runs (--onnx-opsets, written by the controller from
  compat/data/onnx.yaml): a model newer than the runtime fails, naming both versions;
- tensorrt: an engine built from the ONNX file, only on a GPU host with TensorRT installed;
  elsewhere "skipped" with the reason, never "pass".

Where it runs: on cuda:0 when torch has CUDA. Without CUDA the export checks run on the CPU
and report "pass (cpu)" only with --allow-cpu (exporting is CPU work; the CUDA provider and
TensorRT are skipped with the reason), else the layer is skipped.

--save-dir DIR keeps the artifacts (model.traced.pt, model.scripted.pt, model.onnx,
sample.json with the input and the eager output) for the model_serving role.

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

ATOL = 1e-4
RTOL = 1e-4
ORT_MIN_OPSET = 7
IN_FEATURES, HIDDEN, OUT_FEATURES, BATCH = 8, 16, 2, 4


def import_torch() -> Any:  # torch is optional on the host
    """Narrow seam: unit tests replace this function with a fake torch."""
    import torch

    return torch


def _mm(version: str) -> tuple[int, int]:
    parts = version.split("+")[0].split(".")
    return (int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0)


def runtime_max_opset(opsets: Mapping[str, Any], ort_version: str) -> tuple[int | None, str]:
    """The highest opset of this onnxruntime from the controller's table: its own
    major.minor row, else the newest older row (a lower bound); (None, why) when none."""
    want = _mm(ort_version)
    best: Mapping[str, Any] | None = None
    for row in opsets.get("runtimes", []):
        if _mm(str(row["onnxruntime"])) <= want:
            best = row
    if best is None:
        return None, f"onnxruntime {ort_version} is older than every row of compat/data/onnx.yaml"
    mark = (
        ""
        if _mm(str(best["onnxruntime"])) == want
        else f" (row {best['onnxruntime']}, a lower bound)"
    )
    return int(best["max_opset"]), mark


def opset_problem(
    model_opset: int, torch_version: str, ort_version: str, opsets: Mapping[str, Any]
) -> str | None:
    """The mismatch message, naming both versions, or None when the runtime runs the opset."""
    top, why = runtime_max_opset(opsets, ort_version)
    if top is None:
        return None
    if ORT_MIN_OPSET <= model_opset <= top:
        return None
    return (
        f"ONNX opset {model_opset} (exported by torch {torch_version}) is not supported by "
        f"onnxruntime {ort_version}, which runs opsets {ORT_MIN_OPSET}-{top}{why}: install an "
        f"onnxruntime that runs opset {model_opset}, or export with opset_version <= {top}"
    )


def build_model(torch: Any, device: str) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = (
        torch.nn.Sequential(
            torch.nn.Linear(IN_FEATURES, HIDDEN),
            torch.nn.ReLU(),
            torch.nn.Linear(HIDDEN, OUT_FEATURES),
        )
        .to(device)
        .eval()
    )
    x = torch.randn(BATCH, IN_FEATURES, device=device)
    with torch.no_grad():
        want = model(x)
    return model, x, want


def compare(torch: Any, got: Any, want: Any) -> dict[str, Any]:
    got_t = torch.as_tensor(got).to(want.device).float()
    diff = float((got_t - want).abs().max().item()) if got_t.shape == want.shape else float("inf")
    ok = got_t.shape == want.shape and bool(torch.allclose(got_t, want, atol=ATOL, rtol=RTOL))
    return {
        "status": sl.PASS if ok else sl.FAIL,
        "max_abs_diff": diff,
        "reason": "" if ok else f"differs from eager: max |diff| {diff:.3g} > {ATOL} + {RTOL}|x|",
    }


def _step(fn: Any) -> dict[str, Any]:
    try:
        out: dict[str, Any] = fn()
    except Exception as exc:  # one broken export is that check's fail, not a crash
        return {"status": sl.FAIL, "reason": f"{type(exc).__name__}: {exc}"[:400]}
    return out


def check_torchscript(
    torch: Any, model: Any, x: Any, want: Any, work: Path, kind: str
) -> dict[str, Any]:
    path = work / f"model.{'traced' if kind == 'trace' else 'scripted'}.pt"
    mod = torch.jit.trace(model, x) if kind == "trace" else torch.jit.script(model)
    mod.save(str(path))
    loaded = torch.jit.load(str(path), map_location=x.device)
    with torch.no_grad():
        return {**compare(torch, loaded(x), want), "file": path.name}


def export_onnx(torch: Any, model: Any, x: Any, path: Path, opset: int | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"input_names": ["x"], "output_names": ["y"], "dynamo": False}
    kwargs["dynamic_axes"] = {"x": {0: "batch"}, "y": {0: "batch"}}
    if opset is not None:
        kwargs["opset_version"] = opset
    with warnings.catch_warnings():  # the TorchScript-based exporter warns that it is legacy
        warnings.simplefilter("ignore")
        torch.onnx.export(model.cpu(), x.cpu(), str(path), **kwargs)
    import onnx  # torch.onnx.export needs it too

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    got = [int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    return {
        "status": sl.PASS,
        "opset": got[0] if got else None,
        "onnx": onnx.__version__,
        "file": path.name,
    }


def simplify_onnx(path: Path) -> dict[str, Any]:
    try:
        import onnxsim
    except ImportError:
        return {
            "status": sl.SKIPPED,
            "reason": "onnxsim not installed: the exported model runs unsimplified",
        }
    import onnx

    model, ok = onnxsim.simplify(onnx.load(str(path)))
    if not ok:
        return {"status": sl.FAIL, "reason": "onnxsim could not validate the simplified model"}
    onnx.save(model, str(path))
    return {
        "status": sl.PASS,
        "onnxsim": getattr(onnxsim, "__version__", "?"),
        "nodes": len(model.graph.node),
    }


def run_onnxruntime(
    torch: Any,
    path: Path,
    x: Any,
    want: Any,
    opset: int | None,
    opsets: Mapping[str, Any],
) -> dict[str, Any]:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return {"status": sl.SKIPPED, "reason": f"onnxruntime not installed ({exc})"}
    version = str(ort.__version__)
    out: dict[str, Any] = {"onnxruntime": version}
    if opset is not None:
        problem = opset_problem(opset, str(torch.__version__), version, opsets)
        if problem:
            # What the runtime itself does with the file, for the record (it may load a newer
            # opset whose ops did not change: forward compatibility, which it does not promise).
            try:
                ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                said = "loads the file anyway (unsupported: forward compatibility only)"
            except Exception as exc:  # the runtime's own refusal, recorded verbatim
                said = f"{type(exc).__name__}: {exc}"[:300]
            return {**out, "status": sl.FAIL, "reason": problem, "runtime_says": said}
    available = list(ort.get_available_providers())
    gpu = x.device.type == "cuda"
    if gpu and "CUDAExecutionProvider" not in available:
        return {
            **out,
            "status": sl.FAIL,
            "reason": f"torch has CUDA but onnxruntime {version} has no CUDAExecutionProvider "
            f"(providers: {', '.join(available)}): install onnxruntime-gpu",
        }
    providers = ["CUDAExecutionProvider"] if gpu else ["CPUExecutionProvider"]
    sess = ort.InferenceSession(str(path), providers=providers)
    got = sess.run(None, {"x": x.cpu().numpy()})[0]
    return {**out, **compare(torch, torch.from_numpy(got), want), "providers": sess.get_providers()}


def run_tensorrt(torch: Any, path: Path, x: Any, want: Any) -> dict[str, Any]:
    if x.device.type != "cuda":
        return {
            "status": sl.SKIPPED,
            "reason": "no CUDA device for torch on this host: TensorRT needs a GPU",
        }
    try:
        import tensorrt as trt
    except ImportError as exc:
        return {"status": sl.SKIPPED, "reason": f"TensorRT not installed ({exc})"}
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        return {
            "status": sl.FAIL,
            "reason": f"TensorRT {trt.__version__} cannot parse the ONNX model: {errors}",
        }
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, IN_FEATURES), (BATCH, IN_FEATURES), (BATCH, IN_FEATURES))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        return {
            "status": sl.FAIL,
            "reason": f"TensorRT {trt.__version__} failed to build an engine",
        }
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    ctx = engine.create_execution_context()
    ctx.set_input_shape("x", tuple(x.shape))
    xin = x.contiguous().float()
    y = torch.empty(BATCH, OUT_FEATURES, device=x.device)
    ctx.set_tensor_address("x", xin.data_ptr())
    ctx.set_tensor_address("y", y.data_ptr())
    stream = torch.cuda.current_stream()
    ctx.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return {**compare(torch, y, want), "tensorrt": str(trt.__version__)}


def probe(
    device: str, opset: int | None, opsets: Mapping[str, Any], save_dir: str | None
) -> dict[str, Any]:
    try:
        torch = import_torch()
    except ImportError as exc:
        return {"torch": None, "import_error": str(exc)}
    result: dict[str, Any] = {
        "torch": str(torch.__version__),
        "device": device,
        "atol": ATOL,
        "rtol": RTOL,
    }
    with tempfile.TemporaryDirectory(prefix="gpuprov-l6-") as tmp:
        work = Path(tmp)
        model, x, want = build_model(torch, device)
        checks: dict[str, Any] = {}
        checks["torchscript_trace"] = _step(
            lambda: check_torchscript(torch, model, x, want, work, "trace")
        )
        checks["torchscript_script"] = _step(
            lambda: check_torchscript(torch, model, x, want, work, "script")
        )
        onnx_path = work / "model.onnx"
        checks["onnx"] = _step(lambda: export_onnx(torch, model, x, onnx_path, opset))
        model.to(device)
        if checks["onnx"]["status"] == sl.PASS:
            checks["onnxsim"] = _step(lambda: simplify_onnx(onnx_path))
            got_opset = checks["onnx"].get("opset")
            checks["onnxruntime"] = _step(
                lambda: run_onnxruntime(torch, onnx_path, x, want, got_opset, opsets)
            )
            checks["tensorrt"] = _step(lambda: run_tensorrt(torch, onnx_path, x, want))
        else:
            why = "the ONNX export failed"
            for name in ("onnxsim", "onnxruntime", "tensorrt"):
                checks[name] = {"status": sl.SKIPPED, "reason": why}
        result["checks"] = checks
        if save_dir:
            dest = Path(save_dir)
            dest.mkdir(parents=True, exist_ok=True)
            for f in work.iterdir():
                shutil.copy2(f, dest / f.name)
            sample = {
                "input": x.cpu().tolist(),
                "output": want.cpu().tolist(),
                "atol": ATOL,
                "rtol": RTOL,
            }
            (dest / "sample.json").write_text(json.dumps(sample) + "\n", encoding="utf-8")
            result["saved"] = str(dest)
    return result


def judge(p: Mapping[str, Any], started: float | None = None) -> dict[str, Any]:
    details = dict(p)
    if p.get("torch") is None:
        reason = f"torch is not importable: {p.get('import_error')}"
        return sl.verdict("L6", "export", sl.FAIL, reason, details, None, started)
    checks: Mapping[str, Mapping[str, Any]] = p["checks"]
    failed = [
        f"{name}: {c.get('reason', '')}" for name, c in checks.items() if c["status"] == sl.FAIL
    ]
    if failed:
        return sl.verdict("L6", "export", sl.FAIL, "; ".join(failed), details, None, started)
    summary = ", ".join(
        f"{name} {c['status']}" + (f" ({c['reason']})" if c["status"] == sl.SKIPPED else "")
        for name, c in checks.items()
    )
    status = sl.PASS_CPU if p.get("device") == "cpu" else sl.PASS
    return sl.verdict(
        "L6", "export", status, f"on {p.get('device')}: {summary}", details, None, started
    )


def plan_device(cuda: bool, allow_cpu: bool) -> tuple[str | None, str]:
    if cuda:
        return "cuda:0", ""
    if allow_cpu:
        return "cpu", ""
    return (
        None,
        "torch has no CUDA device here "
        "(set gpu_smoke_allow_cpu: true to check the exports on the CPU)",
    )


def cuda_available() -> bool:
    try:
        return bool(import_torch().cuda.is_available())
    except ImportError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L6 export (TorchScript, ONNX, TensorRT)")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--device", choices=("auto", "cpu"), default="auto")
    parser.add_argument("--opset", type=int, help="ONNX opset_version (default: the exporter's)")
    parser.add_argument(
        "--onnx-opsets", default="", help="JSON {runtimes: [{onnxruntime, max_opset}]}"
    )
    parser.add_argument("--save-dir", default="", help="keep the exported files here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    opsets: dict[str, Any] = {}
    if args.onnx_opsets:
        opsets = json.loads(Path(args.onnx_opsets).read_text(encoding="utf-8"))
    if args.device == "cpu":
        device: str | None = "cpu"
        why = ""
    else:
        device, why = plan_device(cuda_available(), args.allow_cpu)
    if device is None:
        v = sl.verdict("L6", "export", sl.SKIPPED, why, {}, None, started)
    else:
        v = judge(probe(device, args.opset, opsets, args.save_dir or None), started)
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
