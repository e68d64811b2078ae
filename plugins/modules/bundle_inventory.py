#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""What a converged host installed, as the offline bundle needs it (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_inventory
short_description: List what a converged host installed, with where each part came from
description:
  - Read-only. Run on a host that converged online (a staging host of each plan);
    C(scripts/bundle.py) downloads what it lists into the offline bundle (docs/bundle.md).
  - Debian packages. Every package dpkg has installed (C(ii), or C(hi) when held), at its
    installed version,
    with the URL, size and SHA256 apt would download it from (C(apt-get download
    --print-uris), from apt's own lists, no download). A package no configured source has at that
    version (installed from a file) is named in RV(not_downloadable).
  - Python environments. Every virtual environment (a C(pyvenv.cfg)) under O(venv_roots), with
    its Python version, the platform tags its pip accepts and every installed distribution
    (C(pip list)).
version_added: "0.9.0"
author: gpuprov contributors
options:
  venv_roots:
    description: Directories searched for virtual environments (4 levels deep).
    type: list
    elements: path
    default: [/opt, /srv, /usr/local]
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: List what this host installed
  bundle_inventory:
  register: installed
"""

RETURN = r"""
release:
  description: The Debian release's codename (C(VERSION_CODENAME) of /etc/os-release).
  returned: always
  type: str
architecture:
  description: dpkg's architecture.
  returned: always
  type: str
debs:
  description: One item per installed package (package, version, architecture, uri, filename,
    size, sha256).
  returned: always
  type: list
  elements: dict
not_downloadable:
  description: C(name=version) of installed packages no configured source has.
  returned: always
  type: list
  elements: str
venvs:
  description: One item per virtual environment (path, python, platforms, packages).
  returned: always
  type: list
  elements: dict
"""

import json
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

Runner = Callable[[Sequence[str]], tuple[int, str, str]]

MISSING = re.compile(
    r"^E: Can't find a source to download version '(?P<version>[^']+)' of '(?P<name>[^']+)'",
    re.MULTILINE,
)

DPKG_FORMAT = "${db:Status-Abbrev}\t${binary:Package}\t${Version}\t${Architecture}\n"

# Run by each environment's own interpreter: the platform tags its pip accepts.
TAGS_SCRIPT = (
    "import json, sys\n"
    "from pip._vendor.packaging import tags\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2],"
    " 'platforms': sorted({t.platform for t in tags.sys_tags()})}))\n"
)


def parse_installed(output: str) -> list[dict[str, str]]:
    """dpkg-query lines (DPKG_FORMAT) of installed packages, in order: the status letter (the
    second of db:Status-Abbrev) `i`, whatever the selection (`ii`, and `hi` for a held one)."""
    found = []
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0][1:2] == "i":
            found.append({"package": parts[1], "version": parts[2], "architecture": parts[3]})
    return found


def parse_print_uris(output: str) -> list[dict[str, Any]]:
    """`apt-get download --print-uris` lines: 'URI' FILENAME SIZE HASHTYPE:HEX."""
    found = []
    for line in output.splitlines():
        if not line.startswith("'"):
            continue
        uri, filename, size, digest = shlex.split(line)[:4]
        kind, _, value = digest.partition(":")
        found.append(
            {
                "uri": uri,
                "filename": filename,
                "size": int(size),
                "sha256": value if kind.upper() == "SHA256" else "",
            }
        )
    return found


def parse_missing(output: str) -> set[tuple[str, str]]:
    """(name, version) of apt's "Can't find a source to download version 'V' of 'N'" lines
    (the architecture qualifier dropped)."""
    found = set()
    for match in MISSING.finditer(output):
        found.add((match["name"].split(":", 1)[0], match["version"]))
    return found


def download_uris(
    run: Runner, packages: Sequence[dict[str, str]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each package with apt's download URI, and the `name=version` apt has no source for.

    One apt-get call: apt names every package it has no source for (an `E:` line each) and
    prints the URIs of the others, not in the order asked; each is matched by the file name
    apt gives it (name_version_architecture.deb, the epoch's colon as %3a)."""
    if not packages:
        return [], []
    specs = [f"{p['package']}={p['version']}" for p in packages]
    _rc, out, err = run(["apt-get", "download", "--print-uris", *specs])
    by_file = {u["filename"]: u for u in parse_print_uris(out)}
    debs: list[dict[str, Any]] = []
    missing: list[str] = []
    for package, spec in zip(packages, specs):  # specs: one per package, built above
        uri = by_file.get(deb_filename(package))
        if uri:
            debs.append({**package, **uri})
        else:
            missing.append(spec)
    unmatched = len(by_file) - len(debs)
    if unmatched or len(missing) != len(parse_missing(err + out)):
        raise RuntimeError(
            f"apt-get download --print-uris: {len(by_file)} URIs, {len(debs)} matched to "
            f"installed packages, {len(missing)} without a source: {err.strip()[-400:]}"
        )
    return debs, missing


def deb_filename(package: Mapping[str, str]) -> str:
    """The file name apt downloads an installed package's version to."""
    name = package["package"].split(":", 1)[0]
    version = package["version"].replace(":", "%3a")
    return f"{name}_{version}_{package['architecture']}.deb"


def find_venvs(roots: Iterable[str], depth: int = 4) -> list[str]:
    """Directories holding a pyvenv.cfg under roots (not below another environment)."""
    found: list[str] = []
    for root in roots:
        if not Path(root).is_dir():
            continue
        base = root.rstrip(os.sep).count(os.sep)
        for path, dirs, files in os.walk(root):
            if "pyvenv.cfg" in files:
                found.append(path)
                dirs[:] = []
            elif path.count(os.sep) - base >= depth:
                dirs[:] = []
            dirs.sort()
    return sorted(set(found))


def venv_inventory(run: Runner, path: str) -> dict[str, Any]:
    python = str(Path(path, "bin", "python"))
    rc, out, err = run([python, "-c", TAGS_SCRIPT])
    if rc != 0:
        raise RuntimeError(f"{python} could not report its platform tags: {err.strip()}")
    tags = json.loads(out)
    rc, out, err = run(
        [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"]
    )
    if rc != 0:
        raise RuntimeError(f"{python} -m pip list failed: {err.strip()}")
    packages = sorted(
        ({"name": p["name"], "version": p["version"]} for p in json.loads(out)),
        key=lambda p: p["name"].lower(),
    )
    return {"path": path, **tags, "packages": packages}


def os_release(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv_roots": {
                "type": "list",
                "elements": "path",
                "default": ["/opt", "/srv", "/usr/local"],
            },
        },
        supports_check_mode=True,
    )

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(list(argv), environ_update={"LC_ALL": "C"})
        return int(rc), str(out), str(err)

    release = os_release(Path("/etc/os-release").read_text(encoding="utf-8")).get(
        "VERSION_CODENAME", ""
    )
    rc, arch, err = run(["dpkg", "--print-architecture"])
    if rc != 0:
        module.fail_json(msg=f"dpkg --print-architecture failed: {err.strip()}")
    rc, out, err = run(["dpkg-query", "-W", "-f", DPKG_FORMAT])
    if rc != 0:
        module.fail_json(msg=f"dpkg-query failed: {err.strip()}")
    try:
        debs, missing = download_uris(run, parse_installed(out))
        venvs = [venv_inventory(run, path) for path in find_venvs(module.params["venv_roots"])]
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=False,
        release=release,
        architecture=arch.strip(),
        debs=debs,
        not_downloadable=missing,
        venvs=venvs,
    )


if __name__ == "__main__":
    main()
