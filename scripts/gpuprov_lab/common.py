"""Paths, names and constants of the lab, its errors and its progress lines."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path

# scripts/lab/ holds the lab's data (profiles, image recipe); this package its code.
REPO = Path(__file__).resolve().parents[2]
LAB_FILES = REPO / "scripts" / "lab"

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
    "lab.py: no Docker engine reachable: `make prereqs` installs and starts one (Debian, "
    "root), or: apt-get install docker.io && dockerd &"
)


class LabError(Exception):
    """A failure that ends the command with a message (exit 1)."""


class UsageError(LabError):
    """Bad input (exit 2)."""


_STARTED = time.monotonic()


def log(msg: str) -> None:
    """One progress line, prefixed with the seconds since the command started."""
    print(f"[{time.monotonic() - _STARTED:4.0f}s] {msg}", flush=True)
