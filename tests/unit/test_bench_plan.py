"""scripts/bench_plan.py (issue 23 item 5): its fleet is deterministic and looks like a real one,
its functions plan a small fleet both ways (the plan.yml filter, compat.plan_host), and the
memoised planning behind it gives the plans the unmemoised code gives. No timing here: the
figures are the benchmark's to print (docs/benchmarks.md), never asserted."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import bench_plan  # scripts/ is on pytest's pythonpath
import pytest
import yaml

import compat
from compat import plan, rules
from compat.branches import drives, driving_branches
from compat.gpus import targets

ROOT = Path(__file__).resolve().parents[2]
# The plan document's keys (docs/design.md, "The host plan"; test_design_doc holds that table
# to the code).
PLAN_KEYS = {
    "schema_version",
    "host",
    "ok",
    "refused",
    "gpus",
    "detected",
    "driver",
    "cuda",
    "torch",
    "variant",
    "torchvision",
    "torchaudio",
    "channel",
    "python",
    "install",
    "container",
    "reasons",
    "notes",
    "pinned",
    "packaged_branches",
    "lines",
    "environment",
}
DRIVER_KEYS = {"branch", "min_version", "required_version", "allowed_branches", "why"}


@pytest.fixture(scope="module")
def fleet() -> list[dict[str, Any]]:
    return bench_plan.fleet(2000)


@pytest.fixture
def ansible_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_filter() sets ANSIBLE_CONFIG only where it is unset: keep the test's environment."""
    monkeypatch.setenv("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))


def _gpus(host: dict[str, Any]) -> list[dict[str, Any]]:
    gpus: list[dict[str, Any]] = host["gpu_info"]["gpus"]
    return gpus


def test_the_fleet_is_the_same_for_the_same_seed(fleet: list[dict[str, Any]]) -> None:
    assert bench_plan.fleet(2000) == fleet
    other = bench_plan.fleet(2000, seed=bench_plan.SEED + 1)
    assert other != fleet
    assert [h["host"] for h in other] == [h["host"] for h in fleet]


def test_the_fleet_looks_like_a_data_centre(fleet: list[dict[str, Any]]) -> None:
    n = len(fleet)
    gpu_hosts = [h for h in fleet if _gpus(h)]
    cpu_only = n - len(gpu_hosts)
    mixed = [h for h in gpu_hosts if len({g["architecture"] for g in _gpus(h)} - {None}) > 1]
    assert 0.03 * n <= cpu_only <= 0.07 * n
    assert 0.07 * n <= len(mixed) <= 0.13 * n
    assert {len(_gpus(h)) for h in gpu_hosts} <= set(range(1, 9))
    assert {1, 2, 4, 8} <= {len(_gpus(h)) for h in gpu_hosts}
    names = Counter(g["name"] for h in gpu_hosts for g in _gpus(h))
    for family, (_, members) in bench_plan.FAMILIES.items():
        assert any(names[m] for m in members), family
    # Weighted toward the common cards: the named families carry most of the GPUs.
    common = {m for _, members in bench_plan.FAMILIES.values() for m in members}
    assert sum(c for name, c in names.items() if name in common) > 0.7 * sum(names.values())
    # A driver loaded on some hosts (facts from NVML/nvidia-smi), the PCI scan on the others.
    sources = Counter(_gpus(h)[0]["source"] for h in gpu_hosts)
    assert min(sources[s] for s in ("pci", "nvml", "nvidia-smi")) > 0
    assert all(
        (g["source"] == "pci") == (g["driver_version"] is None) for h in gpu_hosts for g in _gpus(h)
    )
    assert any(not g["matrix"] for h in gpu_hosts for g in _gpus(h))  # a card the data lacks
    pins = [h["vars"] for h in fleet]
    assert 0.15 * n <= sum(v["driver_branch"] is not None for v in pins) <= 0.35 * n
    assert 0.08 * n <= sum(v["torch"] is not None for v in pins) <= 0.22 * n
    assert {type(v["driver_branch"]) for v in pins} == {type(None), int, str}
    assert any(v["expect_gpu"] is False for v in pins)
    assert {v["os_name"] for v in pins} == {
        "Debian 12",
        "Debian 13",
        "Ubuntu 22.04",
        "Ubuntu 24.04",
    }


def test_packaged_branches_are_read_where_the_playbooks_read_them() -> None:
    packaged = bench_plan.packaged_branches()
    debian = compat.debian_packages()
    ubuntu = yaml.safe_load((ROOT / "roles/nvidia_driver/vars/Ubuntu.yml").read_text())
    assert packaged["Debian 12"] == sorted(debian["12"])
    assert packaged["Debian 13"] == sorted(debian["13"])
    canonical = ubuntu["_nvidia_driver_packages_canonical"]
    assert packaged["Ubuntu 24.04"] == sorted(int(b) for b in canonical["24.04"])


@pytest.mark.usefixtures("ansible_config")
def test_each_way_plans_each_host_of_a_small_fleet() -> None:
    hosts = bench_plan.fleet(50)
    by_way = {way: bench_plan.plan_fleet(hosts, way) for way in ("filter", "direct")}
    for way, plans in by_way.items():
        assert [p["host"] for p in plans] == [h["host"] for h in hosts], way
        for p in plans:
            assert set(p) == PLAN_KEYS, way
            assert set(p["driver"]) >= DRIVER_KEYS, way
            assert p["schema_version"] == plan.SCHEMA_VERSION
    # The filter is a thin bridge: the same plans as compat.plan_host.
    assert by_way["filter"] == by_way["direct"]
    assert {p["ok"] for p in by_way["direct"]} == {True, False}


@pytest.mark.parametrize("way", ["filter", "direct", "direct-nomemo"])
@pytest.mark.usefixtures("ansible_config")
def test_measure_reports_the_figures(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "MEMO_SIZE", plan.MEMO_SIZE)  # direct-nomemo sets it to 0
    result = bench_plan.measure(20, way, trace=way == "direct")
    assert result["hosts"] == 20
    assert result["ok"] + result["refused"] + result["no_plan"] == 20
    assert result["rss_mib"] >= result["rss_before_mib"] > 0
    assert (result["traced_mib"] is not None) == (way == "direct")
    assert result["seconds"] > 0


@pytest.mark.usefixtures("ansible_config")
def test_main_prints_the_table_for_each_size(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "MEMO_SIZE", plan.MEMO_SIZE)
    monkeypatch.setattr(bench_plan, "_child", bench_plan.measure)  # in-process: quicker
    assert bench_plan.main(["--sizes", "20", "30"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^20 hosts +filter +direct +direct-nomemo$", out, re.MULTILINE)
    assert re.search(r"^per 1,000 hosts, wall( +[0-9.]+ s){3}$", out, re.MULTILINE)
    assert re.search(r"^tracemalloc peak, plans kept( +[0-9.]+ MiB){2} +-$", out, re.MULTILINE)
    assert "per-host cost, 30 hosts / 20 hosts" in out


def test_the_script_runs_standalone() -> None:
    """What main() runs for each figure: the script itself in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "scripts/bench_plan.py", "--child", "10", "--way", "direct"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out)
    assert (result["hosts"], result["way"]) == (10, "direct")


# --- the memo in compat.plan changes no output --------------------------------------------


def _unmemoised(monkeypatch: pytest.MonkeyPatch) -> None:
    """compat.plan without its memo and compat.rules.coverage without its cache."""
    monkeypatch.setattr(plan, "MEMO_SIZE", 0)
    monkeypatch.setattr(rules, "coverage", rules._coverage)


def test_memoised_plans_equal_unmemoised_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = bench_plan.fleet(400, seed=5)
    first = bench_plan.plan_fleet(hosts, "direct")
    again = bench_plan.plan_fleet(hosts, "direct")  # every answer now from the memo
    with monkeypatch.context() as patched:
        _unmemoised(patched)
        plain = bench_plan.plan_fleet(hosts, "direct")
    assert first == plain
    assert again == plain
    assert len({repr(p["gpus"]) for p in plain}) > 50  # many distinct hosts, not one repeated


def test_a_full_memo_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = bench_plan.fleet(60, seed=7)
    with monkeypatch.context() as patched:
        _unmemoised(patched)
        plain = bench_plan.plan_fleet(hosts, "direct")
    monkeypatch.setattr(plan, "MEMO_SIZE", 3)
    assert bench_plan.plan_fleet(hosts, "direct") == plain
    assert len(plan._MEMO[compat.load()]) <= 3


def test_a_plan_shares_nothing_with_the_memo_or_other_plans() -> None:
    host = next(h for h in bench_plan.fleet(200) if h["vars"]["torch"] is None and _gpus(h))
    one = bench_plan.plan_direct(host)
    pristine = copy.deepcopy(one)
    one["install"]["pip"]["requirements"].append("mutated")
    one["gpus"][0]["name"] = "mutated"
    one["driver"]["branches"].clear()
    one["reasons"].append("mutated")
    assert bench_plan.plan_direct(host) == pristine


def test_memo_keys_of_other_types_are_not_remembered() -> None:
    m = compat.load()
    calls: list[int] = []

    def compute() -> list[int]:
        calls.append(1)
        return [len(calls)]

    assert plan._memo(m, ("test", 1.0), compute) == [1]
    assert plan._memo(m, ("test", 1.0), compute) == [2]  # a float: computed each time
    assert plan._memo(m, ("test", True), compute) == [3]
    assert plan._memo(m, ("test", 1), compute) == [4]
    assert plan._memo(m, ("test", 1), compute) == [4]  # an int: remembered


def test_the_copy_is_deepcopy_for_json_and_the_rest() -> None:
    value = {"a": [1, {"b": (2, [3])}], "c": None, "d": 1.5, "e": True, "f": {4, 5}}
    copied = plan._copy(value)
    assert copied == copy.deepcopy(value)
    assert copied["a"] is not value["a"]
    assert copied["a"][1]["b"][1] is not value["a"][1]["b"][1]
    assert copied["f"] is not value["f"]


@pytest.mark.parametrize(
    "queries",
    [
        ["A100"] * 8,
        ["K80", "K80", "V100", "V100"],
        ["sm_86", "A100", "sm_86"],
        ["H100 PCIe", "K40m", "H100 PCIe"],
    ],
    ids=["8xA100", "K80+V100", "cc+name", "hopper+kepler"],
)
def test_driving_branches_judges_identical_gpus_once(queries: list[str]) -> None:
    m = compat.load()
    tgts = targets(m, queries)
    naive = [b.branch for b in m.branches if all(drives(b.branch, t) for t in tgts)]
    assert driving_branches(m, tgts) == naive


def test_coverage_cache_answers_as_the_rule() -> None:
    m = compat.load()
    ccs = sorted({g.compute_capability for g in m.gpus})
    for release in m.releases[-6:]:
        for v in release.variants:
            for cc in ccs:
                assert rules.coverage(v.sass, v.ptx, cc) == rules._coverage(v.sass, v.ptx, cc)
    # Lists are not hashable: answered, not remembered.
    assert rules.coverage(["sm_80"], [], (8, 6)) == ("sass", "sm_80")


def test_bench_site_prints_the_cpu_a_no_op_needs() -> None:
    """scripts/bench_site.py's scaling rows: CPU of the controller and the hosts, and the least
    wall time that much CPU takes on the machine's cores, against 1 host's wall time."""
    import bench_site

    runs = {
        1: bench_site.Run(5.0, 4.0, 1.0),
        8: bench_site.Run(20.0, 24.0, 8.0),
        4: bench_site.Run(10.0, 12.0, None),
    }
    lines = bench_site.cpu_lines(runs, 2)
    assert lines[0] == (
        "    1 host: CPU controller 4.0s + hosts 1.0s = 5.0s; on 2 cores at least 2.5s "
        "= 0.50x 1 host's wall time"
    )
    assert lines[1] == (
        "    8 hosts: CPU controller 24.0s + hosts 8.0s = 32.0s; on 2 cores at least 16.0s "
        "= 3.20x 1 host's wall time"
    )
    assert lines[2].startswith("    4 hosts: CPU controller 12.0s + hosts n/a")
