# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filters: the oldest Python an ansible-core release runs its controller side on, and
the ansible-core release an Ansible community package is built on (used by roles/gpuprov_pull,
whose hosts run ansible-pull, a controller, with their own Python and the releases the
inventory pins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DOCUMENTATION = r"""
name: gpuprov_ansible_core_python
short_description: The oldest controller Python of an ansible-core release
description:
  - Takes an ansible-core version (C(2.19.14)) and returns the oldest Python its controller
    side supports (C(3.11)), from ansible-core's support matrix; a release newer than the
    table gets the newest known floor (the floor never went down); one older than the table,
    or not a version, gets an empty string (nothing to check).
options:
  _input:
    description: An ansible-core version.
    type: str
    required: true
"""
# The second filter, gpuprov_ansible_core_needed: takes the Ansible community package's version
# (C(12.3.0)) and an ansible-core version; returns the ansible-core minor release the package
# depends on (C(2.19)) when the core version is not of it, else an empty string (also for a
# package major the table does not know: nothing to check).

# ansible-core minor release -> oldest controller Python. Source: the ansible-core support
# matrix, https://docs.ansible.com/ansible/latest/reference_appendices/release_and_maintenance.html
# (tests/unit/test_ansible_core_python.py checks the installed release's Requires-Python).
CONTROLLER_PYTHON = {
    (2, 12): "3.8",
    (2, 13): "3.8",
    (2, 14): "3.9",
    (2, 15): "3.9",
    (2, 16): "3.10",
    (2, 17): "3.10",
    (2, 18): "3.11",
    (2, 19): "3.11",
    (2, 20): "3.12",
    (2, 21): "3.12",
}

# Ansible community package major -> the ansible-core minor release it depends on. Source: the
# "Core version dependency" column of ansible-documentation's release_and_maintenance.rst
# (4.x 2.11 ... 12.x 2.19, 13.0.0 2.20); tests/unit/test_ansible_core_python.py checks the
# installed package's own Requires-Dist.
CORE_OF_PACKAGE = {major: (2, major + 7) for major in range(4, 14)}


def _leading(version: str, count: int) -> tuple[int, ...] | None:
    """The first ``count`` numbers of ``version`` (None when it has fewer, or is no version)."""
    parts = str(version).strip().split(".")
    try:
        return tuple(int(part) for part in parts[:count]) if len(parts) >= count else None
    except ValueError:
        return None


def core_needed(package_version: str, core_version: str) -> str:
    """The ansible-core minor release Ansible ``package_version`` depends on when
    ``core_version`` is not of it, else "" (see the module's comment)."""
    major = _leading(package_version, 1)
    needed = CORE_OF_PACKAGE.get(major[0]) if major else None
    if needed is None or _leading(core_version, 2) == needed:
        return ""
    return f"{needed[0]}.{needed[1]}"


def controller_python(version: str) -> str:
    """The oldest controller Python of ansible-core ``version`` (see DOCUMENTATION)."""
    minor = _leading(version, 2)
    if minor is None:
        return ""
    if minor in CONTROLLER_PYTHON:
        return CONTROLLER_PYTHON[minor]
    newest = max(CONTROLLER_PYTHON)
    return CONTROLLER_PYTHON[newest] if minor > newest else ""


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "gpuprov_ansible_core_python": controller_python,
            "gpuprov_ansible_core_needed": core_needed,
        }
