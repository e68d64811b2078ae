"""testinfra suite for the nvidia_driver role: run it against your fleet.

    pytest tests/infra --hosts=ansible://gpu_nodes --ansible-inventory=inventories/<env>/hosts.yml

(add `--sudo` when the SSH user is not root). One test per behaviour. What the role must
have installed is computed from the inventory and the host's PCI devices through compat,
as plan.yml does (conftest.py: driver_intent), never from what the role wrote: the local
facts file it writes (/etc/ansible/facts.d/gpuprov.fact) is checked against that intent.
Tests of the kernel module (nvidia-smi, nvidia-persistenced, nouveau unloaded) are skipped
on hosts the inventory declares containers (gpuprov_container_host: true; the lab) and
while a driver reboot is pending; failures print the unit's journal.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from infra_vars import role_vars

# playbooks/driver.yml targets gpu_nodes: other hosts are skipped (conftest.py).
PLAY_GROUP = "gpu_nodes"

FACT_FILE = "/etc/ansible/facts.d/gpuprov.fact"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
UNATTENDED_BLACKLIST = "/etc/apt/apt.conf.d/51gpuprov-nvidia-blacklist"
REBOOT_FLAG = "/run/gpuprov-reboot-required"
PERSISTENCED = "nvidia-persistenced"


def journal(host: Any, unit: str, lines: int = 60) -> str:
    """The last lines of a unit's journal, for failure messages."""
    out = host.run(f"journalctl -u {unit} -n {lines} --no-pager")
    return f"\n--- journalctl -u {unit} ---\n{out.stdout}{out.stderr}"


@pytest.fixture
def fact(host: Any) -> dict[str, Any]:
    """The gpuprov local facts the nvidia_driver role wrote."""
    target = host.file(FACT_FILE)
    assert target.exists, f"{FACT_FILE} missing: the nvidia_driver role has not run on this host"
    data: dict[str, Any] = json.loads(target.content_string)
    return data


@pytest.fixture
def kernel_host(host: Any, intent: dict[str, Any]) -> Any:
    """A host where the kernel-module steps apply (not a container, no pending reboot)."""
    if intent["container"]:
        pytest.skip("container (gpuprov_container_host): no kernel module to check")
    if host.file(REBOOT_FLAG).exists:
        pytest.skip(f"driver reboot pending ({REBOOT_FLAG})")
    return host


def is_debian_family(host: Any) -> bool:
    return bool(host.system_info.distribution in ("debian", "ubuntu"))


def test_the_fact_file_agrees_with_the_intent(fact: dict[str, Any], intent: dict[str, Any]) -> None:
    """The role's own record of the host (read by the plan, the reports and operators) says
    what the inventory and the hardware say: a role that misjudged the host fails here."""
    assert intent["gpus"], "no NVIDIA GPU on the host's PCI bus"
    assert sorted(g["pci_id"] for g in fact["gpus"]) == sorted(g["pci_id"] for g in intent["gpus"])
    assert fact["driver_branch"] == intent["branch"]
    judged, declared = fact["container"], intent["container"]
    assert judged == declared, (
        f"the role judged container={judged}; the inventory says gpuprov_container_host={declared}"
    )
    assert sorted(fact["packages"]) == intent["packages"]
    assert fact["packages_held"] == intent["held"]


def test_driver_packages_installed(host: Any, intent: dict[str, Any]) -> None:
    missing = [name for name in intent["packages"] if not host.package(name).is_installed]
    assert not missing, f"driver packages not installed: {missing}"


def test_driver_packages_held(host: Any, intent: dict[str, Any]) -> None:
    if not intent["held"]:
        pytest.skip("nvidia_driver_hold_packages is false")
    if is_debian_family(host):
        held = set(host.check_output("apt-mark showhold").split())
        wanted = set(intent["packages"])
        assert wanted <= held, f"not held: {sorted(wanted - held)}"
    else:
        locks = host.check_output("dnf versionlock list")
        assert "nvidia" in locks, f"no nvidia versionlock:\n{locks}"


DEBIAN_COMPONENTS = "/etc/apt/sources.list.d/gpuprov-debian-nonfree.sources"
SOURCE_FILES = (
    "/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources"
)


def test_nvml_python_binding_imports(host: Any) -> None:
    """gpu_info reads the GPUs through NVML first: the host's own Python imports the binding
    the role installs (nvidia_driver_nvml_python; Debian's python3-pynvml)."""
    if not role_vars(host, "nvidia_driver").get("nvidia_driver_nvml_python", True):
        pytest.skip("nvidia_driver_nvml_python is off in the inventory")
    if host.system_info.distribution != "debian":
        pytest.skip("the role installs NVML's Python binding on Debian only")
    assert host.package("python3-pynvml").is_installed
    probe = host.run("/usr/bin/python3 -c 'import pynvml; print(pynvml.__name__)'")
    assert probe.rc == 0, probe.stderr


def test_debian_components_repeat_no_other_source(host: Any) -> None:
    """The role adds contrib/non-free only where the host's own sources lack them: a
    component enabled twice for a suite makes every apt update warn "configured multiple
    times" (18 such warnings on the lab before)."""
    if host.system_info.distribution != "debian":
        pytest.skip("Debian only: gpuprov adds Debian's non-free components")
    import apt_ready  # plugins/modules/apt_ready.py: its parser of both source formats

    listing = host.run(f"ls -1 {SOURCE_FILES} 2>/dev/null").stdout.split()
    entries = apt_ready.parse_sources((p, host.file(p).content_string) for p in listing)
    ours = [e for e in entries if e.file == DEBIAN_COMPONENTS]
    repeated = [
        f"{o.uri} {suite} {component} (also in {e.file}:{e.line})"
        for o in ours
        for e in entries
        if e.file != DEBIAN_COMPONENTS and "deb" in e.types and apt_ready.same_uri(e.uri, o.uri)
        for suite in set(o.suites) & set(e.suites)
        for component in set(o.components) & set(e.components)
    ]
    assert repeated == []


def test_nouveau_blacklist_file(host: Any) -> None:
    target = host.file(NOUVEAU_BLACKLIST)
    assert target.exists
    assert target.user == "root"
    assert target.mode == 0o644
    assert "blacklist nouveau" in target.content_string


def test_unattended_upgrades_blacklist(host: Any, intent: dict[str, Any]) -> None:
    if not is_debian_family(host):
        pytest.skip("unattended-upgrades is Debian-family only")
    target = host.file(UNATTENDED_BLACKLIST)
    assert target.exists
    assert target.mode == 0o644
    text = target.content_string
    assert "Unattended-Upgrade::Package-Blacklist" in text
    for name in intent["packages"]:
        pattern = name.replace(".", "[.]").replace("+", "[+]")
        assert f'"^{pattern}$";' in text, f"{name} not blacklisted"


def test_nouveau_not_loaded(kernel_host: Any) -> None:
    modules = kernel_host.check_output("cat /proc/modules")
    assert not any(line.startswith("nouveau ") for line in modules.splitlines())


def test_nvidia_smi_answers(kernel_host: Any, intent: dict[str, Any]) -> None:
    out = kernel_host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert out.rc == 0, f"nvidia-smi failed: {out.stderr}{journal(kernel_host, PERSISTENCED)}"
    versions = {line.strip() for line in out.stdout.splitlines() if line.strip()}
    assert versions, "nvidia-smi listed no GPU"
    assert all(v.split(".")[0] == str(intent["branch"]) for v in versions), versions


def test_persistenced_running(kernel_host: Any) -> None:
    service = kernel_host.service(PERSISTENCED)
    assert service.is_running, f"{PERSISTENCED} not running{journal(kernel_host, PERSISTENCED)}"
    assert service.is_enabled, f"{PERSISTENCED} not enabled{journal(kernel_host, PERSISTENCED)}"
