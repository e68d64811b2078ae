"""Resolution logic on a small synthetic matrix (tests/unit/conftest.py), so that each rule is
pinned by data written for the test rather than by the evolving real matrix."""

from __future__ import annotations

import pytest

from compat import branches, gpus, install, resolution
from compat.data import Matrix
from compat.model import CompatError


def test_resolve_picks_newest_release_covering_every_gpu(mini: Matrix) -> None:
    plan = resolution.resolve(mini, ["A100"])
    assert plan["ok"] is True
    assert (plan["torch"], plan["variant"]) == ("2.0.0", "cu118")
    assert plan["driver"]["branches"] == [535]  # 450/470 cannot run CUDA 11.8 fully
    assert plan["install"]["pip"]["index_url"] == "https://download.pytorch.org/whl/cu118"


def test_mixed_host_needs_a_build_for_both(mini: Matrix) -> None:
    plan = resolution.resolve(mini, ["K40m", "M40"])
    assert (plan["torch"], plan["variant"]) == ("1.5.0", "cu102")
    assert [g["covered_by"] for g in plan["gpus"]] == ["sm_35", "sm_50"]
    assert plan["driver"]["branch"] == 470  # Kepler's last branch caps the host


def test_nothing_covers_kepler_and_ampere_together(mini: Matrix) -> None:
    plan = resolution.resolve(mini, ["K40m", "A100"])
    assert plan["ok"] is False
    assert any("every GPU of the host" in r for r in plan["reasons"])


def test_minor_version_compatibility_counts_with_a_note(mini: Matrix) -> None:
    verdict = resolution.check(mini, ["A100"], "2.0.0+cu118", driver="470.256.02")
    assert verdict["compatible"] is True
    assert verdict["driver"]["compatibility"] == "minor-version-compatibility"
    assert any("minor-version-compatibility minimum 450.80.02" in r for r in verdict["reasons"])


def test_driver_below_minor_compat_minimum_fails(mini: Matrix) -> None:
    verdict = resolution.check(mini, ["A100"], "2.0.0+cu118", driver="450.51.06")
    assert verdict["compatible"] is False
    assert verdict["reasons"] == [
        "driver 450.51.06 is older than CUDA 11.8's minimum 520.61.05 "
        "(minor-version compatibility needs >= 450.80.02)"
    ]


def test_ptx_only_coverage_is_compatible_with_a_jit_note(mini: Matrix) -> None:
    # 1.9.0+cu102 carries sm_50/sm_60 SASS and compute_50 PTX; a GPU of 7.x or 8.x has only PTX.
    verdict = resolution.check(mini, ["sm_52"], "1.9.0+cu102", driver="470.256.02")
    assert verdict["gpus"][0]["via"] == "sass"
    tk_limited = resolution.check(mini, ["sm_37"], "1.9.0+cu102", driver="470.256.02")
    assert tk_limited["compatible"] is False  # neither SASS nor PTX reaches down to 3.7


def test_toolkit_that_predates_the_gpu(mini: Matrix) -> None:
    # 1.5.0 conda cu102 reaches sm_86 only through compute_60 PTX; CUDA 10.2 predates 8.6.
    verdict = resolution.check(mini, ["RTX 3090"], "1.5.0+cu102", channel="conda")
    assert verdict["compatible"] is False
    assert any("supports compute capabilities 3.0 to 7.5" in r for r in verdict["reasons"])


def test_ptx_jit_is_refused_under_minor_version_compatibility(mini: Matrix) -> None:
    # 2.0.0+cu118 reaches a 5.2 GPU only through compute_50 PTX.
    full = resolution.check(mini, ["M40"], "2.0.0+cu118", driver="520.61.05")
    assert (full["compatible"], full["gpus"][0]["via"]) == (True, "ptx")
    assert any("JIT-compiled" in r for r in full["reasons"])
    minor = resolution.check(mini, ["M40"], "2.0.0+cu118", driver="470.256.02")
    assert minor["compatible"] is False
    assert minor["reasons"] == [
        "driver 470.256.02 runs CUDA 11.8 only through minor-version compatibility, which "
        "cannot JIT-compile the PTX this GPU needs"
    ]


def test_branch_that_dropped_the_gpu(mini: Matrix) -> None:
    verdict = resolution.check(mini, ["K40m"], "1.5.0+cu102", driver="535.183.01")
    assert verdict["compatible"] is False
    assert (
        "driver branch 535 does not drive Tesla K40m (Kepler): allowed are branches 450 to 470"
        in verdict["reasons"]
    )


def test_gpu_specific_first_branch(mini: Matrix) -> None:
    t = gpus.target(mini, "RTX 3090")
    assert branches.driving_branches(mini, [t]) == [470, 535]  # 450 predates sm_86


def test_python_version_filters_releases(mini: Matrix) -> None:
    plan = resolution.resolve(mini, ["M40"], python="3.7")
    assert plan["torch"] == "1.5.0"
    none = resolution.resolve(mini, ["A100"], python="3.7")
    assert none["ok"] is False
    assert any("torch 2.0.0 needs Python 3.8, 3.9, 3.10" in n for n in none["notes"])


def test_conda_build_differs_from_pip(mini: Matrix) -> None:
    # 1.5.0+cu102: pip carries sm_35 sm_50 sm_60; conda adds compute_60 PTX. A 5.2 GPU runs
    # both through sm_50 SASS; only the conda build reaches 8.0, through PTX -- and CUDA 10.2
    # predates 8.0, so neither is compatible there.
    pip = resolution.check(mini, ["M40"], "1.5.0+cu102", channel="pip")
    assert (pip["compatible"], pip["gpus"][0]["covered_by"]) == (True, "sm_50")
    rel = mini.release("1.5.0")
    assert rel is not None
    variant = rel.variant("cu102")
    assert variant is not None
    assert variant.archs("conda")[1] == ("compute_60",)
    assert variant.archs("pip")[1] == ()
    conda = resolution.check(mini, ["A100"], "1.5.0+cu102", channel="conda")
    assert conda["compatible"] is False
    assert conda["gpus"][0]["via"] == "ptx"


def test_cpu_host_gets_the_cpu_build(mini: Matrix) -> None:
    plan = resolution.resolve(mini, [])
    assert (plan["torch"], plan["variant"], plan["cuda"]) == ("2.0.0", "cpu", None)


def test_check_without_variant_names_the_best(mini: Matrix) -> None:
    verdict = resolution.check(mini, ["A100"], "1.9.0", driver="535.183.01")
    assert (verdict["compatible"], verdict["variant"]) == (True, "cu110")


def test_find_links_install_command(mini: Matrix) -> None:
    plan = resolution.resolve(mini, ["K40m"])
    assert plan["install"]["commands"]["pip"] == "pip install torch==1.5.0 torchvision==0.6.0"
    assert plan["install"]["pip"]["requirements"] == ["torch==1.5.0", "torchvision==0.6.0"]
    assert plan["install"]["pip"]["find_links"] is None
    rel = mini.release("1.5.0")
    assert rel is not None
    cpu = rel.variant("cpu")
    assert cpu is not None
    cmd = install.install_commands(rel, cpu)
    assert cmd["pip"] == (
        "pip install torch==1.5.0+cpu torchvision==0.6.0+cpu "
        "-f https://download.pytorch.org/whl/torch_stable.html"
    )
    assert cmd["conda"] == "conda install pytorch==1.5.0 torchvision==0.6.0 cpuonly -c pytorch"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("K41m", "unknown GPU 'K41m'"),
        ("sm_99", "unknown compute capability 'sm_99'"),
        ("", "empty GPU query"),
        ("40", "is ambiguous"),
    ],
    ids=["typo", "unknown-cc", "empty", "ambiguous"],
)
def test_bad_gpu_queries(mini: Matrix, query: str, message: str) -> None:
    with pytest.raises(CompatError, match=message):
        gpus.target(mini, query)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"driver": "abc"}, "malformed driver version 'abc'"),
        ({"driver": "12.1"}, "malformed driver version '12.1'"),
        ({"driver": "99"}, "malformed driver version '99'"),
        ({"python": "three"}, "malformed Python version 'three'"),
        ({"channel": "brew"}, "unknown channel 'brew': allowed are pip, conda"),
    ],
    ids=["driver-text", "driver-cuda-like", "driver-too-small", "python", "channel"],
)
def test_bad_parameters(mini: Matrix, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(CompatError, match=message):
        resolution.resolve(mini, ["A100"], **kwargs)


def test_unknown_torch_version_and_variant(mini: Matrix) -> None:
    with pytest.raises(CompatError, match=r"unknown torch version '1\.9\.9'.*did you mean 1\.9\.0"):
        resolution.check(mini, ["A100"], "1.9.9")
    with pytest.raises(CompatError, match=r"2\.0\.0 has no variant 'cu999': allowed are cu118"):
        resolution.check(mini, ["A100"], "2.0.0+cu999")


def test_lookup_forms(mini: Matrix) -> None:
    for q in ("10de:1023", "0x1023", "1023", "k40M", "tesla k40m", "sm_35", "3.5"):
        assert [g.name for g in gpus.lookup(mini, q)] == ["Tesla K40m"], q
    assert gpus.lookup(mini, "0xffff") == []
    assert [g.name for g in gpus.lookup(mini, "40")] == [
        "Tesla K40m",
        "Tesla M40",
        "A100-SXM4-40GB",
    ]


def test_bare_branch_is_judged_by_the_branch_table(mini: Matrix) -> None:
    full = resolution.check(mini, ["A100"], "2.0.0+cu118", driver="535")
    assert full["compatible"] is True
    assert full["driver"]["compatibility"] == "full"  # 535 runs CUDA 12.2 >= 11.8
    minor = resolution.check(mini, ["A100"], "2.0.0+cu118", driver="470")
    assert minor["driver"]["compatibility"] == "minor-version-compatibility"
    unknown = resolution.check(mini, ["A100"], "2.0.0+cu118", driver="999")
    assert unknown["compatible"] is False
    assert unknown["reasons"] == ["driver branch 999 is not in the matrix: known are 450, 470, 535"]
