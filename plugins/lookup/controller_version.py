# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Lookup: the version of a Python distribution installed where Ansible runs (the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: controller_version
short_description: Versions of Python distributions installed on the controller
description:
  - For each term, the version of that Python distribution (PyPI name) in the environment
    that runs ansible-playbook, read with importlib.metadata.
  - roles/gpuprov_pull installs the same ansible-core and ansible releases on a pull host as
    the controller that set it up runs, so that both run one Ansible.
options:
  _terms:
    description: Distribution names (ansible, ansible-core, ...).
    required: true
  variable:
    description: The variable that overrides the lookup, named when a distribution is missing.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: The controller's ansible release
  ansible.builtin.debug:
    msg: "{{ lookup('gpuprov.fleet.controller_version', 'ansible') }}"
"""

RETURN = r"""
_raw:
  description: One version string per term.
  type: list
  elements: str
"""

from importlib import metadata
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


def controller_version(name: str, variable: str = "") -> str:
    """``name``'s installed version; AnsibleLookupError naming ``variable`` when missing."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError as exc:
        hint = f": set {variable}" if variable else ""
        raise AnsibleLookupError(
            f"controller_version: {name} is not installed on the controller{hint}"
        ) from exc


class LookupModule(LookupBase):  # type: ignore[misc]
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        self.set_options(var_options=variables, direct=kwargs)
        variable = str(self.get_option("variable") or "")
        return [controller_version(str(term), variable) for term in terms]
