"""Behaviour of a host after the model_serving role (playbooks/serving.yml).

pytest tests/infra/test_serving.py --hosts=ansible://all --ansible-inventory=INV

Each stack of the host's ``model_serving_stacks`` runs as the unprivileged service user under
systemd with a restart policy, and listens only on ``model_serving_bind_address``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

# Attached to failure reports by conftest.py.
JOURNAL_UNITS = ("gpuprov-serve-flask", "gpuprov-serve-torchserve", "gpuprov-serve-triton")

# Each stack's port variables: the role's own list (roles/model_serving/vars/main.yml).
PORTS: dict[str, list[str]] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "roles/model_serving/vars/main.yml").read_text()
)["_model_serving_port_variables"]


@pytest.fixture
def serving(host: Any, serving_vars: dict[str, Any]) -> dict[str, Any]:
    v = dict(serving_vars)
    if isinstance(v["model_serving_stacks"], str):
        # A Jinja expression (the lab's group_vars) that testinfra does not render: the stacks
        # are those whose unit the role wrote on this host.
        v["model_serving_stacks"] = [
            s
            for s in sorted(PORTS)
            if host.file(f"/etc/systemd/system/gpuprov-serve-{s}.service").exists
        ]
    if not v["model_serving_stacks"]:
        pytest.skip("model_serving_stacks is empty on this host")
    return v


@pytest.mark.parametrize("stack", sorted(PORTS))
def test_service_runs_as_the_unprivileged_user_with_restart(
    host: Any, serving: dict[str, Any], stack: str
) -> None:
    if stack not in serving["model_serving_stacks"]:
        pytest.skip(f"{stack} is not in model_serving_stacks")
    unit = f"gpuprov-serve-{stack}"
    svc = host.service(unit)
    assert svc.is_running
    assert svc.is_enabled
    props = host.run("systemctl show -p User -p Restart -p MainPID %s", unit).stdout
    user = serving["model_serving_user"]
    if not (stack == "triton" and serving["model_serving_triton_method"] == "container"):
        assert f"User={user}" in props
    assert "Restart=on-failure" in props
    account = host.user(user)
    assert account.exists
    assert account.shell == "/usr/sbin/nologin"
    assert account.uid < 1000


@pytest.mark.parametrize("stack", sorted(PORTS))
def test_ports_listen_only_on_the_bind_address(
    host: Any, root: Any, serving: dict[str, Any], stack: str
) -> None:
    if stack not in serving["model_serving_stacks"]:
        pytest.skip(f"{stack} is not in model_serving_stacks")
    address = serving["model_serving_bind_address"]
    with root():
        listening = host.run("ss -Hltn").stdout.split("\n")
    for var in PORTS[stack]:
        port = int(serving[var])
        bound = [
            line.split()[3]
            for line in listening
            if line.split() and line.split()[3].endswith(f":{port}")
        ]
        assert bound, f"nothing listens on port {port} ({var})"
        assert all(b.rsplit(":", 1)[0] in (address, f"[{address}]") for b in bound), (var, bound)


def test_secrets_are_root_or_service_user_only(
    host: Any, root: Any, serving: dict[str, Any]
) -> None:
    base = serving["model_serving_dir"]
    with root():
        if "flask" in serving["model_serving_stacks"]:
            env = host.file(f"{base}/flask.env")
            assert env.mode == 0o600
            assert env.user == "root"
        if (
            "torchserve" in serving["model_serving_stacks"]
            and serving["model_serving_torchserve_token_auth"]
        ):
            keys = host.file(f"{base}/torchserve/key_file.json")
            assert keys.exists
            assert keys.mode & 0o077 == 0, oct(keys.mode)
            assert keys.user == serving["model_serving_user"]
