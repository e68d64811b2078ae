# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Lookup: a JSON report on the controller, with whether it exists and when it was written."""

from __future__ import annotations

DOCUMENTATION = r"""
name: controller_report
short_description: Read JSON reports on the controller, with their modification times
description:
  - For each term (a path on the controller), a dict with C(exists), C(mtime) (seconds since
    the epoch, null when absent) and C(data) (the parsed JSON, null when absent).
  - One read in the controller's process, where a delegated M(ansible.builtin.stat) and a
    M(ansible.builtin.file) lookup cost a module run per host and report (gpu_monitoring reads
    the smoke report of each host on every run).
  - A file that is not JSON is an error that names it.
options:
  _terms:
    description: Paths of JSON files on the controller.
    required: true
"""

EXAMPLES = r"""
- name: The smoke report of this host, if there is one
  ansible.builtin.debug:
    msg: "{{ lookup('gpuprov.fleet.controller_report', 'reports/smoke/h1.json') }}"
"""

RETURN = r"""
_raw:
  description: One dict per term (exists, mtime, data).
  type: list
  elements: dict
"""

import json
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


def controller_report(path: str) -> dict[str, Any]:
    """``path``'s existence, modification time and JSON content (None, None when absent)."""
    try:
        with Path(path).open("rb") as fh:
            mtime = Path(path).stat().st_mtime
            raw = fh.read()
    except FileNotFoundError:
        return {"exists": False, "mtime": None, "data": None}
    except OSError as exc:
        raise AnsibleLookupError(f"controller_report: cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise AnsibleLookupError(f"controller_report: {path} is not JSON: {exc}") from exc
    return {"exists": True, "mtime": mtime, "data": data}


class LookupModule(LookupBase):  # type: ignore[misc]
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        self.set_options(var_options=variables, direct=kwargs)
        return [controller_report(str(term)) for term in terms]
