"""Paths, names and constants of the lab, its errors and its progress lines."""

from __future__ import annotations

import os
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


# Environment variables that choose Ansible's configuration, vault secrets, inventory or
# content. The lab brings its own (the repository's ansible.cfg and its paths, the lab's
# .lab/NAME/vault-password, its hosts.yml given with -i), so an operator's exported values
# never reach the Ansible programs the lab runs. Kept, they conflict: an
# ANSIBLE_VAULT_PASSWORD_FILE next to the lab's --vault-password-file gives ansible-vault
# two "default" vault ids and `encrypt` stops (exit 5); it also cannot open the lab's vault,
# and a file that is missing here stops every run. Another ANSIBLE_CONFIG may name a vault
# password file, an inventory or other roles and plugins; *_PATH-style variables override
# ansible.cfg's paths, so the lab would run other roles than this checkout's.
OPERATOR_ANSIBLE_ENV = (
    "ANSIBLE_CONFIG",
    "ANSIBLE_INVENTORY",
    "ANSIBLE_VAULT_PASSWORD_FILE",
    "ANSIBLE_VAULT_IDENTITY_LIST",
    "ANSIBLE_VAULT_IDENTITY",
    "ANSIBLE_VAULT_ENCRYPT_IDENTITY",
    "ANSIBLE_VAULT_ID_MATCH",
    "ANSIBLE_ASK_VAULT_PASS",
    "ANSIBLE_ROLES_PATH",
    "ANSIBLE_COLLECTIONS_PATH",
    "ANSIBLE_COLLECTIONS_PATHS",
    "ANSIBLE_LIBRARY",
    "ANSIBLE_ACTION_PLUGINS",
    "ANSIBLE_FILTER_PLUGINS",
    "ANSIBLE_MODULE_UTILS",
)


def lab_tool_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an Ansible program the lab runs (ansible-playbook, ansible-vault):
    `base` (default: this process's environment) without OPERATOR_ANSIBLE_ENV, with the
    repository's ansible.cfg. Everything else in `base` is kept (e.g. a test's
    ANSIBLE_STDOUT_CALLBACK)."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k not in OPERATOR_ANSIBLE_ENV
    }
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    return env


class LabError(Exception):
    """A failure that ends the command with a message (exit 1)."""


class UsageError(LabError):
    """Bad input (exit 2)."""


_STARTED = time.monotonic()


def log(msg: str) -> None:
    """One progress line, prefixed with the seconds since the command started."""
    print(f"[{time.monotonic() - _STARTED:4.0f}s] {msg}", flush=True)
