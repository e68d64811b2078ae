"""Issue 21, second pass: values read in primary sources on 2026-12-02.

Corrections are typed here from their source, so the old value fails (R440's kind, R560's
month). Rows that a source now confirms must say what was read, and rows the sources dispute
keep their value, stay unverified and name the dispute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from compat import containers
from compat.data import Matrix, data_dir
from compat.model import Container, version_key


def _rows(file: str, key: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load((Path(data_dir()) / file).read_text())[key]
    return rows


def _branch_row(branch: int) -> dict[str, Any]:
    (row,) = [r for r in _rows("drivers.yaml", "branches") if r["branch"] == branch]
    return row


def _container(m: Matrix, tag: str) -> Container:
    (c,) = [c for c in m.containers if c.tag == tag]
    return c


# ---------------------------------------------------------------- drivers.yaml

DC_PDF = "NVIDIA_CUDA_Drivers_Support.pdf"  # RN-08625-001 _v02, March 2021, Table 1


def test_r440_is_a_new_feature_branch(real: Matrix) -> None:
    """NVIDIA's March 2021 data-center PDF, Table 1: R440 'New Feature Branch', EOL November
    2020, CUDA 10.2 (the data said production)."""
    b = real.branch(440)
    assert b is not None
    assert (b.kind, b.max_cuda[:2]) == ("new-feature", (10, 2))
    assert DC_PDF in _branch_row(440)["source"]


def test_r455_keeps_new_feature_and_names_nvidias_designation(real: Matrix) -> None:
    """The same PDF calls R455 'Evaluation/Developer Branch'; the kind list has no such value."""
    b = real.branch(455)
    assert b is not None
    assert b.kind == "new-feature"
    assert "Evaluation/Developer Branch" in _branch_row(455)["notes"]


def test_r560_first_release_is_july_2024(real: Matrix) -> None:
    """NVIDIA/open-gpu-kernel-modules tag 560.28.03 (the CUDA 12.6 GA driver): 2024-07-19
    (the data said 2024-08 from memory)."""
    b = real.branch(560)
    assert b is not None
    assert b.released == "2024-07"
    assert "560.28.03 (2024-07-19)" in _branch_row(560)["source"]


@pytest.mark.parametrize(
    ("branch", "released", "tag"),
    [(515, "2022-05", "515.43.04"), (530, "2023-02", "530.30.02")],
    ids=["R515", "R530"],
)
def test_branches_confirmed_by_nvidias_changelog(
    real: Matrix, branch: int, released: str, tag: str
) -> None:
    b = real.branch(branch)
    assert b is not None
    assert (b.released, b.confidence) == (released, "sourced")
    assert "open-gpu-kernel-modules@015742d32fa6153" in _branch_row(branch)["source"]
    assert f"[{tag}]" in _branch_row(branch)["notes"]


# ---------------------------------------------------------------- cuda.yaml


@pytest.mark.parametrize(
    ("cuda", "max_cc"),
    [("9.1", (7, 2)), ("9.2", (7, 2))] + [(v, (8, 7)) for v in ("11.4", "11.5", "11.6", "11.7")],
    ids=str,
)
def test_toolkit_ceilings_from_the_llvm_and_cmake_tables(
    real: Matrix, cuda: str, max_cc: tuple[int, int]
) -> None:
    t = real.toolkit(version_key(cuda))
    assert t is not None
    assert (t.max_cc, t.confidence) == (max_cc, "sourced")
    assert "clang/lib/Basic/Cuda.cpp" in t.source
    assert "CMakeCUDAArchitecturesAll.cmake" in t.source


def test_cuda_11_7_driver_is_515_43_04(real: Matrix) -> None:
    t = real.toolkit(version_key("11.7"))
    assert t is not None
    assert t.min_driver_text == "515.43.04"
    assert "'CUDA 11.7 GA >=515.43.04" in t.source


# ---------------------------------------------------------------- ngc.yaml

# Tags whose every unconfirmed field NVIDIA's own words now confirm: a verbatim copy of the
# PyTorch release-notes page (20.03, 20.12, 21.09) or its 'NVIDIA PyTorch Container Versions'
# table (torch of 20.01-20.12), and the Triton release notes of the same month (cuda, driver,
# GPU floor).
NGC_SOURCED = {
    "20.01": "1.4.0a0+a5b4d78",
    "20.03": "1.5.0a0+8f84ded",
    "20.07": "1.6.0a0+9907a3e",
    "20.09": "1.7.0a0+8deb4fe",
    "20.10": "1.7.0a0+7036e91",
    "20.11": "1.8.0a0+17f8c32",
    "20.12": "1.8.0a0+1606899",
    "21.07": "1.10.0a0+ecc3718",
    "21.09": "1.10.0a0+3fd9dcf",
    "21.10": "1.10.0a0+0aef44c",
    "21.12": "1.11.0a0+b6df043",
    "22.02": "1.11.0a0+17540c5",
    "22.10": "1.13.0a0+d0d6b1f",
}


@pytest.mark.parametrize(("tag", "torch"), NGC_SOURCED.items(), ids=list(NGC_SOURCED))
def test_ngc_rows_read_in_nvidia_text(real: Matrix, tag: str, torch: str) -> None:
    c = _container(real, tag)
    assert (c.torch, c.confidence) == (torch, "sourced")
    assert c.min_cc_source is not None
    assert f"Release {tag} supports CUDA compute capability 6.0" in c.min_cc_source
    # the driver sentence quoted in the source names the row's CUDA and driver branch
    assert f"based on NVIDIA CUDA {c.cuda}" in c.source or f"based on CUDA {c.cuda}" in c.source
    assert f"requires NVIDIA Driver release {c.min_driver}" in c.source
    assert "from memory" not in c.source
    assert containers.container_floors(real)[tag] == (6, 0)


def test_ngc_20_08_torch_dispute_is_named_not_changed(real: Matrix) -> None:
    """NVIDIA's version table (rel_20-12) gives 20.08 = 1.7.0a0+6392713; the 20.08 image's
    banner prints 1.7.0a0+8deb4fe. The value stays until the rel_20-08 page is read."""
    c = _container(real, "20.08")
    assert (c.torch, c.confidence) == ("1.7.0a0+8deb4fe", "unverified")
    (row,) = [r for r in _rows("ngc.yaml", "containers") if r["tag"] == "20.08"]
    assert "1.7.0a0+6392713" in row["notes"]


@pytest.mark.parametrize(
    ("tag", "torch", "jetson"),
    [
        ("23.03", "2.0.0a0+1767026", "2.0.0a0+8aa34602"),
        ("23.04", "2.1.0a0+fe05266", "2.0.0a0+fe05266f"),
    ],
    ids=["23.03", "23.04"],
)
def test_ngc_2023_torch_disputes_are_named_not_changed(
    real: Matrix, tag: str, torch: str, jetson: str
) -> None:
    c = _container(real, tag)
    assert (c.torch, c.confidence) == (torch, "unverified")
    (row,) = [r for r in _rows("ngc.yaml", "containers") if r["tag"] == tag]
    assert jetson in row["notes"]


# ---------------------------------------------------------------- torch_1.yaml


@pytest.mark.parametrize(
    ("version", "pypi_default", "wheel_cuda"),
    [("1.0.0", "cu90", "'9.0.176'"), ("1.1.0", "cu90", "'9.0.176'"), ("1.10.2", "cu102", "'10.2'")],
    ids=["1.0.0", "1.1.0", "1.10.2"],
)
def test_pypi_default_read_from_the_wheel(version: str, pypi_default: str, wheel_cuda: str) -> None:
    (row,) = [r for r in _rows("torch_1.yaml", "releases") if r["version"] == version]
    assert row["pypi_default"] == pypi_default
    assert row.get("confidence") is None
    assert f"cuda = {wheel_cuda}" in row["source"]
