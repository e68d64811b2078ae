"""Issue 21, third pass: values read on 2026-12-03 in NVIDIA's own driver changelog
(NVIDIA_Changelog, shipped in every driver; read in Debian's nvidia-kernel-dkms 550.163.01-2),
in the format strings of NVIDIA's closed kernel object of the same package, in NVIDIA's Unix
driver page and in pytorch/serve's README and SECURITY.md.

`released` is now defined in drivers.yaml's header: the month of a branch's first public
release, a beta included. The months below were typed from the changelog's dated entries, so
the old values (from memory) fail."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import compat
from compat.data import Matrix, data_dir

CHANGELOG = "NVIDIA_Changelog (shipped in the driver"


def _row(file: str, key: str, field: str, value: object) -> dict[str, Any]:
    rows = yaml.safe_load((Path(data_dir()) / file).read_text())[key]
    (row,) = [r for r in rows if r[field] == value]
    return dict(row)


@pytest.mark.parametrize(
    ("branch", "released", "first", "verified"),
    [
        (384, "2017-06", "'2017-06-29 version 384.47' (first)", False),  # kind still from memory
        (396, "2018-04", "'2018-04-10 version 396.18' (first)", True),
        (410, "2018-09", "version 410.57' (first)", False),  # kind still from memory
        (418, "2019-01", "'2019-01-30 version 418.30' (first)", True),
        (430, "2019-04", "'2019-04-23 version 430.09' (first)", False),  # kind still from memory
        (440, "2019-10", "'2019-10-17 version 440.26' (first)", True),
    ],
    ids=lambda v: str(v),
)
def test_first_release_months_from_nvidias_changelog(
    real: Matrix, branch: int, released: str, first: str, verified: bool
) -> None:
    b = real.branch(branch)
    assert b is not None
    assert b.released == released
    row = _row("drivers.yaml", "branches", "branch", branch)
    assert CHANGELOG in " ".join(row["source"].split())
    assert first in " ".join(row["source"].split())
    assert ("confidence" not in row) is verified


def test_the_header_defines_released() -> None:
    head = (Path(data_dir()) / "drivers.yaml").read_text().split("branches:", 1)[0]
    assert "first public release, a beta" in " ".join(head.replace("#", " ").split())


def test_r550_counts_its_beta_and_stays_unverified_for_its_data_center_kind(real: Matrix) -> None:
    b = real.branch(550)
    assert b is not None
    assert b.released == "2024-01"  # 550.40.07 (beta), 2024-01-24
    row = _row("drivers.yaml", "branches", "branch", 550)
    assert row["confidence"] == "unverified"
    assert "data-center designation not read" in " ".join(row["notes"].split())


def test_r590_is_a_new_feature_branch_on_nvidias_unix_driver_page(real: Matrix) -> None:
    b = real.branch(590)
    assert b is not None
    assert b.kind == "new-feature"
    row = _row("drivers.yaml", "branches", "branch", 590)
    assert "confidence" not in row
    assert "Latest New Feature Branch Version 590.48.01" in " ".join(row["source"].split())


@pytest.mark.parametrize(
    ("arch", "branch", "gpu"),
    [
        ("fermi", 195, "GeForce GTX 480"),
        ("kepler", 295, "GeForce GTX 680"),
        ("maxwell", 334, "GeForce GTX 750 Ti"),
    ],
)
def test_first_branches_of_the_old_architectures(arch: str, branch: int, gpu: str) -> None:
    row = _row("architectures.yaml", "architectures", "name", arch)
    assert row["min_driver_branch"] == branch
    assert "confidence" not in row
    assert gpu in row["notes"]
    assert f"Release {branch} Entries" in " ".join(row["source"].split())


# NVIDIA's format string, byte for byte from nv-kernel.o_binary of driver 550.163.01.
NVRM_FORMAT = (
    "NVRM: The NVIDIA %s GPU installed in this system is\n"
    "NVRM:  supported through the NVIDIA %s Legacy drivers. Please\n"
    "NVRM:  visit http://www.nvidia.com/object/unix.html for more\n"
    "NVRM:  information.  The %s NVIDIA driver will ignore\n"
    "NVRM:  this GPU.  Continuing probe...\n"
)


@pytest.mark.parametrize("prefix", ["", "[   12.228469] ", "Dec  3 10:00:01 gpu1 kernel: [ 13.5] "])
def test_the_kepler_pattern_matches_nvidias_own_format_string(prefix: str) -> None:
    text = "".join(
        prefix + line + "\n"
        for line in (NVRM_FORMAT % ("Tesla K80", "470.xx", "550.163.01")).splitlines()
    )
    row = _row("errors.yaml", "errors", "id", "kepler-unsupported-driver")
    assert any(
        (m := re.search(p, text, re.IGNORECASE | re.DOTALL)) and m.group("branch") == "470"
        for p in row["patterns"]
    )
    assert "confidence" not in row
    assert "nv-kernel.o_binary" in row["source"]


@pytest.mark.parametrize("version", ["0.9.0", "0.11.0"])
def test_every_torchserve_release_is_in_limited_maintenance(version: str) -> None:
    row = _row("torchserve.yaml", "torchserve", "version", version)
    assert row["status"] == "limited-maintenance"  # was active, unchecked
    assert "confidence" not in row
    assert "SECURITY.md" in row["source"]
    verdict = compat.serving_torchserve(version, "2.3.0", 17)
    assert verdict["status"] == "limited-maintenance"
    assert any("no further fixes or security patches" in r for r in verdict["reasons"])


# ---------------------------------------------------------------- gpus.yaml (2026-12-03)

DERIVED = {
    "Tesla M4": "GM206",
    "GeForce RTX 2060 SUPER": "TU106",
    "GeForce RTX 2070 SUPER": "TU104",
    "GeForce RTX 2080 SUPER": "TU104",
    "A10G": "GA102",
    "GeForce RTX 4070 SUPER": "AD104",
    "GeForce RTX 4070 Ti SUPER": "AD103",
    "GeForce RTX 4080 SUPER": "AD103",
    "GeForce RTX 4090 D": "AD102",
    "L20": "AD102",
    "H800": "GH100",
    "H800 PCIe": "GH100",
    "GeForce RTX 5090 D": "GB202",
}
MIG_ROWS = {
    "H20": "'H20 | Hopper | GH100 | 9.0 | 96GB'",
    "GH200 120GB": "'H100 on GH200 | Hopper | GH100 | 9.0 | 96GB'",
    "B200": "'B200 | Blackwell | GB100 | 10.0 | 180GB'",
    "GB200": "'GB200 | Blackwell | GB100 | 10.0 | 186GB'",
}


@pytest.mark.parametrize(("name", "die"), sorted(DERIVED.items()))
def test_compute_capabilities_derived_from_the_die(name: str, die: str) -> None:
    row = _row("gpus.yaml", "gpus", "name", name)
    source = " ".join(row["source"].split())
    assert "confidence" not in row
    assert f"compute capability derived: {die} die" in source
    assert "pci.ids" in source.split("compute capability derived:", 1)[1]


@pytest.mark.parametrize(("name", "quote"), sorted(MIG_ROWS.items()))
def test_values_read_in_nvidias_mig_guide(name: str, quote: str) -> None:
    row = _row("gpus.yaml", "gpus", "name", name)
    assert "confidence" not in row
    assert quote in " ".join(row["source"].split())
    cc, mem = re.findall(r"\| ([\d.]+) \| (\d+)GB'", quote)[0]
    assert (row["compute_capability"], row["memory_gib"]) == (cc, int(mem))


def test_the_h100_hbm2e_name_is_in_nvidias_driver_list() -> None:
    row = _row("gpus.yaml", "gpus", "name", "H100 80GB HBM2e")
    assert "confidence" not in row
    assert "@46d0ada3" in row["source"]


def test_the_header_says_how_a_compute_capability_is_derived() -> None:
    head = (Path(data_dir()) / "gpus.yaml").read_text().split("gpus:", 1)[0]
    assert "may be derived" in head


# ---------------------------------------------------------------- torch_2.yaml, perf.yaml


@pytest.mark.parametrize(
    ("version", "variant", "pr"),
    [
        ("2.12.0", "cu132", "#188914"),
        ("2.12.1", "cu132", "#188914"),
        ("2.13.0", "cu132", "#188925"),
        ("2.14.0", "cu132", "#188914"),
        ("2.14.1", "cu132", "#188914"),
        ("2.15.0", "cu130", "#188914"),
    ],
)
def test_release_wheels_ship_without_ptx(real: Matrix, version: str, variant: str, pr: str) -> None:
    """pytorch/pytorch PR #188914 and its release/2.13 pick #188925: release and RC CUDA
    wheels ship without +PTX (RELEASE.md's 12.0+PTX is the nightly list)."""
    release = real.release(version)
    assert release is not None
    (v,) = [v for v in release.variants if v.name == variant]
    assert list(v.ptx) == []
    doc = yaml.safe_load((Path(data_dir()) / "torch_2.yaml").read_text())["releases"]
    (row,) = [r for r in doc if str(r["version"]) == version]
    (var,) = [x for x in row["variants"] if x["name"] == variant]
    assert f"PR {pr}" in " ".join(f"{var['notes']} {var['source']}".split())


@pytest.mark.parametrize(
    ("gpu", "fp32", "fp16", "bandwidth"),
    [
        ("Tesla P100-PCIE-12GB", 9.3, 18.7, 549),
        ("Tesla P100-PCIE-16GB", 9.3, 18.7, 732),
        ("Tesla V100S-PCIE-32GB", 16.4, 130.0, 1134),
        ("A100-PCIE-40GB", 19.5, 312.0, 1555),
        ("A100 80GB PCIe", 19.5, 312.0, 1935),
        ("A10", 31.2, 125.0, 600),
        ("H100 NVL", 60.0, 835.5, 3900),  # 1,671 with sparsity (was 835)
    ],
)
def test_datasheet_peaks_read_again(gpu: str, fp32: float, fp16: float, bandwidth: int) -> None:
    row = _row("perf.yaml", "floors", "gpu", gpu)
    assert (row["peak_fp32_tflops"], row["peak_fp16_tflops"], row["peak_bandwidth_gbs"]) == (
        fp32,
        fp16,
        bandwidth,
    )
    assert "confidence" not in row
    assert "recalled" not in row["notes"]
