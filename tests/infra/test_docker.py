"""Behaviour of a host after the docker role (playbooks/docker.yml).

pytest tests/infra/test_docker.py --hosts=ansible://all --ansible-inventory=INV
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

# Attached to failure reports by conftest.py.
JOURNAL_UNITS = ("docker", "containerd")

ENGINE_PACKAGES = {
    ("Debian", "distro"): "docker.io",
    ("RedHat", "distro"): "moby-engine",
    ("Debian", "docker-ce"): "docker-ce",
    ("RedHat", "docker-ce"): "docker-ce",
}


def _engine(host: Any, docker_vars: dict[str, Any]) -> str:
    family = "Debian" if host.system_info.distribution in {"debian", "ubuntu"} else "RedHat"
    return ENGINE_PACKAGES[(family, docker_vars["docker_source"])]


def test_engine_package_installed(host: Any, docker_vars: dict[str, Any]) -> None:
    package = host.package(_engine(host, docker_vars))
    assert package.is_installed
    wanted = docker_vars["docker_version"]
    if wanted:
        assert fnmatch.fnmatch(package.version, wanted) or package.version.startswith(wanted)


def test_engine_package_held(host: Any, root: Any, docker_vars: dict[str, Any]) -> None:
    if not docker_vars["docker_package_hold"]:
        pytest.skip("docker_package_hold is false")
    engine = _engine(host, docker_vars)
    if host.exists("apt-mark"):
        held = host.check_output("apt-mark showhold").split()
    else:
        with root():
            held = host.check_output("dnf versionlock list")
    assert engine in held


def test_docker_client_present(host: Any) -> None:
    assert host.exists("docker")


def test_daemon_json_has_role_options(
    daemon_json: dict[str, Any], docker_vars: dict[str, Any]
) -> None:
    options = docker_vars["docker_daemon_options"]
    if not options:
        pytest.skip("docker_daemon_options is empty")
    for key, value in options.items():
        assert daemon_json.get(key) == value, f"daemon.json {key}"


def test_daemon_json_keeps_keys_of_others(
    daemon_json: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    keys: list[str] = request.config.getoption("--docker-preserved-key")
    if not keys:
        pytest.skip("no --docker-preserved-key given")
    missing = [k for k in keys if k not in daemon_json]
    assert not missing, f"daemon.json lost keys owned by others: {missing}"


def test_docker_service_running_and_enabled(host: Any, docker_vars: dict[str, Any]) -> None:
    service = host.service("docker")
    assert service.is_running == (docker_vars["docker_service_state"] == "started")
    assert service.is_enabled == docker_vars["docker_service_enabled"]


def test_docker_socket(host: Any) -> None:
    assert host.socket("unix:///run/docker.sock").is_listening


def test_proxy_dropin(host: Any, docker_vars: dict[str, Any]) -> None:
    dropin = host.file("/etc/systemd/system/docker.service.d/http-proxy.conf")
    proxy = docker_vars["docker_proxy_env"]
    if not proxy:
        assert not dropin.exists
        return
    assert dropin.exists
    environment = host.check_output("systemctl show docker --property=Environment")
    for name, value in proxy.items():
        assert f"{name}={value}" in environment


def test_docker_users_in_group(host: Any, docker_vars: dict[str, Any]) -> None:
    users = docker_vars["docker_users"]
    if not users:
        pytest.skip("docker_users is empty")
    for user in users:
        assert "docker" in host.user(user).groups, user


def test_container_runs(host: Any, root: Any, test_image: str) -> None:
    with root():
        result = host.run("docker run --rm %s /usr/bin/true", test_image)
    assert result.rc == 0, result.stderr
