#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""gpu_info: gather NVIDIA GPU facts with NVML -> nvidia-smi -> PCI ID fallbacks."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Gather NVIDIA GPU facts (NVML, nvidia-smi, PCI IDs)
description:
  - Detects the NVIDIA GPUs of a host and the state of the driver stack around them.
  - Each GPU is answered by the first source that works, in this order, and the answering
    source is reported per GPU in C(source)
    - C(nvml) through nvidia-ml-py (C(pynvml)) when C(libnvidia-ml.so.1) loads and the driver
      answers; C(nvidia-smi) with C(--query-gpu) (on R470-era drivers, which lack the
      C(compute_cap) field, the query is retried without it); C(pci), the vendor, device and
      class IDs read from C(<sysfs_root>/bus/pci/devices/*/).
  - The module never guesses. A GPU found only by PCI ID is reported with C(name=unknown) and
    C(compute_capability=null); the C(gpu_info) action plugin on the controller then fills in
    name, compute capability and architecture from the gpuprov compat matrix (the compat
    package is not needed on the managed host). An ID the matrix does not know stays unknown.
  - Results are returned as the C(gpu_info) fact, stamped with the run that made them (the
    C(gpu_info_scan) fact).
  - C(reuse=run), an argument of the action plugin (not sent to the host), answers with this
    run's last scan of the host made with the same arguments, and scans only where there is
    none; C(reuse=never) (the default) always scans. gpuprov's roles reuse within a run (the
    validate and plan plays scan first, and the driver role scans again after changing anything).
  - Read-only; runs the same in check mode.
version_added: "0.1.0"
author:
  - gpuprov contributors
options:
  sysfs_root:
    description:
      - Root of the sysfs tree to read PCI devices from.
      - B(Simulation seam.) Only the lab inventory changes it, pointing at the simulated PCI tree
        at C(/opt/gpuprov-sim/sys) inside each lab container; the simulated PCI IDs are the only
        simulated part of the lab. Leave the default on real hosts.
    type: path
    default: /sys
  nvidia_smi_path:
    description:
      - Path to C(nvidia-smi). When unset the module searches C(PATH).
    type: path
attributes:
  check_mode:
    support: full
    description: The module only reads; it reports the same facts in check mode.
  diff_mode:
    support: none
  facts:
    support: full
requirements:
  - nvidia-ml-py on the managed host for the NVML source (optional)
notes:
  - Container detection (C(virtualization)) is a hint from C(/.dockerenv), C(/run/.containerenv),
    C(/proc/1/environ) and C(/proc/1/cgroup).
"""

EXAMPLES = r"""
- name: Gather GPU facts
  gpu_info:

- name: Gather GPU facts from the lab's simulated PCI tree
  gpu_info:
    sysfs_root: /opt/gpuprov-sim/sys

- name: The GPUs as this run last saw them (scan only where it has not yet)
  gpu_info:
    reuse: run

- name: Show the GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu_info']['gpus'] | map(attribute='name') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpu_info:
      description: GPU facts.
      returned: always
      type: dict
      contains:
        gpus:
          description: One entry per NVIDIA GPU, ordered by index.
          type: list
          elements: dict
          sample:
            - index: 0
              pci_id: "10de:1023"
              bus_id: "0000:3b:00.0"
              name: Tesla K40m
              compute_capability: "3.5"
              architecture: kepler
              memory_mib: 11441
              driver_version: "470.256.02"
              source: nvidia-smi
        source:
          description: Source that answered (nvml, nvidia-smi, pci; unknown when no GPU was found).
          type: str
          sample: pci
        nvidia_module_loaded:
          description: Whether the nvidia kernel module is loaded.
          type: bool
        nouveau_loaded:
          description: Whether the nouveau kernel module is loaded.
          type: bool
        secure_boot:
          description: Secure Boot state from C(mokutil --sb-state).
          type: str
          sample: disabled
        kernel:
          description: Running kernel release (C(uname -r)).
          type: str
        kernel_headers_installed:
          description: Whether C(/lib/modules/<kernel>/build) exists.
          type: bool
        virtualization:
          description: Container hint (docker, podman, lxc, container) or none.
          type: str
          sample: docker
        driver_version:
          description: Driver version reported by NVML or nvidia-smi, null when no driver answered.
          type: str
        smi_error:
          description: What a failing nvidia-smi said (NVML did not answer either), else null.
          type: str
          sample: "Failed to initialize NVML: Driver/library version mismatch"
        labels:
          description: GPU Feature Discovery style labels (values are strings), from the first GPU.
          type: dict
          sample:
            nvidia.com/gpu.count: "1"
            nvidia.com/gpu.product: Tesla-K40m
            nvidia.com/gpu.family: kepler
            nvidia.com/gpu.compute.major: "3"
            nvidia.com/gpu.compute.minor: "5"
            nvidia.com/gpu.memory: "11441"
"""

import os
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# gpuprov's one hardware probe (plugins/module_utils/gpu_probe.py): AnsiballZ ships it to the
# host with this module. Installed as the gpuprov.fleet collection it is the collection's
# module_utils; from the checkout, ansible.cfg's module_utils path. Both imports are optional
# to AnsiballZ (inside try), and the one that resolves is shipped.
try:
    from ansible_collections.gpuprov.fleet.plugins.module_utils import gpu_probe as _gp
except ImportError:
    from ansible.module_utils import gpu_probe as _gp

SMI_FIELDS = _gp.SMI_FIELDS
UNKNOWN = _gp.UNKNOWN
build_labels = _gp.build_labels
import_pynvml = _gp.import_pynvml
probe = _gp.probe
smi_command = _gp.smi_command

__all__ = ["SMI_FIELDS", "gather", "main", "run_smi"]


def _import_pynvml() -> Any:  # pynvml ships no type hints
    """Import nvidia-ml-py. Narrow seam: unit tests monkeypatch this function."""
    return import_pynvml()


def run_smi(module: AnsibleModule, smi: str, fields: tuple[str, ...]) -> tuple[int, str, str]:
    """Run the nvidia-smi query. Narrow seam: unit tests monkeypatch this function."""
    rc, out, err = module.run_command(smi_command(smi, fields))
    return int(rc), str(out), str(err)


def read_modules(proc_modules: str = "/proc/modules") -> set[str]:
    try:
        text = Path(proc_modules).read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    return {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}


def module_loaded(name: str, modules: set[str], sysfs_root: str) -> bool:
    return name in modules or (Path(sysfs_root) / "module" / name).is_dir()


def secure_boot_state(module: AnsibleModule) -> str:
    mokutil = module.get_bin_path("mokutil")
    if not mokutil:
        return str(UNKNOWN)
    _rc, out, err = module.run_command([mokutil, "--sb-state"])
    text = f"{out}\n{err}".lower()
    if "secureboot enabled" in text:
        return "enabled"
    if "secureboot disabled" in text:
        return "disabled"
    return str(UNKNOWN)


def detect_container(root: str = "/") -> str:
    """A hint, not proof: docker, podman, lxc, container, or none."""
    base = Path(root)
    if (base / ".dockerenv").exists():
        return "docker"
    if (base / "run" / ".containerenv").exists():
        return "podman"
    try:
        environ = (base / "proc" / "1" / "environ").read_bytes()
    except OSError:
        environ = b""
    for item in environ.split(b"\0"):
        if item.startswith(b"container="):
            return item.split(b"=", 1)[1].decode(errors="replace") or "container"
    try:
        cgroup = (base / "proc" / "1" / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cgroup = ""
    for hint in ("docker", "lxc", "kubepods"):
        if hint in cgroup:
            return "container" if hint == "kubepods" else hint
    return "none"


def gather(module: AnsibleModule) -> dict[str, Any]:
    sysfs_root: str = module.params["sysfs_root"]
    smi = module.params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    answer = probe(
        sysfs_root,
        lambda: _import_pynvml(),
        (lambda fields: run_smi(module, smi, fields)) if smi else None,
    )
    gpus: list[dict[str, Any]] = answer["gpus"]
    driver_version: str | None = answer["driver_version"]
    modules = read_modules()
    kernel = os.uname().release
    return {
        "gpus": gpus,
        "source": str(answer["source"]),
        "driver_version": driver_version,
        "smi_error": answer["smi_error"],
        "nvidia_module_loaded": module_loaded("nvidia", modules, "/sys"),
        "nouveau_loaded": module_loaded("nouveau", modules, "/sys"),
        "secure_boot": secure_boot_state(module),
        "kernel": kernel,
        "kernel_headers_installed": (Path("/lib/modules") / kernel / "build").exists(),
        "virtualization": detect_container(),
        "sysfs_root": sysfs_root,
        "labels": build_labels(gpus, driver_version),
    }


def build_module() -> AnsibleModule:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "nvidia_smi_path": {"type": "path"},
        },
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}
    return module


def main() -> None:
    module = build_module()
    facts = gather(module)
    module.exit_json(changed=False, ansible_facts={"gpu_info": facts})


if __name__ == "__main__":
    main()
