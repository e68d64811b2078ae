"""Issue 9 on the real matrix: same-major SASS, NGC floors, the CUDA libraries' kernels,
answers that say which unverified rows they used. The rules themselves are pinned on the
synthetic matrix (test_resolver_mini.py); these check what users see for known cases."""

from __future__ import annotations

import pytest

import compat
from compat import containers
from compat.data import Matrix


@pytest.mark.parametrize(
    ("gpu", "torch", "covered_by"),
    [
        ("RTX 4090", "2.0.1", "sm_86"),  # the plain PyPI install, cu117: CUDA 11.7 stops at 8.7
        ("RTX 3090", "1.7.1+cu110", "sm_80"),  # CUDA 11.0 stops at 8.0
    ],
)
def test_same_major_sass_runs(gpu: str, torch: str, covered_by: str) -> None:
    verdict = compat.check([gpu], torch)
    assert verdict["compatible"] is True, verdict["reasons"]
    assert verdict["gpus"][0]["covered_by"] == covered_by


@pytest.mark.parametrize(
    ("gpu", "torch"),
    [("RTX 3080", "1.3.1"), ("A100-SXM4-40GB", "1.5.1+cu101")],  # newer major via PTX only
)
def test_newer_major_through_ptx_of_an_old_toolkit_is_refused(gpu: str, torch: str) -> None:
    verdict = compat.check([gpu], torch)
    assert verdict["compatible"] is False
    assert any("reached only through PTX" in r for r in verdict["reasons"])


@pytest.mark.parametrize("gpu", ["GTX 1080 Ti", "Tesla P100-PCIE-16GB", "V100-SXM2-16GB"])
def test_no_ngc_image_above_a_verified_floor_for_pascal_and_volta(real: Matrix, gpu: str) -> None:
    plan = compat.resolve([gpu])
    container = plan["container"]
    assert container is not None
    floors = containers.container_floors(real)
    # the recommended image's floor is confirmed, or bounded by a later confirmed one
    assert floors[container["tag"]] is not None
    assert container["tag"] < "25.08"  # the CUDA 13 images start at 7.5
    assert container["tag"] not in {"25.01", "25.02", "25.03", "25.04", "25.05", "25.06"}


def test_cuda13_images_have_a_floor_of_7_5(real: Matrix) -> None:
    for c in real.containers:
        if c.cuda.startswith("13."):
            assert c.min_cc == (7, 5), c.tag
            assert c.min_cc_source is not None, c.tag


def test_k80_with_the_cu118_build_fails_in_cudnn() -> None:
    """torch 2.7.1+cu118 carries sm_37, but the cuDNN 9.1.0.70 wheel it pins starts at sm_50
    (measured): the answer is NO and names cuDNN, and it says the pin is unverified."""
    verdict = compat.check(["K80"], "2.7.1+cu118")
    assert verdict["compatible"] is False
    assert verdict["gpus"][0]["covered_by"] == "sm_37"
    assert any(r.startswith("torch 2.7.1+cu118 pins cuDNN 9.1.0.70") for r in verdict["reasons"])
    assert "libraries.yaml: pin 2.7.1+cu118" in verdict["unverified"]
    # cuBLAS of the same build has sm_35, which runs on 3.7: not named
    assert not any("pins cuBLAS" in r for r in verdict["reasons"])


def test_measured_libraries_back_a_yes() -> None:
    verdict = compat.check(["T4"], "2.7.1+cu126")
    assert verdict["compatible"] is True
    assert (
        "its cuDNN 9.5.1.17, cuBLAS 12.6.4.1 carry kernels for every GPU (measured wheels)"
        in (verdict["reasons"])
    )


def test_json_of_check_and_resolve_carry_unverified() -> None:
    for answer in (compat.check(["K40m"], "1.2.0+cu100"), compat.resolve(["GTX 1080 Ti"])):
        assert isinstance(answer["unverified"], list)
    plan = compat.resolve(["GTX 1080 Ti"])
    assert "torch_*.yaml: 2.15.0 cu126" in plan["unverified"]
