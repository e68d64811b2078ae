"""The roles read facts only as ``ansible_facts[...]``: gpuprov's ansible.cfg sets
``inject_facts_as_vars = false`` (the controller no longer copies and cleans every fact for
every task and host), and ansible-core plans to drop the top-level copies. A fact read as a
top-level variable (``ansible_os_family``, ``gpu_info``, ``getent_passwd``) would be undefined
here, and only on the paths a lab run takes would a test see it; collection users with the
setting on would never notice. This scans every expression of the roles, playbooks and
inventories."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# ansible_* variables that are not facts: connection, magic and play variables.
NOT_FACTS = {
    "ansible_facts", "ansible_check_mode", "ansible_diff_mode", "ansible_play_hosts",
    "ansible_play_hosts_all", "ansible_play_batch", "ansible_play_name", "ansible_host",
    "ansible_port", "ansible_user", "ansible_connection", "ansible_python_interpreter",
    "ansible_become", "ansible_become_user", "ansible_become_method", "ansible_failed_result",
    "ansible_failed_task", "ansible_loop", "ansible_loop_var", "ansible_index_var",
    "ansible_run_tags", "ansible_skip_tags", "ansible_version", "ansible_playbook_python",
    "ansible_config_file", "ansible_forks", "ansible_limit", "ansible_verbosity",
    "ansible_search_path", "ansible_role_name", "ansible_parent_role_names",
    "ansible_collection_name", "ansible_inventory_sources", "ansible_private_key_file",
    "ansible_ssh_common_args", "ansible_ssh_private_key_file", "ansible_dependent_role_names",
    "ansible_role_names", "ansible_play_role_names", "ansible_managed",
}  # fmt: skip
# Facts of gpuprov's own modules and the ones the roles call (gpu_info, getent).
OWN_FACTS = r"gpu_info|gpu_info_scan|getent_[a-z]+"
# A name as a variable: not an attribute or a key (preceded by ".", a quote or "[").
BARE = re.compile(rf"(?<![\w.'\"\[])(ansible_[a-z0-9_]+|{OWN_FACTS})\b(?!\s*[=(])")
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
CONDITIONS = ("when", "that", "failed_when", "changed_when", "until")


def _expressions(node: Any, key: str = "") -> Iterator[str]:
    """Every Jinja expression in a YAML document: templated strings, and the bare
    expressions of conditionals."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _expressions(v, str(k))
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item, key)
    elif isinstance(node, str):
        if key in CONDITIONS:
            yield node
        else:
            yield from JINJA.findall(node)


def _files() -> list[Path]:
    found = [
        p
        for d in ("roles", "playbooks", "inventories")
        for p in sorted((ROOT / d).rglob("*"))
        if p.suffix in (".yml", ".yaml", ".j2") and p.is_file()
    ]
    return found


def _top_level_facts(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".j2":
        expressions = JINJA.findall(text)
    else:
        expressions = [e for doc in yaml.safe_load_all(text) for e in _expressions(doc)]
    return sorted({m for e in expressions for m in BARE.findall(e) if m not in NOT_FACTS})


def test_the_scan_sees_a_top_level_fact(tmp_path: Path) -> None:
    book = tmp_path / "t.yml"
    book.write_text(
        '- name: t\n  ansible.builtin.debug:\n    msg: "{{ ansible_os_family }}"\n'
        "  when: gpu_info.gpus | length > 0 and ansible_facts['distribution'] == 'Debian'\n"
    )
    assert _top_level_facts(book) == ["ansible_os_family", "gpu_info"]


def test_the_files_are_found() -> None:
    assert len(_files()) > 100


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_facts_are_read_only_through_ansible_facts(path: Path) -> None:
    assert _top_level_facts(path) == [], "read them as ansible_facts['...']"
