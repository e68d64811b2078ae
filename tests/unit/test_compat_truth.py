"""Issue 9 on the real matrix: same-major SASS, NGC floors, the CUDA libraries' kernels,
answers that say which unverified rows they used. The rules themselves are pinned on the
synthetic matrix (test_resolver_mini.py); these check what users see for known cases.

Issue 21 (the 2026-12-02 audit): each corrected value is typed here from its source, so the
old value fails; and builds the data records as never published cannot come back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import compat
from compat import containers
from compat.data import Matrix, data_dir
from compat.model import version_key


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
        "its cuDNN 9.5.1.17, cuBLAS 12.6.4.1, NCCL 2.26.2 carry kernels for every GPU "
        "(measured wheels)" in (verdict["reasons"])
    )


def test_json_of_check_and_resolve_carry_unverified() -> None:
    for answer in (compat.check(["K40m"], "1.2.0+cu100"), compat.resolve(["GTX 1080 Ti"])):
        assert isinstance(answer["unverified"], list)
    plan = compat.resolve(["GTX 1080 Ti"])
    assert plan["unverified"] == ["ngc.yaml: 23.07"]  # 2.14.1+cu126 and branch 580 are sourced


# ---------------------------------------------------------------- issue 21


def _table(file: str, key: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load((Path(data_dir()) / file).read_text())[key]
    return rows


# 1. torch 2.15 publishes no CUDA 12.6 wheels (pytorch/pytorch PR #196249, RFC #190385,
#    meta-pytorch/torchcodec PR #1703): the newest cu126 build is 2.14.1.


def test_2_15_has_no_cu126_build(real: Matrix) -> None:
    rel = real.release("2.15.0")
    assert rel is not None
    assert [v.name for v in rel.variants] == ["cu130", "cu132", "cpu"]
    newest_cu126 = [r.version for r in real.releases if r.variant("cu126") is not None][-1]
    assert newest_cu126 == "2.14.1"
    with pytest.raises(compat.CompatError, match=r"torch 2\.15\.0 has no variant 'cu126'"):
        compat.check(["Tesla M40"], "2.15.0+cu126")


@pytest.mark.parametrize(
    "gpu",
    ["Tesla M40", "GTX 1080 Ti", "Tesla P100-PCIE-16GB", "V100-SXM2-16GB"],
    ids=["maxwell", "pascal-geforce", "pascal", "volta"],
)
def test_maxwell_pascal_volta_resolve_to_2_14_1_cu126(gpu: str) -> None:
    plan = compat.resolve([gpu])
    assert (plan["torch"], plan["variant"]) == ("2.14.1", "cu126")


# 2. torch 2.4.0-2.7.0 cu118 pin nvidia-cudnn-cu11==9.1.0.70 (RELEASE.md rows 2.4-2.7), which
#    has no sm_3x kernels: the K80 gets 2.3.1+cu118 (cuDNN 8.7.0.84, RELEASE.md row 2.3).

CUDNN9_CU118 = ["2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1"]


@pytest.mark.parametrize("torch", CUDNN9_CU118, ids=str)
def test_cu118_builds_with_cudnn_9_fail_on_kepler(real: Matrix, torch: str) -> None:
    pin = real.pins[(torch, "cu118")]
    assert "nvidia-cudnn-cu11==9.1.0.70" in pin.packages
    verdict = compat.check(["K80"], f"{torch}+cu118")
    assert verdict["compatible"] is False
    assert verdict["gpus"][0]["covered_by"] == "sm_37"  # torch itself carries Kepler code
    assert any(
        r.startswith(f"torch {torch}+cu118 pins cuDNN 9.1.0.70 (nvidia-cudnn-cu11)")
        for r in verdict["reasons"]
    )


def test_k80_resolves_to_2_3_1_cu118() -> None:
    plan = compat.resolve(["K80"])
    assert (plan["torch"], plan["variant"]) == ("2.3.1", "cu118")


# 3. + 4. NGC 25.01-25.06: GPU floor 7.5 (Triton Inference Server 25.0x release notes, GPU
#    Requirements); 25.02 ships torch 2.7.0a0+6c54963f75 (NVIDIA's framework compatibility table).


@pytest.mark.parametrize("tag", ["25.01", "25.02", "25.03", "25.04", "25.05", "25.06"], ids=str)
def test_ngc_2025_h1_floor_is_7_5(real: Matrix, tag: str) -> None:
    (c,) = [c for c in real.containers if c.tag == tag]
    assert c.min_cc == (7, 5)
    assert containers.container_floors(real)[tag] == (7, 5)


@pytest.mark.parametrize(
    ("tag", "torch"),
    [
        ("25.01", "2.6.0a0+ecf3bae"),
        ("25.02", "2.7.0a0+6c54963f75"),
        ("25.03", "2.7.0a0+7c8ec84"),
    ],
    ids=["25.01", "25.02", "25.03"],
)
def test_ngc_torch_versions(real: Matrix, tag: str, torch: str) -> None:
    (c,) = [c for c in real.containers if c.tag == tag]
    assert c.torch == torch


# 5. + 6. Driver branches (docs.nvidia.com/datacenter/tesla/drivers/{615,620}/supported-drivers-
#    and-cuda-toolkit-versions.html, Table 2): R580 LTSB ends June 2028; R595 Production Branch
#    (March 2027); R610 New Feature Branch; R620 LTSB (September 2029).


def test_r580_end_of_life_is_june_2028() -> None:
    (row,) = [r for r in _table("drivers.yaml", "branches") if r["branch"] == 580]
    assert "end of life June 2028" in row["notes"]
    assert "End of Life June 2028" in row["source"]
    assert "August 2028" not in row["notes"] + row["source"]


@pytest.mark.parametrize(
    ("branch", "kind", "max_cuda"),
    [(595, "production", (13, 2)), (610, "new-feature", (13, 3)), (620, "lts", (13, 5))],
    ids=["R595", "R610", "R620"],
)
def test_branches_from_the_data_center_driver_pages(
    real: Matrix, branch: int, kind: str, max_cuda: tuple[int, int]
) -> None:
    b = real.branch(branch)
    assert b is not None
    assert (b.kind, b.max_cuda[:2]) == (kind, max_cuda)


def test_r595_is_sourced_from_nvidia() -> None:
    (row,) = [r for r in _table("drivers.yaml", "branches") if r["branch"] == 595]
    assert row.get("confidence") is None
    assert "R595 Production Branch, End of Life March 2027" in row["source"]


def test_every_toolkit_driver_has_its_branch(real: Matrix) -> None:
    """cuda.yaml's driver of each toolkit from 9.0 on belongs to a branch in drivers.yaml that
    runs that toolkit (8.0's 375.26 predates the branch table)."""
    for t in real.toolkits:
        if t.version < (9, 0):
            continue
        b = real.branch(t.min_driver[0])
        assert b is not None, f"CUDA {t.version_text}: no branch {t.min_driver[0]}"
        assert b.max_cuda[:2] >= t.version[:2], t.version_text
    assert {610, 615, 620} <= {b.branch for b in real.branches}


# 7. NGC tags: 25.07 appears never to have been released (the Triton release notes go from
#    25.06 to 25.08; NVIDIA's framework compatibility table has no 25.07).


def test_no_ngc_25_07(real: Matrix) -> None:
    tags = [c.tag for c in real.containers]
    assert "25.07" not in tags
    assert {"25.06", "25.08"} <= set(tags)


# 8. Triton 25.01 (release notes, Driver Requirements): driver 560 or later; forward
#    compatibility on R470, R525, R535 and R545.


def test_triton_25_01_driver_requirements() -> None:
    (row,) = [r for r in _table("triton.yaml", "triton") if r["tag"] == "25.01"]
    assert row["min_driver"] == "560"
    assert row["forward_compat_branches"] == [470, 525, 535, 545]
    assert compat.serving_triton("565", ["T4"], tag="25.01")["pick"] is not None
    refused = compat.serving_triton("550", ["T4"], forward_compat=True, tag="25.01")
    assert refused["pick"] is None


# B. Builds that were never published: torch_2.yaml `removals:` records when PyTorch stopped a
#    CUDA variant, with its source; no (release, variant) row may come after that.


def unpublished_rows(
    releases: list[tuple[str, list[str]]], removals: list[dict[str, Any]]
) -> list[str]:
    """'torch+variant' rows at or after their variant's recorded removal, plus stale records
    (the newest release carrying the variant is not the recorded ``last``)."""
    bad = []
    for rm in removals:
        variant, cut = rm["variant"], version_key(str(rm["first_without"]))
        carrying = [v for v, names in releases if variant in names]
        bad += [f"{v}+{variant}" for v in carrying if version_key(v) >= cut]
        newest = max(carrying, key=version_key, default=None)
        if newest is not None and version_key(newest) < cut and newest != str(rm["last"]):
            bad.append(f"removal of {variant}: last is {newest}, not {rm['last']}")
    return bad


def _removals() -> list[dict[str, Any]]:
    return _table("torch_2.yaml", "removals")


def test_removals_are_sourced_and_sorted() -> None:
    rows = _removals()
    for rm in rows:
        assert len(str(rm["source"])) > 10, rm
        assert version_key(str(rm["last"])) < version_key(str(rm["first_without"])), rm
    cuts = [version_key(str(rm["first_without"])) for rm in rows]
    assert cuts == sorted(cuts)
    assert len({rm["variant"] for rm in rows}) == len(rows)
    # the two the audit named
    by_variant = {rm["variant"]: (str(rm["last"]), str(rm["first_without"])) for rm in rows}
    assert by_variant["cu126"] == ("2.14.1", "2.15.0")
    assert by_variant["cu118"] == ("2.7.1", "2.8.0")


def test_no_row_for_a_build_never_published(real: Matrix) -> None:
    releases = [(r.version, [v.name for v in r.variants]) for r in real.releases]
    assert unpublished_rows(releases, _removals()) == []


def test_unpublished_row_check_fails_on_the_old_2_15_cu126(real: Matrix) -> None:
    releases = [(r.version, [v.name for v in r.variants]) for r in real.releases]
    with_old_row = [(v, [*names, "cu126"] if v == "2.15.0" else names) for v, names in releases]
    assert unpublished_rows(with_old_row, _removals()) == ["2.15.0+cu126"]
    stale = [rm | {"last": "2.14.0"} if rm["variant"] == "cu126" else rm for rm in _removals()]
    assert unpublished_rows(releases, stale) == ["removal of cu126: last is 2.14.1, not 2.14.0"]


# The lists of builds for one GPU (`gpu-compat matrix --gpu`, explain's and resolve's "newest
# official build") apply the rules `check` applies, not the kernels of torch alone: they named
# builds that `check` refuses (the 2026-12-07 review).
@pytest.mark.parametrize(
    ("gpu", "channel", "first", "last"),
    [
        # CUDA 11.0 is the first toolkit for sm_80 (torch 1.7.0+cu110); 1.0-1.5 carried it as
        # PTX of CUDA 10.x only, whose cuBLAS and cuDNN have no code for it.
        ("A100-SXM4-40GB", "pip", "1.7.0", None),
        # cuDNN 9 of the cu118 builds from 2.4.0 has no sm_37: 2.3.1 is the last pip build.
        ("Tesla K80", "pip", None, "2.3.1"),
    ],
)
def test_the_builds_listed_for_a_gpu_are_those_check_accepts(
    gpu: str, channel: str, first: str | None, last: str | None
) -> None:
    listed = compat.releases_for_gpu(gpu, channel)["releases"]
    versions = [r["torch"] for r in listed]
    assert versions, gpu
    if first is not None:
        assert min(versions, key=version_key) == first
    if last is not None:
        assert max(versions, key=version_key) == last
    for row in listed:
        for variant in row["variants"]:
            verdict = compat.check([gpu], f"{row['torch']}+{variant}", channel=channel)
            assert verdict["compatible"] is True, (row["torch"], variant, verdict["reasons"])


def test_no_plan_for_k80_on_python_3_13_names_the_python_of_its_last_build() -> None:
    """The reason used to name 2.7.1+cu118 as K80's newest build (a build check refuses, and
    one that has Python 3.13), which left the user nothing to fix."""
    plan = compat.resolve(["Tesla K80"], python="3.13")
    assert plan["ok"] is False
    assert plan["reasons"][0] == (
        "the newest official pip build that runs on Tesla K80 is torch 2.3.1+cu118"
    )
    assert any("torch 2.3.1 needs Python 3.8, 3.9, 3.10, 3.11, 3.12" in n for n in plan["notes"])


# First driver branch of each board, read from NVIDIA/open-gpu-kernel-modules' README at every
# release tag (2026-12-07): L4 first in 525.105.17; L40S and H100 NVL first in 535.104.05, in
# no 525 release through 525.147.05; RTX PRO 6000 Blackwell Server Edition first in 575.57.08,
# in no 570 release through 570.211.01. The rows had no floor: R520 "drove" them.
@pytest.mark.parametrize(
    ("gpu", "too_old", "first"),
    [
        ("L4", "520.61.05", "525.105.17"),
        ("L40S", "525.147.05", "535.104.05"),
        ("H100 NVL", "525.147.05", "535.104.05"),
        ("RTX PRO 6000 Blackwell Server Edition", "570.211.01", "575.57.08"),
    ],
)
def test_a_board_newer_than_its_architecture_needs_its_first_branch(
    gpu: str, too_old: str, first: str
) -> None:
    older = compat.check([gpu], "2.7.1+cu128", driver=too_old)
    branch = too_old.split(".")[0]
    assert older["compatible"] is False
    assert any(f"driver branch {branch} does not drive" in r for r in older["reasons"]), older
    newer = compat.check([gpu], "2.7.1+cu128", driver=first)
    assert not any("does not drive" in r for r in newer["reasons"]), newer


def test_rtx_pro_6000_alone_is_ambiguous_now_that_the_server_edition_needs_r575() -> None:
    """The Workstation Edition's alias also matches the Server Edition by its words; with the
    Server Edition's own floor the rules tell them apart, so the short name must not pick one
    (R570 would be allowed on a Server Edition)."""
    with pytest.raises(compat.CompatError) as exc:
        compat.resolve(["RTX PRO 6000"])
    assert "RTX PRO 6000 Blackwell Server Edition (12.0, branches 575+)" in str(exc.value)
    assert "give one of these names" in str(exc.value)
