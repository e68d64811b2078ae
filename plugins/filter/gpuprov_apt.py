# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filter: which apt components a host's own sources lack (used by nvidia_driver)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

DOCUMENTATION = r"""
name: gpuprov_apt_missing_components
short_description: The components each suite lacks in the host's other apt sources
description:
  - Takes apt_ready's C(source_definitions) entries for one URI and returns, for each suite
    asked, the wanted components that no other enabled C(deb) entry of that suite already
    enables. A suite that lacks none maps to an empty list.
  - Entries of O(own_file) (the role's own file) do not count, so the answer does not
    depend on what the role wrote before.
  - Repeating a component that another source enables makes apt warn "Target ... is
    configured multiple times" on every update.
positional: suites, wanted, own_file
options:
  _input:
    description: apt_ready's C(source_definitions) entries of the URI.
    type: list
    elements: dict
    required: true
  suites:
    description: The suites the role would add components to.
    type: list
    elements: str
    required: true
  wanted:
    description: The components the role needs.
    type: list
    elements: str
    required: true
  own_file:
    description: The role's own sources file.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Add only the components the system's sources lack
  ansible.builtin.set_fact:
    _missing: >-
      {{ found.source_definitions.nvidia_driver_debian_mirror_url
         | gpuprov_apt_missing_components(['bookworm', 'bookworm-updates'],
                                          ['contrib', 'non-free'], _own_file) }}
"""

RETURN = r"""
_value:
  description: Suite -> the wanted components it lacks, in the order of O(wanted).
  type: dict
"""


def missing_components(
    definitions: Iterable[Mapping[str, Any]],
    suites: Iterable[str],
    wanted: Iterable[str],
    own_file: str,
) -> dict[str, list[str]]:
    """Suite -> the wanted components that no other enabled deb entry of it enables."""
    have: dict[str, set[str]] = {}
    for entry in definitions:
        if entry.get("file") == own_file or "deb" not in (entry.get("types") or ()):
            continue
        for suite in entry.get("suites") or ():
            have.setdefault(str(suite), set()).update(entry.get("components") or ())
    wanted = list(wanted)
    return {s: [c for c in wanted if c not in have.get(s, set())] for s in suites}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_apt_missing_components": missing_components}
