# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Ansible filter: the digest of a role's inputs, for the gpuprov_state probe (issue 19)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
name: gpuprov_state_inputs
short_description: One digest of what a role's result depends on
description:
  - Hashes the role's variables (names and values, secrets included; only the digest leaves
    the controller; the controller's report directories, C(*_report_dir) and
    C(*_report_root), how playbooks/driver.yml rolls a change out, C(gpuprov_driver_*)
    and C(nvidia_driver_defer_changes), and what playbooks/plan.yml sets (C(gpuprov_plan),
    which the roles that read it pass in O(facts), and C(nvidia_driver_packaged_*)), left
    out), the host facts the role reads, every file
    of the role (tasks, templates, files, defaults, vars) and every file of gpuprov's
    plugins (less the callbacks, which run on the controller alone), scripts and compat
    package (the smoke layers, the export check and the fatbin reader that roles copy; the
    data). A change to any of them makes the role's next probe
    say "inputs changed", so the role runs in full.
positional: role_path, facts
options:
  _input:
    description: The role's variables, name -> value.
    type: dict
    required: true
  role_path:
    description: The role's directory (Ansible's role_path).
    type: str
    required: true
  facts:
    description: The host facts the role depends on (distribution, kernel, ...).
    type: dict
    default: {}
"""

PLUGINS = Path(__file__).absolute().parent.parent
# The scripts roles copy to hosts (the smoke layers, the launch and export checks).
SCRIPTS = PLUGINS.parent / "scripts" / "smoke"
# The compat package: its data decides the smoke floors and tables; its stdlib-only modules
# (the fatbin reader) are copied to hosts.
COMPAT = PLUGINS.parent / "compat"


# Plugin directories whose files change nothing on a host: callbacks print and time on the
# controller. Editing one must not re-run every role on the next run.
CONTROLLER_PLUGINS = ("callback",)


@lru_cache(maxsize=32)
def tree_digest(root: str, skip: tuple[str, ...] = ()) -> str:
    """sha256 over the relative names and contents of the files under ``root``
    (__pycache__, editor back-ups and the top-level directories named in ``skip`` left out)."""
    digest = hashlib.sha256()
    for parent, dirs, files in os.walk(root):
        left_out = skip if parent == root else ()
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d not in left_out)
        for name in sorted(files):
            if name.endswith(("~", ".pyc", ".swp")):
                continue
            path = Path(parent) / name
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


# Where the controller keeps its reports is not an input of what a role does on a host: a
# run from another checkout (another admin, a CI workspace) must not re-run every role.
CONTROLLER_ONLY = ("_report_dir", "_report_root")
# How playbooks/driver.yml rolls a driver change out (batches, failure limit, drain and undrain
# hooks; a node verified in the first play with nvidia_driver_defer_changes on must match the
# record of its batch, with it off) changes nothing on a host: no role's input.
ROLLOUT_ONLY = ("gpuprov_driver_", "nvidia_driver_defer_changes")


# What playbooks/plan.yml sets (the plan, and the driver branches the OS packages, which only
# the planner reads) is no variable input: the roles that read the plan pass it with their
# facts ('plan'), the same whether plan.yml planned in this run or the role planned the host
# itself (roles/gpuprov_report, entry point plan) when its playbook ran alone; a role that
# does not read the plan is not re-run when it changes.
PLAN_FACTS = frozenset(
    {"gpuprov_plan", "nvidia_driver_packaged_branches", "nvidia_driver_packaged_os"}
)


def is_input(name: str) -> bool:
    """Whether a variable of a role's state_vars is an input of what the role does on a host."""
    return (
        not name.endswith(CONTROLLER_ONLY)
        and not name.startswith(ROLLOUT_ONLY)
        and name not in PLAN_FACTS
    )


def plain(value: Any) -> Any:
    """``value`` with every mapping key as a string (JSON sorts keys; 1 and "1" mix in some
    variables, e.g. gpu_monitoring_dcgm_tags)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def state_inputs(
    values: Mapping[str, Any], role_path: str, facts: Mapping[str, Any] | None = None
) -> str:
    """The digest (hex) of ``values`` (less the controller's report directories), ``facts``,
    the role's files and gpuprov's plugins (less its callbacks), scripts and compat package."""
    doc = {
        "values": plain({k: v for k, v in values.items() if is_input(k)}),
        "facts": plain(facts or {}),
        "role": tree_digest(str(Path(role_path).absolute())),
        "plugins": tree_digest(str(PLUGINS), CONTROLLER_PLUGINS),
        "scripts": tree_digest(str(SCRIPTS)) if SCRIPTS.is_dir() else "",
        "compat": tree_digest(str(COMPAT)) if COMPAT.is_dir() else "",
    }
    text = json.dumps(doc, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gpuprov_state_inputs": state_inputs}
