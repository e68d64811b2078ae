"""The oldest controller Python of an ansible-core release, and the ansible-core release an
Ansible package needs (plugins/filter/ansible_core.py), which the pull role checks on a host
before it installs them there."""

from __future__ import annotations

from importlib import metadata

import pytest
from ansible_core import CORE_OF_PACKAGE, controller_python, core_needed
from packaging.requirements import Requirement


@pytest.mark.parametrize(
    ("version", "python"),
    [
        ("2.19.14", "3.11"),
        ("2.18.0", "3.11"),
        ("2.20.1", "3.12"),
        ("2.16.3", "3.10"),
        ("2.23.0", "3.12"),  # newer than the table: at least the newest floor known
        ("2.11.0", ""),  # older than the table: nothing to check
        ("devel", ""),
        ("", ""),
    ],
)
def test_controller_python(version: str, python: str) -> None:
    assert controller_python(version) == python


def test_the_table_agrees_with_the_installed_release_s_own_metadata() -> None:
    """A primary source beside the support matrix: the wheel's Requires-Python."""
    requires = metadata.metadata("ansible-core")["Requires-Python"]
    assert requires == ">=" + controller_python(metadata.version("ansible-core"))


@pytest.mark.parametrize(
    ("package", "core", "needed"),
    [
        ("12.3.0", "2.19.5", ""),
        ("12.3.0", "2.20.0", "2.19"),  # the pair pip refused in the lab (ResolutionImpossible)
        ("13.0.0", "2.19.4", "2.20"),
        ("4.10.0", "2.11.12", ""),
        ("99.0.0", "2.19.5", ""),  # a major the table does not know: nothing to check
        ("", "2.19.5", ""),
        ("12.3.0", "devel", "2.19"),
    ],
)
def test_core_needed(package: str, core: str, needed: str) -> None:
    assert core_needed(package, core) == needed


def test_the_package_table_agrees_with_the_installed_package_s_own_metadata() -> None:
    """The installed Ansible's Requires-Dist on ansible-core (``~=2.19.5`` for 12.3.0) takes the
    minor release the table gives, and neither neighbour."""
    (req,) = [
        Requirement(r) for r in metadata.requires("ansible") or [] if r.startswith("ansible-core")
    ]
    major, minor = CORE_OF_PACKAGE[int(metadata.version("ansible").split(".")[0])]
    assert req.specifier.contains(f"{major}.{minor}.99"), req
    assert not req.specifier.contains(f"{major}.{minor + 1}.0"), req
    assert not req.specifier.contains(f"{major}.{minor - 1}.99"), req
