"""The oldest controller Python of an ansible-core release (plugins/filter/ansible_core.py),
which the pull role checks on a host before it installs ansible-core there."""

from __future__ import annotations

from importlib import metadata

import pytest
from ansible_core import controller_python


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
