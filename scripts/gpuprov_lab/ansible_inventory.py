"""Hosts, groups and variables of an Ansible inventory, read with Ansible's own API.

The same rules as ansible-playbook: inventory plugins (YAML, INI, scripts), group_vars/
and host_vars/ next to the inventory, group depth and priority. Values are returned as
written (Jinja is not rendered), except the connection variables (CONNECTION_KEYS) and the
keys a caller names (`render`), which are rendered with the host's variables.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONNECTION_KEYS = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_ssh_private_key_file",
    "ansible_ssh_common_args",
)


class InventoryError(Exception):
    """The inventory cannot be read (names the file and the cause)."""


@dataclasses.dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, dict[str, Any]]
    groups: dict[str, list[str]]


def _plain(value: Any) -> Any:
    """Ansible's tagged/lazy containers as plain dicts, lists and strings."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def _vault_secrets(loader: Any, password_file: str) -> list[Any]:
    """The process's vault secrets. ansible-core 2.19 keeps them in a context that can be
    initialized once per process (VaultSecretsContext): the first read sets it up from
    password_file, later reads reuse it (a second setup raises "already initialized")."""
    from ansible.cli import CLI
    from ansible.parsing.vault import VaultSecretsContext

    current = VaultSecretsContext.current(optional=True)
    if current is not None:
        return list(current.secrets)
    return list(CLI.setup_vault_secrets(loader, vault_ids=[], vault_password_files=[password_file]))


def read(path: Path, *, with_vars: bool = True, render: tuple[str, ...] = ()) -> Inventory:
    """Every host (with its merged variables unless with_vars is False) and group; the
    connection variables and the keys in `render` rendered with the host's variables."""
    if not path.exists():
        raise InventoryError(f"cannot read inventory {path}: no such file or directory")
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    try:
        loader = DataLoader()
        password_file = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
        if with_vars and password_file:
            loader.set_vault_secrets(_vault_secrets(loader, password_file))
        manager = InventoryManager(loader=loader, sources=[str(path)])
        if not manager.list_hosts():
            raise InventoryError(f"no hosts in {path} (not an Ansible inventory?)")
        variables = VariableManager(loader=loader, inventory=manager)
        hosts: dict[str, dict[str, Any]] = {}
        for host in manager.get_hosts():
            hv: dict[str, Any] = {}
            if with_vars:
                raw = variables.get_vars(host=host, include_hostvars=False)
                hv = {
                    k: _plain(v)
                    for k, v in raw.items()
                    if k not in {"groups", "group_names", "omit", "playbook_dir"}
                    and not k.startswith("ansible_play")
                }
                templar = Templar(loader=loader, variables=raw)
                for key in (*CONNECTION_KEYS, *render):
                    if key in raw:
                        hv[key] = _plain(templar.template(raw[key]))
            hosts[host.name] = hv
        groups = {
            name: sorted(h.name for h in group.get_hosts())
            for name, group in manager.groups.items()
            if name != "ungrouped"
        }
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "vault" in first.lower():
            first += " (set ANSIBLE_VAULT_PASSWORD_FILE to the vault's password file)"
        raise InventoryError(f"cannot read inventory {path}: {first}") from exc
    return Inventory(path, hosts, groups)


def load(path: Path, *, with_vars: bool = True) -> dict[str, dict[str, Any]]:
    """host -> variables (see read)."""
    return read(path, with_vars=with_vars).hosts
