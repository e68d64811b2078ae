#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Set the dpkg selection (hold or install) of several packages in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dpkg_holds
short_description: Hold or release several packages in one module call
description:
  - Reads the selection of every package in O(names) with one C(dpkg --get-selections) and
    sets only those that differ with one C(dpkg --set-selections). One call replaces a looped
    M(ansible.builtin.dpkg_selections), which costs one module run per package on every run.
  - A name dpkg does not know (not installed) cannot be held; dpkg ignores its selection.
    It is left out with a warning and named in RV(unknown), so that a run stays idempotent.
  - Architecture qualifiers (C(libfoo:amd64)) in dpkg's answer match the plain name.
version_added: "0.5.0"
author: gpuprov contributors
options:
  names:
    description: The package names.
    type: list
    elements: str
    required: true
  selection:
    description: The selection every package gets.
    type: str
    choices: [hold, install]
    required: true
  admindir:
    description: dpkg's database directory (tests point it at a throwaway one).
    type: path
    default: /var/lib/dpkg
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Hold the driver packages
  dpkg_holds:
    names: [nvidia-tesla-470-smi, libnvidia-tesla-470-ml1]
    selection: hold
"""

RETURN = r"""
changed_names:
  description: The packages whose selection was (or, in check mode, would be) set.
  returned: always
  type: list
  elements: str
before:
  description: Each package's selection before the call (C(unknown) when dpkg has none).
  returned: always
  type: dict
unknown:
  description: The names dpkg does not know (left out).
  returned: always
  type: list
  elements: str
"""

from collections.abc import Iterable, Mapping

from ansible.module_utils.basic import AnsibleModule


def parse_selections(output: str) -> dict[str, str]:
    """`dpkg --get-selections` lines ("name[:arch]<whitespace>state") as name -> state."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2:
            found[parts[0].split(":", 1)[0]] = parts[1]
    return found


def differing(names: Iterable[str], current: Mapping[str, str], selection: str) -> list[str]:
    """The known names whose selection is not ``selection``, in order, each once."""
    return [n for n in dict.fromkeys(names) if n in current and current[n] != selection]


def run(module: AnsibleModule) -> dict[str, object]:
    names = [str(n) for n in module.params["names"]]
    selection = str(module.params["selection"])
    admin = ["--admindir", str(module.params["admindir"])]
    result: dict[str, object] = {
        "changed": False,
        "changed_names": [],
        "before": {},
        "unknown": [],
    }
    if not names:
        return result
    rc, out, err = module.run_command(["dpkg", *admin, "--get-selections", *names])
    # rc 1 with "no packages found" for an unknown name: the known ones are still listed.
    if rc not in (0, 1):
        module.fail_json(msg=f"dpkg --get-selections failed (rc {rc}): {err.strip()}", **result)
    current = parse_selections(out)
    result["before"] = {n: current.get(n, "unknown") for n in names}
    unknown = [n for n in dict.fromkeys(names) if n not in current]
    result["unknown"] = unknown
    if unknown:
        module.warn(f"dpkg does not know {', '.join(unknown)} (not installed): not {selection}")
    todo = differing(names, current, selection)
    result["changed_names"] = todo
    result["changed"] = bool(todo)
    if todo:
        result["diff"] = {
            "before": "".join(f"{n} {current[n]}\n" for n in todo),
            "after": "".join(f"{n} {selection}\n" for n in todo),
        }
    if todo and not module.check_mode:
        data = "".join(f"{n} {selection}\n" for n in todo)
        rc, _, err = module.run_command(["dpkg", *admin, "--set-selections"], data=data)
        if rc != 0:
            module.fail_json(
                msg=f"dpkg --set-selections {selection} for {', '.join(todo)} failed (rc {rc}): "
                f"{err.strip()}",
                **result,
            )
    return result


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "selection": {"type": "str", "choices": ["hold", "install"], "required": True},
            "admindir": {"type": "path", "default": "/var/lib/dpkg"},
        },
        supports_check_mode=True,
    )


def main() -> None:
    module = build_module()
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
