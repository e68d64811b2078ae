"""The smoke scripts' copy of the sm/compute coverage rule agrees with compat.rules.

The hosts have no compat package, so scripts/smoke/smokelib.py re-implements the rule;
these tests prove the two give the same answer on a grid of arch entries and compute
capabilities, and on every (torch variant arch list, GPU) pair of the compat data.
Nothing is faked here: both implementations are pure functions.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest

from compat import data as compat_data
from compat import rules

SMOKE = Path(__file__).resolve().parents[2] / "scripts" / "smoke"


def smoke(name: str) -> ModuleType:
    if str(SMOKE) not in sys.path:
        sys.path.insert(0, str(SMOKE))
    return importlib.import_module(name)


sl = smoke("smokelib")

ENTRIES = [
    "sm_35",
    "sm_37",
    "sm_50",
    "sm_52",
    "sm_53",
    "sm_60",
    "sm_61",
    "sm_70",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_89",
    "sm_90",
    "sm_90a",
    "sm_100",
    "sm_100a",
    "sm_100f",
    "sm_120",
    "compute_35",
    "compute_50",
    "compute_70",
    "compute_80",
    "compute_90",
    "compute_90a",
    "compute_100f",
    "compute_120",
]
CCS = [
    (3, 0),
    (3, 5),
    (3, 7),
    (5, 0),
    (5, 2),
    (6, 0),
    (6, 1),
    (7, 0),
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 9),
    (9, 0),
    (10, 0),
    (10, 3),
    (12, 0),
    (12, 1),
]


@pytest.mark.parametrize("entry", ENTRIES, ids=ENTRIES)
def test_parse_arch_agrees(entry):
    assert sl.parse_arch(entry) == rules.parse_arch(entry)


@pytest.mark.parametrize("bad", ["sm_", "foo_35", "sm_3", "compute_x5"], ids=str)
def test_parse_arch_rejects_like_compat(bad):
    with pytest.raises(ValueError, match="not a CUDA arch entry") as ours:
        sl.parse_arch(bad)
    with pytest.raises(ValueError, match="not a CUDA arch entry") as theirs:
        rules.parse_arch(bad)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    ("entry", "cc"),
    list(itertools.product(ENTRIES, CCS)),
    ids=[f"{e}-{c[0]}.{c[1]}" for e, c in itertools.product(ENTRIES, CCS)],
)
def test_single_entry_rule_agrees(entry, cc):
    kind = entry.split("_")[0]
    if kind == "sm":
        assert sl.sass_runs_on(entry, cc) == rules.sass_runs_on(entry, cc)
    else:
        assert sl.ptx_runs_on(entry, cc) == rules.ptx_runs_on(entry, cc)
    split = (tuple(e for e in [entry] if kind == "sm"), tuple(e for e in [entry] if kind != "sm"))
    assert sl.coverage([entry], cc) == rules.coverage(split[0], split[1], cc)


def _variant_lists() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    m = compat_data.load()
    out = []
    for release in m.releases:
        for v in release.variants:
            if v.sass or v.ptx:
                out.append((f"{release.version}+{v.name}", tuple(v.sass), tuple(v.ptx)))
    return out


def test_coverage_agrees_on_every_variant_and_gpu():
    """torch.cuda.get_arch_list() mixes sm_ and compute_ entries; split them as compat does."""
    m = compat_data.load()
    ccs = sorted(
        {
            sl.parse_cc(".".join(map(str, g.compute_capability)))
            if isinstance(g.compute_capability, tuple)
            else sl.parse_cc(str(g.compute_capability))
            for g in m.gpus
        }
    )
    checked = 0
    for _, sass, ptx in _variant_lists():
        arch_list = list(sass) + list(ptx)
        for cc in ccs:
            assert sl.coverage(arch_list, cc) == rules.coverage(sass, ptx, cc), (arch_list, cc)
            checked += 1
    assert checked > 100


def test_unknown_entries_in_arch_list_are_ignored():
    assert sl.coverage(["sm_80", "gfx90a"], (8, 6)) == ("sass", "sm_80")
