"""The nvidia_driver role's test for a driver someone else installed (issue 20): on Debian, the
metapackages only NVIDIA's CUDA repository has. The pattern must match those and never a package
the role itself installs, or the role would refuse its own driver on the next run. The lab
case: tests/lab/test_faults.py::test_a_driver_someone_else_installed_is_refused_kept_or_replaced.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import compat

ROOT = Path(__file__).resolve().parents[2]
VARS = ROOT / "roles" / "nvidia_driver" / "vars"


def _regex(os_name: str) -> re.Pattern[str]:
    doc = yaml.safe_load((VARS / f"{os_name}.yml").read_text())
    return re.compile(doc["_nvidia_driver_foreign_package_regex"])


def _own_packages(os_name: str) -> set[str]:
    """Every package name the role's package maps name for that OS (branch x OS version)."""
    doc = yaml.safe_load((VARS / f"{os_name}.yml").read_text())
    extra = list(doc["_nvidia_driver_persistenced_packages"])
    if os_name == "Debian":
        tables = [compat.debian_packages()]
    elif os_name == "Ubuntu":
        tables = [doc["_nvidia_driver_packages_canonical"], doc["_nvidia_driver_packages_cuda"]]
    else:  # RedHat: one map for every EL version
        tables = [{"el": doc["_nvidia_driver_packages_el"]}]
    names = {
        pkg.split("=")[0]
        for table in tables
        for per_version in table.values()
        for sets in per_version.values()
        for pkgs in sets.values()
        for pkg in pkgs
    }
    assert len(names) > 4, names  # the maps were read
    return names | set(extra)


@pytest.mark.parametrize(
    "name",
    ["cuda-drivers", "cuda-drivers-560", "nvidia-open", "nvidia-open-570", "nvidia-driver-cuda"],
)
def test_nvidias_repository_metapackages_are_foreign_on_debian(name: str) -> None:
    assert _regex("Debian").match(name)


@pytest.mark.parametrize(
    "name",
    # Debian's own driver packages (bookworm and trixie), some of them named much alike.
    ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-tesla-470-driver", "cuda-drivers-x", ""],
)
def test_debians_own_packages_are_not_foreign(name: str) -> None:
    assert not _regex("Debian").match(name)


@pytest.mark.parametrize("os_name", ["Debian", "Ubuntu", "RedHat"])
def test_no_package_the_role_installs_counts_as_foreign(os_name: str) -> None:
    regex = _regex(os_name)
    own = _own_packages(os_name)
    assert [p for p in sorted(own) if regex.match(p)] == []


def test_the_run_installer_paths_are_nvidias() -> None:
    doc = yaml.safe_load((VARS / "main.yml").read_text())
    assert doc["_nvidia_driver_run_installer_paths"] == [
        "/usr/bin/nvidia-uninstall",
        "/usr/bin/nvidia-installer",
    ]
