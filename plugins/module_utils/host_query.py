# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""How gpuprov's modules ask a host's package manager and systemd, and read the answers.

One definition of the queries and their parsing, for the modules that read installed packages
and units: gpuprov_installed (a role's read of what is there) and gpuprov_state (the verifying
fast path's probe). Each caller decides what a row means to it. Runs on managed hosts:
Python 3.9+, standard library only, no Ansible imports (AnsiballZ ships this file with the
module, as ``ansible.module_utils.host_query`` or from the collection)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

# dpkg-query -W's format: one line per package (per architecture of a multi-arch one).
DPKG_FORMAT = "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n"
# rpm -q's format: one line per installed package.
RPM_FORMAT = "%{NAME}\t%{VERSION}-%{RELEASE}\n"
# dpkg's database directory (dpkg-query's --admindir).
DPKG_ADMINDIR = "/var/lib/dpkg"


def package_manager(
    admindir: str = DPKG_ADMINDIR, which: Callable[[str], str | None] = shutil.which
) -> str | None:
    """The package manager whose database holds this host's packages: ``dpkg`` where
    dpkg-query runs and its database lists packages (a non-empty ``status``: EPEL's dpkg for
    RHEL creates an empty one; a Debian host's lists dpkg itself), else ``rpm`` where rpm
    runs, else None. Every module that reads packages asks this."""
    try:
        listed = Path(admindir, "status").stat().st_size > 0
    except OSError:
        listed = False
    if listed and which("dpkg-query"):
        return "dpkg"
    if which("rpm"):
        return "rpm"
    return None


def no_package_manager(admindir: str = DPKG_ADMINDIR) -> str:
    """Why package_manager() found none, in the words every module that reads packages uses."""
    return (
        f"neither dpkg-query with a package database ({admindir}/status, listing packages) "
        "nor rpm on this host's PATH"
    )


def dpkg_rows(output: str) -> list[tuple[str, str, str]]:
    """(name, version, status abbreviation such as ``ii`` or ``hi``) per line of
    ``dpkg-query -W`` with DPKG_FORMAT; lines of another shape are left out."""
    rows: list[tuple[str, str, str]] = []
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0]:
            rows.append((parts[0], parts[1], parts[2].strip()))
    return rows


def rpm_rows(output: str) -> list[tuple[str, str]]:
    """(name, version-release) per line of ``rpm -q`` with RPM_FORMAT."""
    rows: list[tuple[str, str]] = []
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[0]:
            rows.append((parts[0], parts[1]))
    return rows


def systemctl_show_argv(units: Sequence[str], properties: Sequence[str]) -> list[str]:
    return ["systemctl", "show", f"--property={','.join(properties)}", "--", *units]


def unit_properties(units: Sequence[str], output: str) -> dict[str, dict[str, str]]:
    """``systemctl show --property=... UNIT...`` (one block of key=value lines per unit, in the
    order asked, blank lines between) as unit -> its properties, under the names asked (an
    alias is answered under its own name). ValueError when the blocks do not match the units."""
    blocks = output.strip("\n").split("\n\n") if output.strip() else []
    if len(blocks) != len(units):
        raise ValueError(f"systemctl show answered {len(blocks)} blocks for {len(units)} units")
    return {
        unit: dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        for unit, block in zip(units, blocks)  # noqa: B905 - strict= needs Python 3.10 (hosts: 3.9)
    }
