"""How the testinfra suite sees a host's variables: as the play that applies a role does.

Role defaults overlaid with the host's inventory variables, Jinja rendered by Ansible's own
templar with every role's defaults, the host's inventory variables, ``hostvars`` and the
hosts of the playbook play that applies the role. Pure, so tests/unit/test_infra_vars.py
checks it without hosts; tests/infra/conftest.py uses it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
PLAYBOOKS = ROLES.parent / "playbooks"


@functools.cache
def _defaults(role: str) -> dict[str, Any]:
    path = ROLES / role / "defaults" / "main.yml"
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    return dict(data or {})


def _all_defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for role in sorted(p.name for p in ROLES.iterdir() if p.is_dir()):
        merged.update(_defaults(role))
    return merged


def _trusted(value: Any) -> Any:
    """``value`` with every string marked as a template source (ansible-core 2.19 renders
    only trusted strings; these come from the operator's own inventory and our defaults)."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def render(values: dict[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as a play sees them: Jinja in inventory values and role defaults rendered
    by Ansible's own templar with ``variables``. A value that needs what only a running play
    has (gathered facts, registered results, a vault secret) is returned as written, so a
    check against it fails visibly instead of passing by accident."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    templar = Templar(loader=DataLoader(), variables=_trusted(dict(variables)))
    result: dict[str, Any] = {}
    for key, value in values.items():
        try:
            result[key] = templar.template(_trusted(value))
        except AnsibleError:
            result[key] = value
    return result


@functools.cache
def play_pattern(role: str) -> str | None:
    """The host pattern of the playbook play that applies ``role`` (playbooks/*.yml)."""
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            names = [r if isinstance(r, str) else r.get("role") for r in play.get("roles") or []]
            if role in names:
                return str(play["hosts"])
    return None


def pattern_hosts(pattern: str, groups: Mapping[str, list[str]]) -> list[str]:
    """The hosts of a ``group:group`` union pattern (what gpuprov's playbooks use)."""
    if any(c in pattern for c in "!&*,[]~"):
        raise ValueError(f"host pattern {pattern!r}: only unions (a:b) are resolved here")
    found: set[str] = set()
    for part in pattern.split(":"):
        found.update(groups.get(part) or ([part] if part in groups.get("all", []) else []))
    return sorted(found)


class _HostView(Mapping[str, Any]):
    """One host's variables as ``hostvars[name]``: each rendered when read."""

    def __init__(self, play: _PlayVars, name: str) -> None:
        self._play, self._name = play, name

    def __getitem__(self, key: str) -> Any:
        variables = self._play.variables(self._name)
        return render({key: variables[key]}, variables)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._play.variables(self._name))

    def __len__(self) -> int:
        return len(self._play.variables(self._name))


class _PlayVars(Mapping[str, Any]):
    """``hostvars`` of a play over ``hosts``, and the variables a template of one of them sees:
    every role's defaults, the host's inventory variables, hostvars and the play's hosts."""

    def __init__(self, runner: Any, hosts: list[str]) -> None:
        self._runner, self.hosts = runner, hosts

    def variables(self, name: str) -> dict[str, Any]:
        return {
            **_all_defaults(),
            **self._runner.get_variables(name),
            "hostvars": self,
            "ansible_play_hosts_all": self.hosts,
            "ansible_play_hosts": self.hosts,
        }

    def __getitem__(self, name: str) -> _HostView:
        if name not in self.hosts and name not in self._runner.inventory["_meta"]["hostvars"]:
            raise KeyError(name)
        return _HostView(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._runner.inventory["_meta"]["hostvars"])

    def __len__(self) -> int:
        return len(self._runner.inventory["_meta"]["hostvars"])


def host_vars(host: Any) -> dict[str, Any]:
    """The host's inventory variables (testinfra's ansible backend), unrendered."""
    try:
        inventory: dict[str, Any] = host.ansible.get_variables()
    except (AttributeError, RuntimeError):  # not the ansible backend
        inventory = {}
    return inventory


def role_vars(host: Any, role: str) -> dict[str, Any]:
    """Role defaults overlaid with the host's inventory variables of that role, rendered
    (``render``) as the role's play sees them: with every role's defaults, the host's
    inventory variables, ``hostvars`` and the hosts of the playbook play that applies the
    role (``play_pattern``), so values such as the lab's Jinja ones are judged by what they
    are on this host."""
    inventory = host_vars(host)
    result = dict(_defaults(role))
    result.update({k: v for k, v in inventory.items() if k.startswith(f"{role}_")})
    runner = getattr(getattr(host, "backend", None), "ansible_runner", None)
    pattern = play_pattern(role)
    if runner is None or pattern is None or not inventory:
        return render(result, {**_all_defaults(), **inventory})
    play = _PlayVars(runner, pattern_hosts(pattern, inventory.get("groups") or {}))
    return render(result, play.variables(str(inventory["inventory_hostname"])))
