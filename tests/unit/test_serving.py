"""compat.serving: the serving tables as data, and the pure checks on a synthetic table."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import compat
from compat import cli, serving, serving_data
from compat.model import CompatDataError, CompatError

DATA = serving_data.DATA_DIR
FILES = ("onnx.yaml", "triton.yaml", "tensorrt.yaml", "torchserve.yaml")


def _synthetic() -> dict[str, Any]:
    """A small table, written here by hand: the expectations below do not come from the code."""
    src = "test"
    return {
        "onnx.yaml": {
            "exporters": [
                {
                    "torch": "2.5",
                    "torchscript_default": 17,
                    "torchscript_max": 20,
                    "dynamo_max": 18,
                    "source": src,
                },
                {
                    "torch": "2.13",
                    "torchscript_default": 20,
                    "torchscript_max": 20,
                    "dynamo_max": 23,
                    "source": src,
                },
            ],
            "runtimes": [
                {"onnxruntime": "1.16", "max_opset": 19, "source": src},
                {"onnxruntime": "1.18", "max_opset": 21, "source": src},
            ],
        },
        "triton.yaml": {
            "triton": [
                {
                    "tag": "23.08",
                    "image": "nvcr.io/nvidia/tritonserver:23.08-py3",
                    "cuda": "12.2.1",
                    "min_driver": "535",
                    "forward_compat_branches": [470, 525],
                    "min_compute_capability": "6.0",
                    "source": src,
                },
                {
                    "tag": "24.04",
                    "image": "nvcr.io/nvidia/tritonserver:24.04-py3",
                    "cuda": "12.4.1",
                    "min_driver": "545",
                    "forward_compat_branches": [470, 535],
                    "min_compute_capability": "6.0",
                    "source": src,
                },
            ],
        },
        "tensorrt.yaml": {
            "tensorrt": [
                {
                    "version": "8.6",
                    "cuda": ["11.8", "12.1"],
                    "min_compute_capability": "5.0",
                    "source": src,
                },
                {
                    "version": "10.1",
                    "cuda": ["11.8", "12.4"],
                    "min_compute_capability": "7.0",
                    "source": src,
                },
            ],
            "torch_tensorrt": [
                {
                    "version": "2.1.0",
                    "torch": "2.1",
                    "tensorrt": "8.6",
                    "cuda": "12.1",
                    "source": src,
                },
            ],
        },
        "torchserve.yaml": {
            "torchserve": [
                {
                    "version": "0.12.0",
                    "torch_min": "2.4",
                    "java": 17,
                    "token_auth": True,
                    "status": "limited-maintenance",
                    "source": src,
                },
            ],
        },
    }


@pytest.fixture
def t() -> dict[str, Any]:
    tables = _synthetic()
    serving.validate(tables)
    return tables


# ------------------------------------------------------------------ the real data as data


def test_real_serving_data_validates_and_every_row_has_a_source() -> None:
    tables = serving.load_tables()
    rows = 0
    for fname in FILES:
        doc = yaml.safe_load((DATA / fname).read_text(encoding="utf-8"))
        for key, value in doc.items():
            for row in value:
                rows += 1
                assert row.get("source"), (fname, key, row)
                if row.get("confidence") == "unverified":
                    assert row.get("notes"), (fname, key, row)
    assert rows >= 30
    assert tables["triton.yaml"]["triton"][0]["tag"] == "20.09"


def test_the_matrix_loader_ignores_the_serving_files() -> None:
    from compat.data import compile_tables

    tables = compile_tables(sorted(DATA.glob("*.yaml")))
    assert "triton" not in tables
    assert tables["containers"][0]["image"].startswith("nvcr.io/nvidia/pytorch:")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["triton.yaml"]["triton"][0].pop("source"),
            r"triton\.yaml: triton\[0\] 23\.08: missing source",
        ),
        (
            lambda d: d["onnx.yaml"]["runtimes"].reverse(),
            r"'runtimes' must be sorted by onnxruntime",
        ),
        (
            lambda d: d["torchserve.yaml"]["torchserve"][0].update(confidence="unverified"),
            r"an unverified row needs notes",
        ),
        (lambda d: d["tensorrt.yaml"].update(tensorrt=[]), r"'tensorrt' must be a non-empty list"),
        (
            lambda d: d["triton.yaml"]["triton"][0].update(min_compute_capability="six"),
            r"triton.yaml: triton\[0\]: malformed compute capability 'six'",
        ),
    ],
    ids=["no-source", "unsorted", "unverified-without-notes", "empty", "bad-cc"],
)
def test_bad_rows_are_named(mutate: Any, message: str) -> None:
    tables = copy.deepcopy(_synthetic())
    mutate(tables)
    with pytest.raises((CompatDataError, CompatError), match=message):
        serving.validate(tables)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "onnx.yaml").write_text("exporters: []\n")
    with pytest.raises(CompatDataError, match=r"triton\.yaml"):
        serving.load_tables(str(tmp_path))


# ------------------------------------------------------------------ ONNX


def test_default_opset_of_the_exporter_runs_on_a_new_enough_runtime(t: dict[str, Any]) -> None:
    v = serving.onnx_check(t, "2.5.1", "1.18.0")
    assert (v["ok"], v["opset"], v["runtime_max_opset"]) == (True, 17, 21)


def test_opset_newer_than_the_runtime_fails_naming_both_versions(t: dict[str, Any]) -> None:
    v = serving.onnx_check(t, "2.13.0+cpu", "1.16.3")
    assert v["ok"] is False
    assert v["reasons"][0] == (
        "ONNX opset 20 (exported by torch 2.13.0+cpu) is not supported by onnxruntime 1.16.3, "
        "which runs opsets 7-19: install an onnxruntime that runs opset 20, or export with "
        "opset_version <= 19"
    )


def test_opset_beyond_the_exporter_fails(t: dict[str, Any]) -> None:
    v = serving.onnx_check(t, "2.5.0", "1.18.0", opset=21)
    assert v["ok"] is False
    assert "torch 2.5.0's torchscript exporter writes opsets up to 20, not 21" in v["reasons"]
    assert serving.onnx_check(t, "2.5.0", "1.18.0", opset=18, exporter="dynamo")["ok"] is True


def test_unknown_versions_are_unknown_not_ok(t: dict[str, Any]) -> None:
    v = serving.onnx_check(t, "3.0.0", "1.18.0")
    assert v["ok"] is None
    assert v["known"] is False
    old = serving.onnx_check(t, "2.13.0", "1.10.0")
    assert old["ok"] is None
    assert "older than every row" in old["reasons"][-1]


def test_a_runtime_between_rows_uses_the_older_row_as_a_lower_bound(t: dict[str, Any]) -> None:
    v = serving.onnx_check(t, "2.5.0", "1.17.1", opset=19)
    assert v["ok"] is True
    assert "opsets of onnxruntime 1.16 used (a lower bound)" in v["reasons"][0]


def test_bad_versions_are_usage_errors(t: dict[str, Any]) -> None:
    with pytest.raises(CompatError, match=r"invalid onnxruntime version 'x'"):
        serving.onnx_check(t, "2.5.0", "x")
    with pytest.raises(CompatError, match=r"invalid exporter 'jit'"):
        serving.onnx_check(t, "2.5.0", "1.18", exporter="jit")


# ------------------------------------------------------------------ Triton


def test_triton_tag_needing_a_newer_driver_is_refused_naming_tag_driver_and_branch(
    t: dict[str, Any],
) -> None:
    v = serving.triton_check(t, "24.04", "535.183.01", ["8.0"])
    assert v["ok"] is False
    assert v["reasons"] == [
        "tritonserver:24.04 (CUDA 12.4.1) needs driver branch >= 545; this host's branch is 535 "
        "(branch 535 can run it through CUDA forward compatibility on data-center GPUs only, "
        "when asked: --forward-compat)"
    ]
    assert serving.triton_check(t, "24.04", "535", ["8.0"], forward_compat=True)["ok"] is True
    old = serving.triton_check(t, "24.04", "520", ["8.0"])
    assert old["reasons"][0].endswith(
        "this host's branch is 520 (forward compatibility covers only [470, 535])"
    )


def test_triton_refuses_a_gpu_below_its_floor_and_a_host_without_driver(t: dict[str, Any]) -> None:
    v = serving.triton_check(t, "23.08", 550, ["3.5", "8.0"])
    assert v["ok"] is False
    assert v["reasons"] == [
        "tritonserver:23.08 needs compute capability >= 6.0; this host has a 3.5 GPU"
    ]
    none = serving.triton_check(t, "23.08", None, [])
    assert none["ok"] is False
    assert "no NVIDIA driver" in none["reasons"][0]


def test_triton_pick_is_the_newest_tag_the_branch_runs(t: dict[str, Any]) -> None:
    assert serving.triton_pick(t, "550", ["7.5"])["tag"] == "24.04"  # type: ignore[index]
    assert serving.triton_pick(t, "535", ["7.5"])["tag"] == "23.08"  # type: ignore[index]
    assert serving.triton_pick(t, "470", ["7.5"]) is None
    with pytest.raises(CompatError, match=r"unknown Triton tag '99.01': .* has 23\.08, 24\.04"):
        serving.triton_check(t, "99.01", "550", [])


def test_real_data_refuses_the_issue_example_on_a_kepler_470_host() -> None:
    v = serving.triton_check(serving.load(), "23.03", "470", ["3.5"])
    assert v["ok"] is False
    assert v["min_driver"] == 530
    assert v["driver_branch"] == 470
    assert len(v["reasons"]) == 2


# ------------------------------------------------------------------ TensorRT, TorchServe


def test_tensorrt_for_cuda_and_gpu(t: dict[str, Any]) -> None:
    assert serving.tensorrt_for(t, "12.1", ["7.5"]) == {
        "tensorrt": ["8.6"],
        "torch_tensorrt": ["2.1.0"],
        "reasons": ["TensorRT 10.1: no build for CUDA 12.1"],
    }
    low = serving.tensorrt_for(t, "11.8", ["6.1"])
    assert low["tensorrt"] == ["8.6"]
    assert low["reasons"] == ["TensorRT 10.1: needs compute capability >= 7.0, the host has 6.1"]
    assert serving.tensorrt_for(t, None, [])["tensorrt"] == []


def test_torchserve_needs_java_17_and_says_it_is_unmaintained(t: dict[str, Any]) -> None:
    v = serving.torchserve_check(t, "0.12.0", "2.13.0+cpu", 17)
    assert v["ok"] is True
    assert v["token_auth"] is True
    assert v["reasons"] == [
        "torchserve is in limited-maintenance: no further fixes or security patches"
    ]
    no_java = serving.torchserve_check(t, "0.12.0", "2.13.0", None)
    assert no_java["ok"] is False
    assert "torchserve 0.12.0 needs Java >= 17; the host has no Java" in no_java["reasons"]
    assert serving.torchserve_check(t, "0.12.0", "2.3.1", 21)["ok"] is False
    with pytest.raises(CompatError, match=r"unknown TorchServe '0\.1\.0'"):
        serving.torchserve_check(t, "0.1.0", "2.4", 17)


# ------------------------------------------------------------------ CLI


def test_cli_serving_onnx_mismatch_exits_1_naming_both(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["serving", "onnx", "--torch", "2.13.0+cpu", "--onnxruntime", "1.16.3"])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.startswith("NO: torch 2.13.0+cpu opset 20 on onnxruntime 1.16.3\n")
    assert "is not supported by onnxruntime 1.16.3, which runs opsets 7-19" in out


def test_cli_serving_triton_json_for_a_kepler_host(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["serving", "triton", "--driver", "470.256.02", "--gpu", "K40m", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert data["pick"] is None
    assert all(not v["ok"] for v in data["images"])


def test_cli_serving_triton_picks_for_an_a100_on_550(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["serving", "triton", "--driver", "550", "--gpu", "A100-SXM4-40GB"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[0] == "Pick: nvcr.io/nvidia/tritonserver:24.04-py3"


def test_cli_serving_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serving", "onnx", "--torch", "2.13.0"]) == 2
    assert "needs --torch VERSION and --onnxruntime VERSION" in capsys.readouterr().err
    assert cli.main(["serving", "triton", "--gpu", "NoSuchGPU", "--driver", "550"]) == 2
    assert "unknown GPU 'NoSuchGPU'" in capsys.readouterr().err


def test_compute_capabilities_of_names_pci_ids_and_gpu_info_dicts() -> None:
    import compat

    got = compat.compute_capabilities(
        ["Tesla K40m", "10de:17fd", {"name": "x", "compute_capability": "8.0"}, {"name": "T4"}]
    )
    assert got == ["3.5", "5.2", "8.0", "7.5"]  # K40m sm_35, M40 (10de:17fd) sm_52, T4 sm_75
    with pytest.raises(CompatError, match="unknown GPU 'no such gpu'"):
        compat.compute_capabilities([{"name": "no such gpu"}])


def test_serving_filter_takes_gpu_info_dicts_and_names_the_filter_on_errors() -> None:
    import gpu_compat as gpu_serving  # plugins/filter/gpu_compat.py (on pytest's pythonpath)
    from ansible.errors import AnsibleFilterError

    v = gpu_serving.gpu_serving_triton_check("24.04", "470", [{"name": "T4"}])
    assert v["ok"] is False
    assert "470" in "; ".join(v["reasons"])
    with pytest.raises(AnsibleFilterError, match="gpu_serving_triton_pick: unknown GPU"):
        gpu_serving.gpu_serving_triton_pick("535", ["no such gpu"])
    # The opset table as written in the data file; TorchServe judged by the filter, errors named.
    rows = yaml.safe_load((Path(compat.__file__).parent / "data" / "onnx.yaml").read_text())
    table = {str(r["onnxruntime"]): r["max_opset"] for r in rows["runtimes"]}
    got = {str(r["onnxruntime"]): r["max_opset"] for r in gpu_serving.gpu_serving_onnx_runtimes()}
    assert got == table
    assert got["1.16"] == 19
    assert gpu_serving.gpu_serving_torchserve_check("0.12.0", "2.3.1", 21)["ok"] is False
    with pytest.raises(AnsibleFilterError, match="gpu_serving_torchserve_check: "):
        gpu_serving.gpu_serving_torchserve_check("0.1.0", "2.4", "17")
