"""The matrix data tested as data: schema, sources, order, uniqueness, cross-table links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from compat import rules
from compat.data import DATA_DIR as _DATA_DIR
from compat.data import TABLES, Matrix, compile_tables
from compat.model import CompatDataError, cc_key, cmp_key, version_key

DATA_DIR = Path(_DATA_DIR)

# "file:key" of every table, from the one table list (compat.data.TABLES).
TABLE_KEYS = sorted(
    f"{path.name}:{key}" for key, _, pattern in TABLES.values() for path in DATA_DIR.glob(pattern)
)


def _rows(name: str) -> list[dict[str, object]]:
    """Rows of ``file.yaml`` (its first table) or of ``file.yaml:key``."""
    file, _, key = name.partition(":")
    doc = yaml.safe_load((DATA_DIR / file).read_text())
    key = key or next(k for k, _, p in TABLES.values() if DATA_DIR.joinpath(file).match(p))
    rows: list[dict[str, object]] = doc[key]
    return rows


def test_table_list_is_not_copied() -> None:
    # design.md names each data file with its key ("`gpus.yaml` -> `gpus:`") and the list
    # lives in compat.data.TABLES only: no test-side or doc-side copy to drift.
    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    for key, _, pattern in TABLES.values():
        assert f"-> `{key}:`" in design, key
        assert f"`{pattern}`" in design or pattern.startswith("torch_"), pattern
    assert "TABLE_KEYS = {" not in Path(__file__).read_text().replace('"TABLE_KEYS = {"', "")


@pytest.mark.parametrize("name", TABLE_KEYS, ids=str)
def test_every_row_has_a_source(name: str) -> None:
    for row in _rows(name):
        assert isinstance(row.get("source"), str), row
        assert len(str(row["source"])) > 10, row
        assert row.get("confidence") in (None, "unverified"), row
        for v in row.get("variants") or []:  # type: ignore[attr-defined]
            assert isinstance(v.get("source"), str), (row, v)
            assert v["source"].strip(), (row, v)


def test_confidence_unverified_rows_say_why() -> None:
    for name in TABLE_KEYS:
        for row in _rows(name):
            if row.get("confidence") == "unverified":
                assert row.get("notes"), f"{name}: {row.get('name') or row.get('version')}"


def test_architectures_sorted_and_consistent(real: Matrix) -> None:
    archs = list(real.architectures.values())
    lows = [min(a.compute_capabilities) for a in archs]
    assert lows == sorted(lows)
    for a in archs:
        assert a.last_driver_branch is None or a.last_driver_branch > a.min_driver_branch
    # the facts gpuprov's guard rails depend on
    assert real.architectures["kepler"].last_driver_branch == 470
    for name in ("maxwell", "pascal", "volta"):
        assert real.architectures[name].last_driver_branch == 580


def test_gpus_sorted_unique_and_linked(real: Matrix) -> None:
    keys = [(g.compute_capability, g.name.lower()) for g in real.gpus]
    assert keys == sorted(keys)
    names = [g.name.lower() for g in real.gpus]
    assert len(names) == len(set(names))
    pcis = [p for g in real.gpus for p in g.pci_ids]
    assert len(pcis) == len(set(pcis)), "a PCI ID names two GPUs"
    for g in real.gpus:
        for p in g.pci_ids:
            assert re.fullmatch(r"10de:[0-9a-f]{4}", p), (g.name, p)
        arch = real.architecture_of(g)
        assert g.compute_capability in arch.compute_capabilities, g.name


@pytest.mark.parametrize(
    ("name", "pci", "cc"),
    [
        ("Tesla K40m", "10de:1023", (3, 5)),
        ("Tesla M40", "10de:17fd", (5, 2)),
        ("Tesla K80", "10de:102d", (3, 7)),
        ("Tesla T4", "10de:1eb8", (7, 5)),
        ("A100-SXM4-40GB", "10de:20b0", (8, 0)),
    ],
    ids=["k40m", "m40", "k80", "t4", "a100"],
)
def test_seed_gpus(real: Matrix, name: str, pci: str, cc: tuple[int, int]) -> None:
    gpu = real.gpu_by_pci(pci)
    assert gpu is not None
    assert gpu.name == name
    assert gpu.compute_capability == cc


def test_coverage_from_kepler_to_blackwell(real: Matrix) -> None:
    archs = {g.architecture for g in real.gpus}
    for a in (
        "kepler",
        "maxwell",
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada",
        "hopper",
        "blackwell",
    ):
        assert a in archs
    for q in (
        "K20",
        "K80",
        "M4",
        "M10",
        "M60",
        "P4",
        "P40",
        "P100",
        "V100S",
        "T4",
        "A2",
        "A10",
        "A16",
        "A30",
        "A40",
        "L4",
        "L40",
        "L40S",
        "H200",
        "B200",
        "GB200",
        "RTX 3090",
        "RTX 4090",
        "RTX 5090",
        "RTX A6000",
        "RTX 6000 Ada",
    ):
        names = [x for g in real.gpus for x in (g.name, *g.aliases)]
        assert any(q.lower() in n.lower() for n in names), q


def test_toolkit_driver_minimums_non_decreasing(real: Matrix) -> None:
    versions = [t.version for t in real.toolkits]
    assert versions == sorted(versions, key=cmp_key)
    mins = [cmp_key(t.min_driver) for t in real.toolkits]
    assert mins == sorted(mins)
    per_major: dict[int, set[tuple[int, ...]]] = {}
    for t in real.toolkits:
        if t.version[0] >= 11:
            assert t.minor_compat_driver is not None, t.version_text
            per_major.setdefault(t.version[0], set()).add(t.minor_compat_driver)
        else:
            assert t.minor_compat_driver is None, t.version_text
        assert t.min_cc <= t.max_cc
    # One minor-version-compatibility minimum per CUDA major (NVIDIA's table 2). It may be
    # newer than the x.0 GA driver: 11.0 shipped with 450.51 and 11.x needs 450.80.02.
    assert all(len(v) == 1 for v in per_major.values()), per_major


def test_cuda_generation_facts(real: Matrix) -> None:
    tk = {t.version_text: t for t in real.toolkits}
    assert tk["11.8"].min_cc == (3, 5)
    assert tk["12.0"].min_cc == (5, 0)  # 12.0 dropped sm_35/sm_37
    assert tk["13.0"].min_cc == (7, 5)  # 13.0 dropped Maxwell, Pascal, Volta
    assert tk["11.8"].minor_compat_text == "450.80.02"
    assert tk["12.0"].minor_compat_text == "525.60.13"


def test_branches_sorted_and_cuda_monotonic(real: Matrix) -> None:
    nums = [b.branch for b in real.branches]
    assert nums == sorted(nums)
    assert len(nums) == len(set(nums))
    tops = [cmp_key(b.max_cuda) for b in real.branches]
    assert tops == sorted(tops)
    assert real.branch(470) is not None
    assert real.branch(470).max_cuda[:2] == (11, 4)


def test_releases_sorted_unique_and_linked(real: Matrix) -> None:
    keys = [r.key for r in real.releases]
    assert keys == sorted(keys)
    assert len(keys) == len(set(keys))
    assert real.releases[0].version == "1.0.0"
    for r in real.releases:
        names = [v.name for v in r.variants]
        assert len(names) == len(set(names)), r.version
        assert r.pypi_default in names, r.version
        assert r.pip_style in ("index", "find_links"), r.version
        assert r.conda_style in (None, "cudatoolkit", "pytorch-cuda"), r.version
        assert r.python, r.version
        for v in r.variants:
            if v.cuda is None:
                assert v.name == "cpu"
                assert not v.sass
                continue
            assert real.toolkit(v.cuda) is not None, f"{r.version}+{v.name}: no CUDA {v.cuda_text}"
            assert v.name == "cu" + "".join(str(p) for p in v.cuda[:2]), (r.version, v.name)
            assert v.sass or v.ptx, (r.version, v.name)
            for entry in v.sass + v.ptx + v.conda_sass + v.conda_ptx:
                rules.parse_arch(entry)
            assert set(v.channels) <= {"pip", "conda"}


def test_seed_fact_1_7_1_pip_and_conda_differ(real: Matrix) -> None:
    rel = real.release("1.7.1")
    assert rel is not None
    cu102 = rel.variant("cu102")
    assert cu102 is not None
    assert "sm_61" in cu102.archs("conda")[0]
    assert "compute_37" in cu102.archs("conda")[1]
    assert "sm_61" not in cu102.archs("pip")[0]
    assert "compute_37" not in cu102.archs("pip")[1]


def test_ngc_containers(real: Matrix) -> None:
    tags = [c.tag for c in real.containers]
    assert tags == sorted(tags)
    assert len(tags) == len(set(tags))
    assert "22.12" in tags
    for c in real.containers:
        assert c.image == f"nvcr.io/nvidia/pytorch:{c.tag}-py3"
        assert real.toolkit(version_key(c.cuda)) is not None, c.tag


def test_error_patterns_compile_and_match_their_examples(real: Matrix) -> None:
    ids = [e.id for e in real.errors]
    assert len(ids) == len(set(ids))
    for e in real.errors:
        for p in e.patterns:
            re.compile(p)
    for required in (
        "no-kernel-image",
        "capability-not-compatible",
        "driver-insufficient",
        "nvml-mismatch",
        "smi-no-driver",
        "forward-compat-unsupported",
    ):
        assert required in ids


def test_perf_floors_name_known_gpus(real: Matrix) -> None:
    names = {g.name for g in real.gpus}
    for row in _rows("perf.yaml"):
        assert row["gpu"] in names, row["gpu"]


def test_perf_floors_are_stored_once_as_peak_times_policy() -> None:
    doc = yaml.safe_load((DATA_DIR / "perf.yaml").read_text())
    policy = doc["policy"]
    pairs = (
        ("matmul_tflops_fp32", "peak_fp32_tflops", policy["matmul_fraction"]),
        ("matmul_tflops_fp16", "peak_fp16_tflops", policy["matmul_fraction"]),
        ("memory_bandwidth_gbs", "peak_bandwidth_gbs", policy["bandwidth_fraction"]),
    )
    for row in doc["floors"]:
        # One name per floor (the one scripts/smoke/perf.py reads); no per-row policy copy.
        assert not [k for k in row if k.startswith("floor_") or k == "fraction"], row["gpu"]
        for floor, peak, fraction in pairs:
            if row[peak] is None:
                assert row[floor] is None, (row["gpu"], floor)
            else:
                assert row[floor] == pytest.approx(row[peak] * fraction, abs=0.011 * row[floor])


def test_gpu_cc_exists_in_some_toolkit(real: Matrix) -> None:
    for g in real.gpus:
        if g.architecture == "fermi":
            continue
        assert any(rules.toolkit_supports(t, g.compute_capability) for t in real.toolkits), g.name


# ------------------------------------------------------------------ malformed data


def _copy_data(tmp_path: Path) -> Path:
    for f in DATA_DIR.glob("*.yaml"):
        (tmp_path / f.name).write_text(f.read_text())
    return tmp_path


def test_missing_source_is_rejected(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    text = (root / "cuda.yaml").read_text()
    doc = yaml.safe_load(text)
    del doc["toolkits"][0]["source"]
    (root / "cuda.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CompatDataError, match=r"cuda\.yaml: toolkits\[0\].*missing required field"):
        compile_tables(sorted(root.glob("*.yaml")))


def test_string_version_garbage_is_rejected(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    doc = yaml.safe_load((root / "drivers.yaml").read_text())
    doc["branches"][0]["max_cuda"] = "eleven"
    (root / "drivers.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(CompatDataError, match="invalid branch max_cuda 'eleven'"):
        compile_tables(sorted(root.glob("*.yaml")))


def test_broken_yaml_is_rejected(tmp_path: Path) -> None:
    root = _copy_data(tmp_path)
    (root / "gpus.yaml").write_text("gpus: [\n")
    with pytest.raises(CompatDataError, match=r"gpus\.yaml is not valid YAML"):
        compile_tables(sorted(root.glob("*.yaml")))


def test_cc_key_rejects_garbage() -> None:
    with pytest.raises(CompatDataError.__mro__[1], match="malformed compute capability"):
        cc_key("sm_35")


def test_library_rows_sorted_unique_and_well_formed(real: Matrix) -> None:
    rows = _rows("libraries.yaml")
    keys = [(r["library"], r["package"], version_key(str(r["version"]))) for r in rows]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    for r in rows:
        assert "measured" in str(r["source"]), r
        for kind, prefix in (("sass", "sm_"), ("ptx", "compute_")):
            entries = list(r.get(kind) or [])  # type: ignore[call-overload]
            assert all(e.startswith(prefix) for e in entries), r
            for e in entries:
                rules.parse_arch(e)
            keyed = [rules.parse_arch(e)[1] for e in entries]
            assert keyed == sorted(keyed), r
    assert set(real.libraries) == {f"{r['package']}=={r['version']}" for r in rows}


def test_library_pins_name_measured_wheels_and_real_builds(real: Matrix) -> None:
    doc = yaml.safe_load((DATA_DIR / "libraries.yaml").read_text())
    pins = doc["pins"]
    keys = [(version_key(str(p["torch"])), p["variant"]) for p in pins]
    assert keys == sorted(keys)
    for p in pins:
        assert len(str(p["source"])) > 10, p
        if p.get("confidence") == "unverified":
            assert p.get("notes"), p
        found = real.libraries_of(str(p["torch"]), p["variant"])
        assert found is not None
        pin, builds = found
        assert [b.spec for b in builds] == list(pin.packages)
        rel = real.release(str(p["torch"]))
        assert rel is not None
        assert rel.variant(p["variant"]) is not None


def test_library_facts(real: Matrix) -> None:
    """Facts a reader can check against the table: cuDNN 9 has no Kepler kernels; the CUDA 11
    cuBLAS still has sm_35."""
    for spec, build in real.libraries.items():
        if build.library == "cudnn" and build.version.startswith("9."):
            assert rules.coverage(build.sass, build.ptx, (3, 7)) is None, spec
    cublas11 = real.libraries["nvidia-cublas-cu11==11.11.3.6"]
    assert rules.coverage(cublas11.sass, cublas11.ptx, (3, 7)) == ("sass", "sm_35")


def test_pin_of_unknown_build_or_unmeasured_wheel_is_rejected(tmp_path: Path) -> None:
    for path in DATA_DIR.glob("*.yaml"):
        if path.name != "libraries.yaml":
            (tmp_path / path.name).write_text(path.read_text())
    base = (DATA_DIR / "libraries.yaml").read_text()
    pin = "torch: 2.7.1\n    variant: cu126"
    (tmp_path / "libraries.yaml").write_text(base.replace(pin, pin.replace("cu126", "cu999"), 1))
    with pytest.raises(CompatDataError, match=r"pin torch 2\.7\.1\+cu999: no such release"):
        compile_tables(sorted(tmp_path.glob("*.yaml")))
    (tmp_path / "libraries.yaml").write_text(
        base.replace("nvidia-cublas-cu12==12.6.4.1,", "nvidia-cublas-cu12==12.6.9.9,", 1)
    )
    with pytest.raises(CompatDataError, match=r"12\.6\.9\.9 has no measured row"):
        compile_tables(sorted(tmp_path.glob("*.yaml")))
    (tmp_path / "libraries.yaml").write_text(base.replace("ptx: [compute_90]", "ptx: [sm_90]", 1))
    with pytest.raises(CompatDataError, match="PTX entry 'sm_90' is not compute_XY"):
        compile_tables(sorted(tmp_path.glob("*.yaml")))
