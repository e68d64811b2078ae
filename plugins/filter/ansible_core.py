# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filter: the oldest Python an ansible-core release runs its controller side on (used
by roles/gpuprov_pull, whose hosts run ansible-pull, a controller, with their own Python)."""

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


def controller_python(version: str) -> str:
    """The oldest controller Python of ansible-core ``version`` (see DOCUMENTATION)."""
    parts = str(version).strip().split(".")
    try:
        minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return ""
    if minor in CONTROLLER_PYTHON:
        return CONTROLLER_PYTHON[minor]
    newest = max(CONTROLLER_PYTHON)
    return CONTROLLER_PYTHON[newest] if minor > newest else ""


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_ansible_core_python": controller_python}
