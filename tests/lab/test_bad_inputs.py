"""The bad-input corpus against real lab hosts: site.yml stops before any host changes.

tests/lab/bad_inputs.yaml holds the corpus (values of every role). One site.yml run covers
the controller stage, one run each the hardware stage:

1. controller stage: one inventory alias of the lab's GPU host per corpus entry (same SSH
   address, one bad value each), all in one run. validate_inventory must print exactly one
   line per entry (`host: variable = value: what is allowed`) and nothing for the real hosts,
   and no later play may start;
2. hardware stage, one run each: the lab's CPU host put into gpu_nodes (no GPU detected), a
   torch pin that does not run on the K40m, and an object_storage user with no account; the
   later, read-only plays of validate.yml refuse them.

Every run ends with every lab host exactly as before (installed packages with their
selections, /etc/apt, /etc/docker, the gpuprov facts), and the output carries no argument
spec dump and no Ansible internals. Pure-Python checks of every entry are in
tests/unit/test_inventory_check.py.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuprov_lab.run_doc import json_document

Lab = Any  # tests/lab/conftest.py's Lab

CORPUS = yaml.safe_load((Path(__file__).with_name("bad_inputs.yaml")).read_text())
SITE = "playbooks/site.yml"
SNAPSHOT = (
    "LC_ALL=C dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' | sort; "
    "find /etc/apt /etc/docker /etc/modprobe.d /etc/ansible /etc/cdi -type f "
    "-exec sha256sum {} + 2>/dev/null | sort; "
    # /opt/gpuprov holds the torch environments (2.2 GB, 66k files on a converged host):
    # checksums took 14 s a host, 5 min of this module. Path, size, mode, owner and mtime of
    # every file and directory catch any write (a rewrite with equal bytes included).
    # A converged host's running services write their logs there (TorchServe: every minute).
    "find /opt/gpuprov -not -path '*/logs/*' -printf '%p %s %m %U %T@\\n' 2>/dev/null | sort; true"
)
INTERNALS = ("Finalization of task args", "argument_spec", "Traceback", "Validating arguments")


def _host_of_profile(lab: Lab, profile: str) -> str:
    return next(h for h, v in sorted(lab.hosts.items()) if v.get("lab_profile") == profile)


def _snapshots(lab: Lab) -> dict[str, str]:
    return {h: lab.ssh(h, SNAPSHOT).stdout for h in sorted(lab.hosts)}


def _json_doc(stdout: str) -> dict[str, Any]:
    doc = json_document(stdout, need=("plays",))
    assert doc is not None, f"no json callback output in:\n{stdout[-3000:]}"
    return doc


def _failures(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(play, host, msg) of every failed result."""
    return [
        (play["play"]["name"], host, str(result.get("msg", "")))
        for play in doc["plays"]
        for task in play["tasks"]
        for host, result in task["hosts"].items()
        if result.get("failed")
    ]


def _with_inventory(lab: Lab, tmp_path: Path, inventory: dict[str, Any]) -> Lab:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return dataclasses.replace(lab, inventory=path)


def _gpu_group(inventory: dict[str, Any], profile: str) -> dict[str, Any]:
    children = inventory["all"]["children"]["lab"]["children"]["gpu_nodes"]["children"]
    group: dict[str, Any] = children[f"gpu_{profile}"]
    if group.get("hosts") is None:
        group["hosts"] = {}
    return group


def test_controller_stage_corpus_stops_site_before_any_change(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [e for e in CORPUS if e.get("stage", "controller") == "controller"]
    real = _host_of_profile(lab, "k40m")
    inventory = yaml.safe_load(lab.inventory.read_text())
    hosts = inventory["all"]["children"]["lab"]["hosts"]
    aliases = {}
    for i, entry in enumerate(entries):
        alias = f"bad-{i:02d}"
        aliases[alias] = entry
        hosts[alias] = {**copy.deepcopy(hosts[real]), **entry["vars"]}
        _gpu_group(inventory, "k40m")["hosts"][alias] = None
    bad_lab = _with_inventory(lab, tmp_path, inventory)
    before = _snapshots(lab)
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.builtin.json")
    proc = bad_lab.ansible_playbook(SITE, "-e", f"gpuprov_report_dir={tmp_path / 'reports'}")
    assert proc.returncode != 0
    doc = _json_doc(proc.stdout)
    assert [p["play"]["name"] for p in doc["plays"]] == ["Validate the inventory"]
    failures = _failures(doc)
    assert len({msg for _, _, msg in failures}) == 1, failures
    lines = failures[0][2].splitlines()
    by_host: dict[str, list[str]] = {}
    for line in lines:
        by_host.setdefault(line.split(":", 1)[0], []).append(line)
    assert set(by_host) == set(aliases), f"lines for hosts without a bad value: {by_host}"
    for alias, entry in aliases.items():
        assert any(entry["expect"] in line for line in by_host[alias]), (alias, by_host[alias])
        # one line per bad value: an entry sets one value, or two that conflict
        assert len(by_host[alias]) <= len(entry["vars"]) + 1, by_host[alias]
    for word in INTERNALS:
        assert word not in failures[0][2]
    assert _snapshots(lab) == before


HARDWARE = [e for e in CORPUS if e.get("stage") == "hardware"]


@pytest.mark.parametrize("entry", HARDWARE, ids=[e["profile"] for e in HARDWARE])
def test_hardware_stage_stops_site_before_any_change(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: dict[str, Any]
) -> None:
    """One run per entry: any_errors_fatal ends the play at the first host that fails."""
    inventory = yaml.safe_load(lab.inventory.read_text())
    lab_group = inventory["all"]["children"]["lab"]
    hosts = lab_group["hosts"]
    real = _host_of_profile(lab, entry["profile"])
    alias = "hw-00"
    hosts[alias] = {**copy.deepcopy(hosts[real]), **entry["vars"]}
    # into gpu_nodes: for the CPU host's alias, a GPU node whose GPU is not detected
    _gpu_group(inventory, "k40m")["hosts"][alias] = None
    # the real hosts are not part of this run
    for name in list(lab.hosts):
        hosts.pop(name)
        for body in [lab_group["children"]["cpu_nodes"], *_all_gpu_groups(inventory)]:
            (body.get("hosts") or {}).pop(name, None)
    bad_lab = _with_inventory(lab, tmp_path, inventory)
    before = _snapshots(lab)
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.builtin.json")
    proc = bad_lab.ansible_playbook(SITE, "-e", f"gpuprov_report_dir={tmp_path / 'reports'}")
    assert proc.returncode != 0
    doc = _json_doc(proc.stdout)
    assert "Plan the GPU stack of each host" not in [p["play"]["name"] for p in doc["plays"]]
    failures = {host: msg for _, host, msg in _failures(doc)}
    assert set(failures) == {alias}, failures
    assert entry["expect"] in failures[alias]
    assert "\n" not in failures[alias].strip()
    for word in INTERNALS:
        assert word not in failures[alias]
    assert _snapshots(lab) == before


def _all_gpu_groups(inventory: dict[str, Any]) -> list[dict[str, Any]]:
    children = inventory["all"]["children"]["lab"]["children"]["gpu_nodes"]["children"]
    return list(children.values())
