# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Action plugin gpuprov_files: read gpuprov's own files on the controller, install them in one
module call on the host (plugins/modules/gpuprov_files.py).

Two forms, alone or together in one call, with optional ``owner`` and ``group`` (default
root) for every entry that names none:

- sets of files of one directory each, one given by the task's own arguments and others in
  ``sets`` (a list of such mappings): ``src_dir`` (a controller directory) or ``payload`` (a
  name of PAYLOADS: the host payload the collection ships once, beside its roles), ``names``
  (file names relative to it, a name may hold a subdirectory), ``dest_dir`` (on the host),
  and optional ``mode`` (default 0644); gpuprov's scripts: no diff text;
- a role's files and directories: ``directories`` (each ``path``, ``mode``, optional
  ``owner``, ``group``) and ``files`` (each ``dest``, ``mode``, one of ``content``, the
  task's text, such as a template lookup's result, and ``src``, a file of the role's
  files/, and optional ``owner``, ``group`` and ``diff``).

A missing source stops the task naming it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

SET_ARGS = frozenset({"src_dir", "payload", "names", "dest_dir", "mode"})
ENTRY_ARGS = frozenset({"files", "directories"})
OWN_ARGS = SET_ARGS | ENTRY_ARGS | {"sets", "owner", "group"}
FILE_KEYS = frozenset({"dest", "mode", "content", "src", "owner", "group", "diff"})
DIR_KEYS = frozenset({"path", "mode", "owner", "group"})

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


def mode_text(mode: object) -> str:
    """A mode as octal text: an unquoted YAML 0644 arrives as the integer 420."""
    return f"{mode:04o}" if isinstance(mode, int) else str(mode)


def _content(entry: dict[str, Any], find: Callable[[str], str]) -> bytes:
    """An entry's content: its text, or the bytes of its role file (``find`` resolves it)."""
    if ("content" in entry) == ("src" in entry):
        raise AnsibleActionFail(
            f"gpuprov_files: {entry.get('dest')!r}: give one of content and src"
        )
    if "content" in entry:
        if not isinstance(entry["content"], str):
            raise AnsibleActionFail(f"gpuprov_files: {entry.get('dest')!r}: content is not text")
        return entry["content"].encode("utf-8")
    src = find(str(entry["src"]))
    try:
        return Path(src).read_bytes()
    except OSError as exc:
        raise AnsibleActionFail(f"gpuprov_files: cannot read {src}: {exc.strerror}") from exc


def entry_specs(
    files: list[dict[str, Any]], directories: list[dict[str, Any]], find: Callable[[str], str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The module's ``files`` and ``directories`` arguments from the task's entries: each
    file's content as base64, no key the module does not know."""
    for kind, entries, keys in (
        ("files", files, FILE_KEYS),
        ("directories", directories, DIR_KEYS),
    ):
        for entry in entries:
            unknown = sorted(set(entry) - keys) if isinstance(entry, dict) else ["(not a mapping)"]
            if unknown:
                raise AnsibleActionFail(
                    f"gpuprov_files: {kind} entry {entry!r}: unknown keys {unknown}"
                )
            if "mode" not in entry:
                raise AnsibleActionFail(f"gpuprov_files: {kind} entry {entry!r} names no mode")
    file_specs_ = [
        {
            **{k: v for k, v in entry.items() if k not in ("content", "src")},
            "mode": mode_text(entry["mode"]),
            "content": base64.b64encode(_content(entry, find)).decode("ascii"),
        }
        for entry in files
    ]
    dir_specs = [{**entry, "mode": mode_text(entry["mode"])} for entry in directories]
    return file_specs_, dir_specs


def sets_of(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The sets of a task's arguments: its own (when it names one, or names nothing else),
    then those of ``sets``."""
    extra = args.get("sets") or []
    if not isinstance(extra, list) or not all(isinstance(one, dict) for one in extra):
        raise AnsibleActionFail(f"gpuprov_files: sets must be a list of mappings, not {extra!r}")
    sets = [dict(one) for one in extra]
    if SET_ARGS & set(args) or not (ENTRY_ARGS | {"sets"}) & set(args):
        sets.insert(0, {k: args[k] for k in SET_ARGS if k in args})
    return sets


def set_specs(one: dict[str, Any]) -> list[dict[str, str]]:
    """The module's files of one set (``src_dir`` or ``payload``, ``names``, ``dest_dir``,
    ``mode``)."""
    unknown = sorted(set(one) - SET_ARGS)
    if unknown:
        raise AnsibleActionFail(f"gpuprov_files: unknown keys {unknown} in a set")
    for required in ("names", "dest_dir"):
        if not one.get(required):
            raise AnsibleActionFail(f"gpuprov_files: {required} is required")
    if bool(one.get("src_dir")) == bool(one.get("payload")):
        raise AnsibleActionFail("gpuprov_files: give one of src_dir and payload")
    src_dir = one.get("src_dir") or payload_dir(str(one["payload"]))
    return file_specs(
        str(src_dir),
        [str(n) for n in one["names"]],
        str(one["dest_dir"]),
        mode_text(one.get("mode", "0644")),
    )


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible-core ships no type hints
    """Controller side of gpuprov_files."""

    TRANSFERS_FILES = False
    _VALID_ARGS = OWN_ARGS

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        owner_group = {
            "owner": str(args.get("owner", "root")),
            "group": str(args.get("group", "root")),
        }
        files, directories = entry_specs(
            list(args.get("files") or []),
            list(args.get("directories") or []),
            lambda name: str(self._find_needle("files", name)),
        )
        for one in sets_of(args):
            files += [{**spec, "diff": False} for spec in set_specs(one)]  # gpuprov's scripts
        module_args = {"files": files, "directories": directories, **owner_group}
        result.update(
            self._execute_module(
                module_name="gpuprov_files", module_args=module_args, task_vars=task_vars
            )
        )
        return dict(result)
