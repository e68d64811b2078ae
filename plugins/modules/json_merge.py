#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Merge keys into a JSON object file without clobbering keys owned by others."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: json_merge
short_description: Merge-safe edits of a JSON object file (for example /etc/docker/daemon.json)
description:
  - Reads an existing JSON file whose top level is an object, deep-merges the keys in
    O(merge) into it, removes the keys in O(remove) whose current value equals the given
    one, and writes the result back atomically.
  - Keys that are not named in O(merge) or O(remove) are kept as they are, so several
    roles can own different keys of the same file (the C(docker) role owns its daemon
    options, the C(nvidia_container_toolkit) role owns C(runtimes.nvidia)).
  - The file is rewritten only when the parsed content changes; formatting-only
    differences never cause a change.
  - A file that exists but is not a JSON object makes the module fail rather than
    overwrite it.
version_added: "0.1.0"
author: gpuprov contributors
options:
  path:
    description: Path of the JSON file. It is created when it does not exist.
    type: path
    required: true
  merge:
    description:
      - Keys to set. Nested objects are merged recursively; any other value (lists,
        strings, numbers, booleans, null) replaces the current value.
    type: dict
    default: {}
  remove:
    description:
      - Keys to delete, each only when its current value equals the value given here.
        A nested object that is not equal to the current one recurses into it.
      - "Example: C(default-runtime: nvidia) removes C(default-runtime) only when
        it is C(nvidia), never a value some other tool set."
    type: dict
    default: {}
  indent:
    description: Indentation of the written JSON.
    type: int
    default: 2
  mode:
    description: Mode of the file when the module creates it.
    type: raw
    default: "0644"
  owner:
    description: Owner of the file.
    type: str
  group:
    description: Group of the file.
    type: str
  backup:
    description: Keep a timestamped copy of the previous file when it changes.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Set the daemon options this role owns
  json_merge:
    path: /etc/docker/daemon.json
    merge:
      log-driver: journald
      storage-driver: overlay2

- name: Register the nvidia runtime without touching other keys
  json_merge:
    path: /etc/docker/daemon.json
    merge:
      runtimes:
        nvidia:
          path: nvidia-container-runtime
          runtimeArgs: []

- name: Drop the nvidia default runtime when it is no longer wanted
  json_merge:
    path: /etc/docker/daemon.json
    remove:
      default-runtime: nvidia
"""

RETURN = r"""
content:
  description: The JSON object the file holds after the module ran (or would hold, in check mode).
  returned: success
  type: dict
  sample:
    log-driver: journald
    runtimes:
      nvidia:
        path: nvidia-container-runtime
        runtimeArgs: []
created:
  description: Whether the file did not exist before.
  returned: success
  type: bool
backup_file:
  description: Path of the backup copy, when O(backup) was set and the file changed.
  returned: changed and backup requested
  type: str
"""

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule


def deep_merge(current: dict[str, Any], merge: dict[str, Any]) -> dict[str, Any]:
    """Return ``current`` with ``merge`` merged in; objects recurse, other values replace."""
    result = copy.deepcopy(current)
    for key, value in merge.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def remove_matching(current: dict[str, Any], remove: dict[str, Any]) -> dict[str, Any]:
    """Return ``current`` without the keys of ``remove`` whose value equals the current one."""
    result = copy.deepcopy(current)
    for key, value in remove.items():
        if key not in result:
            continue
        if result[key] == value:
            del result[key]
        elif isinstance(value, dict) and isinstance(result[key], dict):
            result[key] = remove_matching(result[key], value)
    return result


def load_object(text: str, path: str) -> dict[str, Any]:
    """Parse ``text`` as a JSON object; empty text is an empty object.

    Raises ValueError for text that is not JSON and TypeError for JSON that is not an object.
    """
    if not text.strip():
        return {}
    data = json.loads(text)
    if not isinstance(data, dict):
        raise TypeError(f"{path} holds JSON of type {type(data).__name__}, not an object")
    return data


def render(data: dict[str, Any], indent: int) -> str:
    """Serialise ``data`` the way the module writes it."""
    return json.dumps(data, indent=indent) + "\n"


def build_module() -> AnsibleModule:
    """Build the AnsibleModule (a factory so that unit tests can drive it)."""
    return AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "merge": {"type": "dict", "default": {}},
            "remove": {"type": "dict", "default": {}},
            "indent": {"type": "int", "default": 2},
            "mode": {"type": "raw", "default": "0644"},
            "owner": {"type": "str"},
            "group": {"type": "str"},
            "backup": {"type": "bool", "default": False},
        },
        add_file_common_args=False,
        supports_check_mode=True,
    )


def run(module: AnsibleModule) -> dict[str, Any]:
    """Do the work and return the result dict (without exiting)."""
    path: str = module.params["path"]
    target = Path(path)
    created = not target.exists()
    before_text = ""
    if not created:
        try:
            before_text = target.read_text(encoding="utf-8")
        except OSError as exc:
            module.fail_json(msg=f"cannot read {path}: {exc}")
    try:
        before = load_object(before_text, path)
    except (TypeError, ValueError) as exc:
        module.fail_json(msg=f"refusing to overwrite {path}: it is not a JSON object ({exc})")

    after = remove_matching(deep_merge(before, module.params["merge"]), module.params["remove"])
    indent: int = module.params["indent"]
    changed = created or after != before
    result: dict[str, Any] = {
        "changed": changed,
        "content": after,
        "created": created,
        "path": path,
    }
    if module._diff:
        result["diff"] = {
            "before": "" if created else render(before, indent),
            "after": render(after, indent),
            "before_header": path,
            "after_header": path,
        }

    if changed and not module.check_mode:
        if module.params["backup"] and not created:
            result["backup_file"] = module.backup_local(path)
        directory = target.parent
        if not directory.is_dir():
            module.fail_json(msg=f"directory {directory} does not exist")
        fd, tmp = tempfile.mkstemp(prefix=".json_merge.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(render(after, indent))
        module.atomic_move(tmp, path)

    file_args = module.load_file_common_arguments(
        {
            "path": path,
            "mode": module.params["mode"] if created else None,
            "owner": module.params["owner"],
            "group": module.params["group"],
        }
    )
    if target.exists():
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    return result


def main() -> None:
    module = build_module()
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
