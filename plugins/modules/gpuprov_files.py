#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Install a set of gpuprov's own files on a host in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuprov_files
short_description: Install several of gpuprov's own files in one module call
description:
  - Writes each file whose content, mode, owner or group differs from what is asked, and
    leaves the others alone. One call replaces a looped M(ansible.builtin.copy) of N files,
    which costs N module runs on the host on every run, converged or not.
  - Each file is written to a temporary file in its directory and renamed over the old one,
    so an interrupted run leaves either the old or the new file, never half of one.
  - Used through the action plugin of the same name, which reads the sources on the
    controller, from C(src_dir) or from a C(payload) of the collection (C(smoke) is
    scripts/smoke, C(compat) the compat host modules, C(probe) plugins/module_utils).
    The hosts get the content, never a controller path.
  - No diff text, since these are gpuprov's scripts, not configuration. C(changed_files)
    names what changed (what --diff would otherwise print in full).
version_added: "0.5.0"
author: gpuprov contributors
options:
  files:
    description: The files, each C(dest) (absolute), C(content) (base64) and C(mode).
    type: list
    elements: dict
    required: true
  owner:
    description: Owner of every file.
    type: str
    default: root
  group:
    description: Group of every file.
    type: str
    default: root
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Copy the smoke scripts
  gpuprov_files:
    payload: smoke
    names: [smokelib.py, run_all.py]
    dest_dir: /opt/gpuprov/smoke
    mode: "0755"
"""

RETURN = r"""
changed_files:
  description: The destinations that were (or, in check mode, would be) written or fixed.
  returned: always
  type: list
  elements: str
"""

import base64
import grp
import hashlib
import os
import pwd
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


@dataclass(frozen=True)
class Wanted:
    """One file as it should be."""

    dest: str
    content: bytes
    mode: int


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def differs(want: Wanted, uid: int, gid: int) -> bool:
    """True when the file is missing or its content, mode, owner or group is not `want`."""
    try:
        info = os.lstat(want.dest)
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(info.st_mode):
        return True
    if stat.S_IMODE(info.st_mode) != want.mode or (info.st_uid, info.st_gid) != (uid, gid):
        return True
    return _digest(want.dest) != hashlib.sha256(want.content).hexdigest()


def write(want: Wanted, uid: int, gid: int) -> None:
    """Atomically replace `want.dest` (temporary file in the same directory, then rename)."""
    fd, name = tempfile.mkstemp(prefix=".gpuprov-", dir=Path(want.dest).parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(want.content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chown(tmp, uid, gid)
        tmp.chmod(want.mode)
        tmp.replace(want.dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def converge(wanted: list[Wanted], uid: int, gid: int, check_mode: bool) -> list[str]:
    """Write what differs (nothing in check mode); return the destinations that differed."""
    changed = [w for w in wanted if differs(w, uid, gid)]
    if not check_mode:
        for want in changed:
            write(want, uid, gid)
    return [w.dest for w in changed]


def parse(files: list[dict[str, object]]) -> tuple[list[Wanted], list[str]]:
    """The wanted files and one problem line per bad entry."""
    wanted: list[Wanted] = []
    problems: list[str] = []
    for entry in files:
        dest = str(entry.get("dest", ""))
        if not Path(dest).is_absolute():
            problems.append(f"dest {dest!r} is not an absolute path")
            continue
        try:
            mode = int(str(entry.get("mode", "0644")), 8)
            content = base64.b64decode(str(entry.get("content", "")), validate=True)
        except ValueError as exc:
            problems.append(f"{dest}: {exc}")
            continue
        wanted.append(Wanted(dest=dest, content=content, mode=mode))
    return wanted, problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    wanted, problems = parse(module.params["files"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    try:
        uid = pwd.getpwnam(module.params["owner"]).pw_uid
        gid = grp.getgrnam(module.params["group"]).gr_gid
    except KeyError as exc:
        module.fail_json(msg=f"no such owner or group on this host: {exc}")
    missing = sorted({str(Path(w.dest).parent) for w in wanted if not Path(w.dest).parent.is_dir()})
    if missing and not module.check_mode:
        module.fail_json(msg=f"directory missing (create it first): {', '.join(missing)}")
    try:
        changed = converge(wanted, uid, gid, module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"could not write {exc.filename}: {exc.strerror}")
    module.exit_json(changed=bool(changed), changed_files=changed)


if __name__ == "__main__":
    main()
