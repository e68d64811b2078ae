"""Issue 21 on the serving tables and errors.yaml: each value corrected from its primary source
is typed here, so the old value fails; and the rows confirmed from a source are no longer
marked unverified. Sources (read 2026-12-02): the PyPI wheels' own files (torch/onnx/_constants.py,
torch_tensorrt METADATA and _version.py, torch/cuda/__init__.py), pytorch/serve at its release
tags, and microsoft/onnxruntime docs/reference/compatibility.md."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import compat
from compat import serving
from compat.data import data_dir


def _table(file: str, key: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load((Path(data_dir()) / file).read_text())[key]
    return rows


def _row(file: str, key: str, field: str, value: str) -> dict[str, Any]:
    (row,) = [r for r in _table(file, key) if str(r[field]) == value]
    return row


# 1. onnx.yaml exporters: torch 2.1.0's torch/onnx/_constants.py has
#    ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET = 17 and ONNX_MAX_OPSET = 19; torch 2.5.0's has
#    ONNX_MAX_OPSET = 20. dynamo_max (the file's header): ONNX_MAX_OPSET where the dynamo
#    exporter converts to the requested opset (2.5), 18 in 2.1 (dynamo_export implements
#    opset 18 only, though ONNX_MAX_OPSET is 19).


def test_torch_2_1_torchscript_exporter_stops_at_opset_17() -> None:
    refused = compat.serving_onnx("2.1.0", "1.20.0", opset=18)
    assert refused["export_max_opset"] == 17
    assert refused["ok"] is False
    assert "torch 2.1.0's torchscript exporter writes opsets up to 17, not 18" in refused["reasons"]
    assert compat.serving_onnx("2.1.0", "1.20.0", opset=17)["ok"] is True


@pytest.mark.parametrize(("torch", "dynamo_max"), [("2.1.0", 18), ("2.5.0", 20)], ids=str)
def test_dynamo_max_is_what_the_dynamo_exporter_writes(torch: str, dynamo_max: int) -> None:
    v = compat.serving_onnx(torch, "1.20.0", opset=dynamo_max, exporter="dynamo")
    assert v["export_max_opset"] == dynamo_max
    assert v["ok"] is True, v["reasons"]
    beyond = compat.serving_onnx(torch, "1.20.0", opset=dynamo_max + 1, exporter="dynamo")
    assert beyond["ok"] is False


def test_exporter_rows_follow_the_header() -> None:
    got = {
        r["torch"]: (r["torchscript_default"], r["torchscript_max"], r["dynamo_max"])
        for r in serving.load()["onnx.yaml"]["exporters"]
    }
    assert got["2.1"] == (17, 17, 18)
    assert got["2.5"] == (17, 20, 20)


# 5. Rows confirmed from a primary source: the exporters of torch 1.10, 1.12, 1.13, 2.1, 2.5
#    (the wheels), onnxruntime 1.13-1.18 and 1.20 (the official compatibility table).


@pytest.mark.parametrize(
    ("torch", "values"),
    [
        ("1.10", (9, 14, None)),
        ("1.12", (13, 16, None)),
        ("1.13", (14, 17, None)),
        ("2.1", (17, 17, 18)),
        ("2.5", (17, 20, 20)),
    ],
    ids=str,
)
def test_exporter_rows_read_from_the_wheels_are_sourced(
    torch: str, values: tuple[int, int, int | None]
) -> None:
    row = _row("onnx.yaml", "exporters", "torch", torch)
    assert (row["torchscript_default"], row["torchscript_max"], row["dynamo_max"]) == values
    assert row.get("confidence") is None
    assert f"torch-{torch}.0-" in row["source"]
    assert ".whl" in row["source"]


RUNTIMES = {
    "1.13": (17, "1.12"),
    "1.14": (18, "1.13"),
    "1.15": (19, "1.14"),
    "1.16": (19, "1.14"),
    "1.17": (20, "1.15"),
    "1.18": (21, "1.16"),
    "1.20": (21, "1.16"),
}


@pytest.mark.parametrize("onnxruntime", sorted(RUNTIMES), ids=str)
def test_runtime_rows_of_the_official_table_are_sourced(onnxruntime: str) -> None:
    row = _row("onnx.yaml", "runtimes", "onnxruntime", onnxruntime)
    assert (row["max_opset"], row["onnx"]) == RUNTIMES[onnxruntime]
    assert row.get("confidence") is None
    assert "docs/reference/compatibility.md" in row["source"]
    assert f"'| {onnxruntime} | **" in row["source"]
    runs = {str(r["onnxruntime"]): r["max_opset"] for r in compat.serving_onnx_runtimes()}
    assert runs[onnxruntime] == RUNTIMES[onnxruntime][0]


# After the official table: read from the released wheels (2026-12-03): a model stamped with a
# newer opset is refused naming the runtime's ceiling ("... is till opset N"), one stamped IR 99
# names its highest IR version; 1.30 and 1.32 had 23 and 1.19 (a lower bound, from memory).
MEASURED_RUNTIMES = {
    "1.21": (22, "1.17", "till opset 22."),
    "1.23": (23, "1.18", "till opset 23."),
    "1.30": (26, "1.21", "till opset 26."),
    "1.32": (28, "1.23", "till opset 28."),
}


@pytest.mark.parametrize("onnxruntime", sorted(MEASURED_RUNTIMES), ids=str)
def test_runtime_rows_after_the_official_table_are_read_from_the_wheels(onnxruntime: str) -> None:
    row = _row("onnx.yaml", "runtimes", "onnxruntime", onnxruntime)
    max_opset, onnx, refusal = MEASURED_RUNTIMES[onnxruntime]
    assert (row["max_opset"], row["onnx"]) == (max_opset, onnx)
    assert row.get("confidence") is None
    source = " ".join(row["source"].split())
    assert f"onnxruntime-{onnxruntime}.0-cp311" in source
    assert "sha256" in source
    assert refusal in source
    runs = {str(r["onnxruntime"]): r["max_opset"] for r in compat.serving_onnx_runtimes()}
    assert runs[onnxruntime] == max_opset


def test_onnxruntime_1_12_notes_that_the_official_tables_disagree() -> None:
    row = _row("onnx.yaml", "runtimes", "onnxruntime", "1.12")
    assert row["max_opset"] == 15  # unchanged: a note only
    assert "disagree" in row["notes"]
    assert "'| 1.12 | **1.12** | 17 | 3 | 8 |'" in row["notes"]


# 2. tensorrt.yaml: torch_tensorrt-2.14.0 (cp311 manylinux_2_28 wheel) METADATA Requires-Dist
#    tensorrt-cu13<11.2.0,>=11.1.0; torch_tensorrt/_version.py __tensorrt_version__ = "11.1.0",
#    __cuda_version__ = "13.2".


def _torch_tensorrt(version: str) -> dict[str, Any]:
    (row,) = [
        r for r in serving.load()["tensorrt.yaml"]["torch_tensorrt"] if r["version"] == version
    ]
    return row


def test_torch_tensorrt_2_14_0_is_built_with_tensorrt_11_1_and_cuda_13_2() -> None:
    row = _torch_tensorrt("2.14.0")
    assert (row["torch"], row["tensorrt"], row["cuda"]) == ("2.14", "11.1", "13.2")
    assert row.get("confidence") is None
    # what tensorrt_for answers once a TensorRT 11.1 row for CUDA 13.2 exists
    tables = copy.deepcopy(serving.load())
    tables["tensorrt.yaml"]["tensorrt"].append(
        {"version": "11.1", "cuda": ["13.2"], "min_compute_capability": "7.5", "source": "test"}
    )
    assert serving.tensorrt_for(tables, "13.2", ["8.0"])["torch_tensorrt"] == ["2.14.0"]
    assert serving.tensorrt_for(tables, "13.0", ["8.0"])["torch_tensorrt"] == []


@pytest.mark.parametrize(
    ("version", "values"),
    [("1.4.0", ("2.0", "8.6", "11.8")), ("2.5.0", ("2.5", "10.3", "12.4"))],
    ids=str,
)
def test_torch_tensorrt_rows_read_from_the_wheels_are_sourced(
    version: str, values: tuple[str, str, str]
) -> None:
    row = _torch_tensorrt(version)
    assert (row["torch"], row["tensorrt"], row["cuda"]) == values
    assert row.get("confidence") is None
    assert f"torch_tensorrt-{version}-" in row["source"]
    assert "_version.py" in row["source"]


def test_torch_tensorrt_2_1_0_is_not_on_pypi_and_stays_unverified() -> None:
    assert _torch_tensorrt("2.1.0")["confidence"] == "unverified"


# 3. torchserve.yaml: tag v0.11.0 requirements/torch_linux.txt pins torch==2.3.0+cpu; its
#    docs/token_authorization_api.md enables token authorization only with the endpoint plugin
#    (--plugins-path); on by default from 0.11.1.


def test_torchserve_0_11_0_is_tested_with_torch_2_3() -> None:
    refused = compat.serving_torchserve("0.11.0", "2.2.0", 17)
    assert refused["ok"] is False
    assert "torchserve 0.11.0 needs torch >= 2.3; the host has 2.2.0" in refused["reasons"]
    assert compat.serving_torchserve("0.11.0", "2.3.0", 17)["ok"] is True


def test_torchserve_0_11_0_token_auth_is_not_on_by_default() -> None:
    assert compat.serving_torchserve("0.11.0", "2.3.0", 17)["token_auth"] is False
    # the lab's release is unchanged
    assert compat.serving_torchserve("0.12.0", "2.13.0", 17)["token_auth"] is True
    row = _row("torchserve.yaml", "torchserve", "version", "0.11.0")
    assert "--plugins-path" in row["source"]
    assert "0.11.1" in row["notes"]
    assert row["status"] == "limited-maintenance"  # read in 2026-12-03's pass (was active)


# 4. errors.yaml. gpu-too-old: old_gpu_warn is in torch/cuda/__init__.py of the 2.0.0-2.6.0
#    wheels too, not only 1.x. kepler-unsupported-driver: the NVRM lines as logged have two
#    spaces after 'NVRM:' and dmesg/syslog prefixes.

TOO_OLD_2_6 = """
    Found GPU0 Tesla K40m which is of cuda capability 3.5.
    PyTorch no longer supports this GPU because it is too old.
    The minimum cuda capability supported by this library is 5.0.
"""
TOO_OLD_1_8 = """
    Found GPU0 Tesla K20c which is of cuda capability 3.0.
    PyTorch no longer supports this GPU because it is too old.
    The minimum cuda capability that we support is 3.5.
"""


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        (TOO_OLD_2_6, {"index": "0", "gpu": "Tesla K40m", "capability": "3.5", "min": "5.0"}),
        (TOO_OLD_1_8, {"index": "0", "gpu": "Tesla K20c", "capability": "3.0", "min": "3.5"}),
    ],
    ids=["2.x-wording", "1.3-1.8-wording"],
)
def test_gpu_too_old_is_not_only_torch_1_x(text: str, parsed: dict[str, str]) -> None:
    answer = compat.explain(text)
    assert answer["id"] == "gpu-too-old"
    assert {k: answer["parsed"][k] for k in parsed} == parsed
    assert "(1.x)" not in answer["cause"]
    assert "through at least 2.6" in answer["cause"]
    assert "1.x releases" not in answer["source"]
    assert "2.6.0 (line 193)" in answer["source"]
    row = _row("errors.yaml", "errors", "id", "gpu-too-old")
    assert row.get("confidence") is None


OLD_KEPLER_PATTERN = (
    r"NVRM: The NVIDIA .* GPU installed in this system is\s+(?:NVRM: )?supported through "
    r"the NVIDIA (?P<branch>\d+)\.xx"
)

KEPLER_LOGS = {
    "dmesg": (
        "[   12.115751] nvidia: module license 'NVIDIA' taints kernel.\n"
        "[   12.228469] NVRM: The NVIDIA Tesla K40m GPU installed in this system is\n"
        "[   12.228475] NVRM:  supported through the NVIDIA 470.xx Legacy drivers. Please\n"
        "[   12.228478] NVRM:  visit http://www.nvidia.com/object/unix.html for more\n"
        "[   12.228482] NVRM:  information.  The 580.95.05 NVIDIA driver will ignore\n"
        "[   12.228485] NVRM:  this GPU.  Continuing probe...\n",
        "470",
    ),
    "syslog": (
        "Dec  2 10:00:01 gpu1 kernel: [   13.576513] NVRM: The NVIDIA Quadro FX 550 GPU"
        " installed in this system is\n"
        "Dec  2 10:00:01 gpu1 kernel: [   13.576520] NVRM:  supported through the NVIDIA 304.xx"
        " Legacy drivers. Please\n"
        "Dec  2 10:00:01 gpu1 kernel: [   13.576522] NVRM:  visit http://www.nvidia.com/object/unix.html"
        " for more\n",
        "304",
    ),
    "two-spaces": (
        "NVRM: The NVIDIA Quadro P400 GPU installed in this system is\n"
        "NVRM:  supported through the NVIDIA 580.xx Legacy drivers.\n"
        "NVRM:  The 595.84 NVIDIA driver will ignore\n",
        "580",
    ),
    "three-spaces": (
        "NVRM: The NVIDIA GeForce GTX 870M GPU installed in this system is\n"
        "NVRM:   supported through the NVIDIA 470.xx Legacy drivers. Please\n",
        "470",
    ),
    "one-space": (
        "NVRM: The NVIDIA GeForce GT 630 GPU installed in this system is\n"
        "NVRM: supported through the NVIDIA 390.xx Legacy drivers.\n",
        "390",
    ),
}


@pytest.mark.parametrize("shape", sorted(KEPLER_LOGS), ids=str)
def test_kepler_legacy_branch_line_is_recognised_as_logged(shape: str) -> None:
    text, branch = KEPLER_LOGS[shape]
    answer = compat.explain(text)
    assert answer["id"] == "kepler-unsupported-driver"
    assert answer["parsed"]["branch"] == branch


def test_the_old_kepler_pattern_missed_the_logged_shapes() -> None:
    def old(text: str) -> bool:
        return re.search(OLD_KEPLER_PATTERN, text, re.IGNORECASE | re.DOTALL) is not None

    missed = sorted(shape for shape, (text, _) in KEPLER_LOGS.items() if not old(text))
    assert missed == ["dmesg", "syslog", "three-spaces", "two-spaces"]
    row = _row("errors.yaml", "errors", "id", "kepler-unsupported-driver")
    assert row["patterns"] != [OLD_KEPLER_PATTERN]
    assert "nv-kernel.o_binary" in row["source"]  # NVIDIA's own text (2026-12-03's pass)
