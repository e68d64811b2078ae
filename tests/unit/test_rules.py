"""The pure rules (compat.rules) on hand-written inputs."""

from __future__ import annotations

import pytest

from compat import rules
from compat.model import Toolkit


@pytest.mark.parametrize(
    ("entry", "cc", "runs"),
    [
        ("sm_35", (3, 5), True),
        ("sm_35", (3, 7), True),  # same major, higher minor
        ("sm_37", (3, 5), False),  # same major, lower minor: the K40m/K80 trap
        ("sm_50", (5, 2), True),
        ("sm_60", (7, 0), False),  # SASS never crosses a major
        ("sm_90a", (9, 0), True),
        ("sm_90a", (9, 1), False),  # arch-specific: exactly 9.0
        ("sm_100f", (10, 3), True),  # family-specific: same major, minor >= 0
        ("sm_103f", (10, 0), False),
        ("sm_100", (10, 0), True),  # three digits: 10.0
        ("sm_120", (12, 1), True),
    ],
    ids=lambda v: str(v),
)
def test_sass_runs_on(entry: str, cc: tuple[int, int], runs: bool) -> None:
    assert rules.sass_runs_on(entry, cc) is runs


@pytest.mark.parametrize(
    ("entry", "cc", "runs"),
    [
        ("compute_37", (3, 5), False),
        ("compute_37", (3, 7), True),
        ("compute_37", (8, 6), True),  # PTX JIT goes forward across majors
        ("compute_90a", (10, 0), False),
        ("compute_100f", (10, 3), True),
        ("compute_100f", (12, 0), False),
    ],
    ids=lambda v: str(v),
)
def test_ptx_runs_on(entry: str, cc: tuple[int, int], runs: bool) -> None:
    assert rules.ptx_runs_on(entry, cc) is runs


@pytest.mark.parametrize(
    ("entry_name", "cc", "runs"),
    [
        ("sm_80", (8, 0), True),
        ("sm_80", (8, 6), True),
        ("sm_86", (8, 0), False),
        ("sm_80", (9, 0), False),
        ("sm_75", (8, 0), False),
        ("sm_90a", (9, 0), True),
        ("sm_90a", (9, 1), False),
        ("sm_100a", (10, 3), False),
        ("sm_100f", (10, 3), True),
        ("sm_103f", (10, 0), False),
        ("sm_103f", (10, 3), True),
        ("sm_120f", (12, 1), True),
        ("sm_100f", (12, 0), False),
        ("sm_120", (12, 1), True),
    ],
)
def test_sass_runs_on_more(entry_name: str, cc: tuple[int, int], runs: bool) -> None:
    assert rules.sass_runs_on(entry_name, cc) is runs


@pytest.mark.parametrize(
    ("entry_name", "cc", "runs"),
    [
        ("compute_80", (8, 0), True),
        ("compute_80", (12, 0), True),
        ("compute_80", (7, 5), False),
        ("compute_120", (12, 0), True),
        ("compute_90", (8, 9), False),
        ("compute_90a", (9, 0), True),
        ("compute_90a", (10, 0), False),
        ("compute_100f", (10, 3), True),
        ("compute_100f", (12, 0), False),
    ],
)
def test_ptx_runs_on_more(entry_name: str, cc: tuple[int, int], runs: bool) -> None:
    assert rules.ptx_runs_on(entry_name, cc) is runs


def test_runs_on_rejects_wrong_kind() -> None:
    with pytest.raises(ValueError, match="not a SASS"):
        rules.sass_runs_on("compute_80", (8, 0))
    with pytest.raises(ValueError, match="not a PTX"):
        rules.ptx_runs_on("sm_80", (8, 0))


def test_parse_arch_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a CUDA arch entry: 'sm_x'"):
        rules.parse_arch("sm_x")
    with pytest.raises(ValueError, match="not a CUDA arch entry: 'gfx90a'"):
        rules.parse_arch("gfx90a")


def test_coverage_prefers_sass_and_the_closest_one() -> None:
    assert rules.coverage(("sm_50", "sm_52"), ("compute_50",), (5, 3)) == ("sass", "sm_52")
    assert rules.coverage(("sm_60",), ("compute_37", "compute_50"), (8, 0)) == (
        "ptx",
        "compute_50",
    )
    assert rules.coverage(("sm_37", "sm_50"), ("compute_37",), (3, 5)) is None


def _tk(version: str, min_driver: str, minor: str | None) -> Toolkit:
    return Toolkit(
        {
            "version": version,
            "min_driver": min_driver,
            "minor_compat_driver": minor,
            "min_compute_capability": "3.5",
            "max_compute_capability": "9.0",
            "source": "test",
        }
    )


def test_driver_compat_full_minor_and_none() -> None:
    tk = _tk("11.8", "520.61.05", "450.80.02")
    assert rules.driver_compat((520, 61, 5), tk) == rules.FULL
    assert rules.driver_compat((530, 30), tk) == rules.FULL
    assert rules.driver_compat((470, 256, 2), tk) == rules.MINOR
    assert rules.driver_compat((450, 80, 1), tk) is None


def test_no_minor_version_compatibility_before_cuda_11() -> None:
    tk = _tk("10.2", "440.33", "418.39")  # even if a row carried one, 10.x has none
    assert rules.driver_compat((440, 33), tk) == rules.FULL
    assert rules.driver_compat((430, 50), tk) is None
