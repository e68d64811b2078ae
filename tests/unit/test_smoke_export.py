"""L6 (scripts/smoke/l6_export.py): the opset rule and the verdicts, without torch.

The export itself runs for real on the lab hosts (tests/lab/test_model_serving.py); here the
judge gets the check dicts that probe() returns.
"""

from __future__ import annotations

from typing import Any

import pytest
from smoke_modules import smoke

l6 = smoke("l6_export")
run_all = smoke("run_all")

OPSETS = {
    "runtimes": [{"onnxruntime": "1.16", "max_opset": 19}, {"onnxruntime": "1.18", "max_opset": 21}]
}


def _probe(**checks: dict[str, Any]) -> dict[str, Any]:
    base = {
        "torchscript_trace": {"status": "pass"},
        "torchscript_script": {"status": "pass"},
        "onnx": {"status": "pass", "opset": 20},
        "onnxsim": {"status": "skipped", "reason": "onnxsim not installed"},
        "onnxruntime": {"status": "pass"},
        "tensorrt": {"status": "skipped", "reason": "no CUDA device"},
    }
    base.update(checks)
    return {"torch": "2.13.0+cpu", "device": "cpu", "checks": base}


def test_opset_newer_than_the_runtime_names_both_versions() -> None:
    msg = l6.opset_problem(20, "2.13.0+cpu", "1.16.3", OPSETS)
    assert msg == (
        "ONNX opset 20 (exported by torch 2.13.0+cpu) is not supported by onnxruntime 1.16.3, "
        "which runs opsets 7-19: install an onnxruntime that runs opset 20, or export with "
        "opset_version <= 19"
    )
    assert l6.opset_problem(19, "2.13.0", "1.16.3", OPSETS) is None


def test_a_runtime_between_rows_uses_the_older_row_and_says_so() -> None:
    msg = l6.opset_problem(21, "2.13.0", "1.17.1", OPSETS)
    assert msg is not None
    assert "runs opsets 7-19 (row 1.16, a lower bound)" in msg
    assert l6.opset_problem(20, "2.13.0", "1.9.0", OPSETS) is None  # no row: onnxruntime decides


def test_all_checks_passing_on_the_cpu_is_pass_cpu_and_lists_the_skips() -> None:
    v = l6.judge(_probe())
    assert v["status"] == "pass (cpu)"
    assert "tensorrt skipped (no CUDA device)" in v["reason"]
    assert "onnxsim skipped (onnxsim not installed)" in v["reason"]


def test_a_failed_check_fails_the_layer_naming_it() -> None:
    v = l6.judge(
        _probe(onnxruntime={"status": "fail", "reason": "ONNX opset 20 ... onnxruntime 1.16.3"})
    )
    assert v["status"] == "fail"
    assert v["reason"] == "onnxruntime: ONNX opset 20 ... onnxruntime 1.16.3"
    gpu = l6.judge({**_probe(), "device": "cuda:0"})
    assert gpu["status"] == "pass"


def test_no_torch_fails() -> None:
    v = l6.judge({"torch": None, "import_error": "No module named 'torch'"})
    assert v["status"] == "fail"
    assert "torch is not importable" in v["reason"]


@pytest.mark.parametrize(
    ("cuda", "allow_cpu", "want"),
    [(True, False, "cuda:0"), (False, True, "cpu"), (False, False, None)],
    ids=["gpu", "cpu-allowed", "cpu-refused"],
)
def test_plan_device(cuda: bool, allow_cpu: bool, want: str | None) -> None:
    device, why = l6.plan_device(cuda, allow_cpu)
    assert device == want
    assert bool(why) is (want is None)


def test_run_all_runs_l6_with_the_opset_table_and_skips_it_without_torch() -> None:
    a = run_all_args(["--allow-cpu", "--onnx-opsets", "/x/onnx_opsets.json"])
    assert run_all.layer_args("L6", a) == [
        "--sysfs-root",
        "/sys",
        "--allow-cpu",
        "--onnx-opsets",
        "/x/onnx_opsets.json",
    ]
    assert "L6" in run_all.TORCH_LAYERS
    assert run_all.SCRIPTS["L6"] == "l6_export.py"


def run_all_args(argv: list[str]) -> Any:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--allow-cpu", action="store_true")
    p.add_argument("--sysfs-root", default="/sys")
    p.add_argument("--onnx-opsets", default="")
    return p.parse_args(argv)
