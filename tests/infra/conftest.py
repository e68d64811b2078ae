"""Shared fixtures of the testinfra suite.

Run against any fleet, with the same inventory the playbooks used::

    pytest tests/infra/test_docker.py --hosts=ansible://all --ansible-inventory=INV
    pytest tests/infra/test_toolkit.py --hosts=ansible://gpu_nodes --ansible-inventory=INV

What the tests expect comes from the role defaults (``roles/<role>/defaults/main.yml``)
overlaid with the host's inventory variables, so a fleet that sets
``docker_daemon_options`` or ``nvidia_container_toolkit_version`` is checked against them.
Variables passed with ``-e`` to ansible-playbook are not visible here: put them in the
inventory. On failure the journal of the units a test module names in ``JOURNAL_UNITS``
(``docker``, ``containerd`` here) is attached to the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import yaml
from infra_vars import ROLES, host_vars, pattern_hosts, play_pattern, role_vars

DEFAULT_TEST_IMAGE = "gpuprov-test/true:latest"

# A one-binary image built on the host itself: /usr/bin/true and the libraries ldd lists.
# No registry is needed (air-gapped fleets, the lab).
BUILD_IMAGE = r"""
set -eu
t=/usr/bin/true; [ -x "$t" ] || t=/bin/true
files="$t $(ldd "$t" | grep -o '/[^ ]*' | sort -u | tr '\n' ' ')"
tar -chf - $files 2>/dev/null | docker import -c 'CMD ["/usr/bin/true"]' - "$1" >/dev/null
"""


def pytest_configure(config: pytest.Config) -> None:
    """Let testinfra find ansible-inventory next to this interpreter.

    testinfra's ansible:// backend runs `ansible-inventory` from PATH; `.venv/bin/pytest`
    without an activated virtualenv would not find the one installed beside it.
    """
    del config
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if (Path(bindir) / "ansible-inventory").exists() and bindir not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bindir, path]) if path else bindir


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuprov infra")
    group.addoption(
        "--docker-test-image",
        default=DEFAULT_TEST_IMAGE,
        help=(
            "image that `docker run --rm IMAGE /usr/bin/true` starts; when absent on the host "
            "it is built there from /usr/bin/true and its libraries (default %(default)s)"
        ),
    )
    group.addoption(
        "--docker-preserved-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a daemon.json key some other tool owns that must survive the roles (repeatable)",
    )


def as_root(host: Any) -> contextlib.AbstractContextManager[Any]:
    """``host.sudo()`` unless the connection already is root (lab hosts have no sudo)."""
    if host.run("id -u").stdout.strip() == "0":
        return contextlib.nullcontext()
    return host.sudo()  # type: ignore[no-any-return]


def skip_outside_play(host: Any, role: str) -> None:
    """Skip a host that the play applying ``role`` does not target (its playbook's pattern)."""
    inventory = host_vars(host)
    pattern = play_pattern(role)
    if not inventory or pattern is None:
        return
    if inventory["inventory_hostname"] not in pattern_hosts(pattern, inventory.get("groups") or {}):
        pytest.skip(f"not in {pattern} (the hosts of the play that applies {role})")


# PCI class 0x03xxxx: display controllers (VGA 0x0300, 3D 0x0302), as gpu_info counts them.
PCI_LISTING = (
    "for d in {root}/bus/pci/devices/*; do [ -r $d/vendor ] && "
    "echo $(cat $d/vendor $d/device $d/class); done"
)


def _persistenced_packages() -> list[str]:
    """The nvidia_driver role's persistence daemon packages on Debian (its vars: one list)."""
    data = yaml.safe_load((ROLES / "nvidia_driver" / "vars" / "Debian.yml").read_text())
    return [str(name) for name in data["_nvidia_driver_persistenced_packages"]]


def host_gpus(host: Any) -> list[dict[str, Any]]:
    """The host's NVIDIA GPUs from its PCI devices (under ``gpu_info_sysfs_root``, the lab's
    simulated tree), named by the matrix: what gpu_info reports, read independently."""
    import compat  # the controller's compat package (pip install -e .)

    root = str(host_vars(host).get("gpu_info_sysfs_root") or "/sys")
    gpus: list[dict[str, Any]] = []
    for line in host.check_output(PCI_LISTING.format(root=root)).splitlines():
        vendor, device, klass = [*line.split(), "", "", ""][:3]
        if vendor.lower() != "0x10de" or not klass.lower().startswith("0x03"):
            continue
        pci_id = f"10de:{device.lower().removeprefix('0x')}"
        rows = compat.lookup(pci_id)
        row = rows[0] if rows else {}
        gpus.append(
            {
                "pci_id": pci_id,
                "name": row.get("name"),
                "compute_capability": row.get("compute_capability"),
            }
        )
    return gpus


def plan_intent(host: Any) -> dict[str, Any]:
    """The plan playbooks/plan.yml must have made for this host (compat.plan_host with the
    inventory's pins and the host's PCI devices). Debian only: compat's driver package map
    (compat/data/drivers.yaml) covers Debian."""
    import compat  # the controller's compat package (pip install -e .)

    inventory = host_vars(host)
    if host.system_info.distribution != "debian":
        pytest.skip(
            f"no plan intent for {host.system_info.distribution}: compat's package map "
            "(compat/data/drivers.yaml) covers Debian"
        )
    major = str(host.system_info.release).split(".")[0]
    packages_map = compat.debian_packages().get(major, {})
    torch = inventory.get("gpuprov_torch_version")
    gpus = host_gpus(host)
    plan: dict[str, Any] = compat.plan_host(
        gpus,
        packaged_branches=sorted(packages_map),
        os_name=f"Debian {major}",
        driver_branch=role_vars(host, "nvidia_driver").get("nvidia_driver_branch"),
        torch=None if torch is None else str(torch),
        expect_gpu=bool(inventory.get("gpuprov_expect_gpu", True)),
    )
    plan["_packages_map"], plan["_gpus"] = packages_map, gpus
    return plan


def driver_intent(host: Any) -> dict[str, Any]:
    """What the nvidia_driver role must have left on this host, from the inventory and the
    host's hardware alone, through compat as plan.yml does; never from the role's fact file.

    GPUs: ``host_gpus``. Branch: ``nvidia_driver_branch`` if pinned, else the plan's
    (``plan_intent``). Packages: the matrix's Debian package map for that branch (kernel
    packages unless the inventory says ``gpuprov_container_host: true``), plus
    ``nvidia_driver_extra_packages`` and nvidia-persistenced when
    ``nvidia_driver_persistence_mode`` (not in containers)."""
    inventory = host_vars(host)
    conf = role_vars(host, "nvidia_driver")
    container = bool(inventory.get("gpuprov_container_host", False))
    plan = plan_intent(host)
    branch = int(plan["driver"]["branch"])
    sets = plan["_packages_map"][branch]
    packages = [*sets["userspace"], *(conf.get("nvidia_driver_extra_packages") or [])]
    if not container:
        packages += sets["kernel"]
        if conf.get("nvidia_driver_persistence_mode", True):
            packages += _persistenced_packages()
    return {
        "gpus": plan["_gpus"],
        "branch": branch,
        "packages": sorted(set(packages)),
        "held": bool(conf.get("nvidia_driver_hold_packages", True)),
        "container": container,
    }


@pytest.fixture
def intent(host: Any) -> dict[str, Any]:
    """The nvidia_driver role's expected result on this host (driver_intent)."""
    return driver_intent(host)


@pytest.fixture(autouse=True)
def _play_group(request: pytest.FixtureRequest) -> None:
    """Skip hosts outside the group a test module's playbook targets.

    A module that sets ``PLAY_GROUP = "gpu_nodes"`` (the driver and toolkit plays run on
    gpu_nodes only) is skipped on other hosts, so ``--hosts=ansible://all`` checks each host
    against what the playbooks really applied to it (the inventory's groups decide).
    """
    group = getattr(request.module, "PLAY_GROUP", None)
    if group is None:
        return
    host = request.getfixturevalue("host")
    groups = host.ansible.get_variables().get("group_names") or []
    if group not in groups:
        pytest.skip(f"not in {group} (the playbook of this module targets {group} only)")


@pytest.fixture
def root(host: Any) -> Any:
    """Context manager that runs host commands as root: ``with root(): host.run(...)``."""
    return lambda: as_root(host)


@pytest.fixture
def docker_vars(host: Any) -> dict[str, Any]:
    return role_vars(host, "docker")


@pytest.fixture
def toolkit_vars(host: Any) -> dict[str, Any]:
    return role_vars(host, "nvidia_container_toolkit")


@pytest.fixture
def serving_vars(host: Any) -> dict[str, Any]:
    return role_vars(host, "model_serving")


@pytest.fixture
def jupyterlab_vars(host: Any) -> dict[str, Any]:
    return role_vars(host, "jupyterlab")


@pytest.fixture
def object_storage_vars(host: Any) -> dict[str, Any]:
    return role_vars(host, "object_storage")


@pytest.fixture
def daemon_json(host: Any) -> dict[str, Any]:
    path = "/etc/docker/daemon.json"
    with as_root(host):
        f = host.file(path)
        if not f.exists:
            return {}
        data = json.loads(f.content_string or "{}")
    assert isinstance(data, dict), f"{path} is not a JSON object"
    return data


@pytest.fixture
def test_image(host: Any, request: pytest.FixtureRequest) -> str:
    """The test image, imported on the host when it is not there yet."""
    image: str = request.config.getoption("--docker-test-image")
    with as_root(host):
        if host.run("docker image inspect %s", image).rc != 0:
            built = host.run("sh -c %s sh %s", BUILD_IMAGE, image)
            assert built.rc == 0, f"cannot import {image}: {built.stderr}"
    return image


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the journal of the test module's ``JOURNAL_UNITS`` to a failed test's report."""
    report = yield
    if report.when == "call" and report.failed:
        host = getattr(item, "funcargs", {}).get("host")
        units: tuple[str, ...] = tuple(getattr(getattr(item, "module", None), "JOURNAL_UNITS", ()))
        if host is not None:
            for unit in units:
                with as_root(host):
                    out = host.run("journalctl -u %s --no-pager -n 150", unit)
                report.sections.append((f"journalctl -u {unit}", out.stdout or out.stderr))
    return report
