#!/usr/bin/env python3
"""The gpuprov lab: Debian hosts in systemd containers, reachable over SSH.

    scripts/lab.py [--lab NAME] up [--hosts SPEC] [--inventory PATH] ...
    scripts/lab.py [--lab NAME] down
    scripts/lab.py [--lab NAME] status
    scripts/lab.py [--lab NAME] ssh HOST [-- CMD ...]

Each host is a Docker container running systemd and sshd, built from a local
base image (debootstrap + `docker import`; no registry needed), with SSH
published on 127.0.0.1 only.

The lab simulates one thing only: PCI devices. A host's profile
(scripts/lab/profiles.yaml) is written as a sysfs-shaped tree at
/opt/gpuprov-sim/sys inside the host, and the generated lab inventory sets
`gpu_info_sysfs_root: /opt/gpuprov-sim/sys` so that the gpu_info module (its
`sysfs_root` parameter, default /sys) reads that tree instead of the real
/sys. No other inventory sets it. Everything else (apt, systemd, docker, pip)
is real.

One more container, NAME-mirror, serves a signed apt repository that STANDS IN
for NVIDIA's container toolkit repository (unreachable from the lab): stub
packages with NVIDIA's package names, built by scripts/lab/aptrepo.py once per
recipe (cached under .lab/NAME/) and served with `python3 -m http.server` on
the lab network only. The lab inventory points the nvidia_container_toolkit
role's repository and key URLs at it; real fleets never use it.

Exit codes: 0 ok, 1 failure, 2 usage error or no Docker engine.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

REPO = Path(__file__).resolve().parent.parent
LAB_FILES = REPO / "scripts" / "lab"
sys.path.insert(0, str(LAB_FILES))
import aptrepo  # noqa: E402  (scripts/lab/aptrepo.py: the stand-in toolkit repository)
import s3lab  # noqa: E402  (scripts/lab/s3lab.py: the S3 stand-in and the lab's throwaway vault)

PROFILES_FILE = LAB_FILES / "profiles.yaml"
RECIPE_FILE = LAB_FILES / "image-recipe.sh"
INVENTORY_DIR = REPO / "inventories" / "lab"
SSH_DIR = INVENTORY_DIR / ".ssh"
STATE_ROOT = REPO / ".lab"

DEFAULT_LAB = "gpuprov"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
IMAGE_REPO = "gpuprov-lab/debian"
RELEASES: Mapping[str, str] = {"bookworm": "12", "trixie": "13"}
# bookworm ships Python 3.11 (the torch hosts); trixie ships 3.13.
IMAGE_PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "sudo",
    "ca-certificates",
    "iproute2",
    "procps",
    "kmod",
    "iputils-ping",
    "less",
)

# Inside each host.
SIM_SYSFS_ROOT = "/opt/gpuprov-sim/sys"  # the simulated PCI tree (see module doc)
HOST_WHEELHOUSE = "/opt/gpuprov-wheels"
HOST_CA_DIR = "/usr/local/share/ca-certificates/gpuprov-lab"
CONTAINER_SSH_PORT = 22

# The mirror container: the stand-in for NVIDIA's toolkit repository (see module doc).
MIRROR_RELEASE = "bookworm"
MIRROR_DIR = "/srv/gpuprov-aptrepo"
MIRROR_PORT = 8080
MIRROR_LABEL = "gpuprov.lab.mirror"

PORT_RANGE = (22200, 22999)
NVIDIA_VENDOR = "0x10de"
HOST_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
LAB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,30}$")
LABEL = "gpuprov.lab"

NO_ENGINE = (
    "lab.py: no Docker engine reachable; install and start one: "
    "apt-get install docker.io && dockerd &"
)


class LabError(Exception):
    """A failure that ends the command with a message (exit 1)."""


class UsageError(LabError):
    """Bad input (exit 2)."""


# ---------------------------------------------------------------------------
# Profiles and host specs (pure)


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


# ---------------------------------------------------------------------------
# Images (pure parts)


def recipe_hash(
    release: str, mirror: str, recipe: str, packages: Sequence[str] = IMAGE_PACKAGES
) -> str:
    digest = hashlib.sha256()
    for part in (release, mirror, ",".join(packages), recipe):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def image_tag(release: str, mirror: str, recipe: str) -> str:
    return f"{IMAGE_REPO}:{release}-{recipe_hash(release, mirror, recipe)}"


# ---------------------------------------------------------------------------
# Container runtime parameters (pure)


def cgroup_version(fs_type: str) -> int:
    """`stat -fc %T /sys/fs/cgroup`: cgroup2fs is the unified v2 hierarchy."""
    return 2 if fs_type.strip() == "cgroup2fs" else 1


def init_command(release: str, cgroup: int) -> list[str]:
    """The container command: systemd, told to accept cgroup v1 where needed.

    systemd >= 256 (trixie has 257) refuses to boot on cgroup v1 unless forced;
    inside a container it reads PID 1's arguments as its kernel command line.
    """
    if cgroup == 1 and release != "bookworm":
        return [
            "/sbin/init",
            "systemd.unified_cgroup_hierarchy=0",
            "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1",
        ]
    return ["/sbin/init"]


def container_name(lab: str, host: str) -> str:
    return f"{lab}-{host}"


def network_name(lab: str) -> str:
    return f"{lab}-net"


def docker_volume_name(lab: str, host: str) -> str:
    return f"{lab}-{host}-docker"


def mirror_name(lab: str) -> str:
    return f"{lab}-mirror"


def mirror_run_args(lab: str, image: str, repo_dir: Path) -> list[str]:
    """`docker run` arguments of the lab's mirror container.

    It serves repo_dir (the stand-in for NVIDIA's container toolkit repository,
    mounted read-only) with `python3 -m http.server` on the lab network only:
    no port is published on the controller.
    """
    return [
        "run",
        "--detach",
        "--name",
        mirror_name(lab),
        "--network",
        network_name(lab),
        "--network-alias",
        "mirror",
        "--label",
        f"{MIRROR_LABEL}={lab}",
        "--label",
        f"gpuprov.mirror.repo={repo_dir}",
        "--label",
        f"gpuprov.image={image}",
        "--restart",
        "unless-stopped",
        "--read-only",
        "--mount",
        f"type=bind,source={repo_dir},target={MIRROR_DIR},readonly",
        "--workdir",
        MIRROR_DIR,
        image,
        "python3",
        "-m",
        "http.server",
        "--bind",
        "0.0.0.0",  # noqa: S104 (the container's lab-network address only)
        "--directory",
        MIRROR_DIR,
        str(MIRROR_PORT),
    ]


def mirror_url(address: str) -> str:
    return f"http://{address}:{MIRROR_PORT}"


def docker_run_args(lab: str, host: HostSpec, image: str, port: int, cgroup: int) -> list[str]:
    """`docker run` arguments of one lab host.

    systemd as PID 1 with a read-write cgroup mount and the host cgroup
    namespace (both v1 and v2), plus what a nested dockerd needs: SYS_ADMIN,
    NET_ADMIN, no seccomp/apparmor confinement, and /var/lib/docker on a
    volume (overlay2 cannot sit on the container's own overlay root).
    `--privileged` is not used (it fails on the machines this runs on).
    SSH is published on 127.0.0.1 only.
    """
    name = container_name(lab, host.name)
    args = [
        "run",
        "--detach",
        "--name",
        name,
        "--hostname",
        host.name,
        "--network",
        network_name(lab),
        "--network-alias",
        host.name,
        "--label",
        f"{LABEL}={lab}",
        "--label",
        f"gpuprov.host={host.name}",
        "--label",
        f"gpuprov.profile={host.profile}",
        "--label",
        f"gpuprov.release={host.release}",
        "--label",
        f"gpuprov.image={image}",
        "--publish",
        f"127.0.0.1:{port}:{CONTAINER_SSH_PORT}",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "--volume",
        "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--cgroupns",
        "host",
        "--cap-add",
        "SYS_ADMIN",
        "--cap-add",
        "NET_ADMIN",
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "apparmor=unconfined",
        "--mount",
        f"type=volume,source={docker_volume_name(lab, host.name)},"
        f"target=/var/lib/docker,volume-label={LABEL}={lab}",
        "--env",
        "container=docker",
        "--stop-signal",
        "SIGRTMIN+3",
        image,
    ]
    return args + init_command(host.release, cgroup)


def allocate_ports(
    count: int,
    taken: Iterable[int],
    is_free: Callable[[int], bool],
    port_range: tuple[int, int] = PORT_RANGE,
) -> list[int]:
    """`count` ports in port_range, not in `taken` and free per `is_free`."""
    busy = set(taken)
    ports: list[int] = []
    for port in range(port_range[0], port_range[1] + 1):
        if len(ports) == count:
            break
        if port in busy or not is_free(port):
            continue
        ports.append(port)
        busy.add(port)
    if len(ports) < count:
        raise LabError(f"no free port left in {port_range[0]}-{port_range[1]}")
    return ports


def port_is_free(port: int, address: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


_PUBLISHED_RE = re.compile(r"(?:\d+\.\d+\.\d+\.\d+|\[?[0-9a-f:]*\]?):(\d+)->")


def published_ports(ports_column: str) -> set[int]:
    """Host ports in `docker ps --format {{.Ports}}` output."""
    return {int(m) for m in _PUBLISHED_RE.findall(ports_column)}


# ---------------------------------------------------------------------------
# CA bundle, pip config, known hosts (pure)

_PEM_RE = re.compile(r"-----BEGIN CERTIFICATE-----\s+(.*?)\s+-----END CERTIFICATE-----", re.DOTALL)


def split_pem_bundle(text: str) -> list[str]:
    """The certificates of a PEM bundle, each normalised to one PEM block."""
    certs = []
    for body in _PEM_RE.findall(text):
        b64 = "".join(body.split())
        lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
        certs.append(
            "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"
        )
    return certs


def extra_certs(controller_bundle: str, host_bundle: str) -> list[str]:
    """Certificates the controller trusts that the host does not (yet)."""
    have = set(split_pem_bundle(host_bundle))
    return [c for c in split_pem_bundle(controller_bundle) if c not in have]


def pip_find_links(config_list: str) -> list[str]:
    """find-links directories in `pip config list` output (in order)."""
    found: list[str] = []
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key.strip().endswith(".find-links"):
            continue
        for item in value.strip().strip("'\"").split():
            item = item.removeprefix("file://")
            if item.startswith("/") and item not in found:
                found.append(item)
    return found


def known_hosts_lines(port: int, host_keys: Iterable[str]) -> list[str]:
    """known_hosts lines for `[127.0.0.1]:port` from `ssh_host_*_key.pub` texts."""
    lines = []
    for key in host_keys:
        fields = key.split()
        if len(fields) >= 2:
            lines.append(f"[127.0.0.1]:{port} {fields[0]} {fields[1]}")
    return lines


# ---------------------------------------------------------------------------
# Inventory (pure)


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


# ---------------------------------------------------------------------------
# Paths of one lab


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


# ---------------------------------------------------------------------------
# Docker CLI


class Docker:
    def __init__(self, binary: str) -> None:
        self.binary = binary

    def run(
        self,
        args: Sequence[str],
        *,
        check: bool = True,
        stdin: bytes | None = None,
        timeout: float | None = 600,
    ) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run(
            [self.binary, *args],
            input=stdin,
            capture_output=True,
            check=False,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise LabError(f"docker {' '.join(args[:3])}...: {err}")
        return proc

    def out(self, args: Sequence[str], **kw: Any) -> str:
        return self.run(args, **kw).stdout.decode(errors="replace").strip()

    def exec(
        self, container: str, script: str, *, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        flags = ["-i"] if stdin is not None else []
        return self.run(["exec", *flags, container, "sh", "-ec", script], check=check, stdin=stdin)

    def exists(self, kind: str, name: str) -> bool:
        return self.run([kind, "inspect", name], check=False).returncode == 0

    def inspect(self, name: str) -> dict[str, Any]:
        data = json.loads(self.out(["inspect", name]))
        if not data:
            raise LabError(f"no such object: {name}")
        first: dict[str, Any] = data[0]
        return first


def connect_engine() -> Docker:
    binary = shutil.which("docker")
    if binary is None:
        print(NO_ENGINE, file=sys.stderr)
        raise SystemExit(2)
    docker = Docker(binary)
    try:
        ok = docker.run(["version", "--format", "{{.Server.Version}}"], check=False)
    except subprocess.TimeoutExpired:
        ok = None
    if ok is None or ok.returncode != 0:
        print(NO_ENGINE, file=sys.stderr)
        raise SystemExit(2)
    return docker


def detect_cgroup() -> int:
    stat = shutil.which("stat") or "/usr/bin/stat"
    out = subprocess.run(
        [stat, "-fc", "%T", "/sys/fs/cgroup"],
        capture_output=True,
        text=True,
        check=False,
    )
    return cgroup_version(out.stdout)


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# Images


def ensure_image(docker: Docker, release: str, mirror: str) -> str:
    recipe = RECIPE_FILE.read_text(encoding="utf-8")
    tag = image_tag(release, mirror, recipe)
    if docker.exists("image", tag):
        return tag
    build_root = STATE_ROOT / "build"
    build_root.mkdir(parents=True, exist_ok=True)
    # One build per release at a time, even across labs run side by side.
    with (build_root / f"{release}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if docker.exists("image", tag):
            return tag
        return build_image(docker, release, mirror, tag)


def build_image(docker: Docker, release: str, mirror: str, tag: str) -> str:
    if os.geteuid() != 0:
        raise LabError(f"building {tag} needs root (debootstrap); run lab.py as root")
    if shutil.which("debootstrap") is None:
        raise LabError("debootstrap is missing: apt-get install debootstrap")
    log(f"building image {tag} (debootstrap {release} from {mirror}) ...")
    start = time.monotonic()
    build_root = STATE_ROOT / "build"
    cache = STATE_ROOT / "cache" / f"debootstrap-{release}"
    with tempfile.TemporaryDirectory(dir=build_root, prefix=f"{release}-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        logfile = build_root / f"{release}.log"
        with logfile.open("wb") as fh:
            proc = subprocess.run(
                [
                    "/bin/sh",
                    str(RECIPE_FILE),
                    release,
                    mirror,
                    str(rootfs),
                    str(cache),
                    ",".join(IMAGE_PACKAGES),
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            tail = logfile.read_text(errors="replace").splitlines()[-15:]
            raise LabError(
                f"image recipe failed for {release} (log {logfile}):\n" + "\n".join(tail)
            )
        tar_bin = shutil.which("tar") or "/bin/tar"
        with subprocess.Popen(
            [tar_bin, "--numeric-owner", "-C", str(rootfs), "-cf", "-", "."],
            stdout=subprocess.PIPE,
        ) as tar:
            imp = subprocess.run(
                [
                    docker.binary,
                    "import",
                    "--change",
                    "ENV container=docker",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    f"LABEL gpuprov.recipe={tag.rsplit('-', 1)[1]}",
                    "--message",
                    f"gpuprov lab {release} (scripts/lab/image-recipe.sh)",
                    "-",
                    tag,
                ],
                stdin=tar.stdout,
                capture_output=True,
                check=False,
            )
        if imp.returncode != 0:
            raise LabError(f"docker import failed: {imp.stderr.decode().strip()}")
        # The rootfs has root-owned device nodes etc.; rmtree as root is fine.
        shutil.rmtree(rootfs, ignore_errors=True)
    log(f"built {tag} in {time.monotonic() - start:.0f}s")
    return tag


# ---------------------------------------------------------------------------
# Lab lifecycle


def ensure_key(paths: LabPaths) -> None:
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    SSH_DIR.chmod(0o700)
    if paths.key_file.exists():
        return
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise LabError("ssh-keygen is missing: apt-get install openssh-client")
    subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gpuprov-lab", "-f", str(paths.key_file)],
        check=True,
    )


def lab_containers(docker: Docker, lab: str) -> list[dict[str, Any]]:
    ids = docker.out(["ps", "-aq", "--filter", f"label={LABEL}={lab}"]).split()
    if not ids:
        return []
    data: list[dict[str, Any]] = json.loads(docker.out(["inspect", *ids]))
    return data


def taken_ports(docker: Docker) -> set[int]:
    return published_ports(docker.out(["ps", "-a", "--format", "{{.Ports}}"]))


def container_port(info: Mapping[str, Any]) -> int | None:
    bindings = (info.get("HostConfig") or {}).get("PortBindings") or {}
    for binding in bindings.get(f"{CONTAINER_SSH_PORT}/tcp") or []:
        with contextlib.suppress(TypeError, ValueError):
            return int(binding.get("HostPort"))
    return None


def container_address(info: Mapping[str, Any], network: str) -> str:
    nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
    return str((nets.get(network) or {}).get("IPAddress") or "")


def network_gateway(docker: Docker, network: str) -> str | None:
    info = docker.inspect(network)
    for cfg in (info.get("IPAM") or {}).get("Config") or []:
        gateway = cfg.get("Gateway")
        if gateway:
            return str(gateway)
    return None


def wait_ready(docker: Docker, container: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        proc = docker.run(
            [
                "exec",
                container,
                "sh",
                "-c",
                "systemctl is-active ssh.service && test -s /etc/ssh/ssh_host_ed25519_key.pub",
            ],
            check=False,
        )
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            logs = docker.out(["logs", "--tail", "20", container], check=False)
            raise LabError(f"{container}: sshd not up after {timeout:.0f}s\n{logs}")
        time.sleep(1)


def marker_matches(docker: Docker, container: str, path: str, value: str) -> bool:
    proc = docker.run(["exec", container, "cat", path], check=False)
    return proc.returncode == 0 and proc.stdout.decode().strip() == value


def provision(
    docker: Docker,
    container: str,
    profile: Profile,
    pubkey: str,
    ca_bundle: str | None,
    wheelhouse: Path | None,
) -> list[str]:
    """Bring a running host to the wanted content; return what changed."""
    changes: list[str] = []
    # root's authorized key
    auth = "/root/.ssh/authorized_keys"
    if not marker_matches(docker, container, auth, pubkey.strip()):
        docker.exec(
            container,
            f"mkdir -p -m 700 /root/.ssh && cat > {auth} && chmod 600 {auth}",
            stdin=(pubkey.strip() + "\n").encode(),
        )
        changes.append("ssh key")
    # simulated PCI tree (lab only; gpu_info reads it via gpu_info_sysfs_root)
    files = sysfs_files(profile)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    marker = "/opt/gpuprov-sim/.profile.sha256"
    if not marker_matches(docker, container, marker, digest):
        docker.exec(container, "rm -rf /opt/gpuprov-sim")
        prefix = SIM_SYSFS_ROOT.strip("/")
        tree = {f"{prefix}/{k}": v for k, v in files.items()}
        tree[marker.strip("/")] = digest + "\n"
        docker.run(
            ["cp", "-", f"{container}:/"],
            stdin=tar_bytes(tree, dirs=[f"{prefix}/bus/pci/devices"]),
        )
        changes.append(f"pci profile {profile.name}")
    # CA bundle of the controller (TLS-intercepting proxies)
    if ca_bundle:
        controller = Path(ca_bundle).read_text(encoding="ascii", errors="replace")
        digest = hashlib.sha256(controller.encode()).hexdigest()
        marker = f"{HOST_CA_DIR}/.bundle.sha256"
        if not marker_matches(docker, container, marker, digest):
            host_bundle = docker.out(
                ["exec", container, "cat", "/etc/ssl/certs/ca-certificates.crt"],
                check=False,
            )
            extra = extra_certs(controller, host_bundle)
            tree = {
                f"{HOST_CA_DIR.strip('/')}/gpuprov-lab-{i:03d}.crt": c for i, c in enumerate(extra)
            }
            tree[f"{HOST_CA_DIR.strip('/')}/.bundle.sha256"] = digest + "\n"
            docker.exec(container, f"rm -rf {HOST_CA_DIR}")
            docker.run(["cp", "-", f"{container}:/"], stdin=tar_bytes(tree))
            if extra:
                docker.exec(container, "update-ca-certificates >/dev/null")
            # pip in the hosts uses the system store (Debian's pip does already).
            docker.exec(
                container,
                "test -e /etc/pip.conf || printf '[global]\\ncert = "
                "/etc/ssl/certs/ca-certificates.crt\\n' > /etc/pip.conf",
            )
            changes.append(f"ca bundle (+{len(extra)} certs)")
    # wheelhouse: one docker cp per host, skipped when the listing is unchanged
    if wheelhouse is not None:
        digest = wheelhouse_digest(wheelhouse)
        marker = f"{HOST_WHEELHOUSE}/.gpuprov-wheelhouse.sha256"
        if not marker_matches(docker, container, marker, digest):
            docker.exec(container, f"rm -rf {HOST_WHEELHOUSE}")
            docker.run(["cp", f"{wheelhouse}/.", f"{container}:{HOST_WHEELHOUSE}"])
            docker.exec(
                container,
                f"mkdir -p {HOST_WHEELHOUSE} && echo {digest} > {marker} "
                f"&& chown -R root:root {HOST_WHEELHOUSE}",
            )
            changes.append(f"wheelhouse {wheelhouse}")
    return changes


def wheelhouse_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for entry in sorted(path.rglob("*")):
        if entry.is_file():
            st = entry.stat()
            digest.update(f"{entry.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def find_wheelhouse(arg: str | None) -> Path | None:
    if arg is not None:
        if not arg:
            return None
        path = Path(arg)
        if not path.is_dir():
            raise UsageError(f"--wheelhouse {arg}: not a directory")
        return path
    pip = [sys.executable, "-m", "pip", "config", "list"]
    try:
        out = subprocess.run(pip, capture_output=True, text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for item in pip_find_links(out):
        path = Path(item)
        if path.is_dir() and any(path.glob("*.whl")):
            return path
    return None


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


def ensure_mirror(docker: Docker, paths: LabPaths, image: str) -> str:
    """Build (once, cached) and serve the stand-in toolkit repository; return its URL.

    The repository is NOT NVIDIA's: stub packages with NVIDIA's names, signed with a
    throwaway key (scripts/lab/aptrepo.py). It is served by the NAME-mirror container
    on the lab network; the URL uses the container's lab-network address.
    """
    repo_dir = aptrepo.ensure_repo(paths.state_dir).resolve()
    name = mirror_name(paths.name)
    net = network_name(paths.name)
    if docker.exists("container", name):
        info = docker.inspect(name)
        labels = info["Config"].get("Labels") or {}
        if (
            labels.get("gpuprov.mirror.repo") != str(repo_dir)
            or labels.get("gpuprov.image") != image
        ):
            docker.run(["rm", "-f", name])
            log(f"{name}: removed (repository or image changed)")
        elif not info["State"].get("Running"):
            docker.run(["start", name])
    if not docker.exists("container", name):
        docker.run(mirror_run_args(paths.name, image, repo_dir))
        log(f"{name}: serving the stand-in toolkit repository {repo_dir}")
    probe = (
        "import urllib.request as u; "
        f"u.urlopen('http://127.0.0.1:{MIRROR_PORT}/gpgkey', timeout=2).read()"
    )
    deadline = time.monotonic() + 30
    while docker.run(["exec", name, "python3", "-c", probe], check=False).returncode != 0:
        if time.monotonic() > deadline:
            logs = docker.out(["logs", "--tail", "20", name], check=False)
            raise LabError(f"{name}: not serving after 30s\n{logs}")
        time.sleep(0.5)
    address = container_address(docker.inspect(name), net)
    if not address:
        raise LabError(f"{name}: no address on {net}")
    return mirror_url(address)


def ensure_s3(docker: Docker, paths: LabPaths, network: str, image: str) -> dict[str, Any]:
    """The S3 stand-in (moto, signatures checked) and the lab's vault (scripts/lab/s3lab.py)."""
    try:
        return s3lab.ensure(
            docker, paths.name, paths.state_dir, paths.inventory.parent, network, image
        )
    except (s3lab.S3LabError, subprocess.CalledProcessError) as exc:
        raise LabError(f"{s3lab.s3_name(paths.name)}: {exc}") from exc


def remove_mirror(docker: Docker, lab: str) -> None:
    ids = docker.out(["ps", "-aq", "--filter", f"label={MIRROR_LABEL}={lab}"]).split()
    if ids:
        docker.run(["rm", "-f", *ids])
        log(f"{mirror_name(lab)}: removed")


FACT_CACHES = (REPO / ".cache" / "ansible-facts",)  # ansible.cfg's fact_caching_connection


def forget_cached_facts(lab: str, host: str) -> list[Path]:
    """Remove Ansible's cached facts of `host` (a new container is a new machine).

    The jsonfile cache is keyed by inventory host name (files `<prefix>_<host>` or
    `<host>`), and lab host names repeat across labs; the lab tests use
    .lab/NAME/facts. Returns the removed files.
    """
    removed: list[Path] = []
    for cache in (*FACT_CACHES, STATE_ROOT / lab / "facts"):
        if not cache.is_dir():
            continue
        for entry in cache.iterdir():
            if entry.is_file() and (entry.name == host or entry.name.rsplit("_", 1)[-1] == host):
                entry.unlink()
                removed.append(entry)
    return removed


def create_container(docker: Docker, lab: str, host: HostSpec, image: str, cgroup: int) -> None:
    """docker run on a free 127.0.0.1 port; retry when another lab took it meanwhile."""
    name = container_name(lab, host.name)
    forget_cached_facts(lab, host.name)
    for _ in range(5):
        port = allocate_ports(1, taken_ports(docker), port_is_free)[0]
        proc = docker.run(docker_run_args(lab, host, image, port, cgroup), check=False)
        if proc.returncode == 0:
            return
        err = proc.stderr.decode(errors="replace")
        docker.run(["rm", "-f", name], check=False)
        if "already allocated" not in err and "address already in use" not in err:
            raise LabError(f"docker run {name}: {err.strip()}")
    raise LabError(f"docker run {name}: no free port after 5 tries")


def cmd_up(args: argparse.Namespace, paths: LabPaths) -> int:
    data = load_lab_data()
    hosts = parse_hosts(args.hosts, data)
    wheelhouse = find_wheelhouse(args.wheelhouse)
    ca_bundle: str | None = args.ca_bundle or None
    if ca_bundle and not Path(ca_bundle).is_file():
        raise UsageError(f"--ca-bundle {ca_bundle}: no such file")
    docker = connect_engine()
    cgroup = detect_cgroup()
    started = time.monotonic()
    ensure_key(paths)
    pubkey = paths.key_file.with_suffix(".pub").read_text(encoding="utf-8")

    releases = sorted({h.release for h in hosts} | {MIRROR_RELEASE})
    images = {r: ensure_image(docker, r, args.mirror) for r in releases}

    net = network_name(paths.name)
    if not docker.exists("network", net):
        docker.run(["network", "create", "--label", f"{LABEL}={paths.name}", net])
        log(f"network {net}: created")
    repo_url = ensure_mirror(docker, paths, images[MIRROR_RELEASE])
    s3_vars = ensure_s3(docker, paths, net, images[MIRROR_RELEASE])

    existing = {c["Name"].lstrip("/"): c for c in lab_containers(docker, paths.name)}
    wanted = {container_name(paths.name, h.name) for h in hosts}
    for name in sorted(set(existing) - wanted):
        docker.run(["rm", "-f", "-v", name])
        docker.run(["volume", "rm", "-f", f"{name}-docker"], check=False)
        log(f"{name}: removed (not in --hosts)")

    runtimes: list[HostRuntime] = []
    summary: list[str] = []
    for host in hosts:
        name = container_name(paths.name, host.name)
        info = existing.get(name)
        image = images[host.release]
        action = "reused"
        if info is not None:
            labels = info["Config"].get("Labels") or {}
            if (
                args.recreate
                or labels.get("gpuprov.profile") != host.profile
                or labels.get("gpuprov.release") != host.release
            ):
                docker.run(["rm", "-f", "-v", name])
                docker.run(
                    ["volume", "rm", "-f", docker_volume_name(paths.name, host.name)],
                    check=False,
                )
                info = None
                action = "recreated"
            else:
                if labels.get("gpuprov.image") != image:
                    # Keep a host that someone may be working in; say how to refresh.
                    log(
                        f"{host.name}: runs {labels.get('gpuprov.image')}, not {image}; "
                        f"kept (`up --recreate` or `down` + `up` to refresh)"
                    )
                if not info["State"].get("Running"):
                    docker.run(["start", name])
                    action = "started"
        if info is None:
            create_container(docker, paths.name, host, image, cgroup)
            action = "created" if action == "reused" else action
        info = docker.inspect(name)
        wait_ready(docker, name)
        changes = provision(
            docker, name, data.profiles[host.profile], pubkey, ca_bundle, wheelhouse
        )
        port = container_port(info)
        if port is None:
            raise LabError(f"{name}: no published SSH port")
        runtimes.append(HostRuntime(host, name, port, container_address(info, net)))
        detail = f" ({', '.join(changes)})" if changes and action == "reused" else ""
        summary.append(f"{host.name}: {action}{detail}")
        if action != "reused" or changes:
            log(summary[-1])

    # known_hosts from the hosts' own keys (read through docker exec)
    lines: list[str] = []
    for rt in runtimes:
        keys = docker.out(["exec", rt.container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"])
        lines += known_hosts_lines(rt.port, keys.splitlines())
    kh_changed = write_if_changed(paths.known_hosts, "\n".join(lines) + "\n", 0o600)

    in_lab_dir = paths.inventory.parent.resolve() == INVENTORY_DIR.resolve()
    extra = None if in_lab_dir else read_group_vars(INVENTORY_DIR / "group_vars")
    inventory = build_inventory(
        paths.name,
        runtimes,
        data.profiles,
        paths.key_file.resolve(),
        paths.known_hosts.resolve(),
        HOST_WHEELHOUSE if wheelhouse else None,
        extra,
        network_gateway(docker, net),
        repo_url,
    )
    inventory["all"]["children"]["lab"]["vars"].update(s3_vars)
    inv_changed = write_if_changed(paths.inventory, dump_inventory(inventory, paths.name))
    state = {
        "lab": paths.name,
        "inventory": str(paths.inventory.resolve()),
        "known_hosts": str(paths.known_hosts.resolve()),
        "hosts": [dataclasses.asdict(h) for h in hosts],
        "images": {h.release: images[h.release] for h in hosts},
        "mirror": {"container": mirror_name(paths.name), "url": repo_url},
        "cgroup": cgroup,
        "wheelhouse": str(wheelhouse) if wheelhouse else None,
    }
    write_if_changed(paths.state_file, json.dumps(state, indent=2) + "\n")
    if kh_changed:
        log(f"known_hosts: {paths.known_hosts}")
    if inv_changed:
        log(f"inventory: {paths.inventory}")
    if all(s.endswith(": reused") for s in summary) and not (kh_changed or inv_changed):
        log(f"lab {paths.name}: up, no change ({len(hosts)} hosts)")
    else:
        log(f"lab {paths.name}: up ({len(hosts)} hosts, {time.monotonic() - started:.0f}s)")
    return 0


def cmd_down(args: argparse.Namespace, paths: LabPaths) -> int:
    docker = connect_engine()
    state: dict[str, Any] = {}
    if paths.state_file.exists():
        state = json.loads(paths.state_file.read_text(encoding="utf-8"))
    for info in lab_containers(docker, paths.name):
        name = info["Name"].lstrip("/")
        docker.run(["rm", "-f", "-v", name])
        log(f"{name}: removed")
    remove_mirror(docker, paths.name)
    s3lab.remove(docker, paths.name)
    volumes = docker.out(["volume", "ls", "-q", "--filter", f"label={LABEL}={paths.name}"]).split()
    if volumes:
        docker.run(["volume", "rm", "-f", *volumes])
    net = network_name(paths.name)
    if docker.exists("network", net):
        docker.run(["network", "rm", net])
        log(f"network {net}: removed")
    inventory = Path(state.get("inventory") or paths.inventory)
    for path in (inventory, paths.known_hosts):
        if path.exists():
            path.unlink()
    if paths.state_dir.exists():
        shutil.rmtree(paths.state_dir)
    log(f"lab {paths.name}: down")
    return 0


def cmd_status(args: argparse.Namespace, paths: LabPaths) -> int:
    docker = connect_engine()
    containers = lab_containers(docker, paths.name)
    if not containers:
        log(f"lab {paths.name}: no hosts")
        return 1
    net = network_name(paths.name)
    rows = [("HOST", "PROFILE", "RELEASE", "STATE", "SSH", "ADDRESS", "IMAGE")]
    for info in sorted(containers, key=lambda c: str(c["Name"])):
        labels = info["Config"].get("Labels") or {}
        port = container_port(info)
        rows.append(
            (
                str(labels.get("gpuprov.host", "?")),
                str(labels.get("gpuprov.profile", "?")),
                str(labels.get("gpuprov.release", "?")),
                str(info["State"].get("Status", "?")),
                f"127.0.0.1:{port}" if port else "-",
                container_address(info, net) or "-",
                str(labels.get("gpuprov.image", "?")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        log("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if docker.exists("container", mirror_name(paths.name)):
        info = docker.inspect(mirror_name(paths.name))
        address = container_address(info, net) or "-"
        log(
            f"mirror: {mirror_name(paths.name)} {info['State'].get('Status', '?')} "
            f"http://{address}:{MIRROR_PORT} (stand-in for NVIDIA's toolkit repository)"
        )
    log(f"inventory: {paths.inventory}")
    return 0


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


def cmd_ssh(args: argparse.Namespace, paths: LabPaths) -> NoReturn:
    docker = connect_engine()
    name = container_name(paths.name, args.host)
    if not docker.exists("container", name):
        raise UsageError(f"no host {args.host} in lab {paths.name}")
    port = container_port(docker.inspect(name))
    ssh = shutil.which("ssh")
    if ssh is None or port is None:
        raise LabError("ssh client or published port missing")
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    argv = [
        ssh,
        "-i",
        str(paths.key_file),
        "-p",
        str(port),
        "-o",
        f"UserKnownHostsFile={paths.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "IdentitiesOnly=yes",
        "root@127.0.0.1",
        *command,
    ]
    os.execv(ssh, argv)  # noqa: S606


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab.py",
        description="gpuprov lab: Debian systemd containers with simulated GPUs (PCI only)",
    )
    parser.add_argument(
        "--lab", default=DEFAULT_LAB, help="lab name (prefixes containers, network, state)"
    )
    parser.add_argument(
        "--inventory",
        type=Path,
        help="inventory path (default inventories/lab/hosts.yml, or .lab/NAME/hosts.yml)",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create or reuse the hosts, write the inventory")
    up.add_argument(
        "--hosts",
        default="default",
        help="preset (default, full, small, trixie) or name=profile[:release],...",
    )
    up.add_argument("--mirror", default=os.environ.get("GPUPROV_LAB_MIRROR", DEFAULT_MIRROR))
    up.add_argument(
        "--ca-bundle",
        default=DEFAULT_CA_BUNDLE,
        help="PEM bundle the hosts should trust ('' for none)",
    )
    up.add_argument(
        "--wheelhouse",
        default=None,
        help="directory copied to /opt/gpuprov-wheels (default: pip's find-links; '' none)",
    )
    up.add_argument(
        "--recreate",
        action="store_true",
        help="replace existing hosts (e.g. after the image recipe changed)",
    )
    sub.add_parser("down", help="remove the containers, network, volumes and state")
    sub.add_parser("status", help="table of the hosts")
    ssh = sub.add_parser("ssh", help="ssh into a host")
    ssh.add_argument("host")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def fail(message: str, code: int) -> NoReturn:
    print(f"lab.py: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not LAB_NAME_RE.match(args.lab):
        fail(f"bad lab name {args.lab!r}", 2)
    paths = LabPaths(args.lab, args.inventory or default_inventory(args.lab))
    commands: dict[str, Callable[[argparse.Namespace, LabPaths], int]] = {
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
        "ssh": cmd_ssh,
    }
    try:
        return commands[args.cmd](args, paths)
    except UsageError as exc:
        fail(str(exc), 2)
    except LabError as exc:
        fail(str(exc), 1)
    except KeyboardInterrupt:
        fail("interrupted", 1)


if __name__ == "__main__":
    sys.exit(main())
