"""Behaviour of a host after the jupyterlab role (playbooks/jupyterlab.yml): service user, bind
address, file modes.

pytest tests/infra/test_jupyterlab.py --hosts=ansible://all --ansible-inventory=INV

Hosts with jupyterlab_method: none (from the inventory, rendered as the play sees it) skip
the notebook tests, and a host without the unit otherwise fails; the lab test
tests/lab/test_jupyterlab_storage.py checks that every torch host has it.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import skip_outside_play

# Attached to failure reports by conftest.py.
JOURNAL_UNITS = ("jupyterlab",)


@pytest.fixture
def nb(host: Any, root: Any, jupyterlab_vars: dict[str, Any]) -> dict[str, Any]:
    skip_outside_play(host, "jupyterlab")
    values = jupyterlab_vars
    if values["jupyterlab_method"] == "none":
        reason = values.get("jupyterlab_skip_reason") or "no reason given"
        pytest.skip(f"jupyterlab_method: none on this host ({reason})")
    unit = f"/etc/systemd/system/{values['jupyterlab_service_name']}.service"
    with root():
        assert host.file(unit).exists, f"jupyterlab_method {values['jupyterlab_method']}: no {unit}"
    return values


def test_service_runs_as_unprivileged_user(host: Any, nb: dict[str, Any]) -> None:
    service = host.service(nb["jupyterlab_service_name"])
    assert service.is_running
    assert service.is_enabled
    props = host.run(
        "systemctl show -p User -p Restart -p WorkingDirectory -p MainPID %s",
        nb["jupyterlab_service_name"],
    ).stdout
    assert f"User={nb['jupyterlab_user']}" in props
    assert "Restart=on-failure" in props
    assert f"WorkingDirectory={nb['jupyterlab_notebook_dir']}" in props
    pid = next(line.split("=", 1)[1] for line in props.splitlines() if line.startswith("MainPID="))
    owner = host.run("ps -o user= -p %s", pid).stdout.strip()
    assert owner == nb["jupyterlab_user"]
    assert owner != "root"
    assert host.user(nb["jupyterlab_user"]).uid != 0


def test_listens_on_the_configured_address_only(host: Any, root: Any, nb: dict[str, Any]) -> None:
    port = nb["jupyterlab_port"]
    with root():
        listening = host.run("ss -Htln 'sport = :%s'", str(port)).stdout.split("\n")
    addresses = {line.split()[3].rsplit(":", 1)[0] for line in listening if line.strip()}
    assert addresses == {nb["jupyterlab_bind_address"]}, addresses


@pytest.mark.parametrize(
    ("name", "mode", "owner_key"),
    [
        ("token.env", 0o600, "jupyterlab_user"),
        ("jupyter_server_config.json", 0o640, None),
    ],
    ids=["token", "config"],
)
def test_config_file_modes(
    host: Any, root: Any, nb: dict[str, Any], name: str, mode: int, owner_key: str | None
) -> None:
    with root():
        f = host.file(f"{nb['jupyterlab_config_dir']}/{name}")
        assert f.is_file
        assert f.mode == mode
        assert f.user == (nb[owner_key] if owner_key else "root")
        assert f.group == nb["jupyterlab_group"]


def test_unit_holds_no_token(host: Any, root: Any, nb: dict[str, Any]) -> None:
    with root():
        unit = host.file(f"/etc/systemd/system/{nb['jupyterlab_service_name']}.service")
        assert "EnvironmentFile=" in unit.content_string
        assert "JUPYTER_TOKEN" not in unit.content_string
        assert "token=" not in unit.content_string.lower()
