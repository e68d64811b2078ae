# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Action plugin gpuprov_files: read gpuprov's own files on the controller, install them in one
module call on the host (plugins/modules/gpuprov_files.py).

Arguments: ``src_dir`` (a controller directory) or ``payload`` (a name of PAYLOADS: the host
payload the collection ships once, beside its roles), ``names`` (file names relative to it, a
name may hold a subdirectory), ``dest_dir`` (on the host), and optional ``mode`` (default
0644), ``owner`` and ``group`` (default root). A missing source stops the task naming it.
"""

from __future__ import annotations

import base64
from pathlib import Path, PurePosixPath
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

OWN_ARGS = frozenset({"src_dir", "payload", "names", "dest_dir", "mode", "owner", "group"})

# The collection's root: this file is its plugins/action/gpuprov_files.py, in the checkout (the
# repository is the collection, galaxy.yml) and installed alike. Roles name a payload, never a
# path outside their own folder.
COLLECTION_ROOT = Path(__file__).resolve().parents[2]
PAYLOADS = {
    "smoke": "scripts/smoke",  # the layered smoke scripts and the launch/export checks
    "compat": "compat",  # compat's stdlib-only host modules (gpu_compat_host_modules)
    "probe": "plugins/module_utils",  # gpu_probe.py, the hardware probe smokelib imports
}


def payload_dir(name: str) -> Path:
    """The directory of payload ``name`` inside the collection."""
    try:
        return COLLECTION_ROOT / PAYLOADS[name]
    except KeyError:
        raise AnsibleActionFail(
            f"gpuprov_files: unknown payload {name!r}; one of {', '.join(sorted(PAYLOADS))}"
        ) from None


def file_specs(src_dir: str, names: list[str], dest_dir: str, mode: str) -> list[dict[str, str]]:
    """The module's `files` argument: each name's content (base64) under dest_dir."""
    specs = []
    for name in names:
        src = Path(src_dir) / name
        try:
            content = src.read_bytes()
        except OSError as exc:
            raise AnsibleActionFail(f"gpuprov_files: cannot read {src}: {exc.strerror}") from exc
        specs.append(
            {
                "dest": str(PurePosixPath(dest_dir) / name),
                "content": base64.b64encode(content).decode("ascii"),
                "mode": mode,
            }
        )
    return specs


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible-core ships no type hints
    """Controller side of gpuprov_files."""

    TRANSFERS_FILES = False
    _VALID_ARGS = OWN_ARGS

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        for required in ("names", "dest_dir"):
            if not args.get(required):
                raise AnsibleActionFail(f"gpuprov_files: {required} is required")
        if bool(args.get("src_dir")) == bool(args.get("payload")):
            raise AnsibleActionFail("gpuprov_files: give one of src_dir and payload")
        src_dir = args.get("src_dir") or payload_dir(str(args["payload"]))
        specs = file_specs(
            str(src_dir),
            [str(n) for n in args["names"]],
            str(args["dest_dir"]),
            str(args.get("mode", "0644")),
        )
        module_args = {
            "files": specs,
            "owner": str(args.get("owner", "root")),
            "group": str(args.get("group", "root")),
        }
        result.update(
            self._execute_module(
                module_name="gpuprov_files", module_args=module_args, task_vars=task_vars
            )
        )
        return dict(result)
