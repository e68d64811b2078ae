#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Read which of some packages and systemd units a host has, as a result and not as facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuprov_installed
short_description: Read some installed packages and systemd units, without setting facts
description:
  - Answers the preflight questions "is one of these packages installed, at which version",
    "does this unit exist, is it running" and "do these paths exist" in one module call, with
    one C(dpkg-query) (or C(rpm -qa)) and one C(systemctl show).
  - Replaces M(ansible.builtin.package_facts) and M(ansible.builtin.service_facts) in the
    roles. Those set every package and every unit of the host as host facts, which the
    controller then decodes and copies for every later task of the host (with a fact cache,
    a JSON decode each time; on a 4-host no-op, half of the CPU of ansible-playbook).
    This module returns only what was asked, in its result (C(register) it).
  - Needs no Python bindings of the package manager (package_facts needs python3-apt on
    Debian). dpkg is read where its database is (O(admindir)), rpm otherwise. Units are read
    only where systemd runs (C(/run/systemd/system)); elsewhere RV(units) is empty.
  - A failed package read leaves RV(packages) out of the (failed) result.
version_added: "0.9.0"
author: gpuprov contributors
options:
  packages:
    description: Package names to look for (exact).
    type: list
    elements: str
    default: []
  package_regex:
    description:
      - Also every installed package whose name this regular expression matches from its
        start (Python C(re.match), as Jinja's C(match) test). Empty matches nothing.
    type: str
    default: ""
  units:
    description: systemd unit names (with their suffix, e.g. C(docker.service)).
    type: list
    elements: str
    default: []
  paths:
    description: Paths to look for (links followed), such as an installer someone ran.
    type: list
    elements: path
    default: []
  admindir:
    description: dpkg's database directory (tests point it at a throwaway one).
    type: path
    default: /var/lib/dpkg
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Read the engine packages and the docker unit
  gpuprov_installed:
    packages: [docker-ce, docker-ce-cli]
    units: [docker.service]
  register: __docker_installed
"""

RETURN = r"""
packages:
  description: >-
    name -> version of each installed package asked for (dpkg: every state but not-installed
    and config-files; rpm: VERSION-RELEASE). Packages that are not installed are absent.
  returned: success
  type: dict
units:
  description: >-
    unit -> its C(SubState) (running, exited, dead, failed, ...) for each unit asked for that
    systemd knows (loaded). Units systemd does not know are absent, as is everything on a host
    without systemctl.
  returned: always
  type: dict
paths:
  description: The paths asked for that exist (a link counts when its target exists), in order.
  returned: always
  type: list
  elements: str
manager:
  description: The package manager read (dpkg, rpm) or none.
  returned: always
  type: str
"""

import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

# The package and unit queries, shared with gpuprov_state (plugins/module_utils/host_query.py;
# shipped with this module by AnsiballZ, from the collection or ansible.cfg's module_utils).
try:
    from ansible_collections.gpuprov.fleet.plugins.module_utils import host_query as _hq
except ImportError:
    from ansible.module_utils import host_query as _hq

# dpkg's status abbreviation: the second letter is the package's state. n: not installed,
# c: only its configuration files are left. Every other state has files of the package.
_DPKG_ABSENT = ("n", "c")


def parse_dpkg(output: str) -> dict[str, str]:
    """`dpkg-query -W` with host_query.DPKG_FORMAT as name -> version of the installed
    packages (the first architecture's, for a multi-arch package)."""
    found: dict[str, str] = {}
    for name, version, status in _hq.dpkg_rows(output):
        if len(status) >= 2 and status[1] not in _DPKG_ABSENT:
            found.setdefault(name, version)
    return found


def parse_rpm(output: str) -> dict[str, str]:
    """`rpm -qa` with host_query.RPM_FORMAT as name -> version."""
    found: dict[str, str] = {}
    for name, version in _hq.rpm_rows(output):
        found.setdefault(name, version)
    return found


def select(installed: dict[str, str], names: Iterable[str], regex: str) -> dict[str, str]:
    """The installed packages asked for: by exact name, or matched by ``regex``."""
    wanted = set(names)
    pattern = re.compile(regex) if regex else None
    return {
        name: version
        for name, version in sorted(installed.items())
        if name in wanted or (pattern is not None and pattern.match(name))
    }


def parse_units(units: list[str], output: str) -> dict[str, str]:
    """`systemctl show --property=LoadState,SubState UNIT...` as unit -> SubState of the units
    systemd knows, under the names asked. ValueError when the answer does not fit the units."""
    return {
        unit: props.get("SubState", "")
        for unit, props in _hq.unit_properties(units, output).items()
        if props.get("LoadState", "not-found") != "not-found"
    }


def run(module: AnsibleModule) -> dict[str, object]:
    names = [str(n) for n in module.params["packages"]]
    regex = str(module.params["package_regex"])
    units = [str(u) for u in module.params["units"]]
    try:
        re.compile(regex)
    except re.error as exc:
        module.fail_json(msg=f"package_regex {regex!r} is not a regular expression: {exc}")
    result: dict[str, object] = {
        "changed": False,
        "packages": {},
        "units": {},
        "paths": [p for p in module.params["paths"] if Path(p).exists()],
        "manager": "none",
    }
    if names or regex:
        # Failures leave `packages` out of the result: a caller that tolerates them (gpu_smoke's
        # report) must tell "could not read" from "none installed".
        unread = {k: v for k, v in result.items() if k not in ("packages", "manager")}
        admindir = str(module.params["admindir"])
        manager = _hq.package_manager(admindir)
        if manager == "dpkg":
            argv = ["dpkg-query", "--admindir", admindir, "-W", _hq.DPKG_FORMAT]
            parse = parse_dpkg
        elif manager == "rpm":
            argv = ["rpm", "-qa", "--qf", _hq.RPM_FORMAT]
            parse = parse_rpm
        else:
            module.fail_json(
                msg=f"cannot read the packages: {_hq.no_package_manager(admindir)}", **unread
            )
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{argv[0]} failed (rc {rc}): {err.strip()}", **unread)
        result["manager"] = manager
        result["packages"] = select(parse(out), names, regex)
    # Only where systemd runs (a chroot or a container without it has no units to ask about:
    # systemctl answers rc 1 or nothing there), as service_facts did.
    if units and shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        argv = _hq.systemctl_show_argv(units, ("LoadState", "SubState"))
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"systemctl show failed (rc {rc}): {err.strip()}", **result)
        try:
            result["units"] = parse_units(units, out)
        except ValueError as exc:
            module.fail_json(msg=f"systemctl show {' '.join(units)}: {exc}", **result)
    return result


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "package_regex": {"type": "str", "default": ""},
            "units": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "path", "default": []},
            "admindir": {"type": "path", "default": _hq.DPKG_ADMINDIR},
        },
        supports_check_mode=True,
    )


def main() -> None:
    module = build_module()
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
