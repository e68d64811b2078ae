# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Lookup: where this host's PyTorch environment lives (the plan's ``environment`` block)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: torch_environment
short_description: Where the host's PyTorch environment lives (method, prefix, interpreter)
description:
  - The plan's C(environment) block (docs/design.md, "The host plan"), from the variables the
    task sees - C(pytorch_method), C(pytorch_venv_path), C(pytorch_conda_env_path),
    C(pytorch_container_image), C(jupyterlab_kernel_name), C(pytorch_python) - and, for those
    not set, the pytorch and jupyterlab roles' defaults (their one source).
  - Every role that runs the host's torch reads it here (dist_launch, gpu_smoke,
    model_serving, gpu_monitoring, jupyterlab, object_storage); playbooks/plan.yml puts it in
    the plan. C(prefix) and C(interpreter) are null for the container and none methods.
  - C(base_interpreter) (pip only, else null) - the interpreter that makes the environment
    (C(pytorch_python)), for a role that prepares packages before the environment exists.
  - C(install_lock) and C(install_timeout) (pip only, else null) - the lock the pytorch
    role's background install holds, which every role waits for (at most that many seconds)
    before it installs into the environment.
  - Takes no terms; returns one dict.
"""

EXAMPLES = r"""
- name: Run the host's torch
  ansible.builtin.command:
    argv: ["{{ lookup('gpuprov.fleet.torch_environment')['interpreter'] }}", -c, "import torch"]
"""

RETURN = r"""
_raw:
  description: >-
    C(method), C(prefix), C(interpreter), C(kernel_name), C(image), C(base_interpreter),
    C(install_lock), C(install_timeout).
  type: list
  elements: dict
"""

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# The collection's roles/, beside plugins/: whose defaults give each variable.
ROLES = Path(__file__).resolve().parents[2] / "roles"
VARIABLES = {
    "pytorch_method": "pytorch",
    "pytorch_venv_path": "pytorch",
    "pytorch_conda_env_path": "pytorch",
    "pytorch_container_image": "pytorch",
    "jupyterlab_kernel_name": "jupyterlab",
    "pytorch_python": "pytorch",
}


def role_default(role: str, name: str, roles: Path = ROLES) -> str:
    """``name``'s value in ``roles/<role>/defaults/main.yml`` ("" when it has none)."""
    import yaml

    path = roles / role / "defaults" / "main.yml"
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleLookupError(f"torch_environment: cannot read {path}: {exc}") from exc
    return str(doc.get(name) or "")


def torch_environment(values: dict[str, Any], roles: Path = ROLES) -> dict[str, Any]:
    """The block from the values a task sees (None or absent: the role's default)."""
    from compat import CompatError
    from compat.environment import environment

    given = {
        name: str(values[name]) if values.get(name) is not None else role_default(role, name, roles)
        for name, role in VARIABLES.items()
    }
    try:
        return environment(*given.values())
    except CompatError as exc:
        raise AnsibleLookupError(f"torch_environment: {exc}") from exc


class LookupModule(LookupBase):  # type: ignore[misc]  # ansible-core ships no type hints
    def run(
        self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Any]:
        if terms:
            raise AnsibleLookupError("torch_environment takes no terms")
        seen = variables or {}
        values = {name: self._templar.template(seen[name]) for name in VARIABLES if name in seen}
        return [torch_environment(values)]
