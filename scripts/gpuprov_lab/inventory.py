"""The generated inventory, known_hosts and the paths of one lab (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuprov_lab import aptrepo
from gpuprov_lab.common import (
    DEFAULT_LAB,
    INVENTORY_DIR,
    RELEASES,
    SIM_SYSFS_ROOT,
    SSH_DIR,
    STATE_ROOT,
    LabError,
)
from gpuprov_lab.profiles import HostSpec, Profile


def known_hosts_lines(port: int, host_keys: Iterable[str]) -> list[str]:
    """known_hosts lines for `[127.0.0.1]:port` from `ssh_host_*_key.pub` texts."""
    lines = []
    for key in host_keys:
        fields = key.split()
        if len(fields) >= 2:
            lines.append(f"[127.0.0.1]:{port} {fields[0]} {fields[1]}")
    return lines


@dataclasses.dataclass(frozen=True)
class HostRuntime:
    spec: HostSpec
    container: str
    port: int
    address: str


def build_inventory(
    lab: str,
    hosts: Sequence[HostRuntime],
    profiles: Mapping[str, Profile],
    key_file: Path,
    known_hosts: Path,
    wheelhouse: str | None,
    group_vars: Mapping[str, Mapping[str, Any]] | None = None,
    gateway: str | None = None,
    mirror: str | None = None,
) -> dict[str, Any]:
    """The YAML inventory of a lab.

    Groups: lab (all hosts), gpu_nodes (hosts with an NVIDIA device) with one
    child per GPU profile (gpu_k40m, gpu_m40, gpu_mixed, gpu_a100), cpu_nodes.
    `gpu_info_sysfs_root` is set here, and only here, to the simulated tree.
    `group_vars` (group -> vars) are embedded as the groups' `vars`: used when
    the inventory is written outside inventories/lab/, whose group_vars/ would
    not apply there. `mirror` is the base URL of the lab's mirror container:
    the toolkit role's repository and key URLs point at the stand-in
    repository it serves (lab only; NVIDIA's defaults elsewhere).
    """
    gv = {k: dict(v) for k, v in (group_vars or {}).items()}
    lab_hosts: dict[str, Any] = {}
    gpu_children: dict[str, Any] = {
        f"gpu_{name}": {"hosts": {}} for name, p in profiles.items() if p.has_nvidia
    }
    cpu_hosts: dict[str, Any] = {}
    for h in hosts:
        hostvars: dict[str, Any] = {
            "ansible_host": "127.0.0.1",
            "ansible_port": h.port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key_file),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
            # Lab only: gpu_info reads the simulated PCI tree, not /sys.
            "gpu_info_sysfs_root": SIM_SYSFS_ROOT,
            "lab_profile": h.spec.profile,
            "lab_release": h.spec.release,
            "lab_debian_version": RELEASES[h.spec.release],
            "lab_container": h.container,
            # What the testinfra suite expects of the host (tests/infra: driver_intent):
            # a container, where the driver's kernel-module steps do not apply.
            "gpuprov_container_host": True,
            "lab_hostname": h.spec.name,
            "lab_address": h.address,
        }
        if wheelhouse:
            hostvars["lab_wheelhouse"] = wheelhouse
        lab_hosts[h.spec.name] = hostvars
        if profiles[h.spec.profile].has_nvidia:
            gpu_children.setdefault(f"gpu_{h.spec.profile}", {"hosts": {}})
            gpu_children[f"gpu_{h.spec.profile}"]["hosts"][h.spec.name] = None
        else:
            cpu_hosts[h.spec.name] = None
    lab_vars: dict[str, Any] = gv.pop("lab", {})
    lab_vars["lab_name"] = lab
    if gateway:
        # The controller as the hosts see it (to serve files/repos to them).
        lab_vars["lab_gateway"] = gateway
    if mirror:
        # A stand-in for NVIDIA's toolkit repository (scripts/lab/aptrepo.py), not NVIDIA's.
        lab_vars["lab_mirror_url"] = mirror
        lab_vars.update(aptrepo.role_vars(mirror))

    def group(body: dict[str, Any], name: str) -> dict[str, Any]:
        found = gv.pop(name, None)
        return {"vars": found, **body} if found else body

    children = {name: group(body, name) for name, body in gpu_children.items()}
    all_group: dict[str, Any] = {
        "children": {
            "lab": {
                "vars": lab_vars,
                "hosts": lab_hosts,
                "children": {
                    "gpu_nodes": group({"children": children}, "gpu_nodes"),
                    "cpu_nodes": group({"hosts": cpu_hosts}, "cpu_nodes"),
                },
            }
        }
    }
    all_group = group(all_group, "all")
    # group_vars of groups this inventory lacks: an empty group carries them.
    for name, values in sorted(gv.items()):
        all_group["children"][name] = {"vars": values, "hosts": {}}
    return {"all": all_group}


def dump_inventory(inventory: Mapping[str, Any], lab: str) -> str:
    header = (
        f"# Generated by scripts/lab.py (lab {lab!r}); do not edit, git-ignored.\n"
        "# gpu_info_sysfs_root points gpu_info at the simulated PCI tree of the\n"
        "# lab; real fleets never set it.\n"
    )
    body = yaml.safe_dump(dict(inventory), sort_keys=False, default_flow_style=False)
    return header + body.replace(": null\n", ":\n")


@dataclasses.dataclass(frozen=True)
class LabPaths:
    name: str
    inventory: Path

    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / self.name

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def key_file(self) -> Path:
        return SSH_DIR / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        if self.name == DEFAULT_LAB:
            return SSH_DIR / "known_hosts"
        return SSH_DIR / f"known_hosts.{self.name}"


def default_inventory(lab: str) -> Path:
    if lab == DEFAULT_LAB:
        return INVENTORY_DIR / "hosts.yml"
    return STATE_ROOT / lab / "hosts.yml"


def write_if_changed(path: Path, content: str, mode: int = 0o644) -> bool:
    if path.exists() and path.read_text(encoding="utf-8") == content:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    path.chmod(mode)
    return True


def read_group_vars(directory: Path) -> dict[str, dict[str, Any]]:
    """group -> vars from a group_vars/ dir (`G.yml`, `G.yaml` or `G/*.yml`)."""
    result: dict[str, dict[str, Any]] = {}
    if not directory.is_dir():
        return result
    for entry in sorted(directory.iterdir()):
        if entry.is_dir():
            files = sorted(
                p for p in entry.rglob("*") if p.suffix in {".yml", ".yaml"} and p.is_file()
            )
            name = entry.name
        elif entry.suffix in {".yml", ".yaml"}:
            files = [entry]
            name = entry.stem
        else:
            continue
        for path in files:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if not isinstance(data, dict):
                raise LabError(f"{path}: not a mapping")
            result.setdefault(name, {}).update(data)
    return result


def ssh_argv(hostvars: Mapping[str, Any], command: str) -> list[str]:
    """ssh arguments that reach a host of a generated lab inventory: its key, its port on
    127.0.0.1 and the lab's strict known_hosts (from ansible_ssh_common_args)."""
    return [
        "ssh",
        "-i",
        str(hostvars["ansible_ssh_private_key_file"]),
        "-p",
        str(hostvars["ansible_port"]),
        *str(hostvars["ansible_ssh_common_args"]).split(),
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        f"{hostvars['ansible_user']}@{hostvars['ansible_host']}",
        command,
    ]
