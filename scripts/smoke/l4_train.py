#!/usr/bin/env python3
"""L4 training + export: fit sin(x) with a cubic, then export a tiny model and run it.

The fit is the classic PyTorch tutorial ("Learning PyTorch with Examples", tensors +
autograd): 2000 points on [-pi, pi], y = a + b x + c x^2 + d x^3, summed squared error,
2000 steps of plain gradient descent with lr 1e-6, float32, seed 0. The tutorial ends
near a loss of 9; the pass threshold is --max-loss (default 50), far above that but far
below an untrained cubic (thousands), so a broken autograd or device fails.

Export: a 2-layer MLP is traced to TorchScript and exported to ONNX; both are run and
compared with eager output. ONNX runs through onnxruntime when it is installed (else the
ONNX check reports "onnxruntime not installed" and does not fail the layer).

Where it runs: on cuda:0. On a host without NVIDIA devices it runs on the CPU and
reports "pass (cpu)" only with --allow-cpu (else skipped). On a host WITH NVIDIA devices
but no usable CUDA it is skipped: a CPU pass there would hide the missing GPU (L3 says why).

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import smokelib as sl

POINTS = 2000
STEPS = 2000
LR = 1e-6
MAX_LOSS = 50.0


def import_torch() -> Any:  # torch is optional on the host
    """Narrow seam: unit tests replace this function with a fake torch."""
    import torch

    return torch


def fit_cubic(torch: Any, device: str, steps: int = STEPS) -> dict[str, Any]:
    torch.manual_seed(0)
    dtype = torch.float32
    x = torch.linspace(-math.pi, math.pi, POINTS, device=device, dtype=dtype)
    y = torch.sin(x)
    coef = [torch.randn((), device=device, dtype=dtype, requires_grad=True) for _ in range(4)]
    loss_value = float("nan")
    first = None
    for _ in range(steps):
        a, b, c, d = coef
        y_pred = a + b * x + c * x**2 + d * x**3
        loss = (y_pred - y).pow(2).sum()
        loss_value = float(loss.item())
        first = loss_value if first is None else first
        loss.backward()
        with torch.no_grad():
            for p in coef:
                p -= LR * p.grad
                p.grad = None
    return {
        "initial_loss": first,
        "final_loss": loss_value,
        "coefficients": [round(float(p.item()), 4) for p in coef],
        "steps": steps,
        "lr": LR,
        "points": POINTS,
    }


def export_models(torch: Any, device: str, workdir: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = (
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        .to(device)
        .eval()
    )
    x = torch.randn(4, 8, device=device)
    with torch.no_grad():
        want = model(x)
    out: dict[str, Any] = {}
    ts_path = workdir / "tiny.pt"
    traced = torch.jit.trace(model, x)
    traced.save(str(ts_path))
    loaded = torch.jit.load(str(ts_path), map_location=device)
    with torch.no_grad():
        out["torchscript_ok"] = bool(torch.allclose(loaded(x), want, atol=1e-5))
    onnx_path = workdir / "tiny.onnx"
    try:
        with warnings.catch_warnings():  # the legacy exporter warns; it needs no onnxscript
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model.cpu(),
                x.cpu(),
                str(onnx_path),
                input_names=["x"],
                output_names=["y"],
                dynamo=False,
            )
        out["onnx_exported"] = onnx_path.stat().st_size > 0
    except Exception as exc:  # torch.onnx needs the onnx package: report, not fail
        out["onnx_exported"] = None
        out["onnx_note"] = f"ONNX export unavailable: {type(exc).__name__}: {exc}"[:300]
        return out
    try:
        import onnxruntime as ort  # optional

        sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {"x": x.cpu().numpy()})[0]
        out["onnxruntime_ok"] = bool(torch.allclose(torch.from_numpy(got), want.cpu(), atol=1e-4))
    except ImportError:
        out["onnxruntime_ok"] = None
        out["onnx_note"] = "onnxruntime not installed: ONNX file exported, not run"
    return out


def probe(device: str, steps: int = STEPS) -> dict[str, Any]:
    try:
        torch = import_torch()
    except ImportError as exc:
        return {"torch": None, "import_error": str(exc)}
    result: dict[str, Any] = {"torch": str(torch.__version__), "device": device}
    started = time.monotonic()
    result["fit"] = fit_cubic(torch, device, steps)
    result["fit_s"] = round(time.monotonic() - started, 2)
    with tempfile.TemporaryDirectory(prefix="gpuprov-l4-") as tmp:
        result["export"] = export_models(torch, device, Path(tmp))
    return result


def cuda_available() -> bool:
    try:
        return bool(import_torch().cuda.is_available())
    except ImportError:
        return False


def plan_device(cuda: bool, pci_count: int, allow_cpu: bool) -> tuple[str | None, str]:
    """Where L4 runs, or (None, why it is skipped)."""
    if cuda:
        return "cuda:0", ""
    if pci_count:
        return None, (
            f"CUDA unavailable on a host with {pci_count} NVIDIA device(s) (L3 says why); "
            "a CPU run here would hide the missing GPU"
        )
    if allow_cpu:
        return "cpu", ""
    return None, f"{sl.NO_DEVICE} (set gpu_smoke_allow_cpu: true to train on the CPU)"


def judge(
    p: Mapping[str, Any], max_loss: float = MAX_LOSS, started: float | None = None
) -> dict[str, Any]:
    details = dict(p)
    if p.get("torch") is None:
        return sl.verdict(
            "L4",
            "train",
            sl.FAIL,
            f"torch is not importable: {p.get('import_error')}",
            details,
            None,
            started,
        )
    fit = p["fit"]
    loss = float(fit["final_loss"])
    problems: list[str] = []
    if not math.isfinite(loss) or loss > max_loss:
        problems.append(
            f"cubic fit of sin(x): loss {loss:.2f} after {fit['steps']} steps, want <= {max_loss}"
        )
    exp = p.get("export") or {}
    if exp.get("torchscript_ok") is not True:
        problems.append("TorchScript round trip differs from eager output")
    if exp.get("onnxruntime_ok") is False:
        problems.append("onnxruntime output differs from eager output")
    if problems:
        return sl.verdict("L4", "train", sl.FAIL, "; ".join(problems), details, None, started)
    status = sl.PASS_CPU if p.get("device") == "cpu" else sl.PASS
    onnx = "onnxruntime ok" if exp.get("onnxruntime_ok") else exp.get("onnx_note", "")
    return sl.verdict(
        "L4",
        "train",
        status,
        f"loss {loss:.2f} <= {max_loss} on {p.get('device')}; TorchScript ok; {onnx}",
        details,
        None,
        started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L4 training + export")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--max-loss", type=float, default=MAX_LOSS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    device, why = plan_device(cuda_available(), len(sl.scan_pci(args.sysfs_root)), args.allow_cpu)
    if device is None:
        v = sl.verdict("L4", "train", sl.SKIPPED, why, {}, None, started)
    else:
        v = judge(probe(device), args.max_loss, started)
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
