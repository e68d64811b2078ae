"""Profiles (simulated PCI devices) and host specs (pure): scripts/lab/profiles.yaml."""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuprov_lab.common import (
    HOST_NAME_RE,
    NVIDIA_VENDOR,
    PROFILES_FILE,
    RELEASES,
    UsageError,
)


@dataclasses.dataclass(frozen=True)
class PciDevice:
    bus_id: str
    vendor: str
    device: str
    pci_class: str
    subsystem_vendor: str
    subsystem_device: str

    @property
    def is_nvidia(self) -> bool:
        return self.vendor.lower() == NVIDIA_VENDOR

    @property
    def pci_id(self) -> str:
        return f"{self.vendor[2:]}:{self.device[2:]}".lower()


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    description: str
    devices: tuple[PciDevice, ...]

    @property
    def has_nvidia(self) -> bool:
        return any(d.is_nvidia for d in self.devices)


@dataclasses.dataclass(frozen=True)
class HostSpec:
    name: str
    profile: str
    release: str


@dataclasses.dataclass(frozen=True)
class LabData:
    profiles: Mapping[str, Profile]
    presets: Mapping[str, Mapping[str, str]]


_HEX_RE = re.compile(r"^0x[0-9a-f]+$")


_BUS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def parse_lab_data(raw: Mapping[str, Any]) -> LabData:
    """Validate the content of profiles.yaml."""
    profiles: dict[str, Profile] = {}
    for name, body in dict(raw.get("profiles") or {}).items():
        devices: list[PciDevice] = []
        for dev in body.get("devices") or []:
            fields = {
                k: str(dev[k]).lower()
                for k in (
                    "vendor",
                    "device",
                    "class",
                    "subsystem_vendor",
                    "subsystem_device",
                )
            }
            for key, value in fields.items():
                if not _HEX_RE.match(value):
                    raise UsageError(f"profile {name}: {key} {value!r} is not 0x-hex")
            bus_id = str(dev["bus_id"]).lower()
            if not _BUS_RE.match(bus_id):
                raise UsageError(f"profile {name}: bad bus_id {bus_id!r}")
            devices.append(
                PciDevice(
                    bus_id=bus_id,
                    vendor=fields["vendor"],
                    device=fields["device"],
                    pci_class=fields["class"],
                    subsystem_vendor=fields["subsystem_vendor"],
                    subsystem_device=fields["subsystem_device"],
                )
            )
        profiles[str(name)] = Profile(str(name), str(body.get("description", "")), tuple(devices))
    presets = {
        str(k): {str(h): str(s) for h, s in dict(v).items()}
        for k, v in dict(raw.get("presets") or {}).items()
    }
    return LabData(profiles, presets)


def load_lab_data(path: Path = PROFILES_FILE) -> LabData:
    with path.open(encoding="utf-8") as fh:
        return parse_lab_data(yaml.safe_load(fh) or {})


def parse_hosts(spec: str, data: LabData) -> list[HostSpec]:
    """`name=profile[:release],...` or a preset name (default, full, ...)."""
    spec = spec.strip()
    if spec in data.presets:
        items = [f"{h}={s}" for h, s in data.presets[spec].items()]
    else:
        items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise UsageError("no hosts given")
    hosts: list[HostSpec] = []
    seen: set[str] = set()
    for item in items:
        name, sep, rest = item.partition("=")
        if not sep:
            raise UsageError(
                f"bad host {item!r}: want name=profile[:release] or a preset "
                f"({', '.join(sorted(data.presets))})"
            )
        profile, _, release = rest.partition(":")
        release = release or "bookworm"
        if not HOST_NAME_RE.match(name):
            raise UsageError(f"bad host name {name!r} (lower case, digits, '-')")
        if name in seen:
            raise UsageError(f"host {name} given twice")
        if profile not in data.profiles:
            raise UsageError(f"unknown profile {profile!r} (known: {', '.join(data.profiles)})")
        if release not in RELEASES:
            raise UsageError(f"unknown release {release!r} (known: {', '.join(RELEASES)})")
        seen.add(name)
        hosts.append(HostSpec(name, profile, release))
    return hosts


def sysfs_files(profile: Profile) -> dict[str, str]:
    """Relative path -> content of the simulated sysfs tree of a profile.

    Shaped like the kernel's: bus/pci/devices/<bus_id>/{vendor,device,class,
    subsystem_vendor,subsystem_device}. It is placed in the host at
    SIM_SYSFS_ROOT; only the lab inventory points gpu_info there.
    """
    files: dict[str, str] = {}
    for dev in profile.devices:
        base = f"bus/pci/devices/{dev.bus_id}"
        files[f"{base}/vendor"] = dev.vendor + "\n"
        files[f"{base}/device"] = dev.device + "\n"
        files[f"{base}/class"] = dev.pci_class + "\n"
        files[f"{base}/subsystem_vendor"] = dev.subsystem_vendor + "\n"
        files[f"{base}/subsystem_device"] = dev.subsystem_device + "\n"
    return files


def write_sysfs_tree(profile: Profile, root: Path) -> None:
    """Write the simulated tree under root (as `lab.py up` does in a host)."""
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    for rel, content in sysfs_files(profile).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="ascii")


def tar_bytes(files: Mapping[str, bytes | str], dirs: Iterable[str] = ()) -> bytes:
    """A tar archive (for `docker cp -`) of the given relative paths."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        made: set[str] = set()

        def add_dir(path: str) -> None:
            parts = path.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub and sub not in made:
                    info = tarfile.TarInfo(sub)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                    made.add(sub)

        for d in dirs:
            add_dir(d)
        for rel, content in sorted(files.items()):
            data = content.encode() if isinstance(content, str) else content
            add_dir(rel.rsplit("/", 1)[0] if "/" in rel else "")
            info = tarfile.TarInfo(rel.strip("/"))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
