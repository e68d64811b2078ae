#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Install a set of gpuprov's own files and directories on a host in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuprov_files
short_description: Install several of gpuprov's files and directories in one module call
description:
  - Creates each directory and writes each file whose content, mode, owner or group differs
    from what is asked, and leaves the others alone. One call replaces N
    M(ansible.builtin.file), M(ansible.builtin.copy) and M(ansible.builtin.template) tasks,
    which cost one to two module runs on the host each (issue 19).
  - Each file is written to a temporary file in its directory and renamed over the old one,
    so an interrupted run leaves either the old or the new file, never half of one.
  - Used through the action plugin of the same name, which reads the sources on the
    controller, from C(src_dir), from a C(payload) of the collection (C(smoke) is
    scripts/smoke, C(compat) the compat host modules, C(probe) plugins/module_utils), from
    a role's files/ (C(src) of an entry of C(files)) or the task's own text (C(content),
    a template lookup's result for a configuration file). The hosts get the content, never
    a controller path.
  - Directories come first, in the order given, then the files. Missing parents of a
    directory are created with its mode, owner and group, as M(ansible.builtin.file) does.
  - An owner or group the host lacks stops the call before anything changes, except under
    check mode, where it makes its entries differ (a real run creates it first, such as a
    role's user or a package's group).
  - With --diff, a text file that changes shows its old and new text, unless its entry says
    C(diff=false) (gpuprov's scripts); a directory created or fixed, and a file that was
    there and whose mode, owner or group changes, show those. C(changed_files) names every
    path that changed.
version_added: "0.5.0"
author: gpuprov contributors
options:
  files:
    description:
      - The files. The action plugin builds them from a task's C(files) entries (C(content)
        as text or C(src), a file of the role's files/) and from its sets of scripts
        (C(src_dir) or C(payload), C(names), C(dest_dir), C(mode), and C(sets), a list of
        such sets).
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description: Absolute path of the file.
        type: str
        required: true
      content:
        description:
          - The file's bytes, base64. Kept out of the journal and the invocation (no_log);
            Ansible masks a no_log value wherever it appears in the output, so a file of a
            few bytes could mask the same few characters of a diff.
        type: str
        required: true
      mode:
        description: Octal mode, as text.
        type: str
        required: true
      owner:
        description: Owner (default the module's C(owner)).
        type: str
      group:
        description: Group (default the module's C(group)).
        type: str
      diff:
        description: Whether --diff shows the file's text.
        type: bool
        default: true
  directories:
    description: Directories to create or fix first.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the directory.
        type: str
        required: true
      mode:
        description: Octal mode, as text.
        type: str
        required: true
      owner:
        description: Owner (default the module's C(owner)).
        type: str
      group:
        description: Group (default the module's C(group)).
        type: str
  owner:
    description: Owner of every entry that names none.
    type: str
    default: root
  group:
    description: Group of every entry that names none.
    type: str
    default: root
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Copy the smoke scripts
  gpuprov_files:
    payload: smoke
    names: [smokelib.py, run_all.py]
    dest_dir: /opt/gpuprov/smoke
    mode: "0755"

- name: Write the server's directory, configuration and unit
  gpuprov_files:
    directories:
      - {path: /etc/jupyterlab, mode: "0750", group: jupyter}
    files:
      - dest: /etc/jupyterlab/config.json
        content: "{{ lookup('ansible.builtin.template', 'config.json.j2') }}"
        mode: "0640"
        group: jupyter
      - {dest: /usr/local/bin/probe.py, src: probe.py, mode: "0755", diff: false}
"""

RETURN = r"""
changed_files:
  description: The paths that were (or, in check mode, would be) created, written or fixed.
  returned: always
  type: list
  elements: str
"""

import base64
import contextlib
import grp
import hashlib
import os
import pwd
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# Ansible's own limit for a diff's text (max_file_size_for_diff).
DIFF_LIMIT = 104448


@dataclass(frozen=True)
class Wanted:
    """One file as it should be."""

    dest: str
    content: bytes
    mode: int
    owner: str = "root"
    group: str = "root"
    diff: bool = True


@dataclass(frozen=True)
class WantedDir:
    """One directory as it should be."""

    path: str
    mode: int
    owner: str = "root"
    group: str = "root"


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _ids(owner: str, group: str) -> tuple[int, int]:
    """uid and gid of owner and group (KeyError naming the one that does not exist)."""
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise KeyError(f"owner {owner!r}") from None
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise KeyError(f"group {group!r}") from None
    return uid, gid


def _attrs(info: os.stat_result | None) -> str:
    """mode, owner and group of a stat result as diff text (absent when None)."""
    if info is None:
        return "absent\n"
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"mode {stat.S_IMODE(info.st_mode):04o}, owner {owner}, group {group}\n"


def _wanted_attrs(mode: int, owner: str, group: str) -> str:
    return f"mode {mode:04o}, owner {owner}, group {group}\n"


def _diff_entry(header: str, before: str, after: str) -> dict[str, str]:
    return {"before_header": header, "after_header": header, "before": before, "after": after}


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


def file_diff(want: Wanted) -> list[dict[str, str]]:
    """What --diff shows for a file that differs: its text (old and new) when both are text
    under Ansible's limit and the entry allows it, and, for a file that was there, its mode,
    owner and group when those differ."""
    try:
        info: os.stat_result | None = os.lstat(want.dest)
    except FileNotFoundError:
        info = None
    regular = info is not None and stat.S_ISREG(info.st_mode)
    old = Path(want.dest).read_bytes() if regular else b""
    shown: list[dict[str, str]] = []
    if want.diff and old != want.content and max(len(old), len(want.content)) <= DIFF_LIMIT:
        with contextlib.suppress(UnicodeDecodeError):  # binary: changed_files names it
            shown.append(_diff_entry(want.dest, old.decode("utf-8"), want.content.decode("utf-8")))
    attrs_before = _attrs(info) if regular else "not a regular file\n"
    attrs_after = _wanted_attrs(want.mode, want.owner, want.group)
    if info is not None and attrs_before != attrs_after:  # a new file's text says it is new
        shown.append(_diff_entry(f"{want.dest} (attributes)", attrs_before, attrs_after))
    return shown


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
    except OSError as exc:  # named by its destination, not the temporary file
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, want.dest) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def converge_dir(want: WantedDir, uid: int, gid: int, check_mode: bool) -> str | None:
    """Create or fix one directory; its diff text before the change when it differed.
    A path that exists and is no directory (a link to one counts as one) is an error."""
    try:
        info: os.stat_result | None = Path(want.path).stat()
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(want.path)
    if (
        info is not None
        and stat.S_IMODE(info.st_mode) == want.mode
        and (info.st_uid, info.st_gid) == (uid, gid)
    ):
        return None
    if not check_mode:
        missing = [p for p in [Path(want.path), *Path(want.path).parents] if not p.exists()]
        for path in reversed(missing):  # the missing parents too, as the file module does
            path.mkdir(mode=want.mode)
        for path in missing or [Path(want.path)]:
            os.chown(path, uid, gid)
            path.chmod(want.mode)
    return _attrs(info)


def _placed(
    entry: dict[str, Any], key: str, owner: str, group: str
) -> tuple[str, int, str, str] | str:
    """An entry's absolute path (under ``key``), octal mode, owner and group (the module's
    where it names none), or what is wrong with them."""
    path = str(entry.get(key) or "")
    if not Path(path).is_absolute():
        return f"{key} {path!r} is not an absolute path"
    try:
        mode = int(str(entry.get("mode")), 8)
    except ValueError:
        return f"{path}: mode {entry.get('mode')!r} is not an octal mode"
    return path, mode, str(entry.get("owner") or owner), str(entry.get("group") or group)


def parse(
    files: list[dict[str, Any]], owner: str = "root", group: str = "root"
) -> tuple[list[Wanted], list[str]]:
    """The wanted files and one problem line per bad entry."""
    wanted: list[Wanted] = []
    problems: list[str] = []
    for entry in files:
        placed = _placed(entry, "dest", owner, group)
        if isinstance(placed, str):
            problems.append(placed)
            continue
        dest, mode, file_owner, file_group = placed
        try:
            content = base64.b64decode(str(entry.get("content", "")), validate=True)
        except ValueError as exc:
            problems.append(f"{dest}: {exc}")
            continue
        diff = bool(entry.get("diff", True))
        wanted.append(Wanted(dest, content, mode, file_owner, file_group, diff))
    return wanted, problems


def parse_dirs(
    dirs: list[dict[str, Any]], owner: str = "root", group: str = "root"
) -> tuple[list[WantedDir], list[str]]:
    """The wanted directories and one problem line per bad entry."""
    wanted: list[WantedDir] = []
    problems: list[str] = []
    for entry in dirs:
        placed = _placed(entry, "path", owner, group)
        if isinstance(placed, str):
            problems.append(placed)
        else:
            wanted.append(WantedDir(*placed))
    return wanted, problems


def run(
    files: list[Wanted], dirs: list[WantedDir], check_mode: bool, diff: bool
) -> tuple[list[str], list[dict[str, str]]]:
    """Converge the directories, then the files; the changed paths and the diffs. Outside
    check mode KeyError names an owner or group the host lacks, and FileNotFoundError a
    file's missing directory, before anything changes. In check mode an owner or group that
    does not exist yet (the run creates it first: a role's user, a package's group) makes
    its entries differ."""
    wanted: list[Wanted | WantedDir] = [*dirs, *files]
    ids: dict[tuple[str, str], tuple[int, int]] = {}
    for w in wanted:
        try:
            ids[(w.owner, w.group)] = _ids(w.owner, w.group)
        except KeyError:
            if not check_mode:
                raise
            ids[(w.owner, w.group)] = (-1, -1)  # no file has these: the entry differs
    created = {p for d in dirs for p in [Path(d.path), *Path(d.path).parents]}
    parents = {Path(w.dest).parent for w in files} - created
    missing = sorted(str(p) for p in parents if not p.is_dir())
    if missing and not check_mode:
        raise FileNotFoundError(f"directory missing (create it first): {', '.join(missing)}")
    changed: list[str] = []
    diffs: list[dict[str, str]] = []
    for want_dir in dirs:
        before = converge_dir(want_dir, *ids[(want_dir.owner, want_dir.group)], check_mode)
        if before is None:
            continue
        changed.append(want_dir.path)
        if diff:
            after = "directory, " + _wanted_attrs(want_dir.mode, want_dir.owner, want_dir.group)
            shown = before if before == "absent\n" else "directory, " + before
            diffs.append(_diff_entry(want_dir.path, shown, after))
    for want in files:
        uid, gid = ids[(want.owner, want.group)]
        if not differs(want, uid, gid):
            continue
        changed.append(want.dest)
        if diff:
            diffs.extend(file_diff(want))
        if not check_mode:
            write(want, uid, gid)
    return changed, diffs


# Where and how an entry is placed (read by _placed), the same for files and directories.
PLACED_OPTIONS: dict[str, dict[str, Any]] = {
    "mode": {"type": "str", "required": True},
    "owner": {"type": "str"},
    "group": {"type": "str"},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "dest": {"type": "str", "required": True},
                    # not in the journal or a registered result's invocation
                    "content": {"type": "str", "required": True, "no_log": True},
                    **PLACED_OPTIONS,
                    "diff": {"type": "bool", "default": True},
                },
            },
            "directories": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "path": {"type": "str", "required": True},
                    **PLACED_OPTIONS,
                },
            },
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    owner, group = module.params["owner"], module.params["group"]
    files, problems = parse(module.params["files"], owner, group)
    dirs, dir_problems = parse_dirs(module.params["directories"], owner, group)
    if problems or dir_problems:
        module.fail_json(msg="; ".join(dir_problems + problems))
    try:
        changed, diffs = run(files, dirs, module.check_mode, module._diff)
    except KeyError as exc:
        module.fail_json(msg=f"no such {exc.args[0]} on this host")
    except NotADirectoryError as exc:
        if exc.errno is None:  # converge_dir's own: the path itself is no directory
            module.fail_json(msg=f"{exc.args[0]} exists and is not a directory")
        module.fail_json(msg=f"{exc.filename}: a component of the path is not a directory")
    except FileNotFoundError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"could not write {exc.filename}: {exc.strerror}")
    result: dict[str, Any] = {"changed": bool(changed), "changed_files": changed}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
