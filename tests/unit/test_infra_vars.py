"""tests/infra/infra_vars.py: the testinfra suite judges a host by its variables as the play
sees them. The lab's inventory has Jinja values (pytorch_method by release, dist_launch_hosts
from hostvars over the play's hosts); unrendered, a check compared a template string and the
suite decided its skips from what the roles wrote instead (issue 25). Here the variables
come from an inventory dict shaped as `ansible-inventory --list` prints it (what testinfra's
ansible backend reads); Ansible's templar is real."""

from __future__ import annotations

from typing import Any

import pytest
from infra_vars import pattern_hosts, play_pattern, render, role_vars

LAUNCH_HOSTS = (
    "{{ ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars, "
    "'pytorch_method')) | rejectattr('1', 'equalto', 'none') | map(attribute='0') | list }}"
)
METHOD = "{{ 'pip' if lab_release | default('bookworm') == 'bookworm' else 'none' }}"


class Runner:
    """testinfra's AnsibleRunner, as far as infra_vars reads it."""

    def __init__(self, inventory: dict[str, Any]) -> None:
        self.inventory = inventory

    def get_variables(self, name: str) -> dict[str, Any]:
        groups = {g: sorted(b.get("hosts", [])) for g, b in self.inventory.items() if g != "_meta"}
        groups["all"] = sorted(self.inventory["_meta"]["hostvars"])
        return {
            **self.inventory["_meta"]["hostvars"][name],
            "inventory_hostname": name,
            "groups": groups,
            "group_names": [g for g, hosts in groups.items() if name in hosts],
        }


class Host:
    def __init__(self, runner: Runner, name: str) -> None:
        self.backend = type("Backend", (), {"ansible_runner": runner})()
        read = {"get_variables": lambda _: runner.get_variables(name)}
        self.ansible = type("Ansible", (), read)()


@pytest.fixture
def runner() -> Runner:
    common = {"pytorch_method": METHOD, "dist_launch_hosts": LAUNCH_HOSTS}
    return Runner(
        {
            "_meta": {
                "hostvars": {
                    "gpu-a": {**common, "lab_release": "bookworm"},
                    "gpu-b": {**common, "lab_release": "trixie"},
                    "cpu-a": {**common, "lab_release": "bookworm"},
                    "login": {**common, "lab_release": "bookworm"},  # in no play's group
                }
            },
            "gpu_nodes": {"hosts": ["gpu-a", "gpu-b"]},
            "cpu_nodes": {"hosts": ["cpu-a"]},
            "ungrouped": {"hosts": ["login"]},
        }
    )


def test_a_hosts_own_template_is_rendered_with_its_variables(runner: Runner) -> None:
    assert role_vars(Host(runner, "gpu-a"), "pytorch")["pytorch_method"] == "pip"
    assert role_vars(Host(runner, "gpu-b"), "pytorch")["pytorch_method"] == "none"


def test_hostvars_and_the_plays_hosts_are_those_of_the_role_playbook(runner: Runner) -> None:
    """dist_launch's play (playbooks/launch.yml) runs on gpu_nodes:cpu_nodes; the trixie host
    has pytorch_method none, and the host outside both groups is not in the play."""
    assert role_vars(Host(runner, "cpu-a"), "dist_launch")["dist_launch_hosts"] == [
        "cpu-a",
        "gpu-a",
    ]


def test_role_defaults_are_under_the_inventory_and_rendered_too(runner: Runner) -> None:
    values = role_vars(Host(runner, "gpu-a"), "pytorch")
    assert values["pytorch_venv_path"] == "/opt/gpuprov/venv"  # roles/pytorch/defaults/main.yml
    assert "{{" not in str(values)


def test_what_only_a_running_play_has_stays_as_written() -> None:
    text = "{{ ansible_facts['distribution'] }}"
    assert render({"x": text}, {}) == {"x": text}


def test_the_play_pattern_is_read_from_the_playbooks() -> None:
    assert play_pattern("pytorch") == "gpu_nodes:cpu_nodes"  # playbooks/pytorch.yml
    assert play_pattern("no_such_role") is None


def test_union_patterns_resolve_and_others_are_refused() -> None:
    groups = {"a": ["h1", "h2"], "b": ["h2", "h3"], "all": ["h1", "h2", "h3", "h4"]}
    assert pattern_hosts("a:b", groups) == ["h1", "h2", "h3"]
    assert pattern_hosts("a:h4", groups) == ["h1", "h2", "h4"]
    with pytest.raises(ValueError, match="only unions"):
        pattern_hosts("a:!b", groups)
