# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filters that judge a secret without revealing it (used by jupyterlab, object_storage)
and whether a bind address keeps a service on the host (jupyterlab; inventory_check)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpuprov_secret_problems
short_description: Why a secret (token, key) is not fit to use; empty list when it is
description:
  - Returns a list of one-line reasons, each naming the variable and never the value
    C(empty), C(shorter than N characters), C(a known placeholder), C(one repeated character),
    C(an unrendered template or angle-bracket placeholder).
  - Placeholders are compared case-insensitively, and a value containing C(EXAMPLE) (AWS's
    documented example keys) or C(CHANGEME) counts as one.
positional: name
options:
  _input:
    description: The secret.
    type: raw
    required: true
  name:
    description: The variable's name, used in the reasons.
    type: str
    required: true
  min_length:
    description: Minimum length.
    type: int
    default: 1
  placeholders:
    description: Values refused as placeholders.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Refuse a weak token before anything changes
  ansible.builtin.assert:
    that: (jupyterlab_token | gpuprov_secret_problems('jupyterlab_token', 32)) | length == 0
  no_log: true
"""

RETURN = r"""
_value:
  description: Reasons the secret is refused (empty when it is fine); none contains the value.
  type: list
  elements: str
"""

import ipaddress
import re
from collections.abc import Callable, Sequence
from typing import Any

_EMBEDDED = ("EXAMPLE", "CHANGEME")
_TEMPLATE = re.compile(r"^\s*(<[^>]*>|\{\{.*\}\}|\$\{[^}]*\}|x{3,}|\*{3,})\s*$", re.IGNORECASE)


def secret_problems(
    value: Any, name: str, min_length: int = 1, placeholders: Sequence[str] = ()
) -> list[str]:
    """One-line reasons why `value` is not a usable secret; [] when it is."""
    text = "" if value is None else str(value)
    if not text.strip():
        return [f'{name} is empty (set it from Vault, e.g. {name}: "{{{{ vault_{name} }}}}")']
    problems: list[str] = []
    known = {p.lower() for p in placeholders}
    if text.strip().lower() in known or any(e in text.upper() for e in _EMBEDDED):
        problems.append(f"{name} is a known placeholder, not a secret")
    elif _TEMPLATE.match(text) or len(set(text)) == 1:
        problems.append(f"{name} looks like a placeholder (a template, <...> or one repeated char)")
    if len(text) < min_length:
        problems.append(f"{name} is {len(text)} characters long; the minimum is {min_length}")
    return problems


LOOPBACK_NAMES = ("localhost",)


def is_loopback(address: Any) -> bool:
    """Whether a bind address keeps a service on the host (127.0.0.0/8, ::1, localhost)."""
    text = str(address or "").strip().strip("[]")
    if text.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_secret_problems": secret_problems, "gpuprov_is_loopback": is_loopback}
