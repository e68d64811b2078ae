"""Behaviour of a GPU node after the nvidia_container_toolkit role (playbooks/toolkit.yml).

    pytest tests/infra/test_toolkit.py --hosts=ansible://gpu_nodes --ansible-inventory=INV

In the lab the toolkit packages come from a signed stand-in for NVIDIA's repository
(scripts/lab/aptrepo.py, served by the lab's mirror container): real repository, key,
install and configure path, stub contents (nvidia-container-runtime execs runc; no GPU
is injected).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

# Attached to failure reports by conftest.py.
JOURNAL_UNITS = ("docker", "containerd")
# playbooks/toolkit.yml targets gpu_nodes: other hosts are skipped (conftest.py).
PLAY_GROUP = "gpu_nodes"

PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_toolkit_package_installed(host: Any, toolkit_vars: dict[str, Any], name: str) -> None:
    package = host.package(name)
    assert package.is_installed
    wanted = toolkit_vars["nvidia_container_toolkit_version"]
    if wanted:
        assert package.version.startswith(wanted.split("-")[0])


def test_toolkit_packages_held(host: Any, root: Any, toolkit_vars: dict[str, Any]) -> None:
    if not toolkit_vars["nvidia_container_toolkit_package_hold"]:
        pytest.skip("nvidia_container_toolkit_package_hold is false")
    if host.exists("apt-mark"):
        held = host.check_output("apt-mark showhold").split()
    else:
        with root():
            held = host.check_output("dnf versionlock list")
    missing = [p for p in PACKAGES if p not in held]
    assert not missing


def test_nvidia_ctk_runs(host: Any) -> None:
    assert host.run("nvidia-ctk --version").rc == 0


def test_nvidia_runtime_in_daemon_json(
    daemon_json: dict[str, Any], toolkit_vars: dict[str, Any]
) -> None:
    if "docker" not in toolkit_vars["nvidia_container_toolkit_runtimes"]:
        pytest.skip("docker is not a configured runtime")
    assert daemon_json.get("runtimes", {}).get("nvidia") == {
        "path": "nvidia-container-runtime",
        "runtimeArgs": [],
    }
    if toolkit_vars["nvidia_container_toolkit_default_runtime"]:
        assert daemon_json.get("default-runtime") == "nvidia"
    else:
        assert daemon_json.get("default-runtime") != "nvidia"


def test_daemon_json_keeps_docker_role_options(daemon_json: dict[str, Any], host: Any) -> None:
    from conftest import role_vars

    options = role_vars(host, "docker")["docker_daemon_options"]
    if not options:
        pytest.skip("docker_daemon_options is empty")
    for key, value in options.items():
        assert daemon_json.get(key) == value, f"daemon.json {key} (docker role) was clobbered"


def test_docker_info_lists_nvidia_runtime(
    host: Any, root: Any, toolkit_vars: dict[str, Any]
) -> None:
    if "docker" not in toolkit_vars["nvidia_container_toolkit_runtimes"]:
        pytest.skip("docker is not a configured runtime")
    with root():
        runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert "nvidia" in runtimes


def test_container_runs_with_nvidia_runtime(
    host: Any, root: Any, toolkit_vars: dict[str, Any], test_image: str
) -> None:
    if "docker" not in toolkit_vars["nvidia_container_toolkit_runtimes"]:
        pytest.skip("docker is not a configured runtime")
    with root():
        result = host.run("docker run --rm --runtime=nvidia %s /usr/bin/true", test_image)
    assert result.rc == 0, result.stderr


def test_containerd_nvidia_runtime(host: Any, root: Any, toolkit_vars: dict[str, Any]) -> None:
    if "containerd" not in toolkit_vars["nvidia_container_toolkit_runtimes"]:
        pytest.skip("containerd is not a configured runtime")
    with root():
        config = host.file(
            toolkit_vars["nvidia_container_toolkit_containerd_config"]
        ).content_string
    assert "runtimes.nvidia]" in config or 'runtimes."nvidia"]' in config
    assert host.service("containerd").is_running


def test_cdi_spec(host: Any, toolkit_vars: dict[str, Any]) -> None:
    mode = toolkit_vars["nvidia_container_toolkit_cdi"]
    driver_loaded = host.file("/sys/module/nvidia").exists
    spec = host.file(toolkit_vars["nvidia_container_toolkit_cdi_spec_path"])
    if mode == "never" or (mode == "auto" and not driver_loaded):
        pytest.skip(
            f"no CDI spec expected (nvidia_container_toolkit_cdi={mode}, "
            f"driver loaded: {driver_loaded})"
        )
    assert spec.exists
    assert "nvidia.com/gpu" in spec.content_string
