"""Issue 21 item 3: the library wheels every PyPI torch build pulls in are pinned and measured,
NCCL included. Expected values come from the issue's own reading of the NCCL wheel and from
the cuDNN wheels' known floors, not from the data under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import compat
from compat.data import data_dir


def _libraries() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((Path(data_dir()) / "libraries.yaml").read_text())
    return doc


def _measured(package: str, version: str) -> dict[str, Any]:
    (row,) = [
        r
        for r in _libraries()["libraries"]
        if r["package"] == package and str(r["version"]) == version
    ]
    return row


def test_nccl_cu13_2_30_7_is_measured_as_the_issue_read_it() -> None:
    row = _measured("nvidia-nccl-cu13", "2.30.7")
    assert row["sass"] == ["sm_75", "sm_80", "sm_90", "sm_100", "sm_100f", "sm_110", "sm_120"]
    assert row["ptx"] == ["compute_120"]


def test_every_pypi_default_build_from_2_1_has_a_pin_with_nccl() -> None:
    """torch 2.1 onward: PyPI's Linux wheel pulls nvidia-* wheels (cuDNN, cuBLAS, NCCL)."""
    pinned = {(str(p["torch"]), str(p["variant"])): p["packages"] for p in _libraries()["pins"]}
    missing = []
    for release in compat.load().releases:
        major, minor = (int(x) for x in release.version.split(".")[:2])
        default = release.pypi_default
        if (major, minor) < (2, 1) or not default or not default.startswith("cu"):
            continue
        packages = pinned.get((release.version, default))
        if not packages or not any(str(p).startswith("nvidia-nccl") for p in packages):
            missing.append(f"{release.version}+{default}")
    assert missing == []


def test_a_yes_names_nccl_among_the_measured_libraries() -> None:
    """T4 (7.5) is the lowest GPU NCCL 2.30.7 carries SASS for: the yes rests on NCCL too."""
    verdict = compat.check(["T4"], "2.14.1+cu130")
    assert verdict["compatible"] is True
    assert any("NCCL 2.30.7" in reason for reason in verdict["reasons"]), verdict["reasons"]
