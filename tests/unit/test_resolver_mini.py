"""Resolution logic on a small synthetic matrix (tests/unit/conftest.py), so that each rule is
pinned by data written for the test rather than by the evolving real matrix."""

from __future__ import annotations

import pytest

from compat import branches, containers, gpus, install, resolution
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
        "driver branch 535 does not drive Tesla K40m (Kepler): allowed are branches 300 to 470"
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


# ---------------------------------------------------------------- same-major SASS (issue 9.1)


def test_same_major_higher_minor_through_sass_runs(mini: Matrix) -> None:
    # CUDA 11.0 stops at 8.0; 1.9.0+cu110 carries sm_80 SASS; an RTX 3090 is 8.6.
    verdict = resolution.check(mini, ["RTX 3090"], "1.9.0+cu110", driver="470.256.02")
    assert verdict["compatible"] is True
    assert verdict["gpus"][0]["via"] == "sass"
    assert verdict["gpus"][0]["covered_by"] == "sm_80"
    assert any("CUDA 11.0 stops at compute capability 8.0" in r for r in verdict["reasons"])


def test_higher_major_through_ptx_with_an_old_toolkit_is_refused(mini: Matrix) -> None:
    # 1.5.0 conda cu102 reaches 8.6 only through compute_60 PTX; CUDA 10.2 stops at 7.5.
    verdict = resolution.check(mini, ["RTX 3090"], "1.5.0+cu102", channel="conda")
    assert verdict["compatible"] is False
    assert verdict["reasons"] == [
        "CUDA 10.2 supports compute capabilities 3.0 to 7.5, not GeForce RTX 3090 (8.6): a "
        "newer major reached only through PTX compute_60; the toolkit's cuBLAS and cuDNN "
        "carry no code for it"
    ]


def test_toolkit_too_old_for_the_major_is_refused(mini: Matrix) -> None:
    from compat import rules

    cuda102 = mini.toolkit((10, 2))
    cuda110 = mini.toolkit((11, 0))
    assert cuda102 is not None
    assert cuda110 is not None
    # even SASS of the GPU's own major cannot come from a toolkit that stops at 7.5
    assert rules.toolkit_runs(cuda102, (8, 0), ("sass", "sm_80")) is False
    assert rules.toolkit_runs(cuda102, (8, 6), ("ptx", "compute_60")) is False
    assert rules.toolkit_runs(cuda110, (8, 6), ("sass", "sm_80")) is True
    assert rules.toolkit_runs(cuda110, (8, 6), ("ptx", "compute_80")) is False
    assert rules.toolkit_runs(cuda110, (8, 6), None) is False
    assert rules.toolkit_runs(cuda110, (3, 0), ("sass", "sm_30")) is False  # below the range
    assert rules.toolkit_runs(cuda110, (5, 2), ("ptx", "compute_50")) is True  # inside


# ---------------------------------------------------------------- NGC floors (issue 9.2)


def _ngc(tag: str, cuda: str, floor: str, confirmed: bool) -> dict[str, str]:
    row = {
        "tag": tag,
        "image": f"nvcr.io/nvidia/pytorch:{tag}-py3",
        "torch": "x",
        "cuda": cuda,
        "min_driver": "450",
        "min_compute_capability": floor,
        "source": f"synthetic test row ({tag})",
    }
    if confirmed:
        row["min_compute_capability_source"] = f"synthetic floor source ({tag})"
    return row


def test_unverified_floor_is_bounded_by_the_next_verified_one() -> None:
    from tests_mini import with_containers

    m = with_containers(
        [
            _ngc("20.06", "11.0", "5.0", True),
            _ngc("21.01", "11.0", "5.0", False),  # bounded by 22.01's verified 8.0
            _ngc("22.01", "11.0", "8.0", True),
            _ngc("23.01", "11.0", "5.0", False),  # no later verified floor: never recommended
        ]
    )
    assert containers.container_floors(m) == {
        "20.06": (5, 0),
        "21.01": (8, 0),
        "22.01": (8, 0),
        "23.01": None,
    }
    a100 = resolution.resolve(m, ["A100"], driver="470.256.02")
    assert a100["container"]["tag"] == "22.01"
    assert a100["container"]["floor_verified"] is True
    m40 = resolution.resolve(m, ["M40"], driver="470.256.02")
    assert m40["container"]["tag"] == "20.06"  # 21.01's floor is unverified and may be 8.0
    assert m40["container"]["min_compute_capability"] == "5.0"


# ---------------------------------------------------------------- CUDA libraries (issue 9.3)

CUDNN_FROM_50 = {
    "library": "cudnn",
    "package": "nvidia-cudnn-cu11",
    "version": "9.1.0.70",
    "sass": ["sm_50", "sm_80"],
    "ptx": [],
    "source": "synthetic measured row",
}


def test_a_pinned_library_without_the_gpu_is_a_no_naming_it() -> None:
    from tests_mini import with_libraries

    pin = {"torch": "1.9.0", "variant": "cu110", "packages": ["nvidia-cudnn-cu11==9.1.0.70"]}
    m = with_libraries([CUDNN_FROM_50], [{**pin, "source": "synthetic pin"}])
    # torch 1.9.0+cu110 itself covers 5.2 (sm_50) and 8.0 (sm_80); cuDNN too
    ok = resolution.check(m, ["A100"], "1.9.0+cu110", driver="470.256.02")
    assert ok["compatible"] is True
    assert "its cuDNN 9.1.0.70 carry kernels for every GPU (measured wheels)" in ok["reasons"]
    # a GPU torch covers (M40, 5.2, through sm_50) but a pinned cuDNN starting at sm_60 does not
    m2 = with_libraries(
        [{**CUDNN_FROM_50, "sass": ["sm_60", "sm_80"]}], [{**pin, "source": "synthetic pin"}]
    )
    no = resolution.check(m2, ["M40"], "1.9.0+cu110", driver="470.256.02")
    assert no["compatible"] is False
    assert no["reasons"] == [
        "torch 1.9.0+cu110 pins cuDNN 9.1.0.70 (nvidia-cudnn-cu11), which has no kernel image "
        "for Tesla M40 sm_52 (5.2): it carries sm_60 sm_80; torch loads, but every cuDNN "
        "operation fails"
    ]
    # resolve passes over that build for the M40 and takes the one without the pin
    plan = resolution.resolve(m2, ["M40"], driver="470.256.02")
    assert (plan["torch"], plan["variant"]) == ("1.9.0", "cu102")
    # conda builds do not use the pip wheels
    conda = resolution.check(m2, ["M40"], "1.5.0+cu102", channel="conda")
    assert conda["compatible"] is True


# ---------------------------------------------------------------- unverified rows (issue 9.4)


def test_answers_name_the_unverified_rows_they_rest_on() -> None:
    from tests_mini import with_libraries

    m = with_libraries(
        [{**CUDNN_FROM_50, "confidence": "unverified"}],
        [
            {
                "torch": "2.0.0",
                "variant": "cu118",
                "packages": ["nvidia-cudnn-cu11==9.1.0.70"],
                "source": "synthetic pin",
            }
        ],
        variants={"2.0.0 cu118": {"confidence": "unverified"}},
    )
    verdict = resolution.check(m, ["A100"], "2.0.0+cu118", driver="535.54.03")
    assert verdict["compatible"] is True
    assert verdict["unverified"] == [
        "torch_*.yaml: 2.0.0 cu118",
        "libraries.yaml: nvidia-cudnn-cu11==9.1.0.70",
    ]
    assert verdict["reasons"][-1] == (
        "this answer rests on data rows no source confirmed (confidence: unverified): "
        "torch_*.yaml: 2.0.0 cu118; libraries.yaml: nvidia-cudnn-cu11==9.1.0.70"
    )
    plan = resolution.resolve(m, ["A100"], driver="535.54.03")
    assert plan["unverified"] == verdict["unverified"]
    clean = resolution.check(m, ["M40"], "1.9.0+cu102", driver="470.256.02")
    assert clean["unverified"] == []
    assert not any("unverified" in r for r in clean["reasons"])


def test_resolve_prefers_a_verified_variant_of_equal_standing() -> None:
    from tests_mini import with_libraries

    twin = {
        "version": "2.1.0",
        "python": ["3.10"],
        "torchvision": "0.16.0",
        "torchaudio": "2.1.0",
        "pypi_default": "cu118a",
        "pip_style": "index",
        "conda_style": None,
        "source": "synthetic 2.1.0",
        "variants": [
            # the PyPI default, but unverified; the other is equal in every other respect
            {
                "name": "cu118a",
                "cuda": "11.8",
                "channels": ["pip"],
                "sass": ["sm_80"],
                "ptx": [],
                "source": "synthetic a",
                "confidence": "unverified",
            },
            {
                "name": "cu118b",
                "cuda": "11.8",
                "channels": ["pip"],
                "sass": ["sm_80"],
                "ptx": [],
                "source": "synthetic b",
            },
        ],
    }
    m = with_libraries([], [], releases=[twin])
    plan = resolution.resolve(m, ["A100"], driver="535.54.03")
    assert (plan["torch"], plan["variant"]) == ("2.1.0", "cu118b")
    assert plan["unverified"] == []
    # asked for explicitly, the unverified one is judged and named
    verdict = resolution.check(m, ["A100"], "2.1.0+cu118a", driver="535.54.03")
    assert verdict["unverified"] == ["torch_*.yaml: 2.1.0 cu118a"]


def test_a_python_no_release_supports_is_bad_input(mini: Matrix) -> None:
    for call in (
        lambda: resolution.resolve(mini, ["A100"], python="9.9"),
        lambda: resolution.check(mini, ["A100"], "2.0.0", python="9.9"),
    ):
        with pytest.raises(CompatError, match=r"'9\.9'.*known are 3\.7, 3\.8, 3\.9, 3\.10$"):
            call()
    # a known Python that the newest release lacks is not bad input: it picks an older one
    assert resolution.resolve(mini, ["M40"], python="3.7")["torch"] == "1.5.0"
