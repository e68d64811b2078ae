"""Behaviour of a host after the dist_launch role (playbooks/launch.yml).

pytest tests/infra/test_launch.py --hosts=ansible://all --ansible-inventory=INV

The role writes /etc/gpuprov/launch.json on the hosts of its launch group only
(dist_launch_hosts, rendered from the inventory as the play sees it); the other hosts are
skipped with that reason, and a host of the group without the file fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import as_root, role_vars, skip_outside_play

JOURNAL_UNITS = ("ssh",)
CONFIG = "/etc/gpuprov/launch.json"


@pytest.fixture
def launch(host: Any) -> dict[str, Any]:
    """launch.json of a host in the launch group; the group comes from the inventory
    (dist_launch_hosts as the play renders it), never from what the role wrote."""
    skip_outside_play(host, "dist_launch")
    name = host.ansible.get_variables()["inventory_hostname"]
    group = role_vars(host, "dist_launch")["dist_launch_hosts"]
    assert isinstance(group, list), f"dist_launch_hosts did not render to a list: {group!r}"
    if name not in group:
        pytest.skip(f"not in dist_launch_hosts ({', '.join(group) or 'empty'})")
    f = host.file(CONFIG)
    assert f.exists, f"{name} is in dist_launch_hosts but {CONFIG} is absent"
    data = json.loads(f.content_string)
    assert isinstance(data, dict)
    return data


def test_training_user_is_unprivileged_with_its_own_key(host: Any, launch: dict[str, Any]) -> None:
    user = role_vars(host, "dist_launch")["dist_launch_user"]
    u = host.user(user)
    assert u.exists
    assert u.uid != 0
    assert "sudo" not in u.groups
    with as_root(host):
        key = host.file(f"{u.home}/.ssh/id_ed25519")
        assert key.exists
        assert (key.user, key.mode) == (user, 0o600)
        assert host.file(f"{u.home}/.ssh/authorized_keys").mode == 0o600


def test_every_host_of_the_group_is_trusted_and_pinned(host: Any, launch: dict[str, Any]) -> None:
    user = role_vars(host, "dist_launch")["dist_launch_user"]
    home = host.user(user).home
    with as_root(host):
        authorized = host.file(f"{home}/.ssh/authorized_keys").content_string
        known = host.file(f"{home}/.ssh/known_hosts").content_string
    assert len([x for x in authorized.splitlines() if x.startswith("ssh-ed25519 ")]) == len(
        launch["hosts"]
    )
    pinned = {line.split()[0] for line in known.splitlines() if line and not line.startswith("#")}
    for h in launch["hosts"]:
        assert f"{h['name']},{h['address']}" in pinned, h


def test_hostfile_lists_the_group_in_order(host: Any, launch: dict[str, Any]) -> None:
    lines = [
        x.split("#")[0].split()
        for x in host.file(launch["hostfile"]).content_string.splitlines()
        if x.strip() and not x.startswith("#")
    ]
    assert [[h["address"], f"slots={h['slots']}"] for h in launch["hosts"]] == lines


def test_interface_holds_this_hosts_address(host: Any, launch: dict[str, Any]) -> None:
    addresses = host.interface(launch["ifname"]).addresses
    assert any(h["address"] in addresses for h in launch["hosts"]), (launch["ifname"], addresses)


def test_open_mpi_and_the_wrapper_are_installed(host: Any, launch: dict[str, Any]) -> None:
    assert host.package("openmpi-bin").is_installed
    assert host.file(launch["launcher"]).mode & 0o111
    assert host.run("%s --help", launch["launcher"]).rc == 0


def test_sshd_listens(host: Any, launch: dict[str, Any]) -> None:
    assert host.socket("tcp://0.0.0.0:22").is_listening or host.socket("tcp://:::22").is_listening
