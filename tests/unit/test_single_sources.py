"""One source per fact: each test fails when a copy comes back."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import compat

ROOT = Path(__file__).resolve().parents[2]


def test_debian_driver_packages_live_in_the_matrix_only() -> None:
    vars_text = (ROOT / "roles" / "nvidia_driver" / "vars" / "Debian.yml").read_text()
    # The role reads the map through the filter; no package name or branch table in the file.
    assert "gpu_compat_os_packages" in vars_text
    assert not re.search(r"\bnvidia-(tesla-\d+-)?kernel-dkms\b|\blibcuda1\b", vars_text)
    data = yaml.safe_load((ROOT / "compat" / "data" / "drivers.yaml").read_text())["debian"]
    packages = compat.debian_packages()
    assert sorted(packages) == sorted({str(r["version"]) for r in data})
    for row in data:
        got = packages[str(row["version"])][int(row["branch"])]
        assert got == {
            "kernel": row["packages"]["kernel"],
            "userspace": row["packages"]["userspace"],
        }


def test_debian_packages_match_the_archive_facts() -> None:
    # From apt-cache policy against deb.debian.org (see drivers.yaml): Kepler's 470 is
    # packaged for bookworm only; trixie has the unversioned family at 550 and tesla-535.
    packages = compat.debian_packages()
    assert sorted(packages["12"]) == [470, 535]
    assert sorted(packages["13"]) == [535, 550]
    assert packages["13"][535]["kernel"] == ["nvidia-tesla-535-kernel-dkms"]
    assert packages["12"][535]["kernel"] == packages["13"][550]["kernel"] == ["nvidia-kernel-dkms"]


def test_filter_refuses_an_unknown_os_family() -> None:
    import gpu_compat as plugin  # plugins/filter is on pytest's pythonpath
    import pytest
    from ansible.errors import AnsibleFilterError

    assert plugin.gpu_compat_os_packages("Debian") == compat.debian_packages()
    with pytest.raises(AnsibleFilterError, match="'RedHat'"):
        plugin.gpu_compat_os_packages("RedHat")
