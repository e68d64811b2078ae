"""Behaviour of a host after the jupyterlab and object_storage roles (playbooks/notebook.yml,
playbooks/storage.yml): service user, bind address, file modes.

pytest tests/infra/test_notebook.py --hosts=ansible://all --ansible-inventory=INV

Hosts without the unit (jupyterlab_method: none) skip the notebook tests; the lab test
tests/lab/test_notebook_storage.py checks that every torch host has it.
"""

from __future__ import annotations

from typing import Any

import pytest

# Attached to failure reports by conftest.py.
JOURNAL_UNITS = ("jupyterlab",)


@pytest.fixture
def nb(host: Any, root: Any, jupyterlab_vars: dict[str, Any]) -> dict[str, Any]:
    values = jupyterlab_vars
    unit = f"/etc/systemd/system/{values['jupyterlab_service_name']}.service"
    with root():
        if not host.file(unit).exists:
            pytest.skip(f"no {unit} (jupyterlab_method: none on this host)")
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


@pytest.fixture
def storage(object_storage_vars: dict[str, Any]) -> dict[str, Any]:
    values = object_storage_vars
    if not values["object_storage_users"]:
        pytest.skip("object_storage_users is empty")
    return values


@pytest.mark.parametrize("name", ["config", "credentials"])
def test_aws_files_are_private_to_each_user(
    host: Any, root: Any, storage: dict[str, Any], name: str
) -> None:
    for user in storage["object_storage_users"]:
        home = host.user(user).home
        with root():
            directory = host.file(f"{home}/.aws")
            assert directory.mode == 0o700
            assert directory.user == user
            f = host.file(f"{home}/.aws/{name}")
            assert f.mode == 0o600
            assert f.user == user


def test_awscli_is_in_the_tools_venv(host: Any, storage: dict[str, Any]) -> None:
    aws = host.file("/usr/local/bin/aws")
    assert aws.is_symlink
    assert aws.linked_to == f"{storage['object_storage_tools_venv']}/bin/aws"
    version = host.run("%s/bin/aws --version", storage["object_storage_tools_venv"])
    assert f"aws-cli/{storage['object_storage_awscli_version']} " in version.stdout + version.stderr
