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
  - Results are returned as the C(gpu_info) fact.
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

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

NVIDIA_VENDOR = 0x10DE
# PCI class codes: 0x0300xx VGA controller, 0x0302xx 3D controller (datacenter GPUs).
GPU_CLASSES = (0x0300, 0x0302)
SMI_FIELDS = ("index", "pci.bus_id", "pci.device_id", "name", "memory.total", "driver_version")
UNKNOWN = "unknown"

GPU = dict[str, Any]


def normalize_bus_id(bus_id: str) -> str:
    """Return a bus ID as sysfs spells it: '00000000:3B:00.0' -> '0000:3b:00.0'."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"


def pci_id_from_combined(value: int) -> str:
    """Split NVML/nvidia-smi's 0xDDDDVVVV device ID into '10de:dddd'."""
    return f"{value & 0xFFFF:04x}:{(value >> 16) & 0xFFFF:04x}"


def _read_hex(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip(), 16)
    except (OSError, ValueError):
        return None


def _empty_gpu(index: int, source: str) -> GPU:
    return {
        "index": index,
        "pci_id": None,
        "bus_id": None,
        "name": UNKNOWN,
        "compute_capability": None,
        "architecture": None,
        "memory_mib": None,
        "driver_version": None,
        "source": source,
    }


def read_pci(sysfs_root: str) -> list[GPU]:
    """List NVIDIA display/3D controllers under <sysfs_root>/bus/pci/devices, in bus order."""
    devices_dir = Path(sysfs_root) / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices_dir.iterdir())
    except OSError:
        return []
    gpus: list[GPU] = []
    for base in entries:
        vendor = _read_hex(base / "vendor")
        device = _read_hex(base / "device")
        pci_class = _read_hex(base / "class")
        if vendor != NVIDIA_VENDOR or device is None or pci_class is None:
            continue
        if (pci_class >> 8) not in GPU_CLASSES:
            continue
        gpu = _empty_gpu(len(gpus), "pci")
        gpu["pci_id"] = f"{vendor:04x}:{device:04x}"
        gpu["bus_id"] = normalize_bus_id(base.name)
        gpus.append(gpu)
    return gpus


def _import_pynvml() -> Any:  # pynvml ships no type hints
    """Import nvidia-ml-py. Narrow seam: unit tests monkeypatch this function."""
    import pynvml  # optional dependency, imported only when NVML is tried

    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def query_nvml() -> list[GPU] | None:
    """Ask NVML; None when pynvml or libnvidia-ml is missing or the driver does not answer."""
    try:
        nvml = _import_pynvml()
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: fall back
        return None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus: list[GPU] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            gpu = _empty_gpu(index, "nvml")
            gpu["pci_id"] = pci_id_from_combined(int(pci.pciDeviceId))
            gpu["bus_id"] = normalize_bus_id(_text(pci.busId))
            gpu["name"] = strip_vendor(_text(nvml.nvmlDeviceGetName(handle)))
            gpu["memory_mib"] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
            gpu["driver_version"] = driver
            try:
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                gpu["compute_capability"] = f"{major}.{minor}"
            except Exception:  # not supported by this driver: leave null
                gpu["compute_capability"] = None
            gpus.append(gpu)
    except Exception:  # any NVML failure mid-way: fall back to nvidia-smi
        return None
    else:
        return gpus
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing we report
            nvml.nvmlShutdown()


def strip_vendor(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'A100-SXM4-40GB' (data files name GPUs without the vendor)."""
    name = name.strip()
    return name[len("NVIDIA ") :] if name.startswith("NVIDIA ") else name


def run_smi(module: AnsibleModule, smi: str, fields: tuple[str, ...]) -> tuple[int, str, str]:
    """Run the nvidia-smi query. Narrow seam: unit tests monkeypatch this function."""
    cmd = [smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader"]
    rc, out, err = module.run_command(cmd)
    return int(rc), str(out), str(err)


def parse_smi_csv(text: str, with_compute_cap: bool) -> list[GPU]:
    """Parse `nvidia-smi --query-gpu=... --format=csv,noheader` output."""
    gpus: list[GPU] = []
    expected = len(SMI_FIELDS) + (1 if with_compute_cap else 0)
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != expected:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        gpu = _empty_gpu(int(cells[0]), "nvidia-smi")
        gpu["bus_id"] = normalize_bus_id(cells[1])
        gpu["pci_id"] = pci_id_from_combined(int(cells[2], 16))
        gpu["name"] = strip_vendor(cells[3])
        memory = re.match(r"(\d+)", cells[4])
        gpu["memory_mib"] = int(memory.group(1)) if memory else None
        gpu["driver_version"] = cells[5]
        if with_compute_cap and re.fullmatch(r"\d+\.\d+", cells[6]):
            gpu["compute_capability"] = cells[6]
        gpus.append(gpu)
    return gpus


def query_smi(module: AnsibleModule, smi: str | None) -> list[GPU] | None:
    """Ask nvidia-smi; on R470-era drivers (no compute_cap field) retry without it."""
    if not smi:
        return None
    for with_cc in (True, False):
        fields = (*SMI_FIELDS, "compute_cap") if with_cc else SMI_FIELDS
        rc, out, _err = run_smi(module, smi, fields)
        if rc != 0:
            continue
        try:
            return parse_smi_csv(out, with_cc)
        except ValueError:
            continue
    return None


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
        return UNKNOWN
    _rc, out, err = module.run_command([mokutil, "--sb-state"])
    text = f"{out}\n{err}".lower()
    if "secureboot enabled" in text:
        return "enabled"
    if "secureboot disabled" in text:
        return "disabled"
    return UNKNOWN


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


def build_labels(gpus: list[GPU], driver_version: str | None) -> dict[str, str]:
    """GPU Feature Discovery style labels, taken from the first GPU (GFD's convention)."""
    labels: dict[str, str] = {"nvidia.com/gpu.count": str(len(gpus))}
    if gpus:
        first = gpus[0]
        labels["nvidia.com/gpu.product"] = re.sub(r"\s+", "-", str(first.get("name") or UNKNOWN))
        labels["nvidia.com/gpu.family"] = str(first.get("architecture") or UNKNOWN)
        cc = first.get("compute_capability")
        if cc:
            major, _, minor = str(cc).partition(".")
            labels["nvidia.com/gpu.compute.major"] = major
            labels["nvidia.com/gpu.compute.minor"] = minor
        if first.get("memory_mib") is not None:
            labels["nvidia.com/gpu.memory"] = str(first["memory_mib"])
    if driver_version:
        parts = driver_version.split(".")
        labels["nvidia.com/cuda.driver-version.full"] = driver_version
        for key, value in zip(("major", "minor", "revision"), parts, strict=False):
            labels[f"nvidia.com/cuda.driver-version.{key}"] = value
    return labels


def merge_pci(found: list[GPU], pci: list[GPU]) -> list[GPU]:
    """Fill a missing PCI ID from the PCI scan by bus ID (defensive; NVML/smi usually report it)."""
    by_bus = {gpu["bus_id"]: gpu for gpu in pci}
    for gpu in found:
        if not gpu.get("pci_id") and gpu.get("bus_id") in by_bus:
            gpu["pci_id"] = by_bus[gpu["bus_id"]]["pci_id"]
    return found


def gather(module: AnsibleModule) -> dict[str, Any]:
    sysfs_root: str = module.params["sysfs_root"]
    smi = module.params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    pci = read_pci(sysfs_root)
    gpus = query_nvml()
    if gpus is None:
        gpus = query_smi(module, smi)
    gpus = pci if gpus is None else merge_pci(gpus, pci)
    gpus.sort(key=lambda gpu: int(gpu["index"]))
    driver_version = next((str(g["driver_version"]) for g in gpus if g.get("driver_version")), None)
    modules = read_modules()
    kernel = os.uname().release
    return {
        "gpus": gpus,
        "source": str(gpus[0]["source"]) if gpus else UNKNOWN,
        "driver_version": driver_version,
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
