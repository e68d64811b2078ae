#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""One module call that tells a role whether the host is still as its last converge left it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpuprov_state
short_description: Probe, in one call, whether everything a role manages is as it left it
description:
  - The verifying fast path of gpuprov's roles (issue 19). At the end of a converge that ran
    every task, the role calls this module with O(state=record), which reads the state of
    everything the role manages (O(spec) C(packages) with their versions and holds, C(paths)
    with their content, mode and owner, whole C(trees) of files, C(json_keys) of JSON files
    it merges, systemd C(units) enabled and active, the distributions installed in C(venvs)
    or the versions of named C(distributions),
    the exit status and output of C(commands) such as an import check) and keeps what it
    read, with the digest of the role's inputs (O(inputs)), in a record under O(dir).
  - On the next run the role calls it first with O(state=probe). The host is C(converged)
    only when the record exists, was made for the same inputs and the same list of managed
    things, and every one of them reads the same again now. Otherwise RV(differs) lists
    each difference (missing record, new inputs, or the thing that drifted and how) and the
    role runs its tasks, which repair what differs and leave the rest unchanged.
  - This is not a stamp that trusts itself; every run reads the managed state again, so a
    deleted file, a stopped service, an unheld package or a broken import is found.
  - O(state=forget) removes the record; a role does so before it changes anything, so that a
    run cut short leaves no record and the next run converges in full. A probe says whether
    there is a record file to remove (RV(recorded); on a fresh host there is none).
  - Writing or removing the record is bookkeeping, never reported as a change.
version_added: "0.3.0"
author: gpuprov contributors
options:
  state:
    description: C(probe) compares, C(record) reads and keeps, C(forget) removes the record.
    type: str
    choices: [probe, record, forget]
    default: probe
  role:
    description: The role's name; the record is O(dir)/<role>.json.
    type: str
    required: true
  inputs:
    description: Digest of everything the role's result depends on (computed on the controller).
    type: str
    default: ""
  spec:
    description:
      - What the role manages, each key optional. C(packages) (dpkg or rpm names; version
        and hold state); C(paths) (files, directories, links; type, mode, owner, a file's
        content); C(trees) (directories whose files are read recursively, __pycache__ left
        out); C(json_keys) (JSON file -> the top-level keys the role owns in it; others'
        keys may change); C(units) (systemd units; enabled, active); C(venvs) (Python
        environments; interpreter and installed distributions); C(distributions) (Python
        environment -> the distribution names the role installs there; each one's version,
        for an environment other roles install into too); C(commands) (argv lists
        whose exit status and output are read, such as an import check; no shell,
        C(LC_ALL=C)).
    type: dict
    default: {}
  dir:
    description: Where the records are kept.
    type: path
    default: /var/lib/gpuprov/state
  wait_locks:
    description:
      - Lock files of background installs that write what the role reads (the host's PyTorch
        environment's install lock), each C(path), C(timeout) (seconds) and C(what) (words for
        a message); an entry whose C(path) is null is left out.
      - Before a probe reads anything it waits for each one's holder to let go, as
        M(gpuprov_wait_lock) does, and fails naming the lock and its holder when a timeout runs
        out; a missing lock file is nothing to wait for. So neither this probe nor the role's
        phases after it read an environment that a job is still writing.
      - Under C(--check) it does not wait; a held lock is a difference (an install is under
        way, the answer may change when it ends).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
    details: A probe reads only; record and forget do nothing in check mode.
"""

EXAMPLES = r"""
- name: Probe the state this role left
  gpuprov_state:
    role: docker
    inputs: "{{ _docker_state_inputs }}"
    spec:
      packages: [docker.io]
      json_keys: {/etc/docker/daemon.json: [log-driver]}
      units: [docker.service]
  register: __docker_state
"""

RETURN = r"""
converged:
  description: Whether the record exists for these inputs and everything reads the same.
  type: bool
  returned: always
differs:
  description: Each difference, in words (empty when converged).
  type: list
  elements: str
  returned: always
record:
  description: The record's path.
  type: str
  returned: always
recorded:
  description: Whether a file is at the record's path (readable or not), before this call.
  type: bool
  returned: always
waited:
  description: Seconds the probe waited for O(wait_locks).
  type: float
  returned: always
"""

import hashlib
import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The package and unit queries, shared with gpuprov_installed (plugins/module_utils/host_query.py;
# shipped with this module by AnsiballZ, from the collection or ansible.cfg's module_utils).
try:
    from ansible_collections.gpuprov.fleet.plugins.module_utils import host_query as _hq
except ImportError:
    from ansible.module_utils import host_query as _hq
# The wait for a background install's lock, shared with gpuprov_wait_lock (lock_wait.py).
try:
    from ansible_collections.gpuprov.fleet.plugins.module_utils import lock_wait as _lw
except ImportError:
    from ansible.module_utils import lock_wait as _lw

FORMAT = 1
COMMAND_TIMEOUT = 300


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()  # noqa: S324 - a content fingerprint, not security


def file_sha1(path: str) -> str:
    digest = hashlib.sha1()  # noqa: S324 - a content fingerprint, not security
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_path(path: str) -> str:
    """Type, mode, owner and (files) content digest or (links) target; "absent"."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    meta = f"{stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
    if stat.S_ISLNK(st.st_mode):
        # Path.readlink() would normalise the target ("./x" -> "x"); the record keeps it verbatim.
        return f"link -> {os.readlink(path)}"  # noqa: PTH115
    if stat.S_ISDIR(st.st_mode):
        return f"directory {meta}"
    if stat.S_ISREG(st.st_mode):
        try:
            return f"file {meta} sha1 {file_sha1(path)}"
        except OSError as exc:
            return f"unreadable file {meta}: {exc.strerror}"
    return f"special {meta}"


def read_tree(root: str) -> str:
    """One digest over every file under ``root`` (relative name, type, mode, content);
    __pycache__ is left out (Python writes it when the scripts run)."""
    if not Path(root).is_dir():
        return read_path(root)
    lines: list[str] = []
    for parent, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files) + [f"{d}/" for d in dirs]:
            full = str(Path(parent) / name.rstrip("/"))
            lines.append(f"{os.path.relpath(full, root)} {read_path(full)}")
    return f"{len(lines)} entries sha1 {_sha1(chr(10).join(lines).encode())}"


def read_json_key(path: str, key: str) -> str:
    try:
        with Path(path).open(encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return "file absent"
    except (OSError, ValueError) as exc:
        return f"unreadable: {exc}"
    if not isinstance(doc, dict):
        return "not a JSON object"
    if key not in doc:
        return "key absent"
    return json.dumps(doc[key], sort_keys=True)


def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, LC_ALL="C")
    return subprocess.run(  # argv lists from the role, no shell
        argv, capture_output=True, env=env, timeout=COMMAND_TIMEOUT, check=False
    )


class UnreadablePackages(Exception):
    """The role names packages and this host has no package database to read them from."""


def read_packages(names: list[str]) -> dict[str, str]:
    """name -> "version status" (dpkg: status abbreviation such as ii, hi for held) or
    "absent". UnreadablePackages on a host with neither package manager: a record made there
    would hold no reading to compare, and a probe could never tell."""
    found: dict[str, str] = {}
    if not names:
        return found
    manager = _hq.package_manager()
    if manager == "dpkg":
        proc = _run(["dpkg-query", "-W", _hq.DPKG_FORMAT, "--", *names])
        for name, version, status in _hq.dpkg_rows(proc.stdout.decode(errors="replace")):
            if status and not status.startswith("u"):
                found[name] = f"{version} {status}"
    elif manager == "rpm":
        proc = _run(["rpm", "-q", "--qf", _hq.RPM_FORMAT, "--", *names])
        found.update(_hq.rpm_rows(proc.stdout.decode(errors="replace")))
    else:
        raise UnreadablePackages(
            f"cannot read the packages {', '.join(names)}: {_hq.no_package_manager()}"
        )
    return {name: found.get(name, "absent") for name in names}


def read_units(units: list[str]) -> dict[str, str]:
    if not units:
        return {}
    try:
        proc = _run(_hq.systemctl_show_argv(units, ("Id", "UnitFileState", "ActiveState")))
    except OSError as exc:
        return {u: f"systemctl cannot run: {exc.strerror}" for u in units}
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        return {u: f"systemctl failed: {err}" for u in units}
    try:
        answers = _hq.unit_properties(units, proc.stdout.decode(errors="replace"))
    except ValueError as exc:
        return {u: str(exc) for u in units}
    return {
        unit: f"{props.get('UnitFileState') or 'no unit file'} {props.get('ActiveState')}"
        for unit, props in answers.items()
    }


def read_venv(path: str) -> str:
    python = Path(path) / "bin" / "python"
    if not os.path.lexists(python):
        return "no bin/python"
    dists: list[str] = []
    lib = Path(path) / "lib"
    for ver in sorted(p.name for p in lib.iterdir()) if lib.is_dir() else []:
        site = lib / ver / "site-packages"
        if site.is_dir():
            dists += sorted(p.name for p in site.iterdir() if p.name.endswith(".dist-info"))
    target = os.path.realpath(python)
    return f"python {target}, {len(dists)} distributions sha1 {_sha1(' '.join(dists).encode())}"


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them (case, runs of -_. alike)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def read_distributions(path: str, names: list[str]) -> dict[str, str]:
    """name -> the installed version in the environment at ``path`` (from its *.dist-info
    directories), "absent", or "no bin/python"."""
    if not os.path.lexists(Path(path) / "bin" / "python"):
        return {name: "no bin/python" for name in names}
    found: dict[str, str] = {}
    lib = Path(path) / "lib"
    for ver in sorted(p.name for p in lib.iterdir()) if lib.is_dir() else []:
        site = lib / ver / "site-packages"
        for entry in sorted(site.iterdir()) if site.is_dir() else []:
            if entry.name.endswith(".dist-info") and "-" in entry.name:
                dist, version = entry.name[: -len(".dist-info")].split("-", 1)
                found.setdefault(_normal(dist), version)
    return {name: found.get(_normal(name), "absent") for name in names}


def read_command(argv: list[str]) -> str:
    try:
        proc = _run(argv)
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return f"cannot run: {exc.strerror}"
    except subprocess.TimeoutExpired:
        return f"timed out after {COMMAND_TIMEOUT}s"
    return f"rc {proc.returncode} output sha1 {_sha1(proc.stdout)}"


SPEC_KEYS = {
    "packages": list,
    "paths": list,
    "trees": list,
    "json_keys": dict,
    "units": list,
    "venvs": list,
    "distributions": dict,
    "commands": list,
}


def spec_of(given: dict[str, Any]) -> dict[str, Any]:
    """What the role manages, every key present (the record keeps it: a new list is a new
    record). Raises ValueError naming an unknown key, TypeError naming a value of the wrong
    type."""
    unknown = sorted(set(given) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"unknown spec keys {unknown}; known: {sorted(SPEC_KEYS)}")
    spec: dict[str, Any] = {}
    for key, kind in SPEC_KEYS.items():
        value = given.get(key) or kind()
        if not isinstance(value, kind):
            raise TypeError(f"spec.{key} must be a {kind.__name__}, got {value!r}")
        spec[key] = value
    for argv in spec["commands"]:
        if not isinstance(argv, list) or not argv:
            raise TypeError(f"spec.commands holds argv lists, got {argv!r}")
    for path, keys in spec["json_keys"].items():
        if not isinstance(keys, list):
            raise TypeError(f"spec.json_keys maps a file to a list of keys, got {path}: {keys!r}")
    return spec


def observe(spec: dict[str, Any]) -> dict[str, str]:
    """Read everything in ``spec`` now: a flat map from a readable name to what was read."""
    seen: dict[str, str] = {}
    for name, value in read_packages(spec["packages"]).items():
        seen[f"package {name}"] = value
    for path in spec["paths"]:
        seen[f"path {path}"] = read_path(path)
    for root in spec["trees"]:
        seen[f"tree {root}"] = read_tree(root)
    for path, keys in sorted(spec["json_keys"].items()):
        for key in keys:
            seen[f"json {path} {key}"] = read_json_key(path, key)
    for unit, value in read_units(spec["units"]).items():
        seen[f"unit {unit}"] = value
    for venv in spec["venvs"]:
        seen[f"venv {venv}"] = read_venv(venv)
    for venv, names in sorted(spec["distributions"].items()):
        for name, version in read_distributions(venv, [str(n) for n in names]).items():
            seen[f"distribution {name} in {venv}"] = version
    for argv in spec["commands"]:
        seen[f"command {' '.join(map(str, argv))}"] = read_command([str(a) for a in argv])
    return seen


def compare(record: Any, inputs: str, spec: dict[str, Any], path: str) -> list[str]:
    """The differences between ``record`` and the host now; empty when converged."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return [f"no record of a converge at {path}"]
    if record.get("stale"):  # apt_ready: another role's update met this role's stale key
        return [f"marked stale by apt_ready: {record['stale']}"]
    if record.get("inputs") != inputs:
        return ["the role's inputs changed (inventory, role files or host facts)"]
    if record.get("spec") != json.loads(json.dumps(spec)):
        return ["the list of what the role manages changed"]
    before: dict[str, str] = record.get("seen") or {}
    now = observe(spec)
    return [
        f"{name}: {before.get(name, 'not recorded')} -> {value}"
        for name, value in now.items()
        if before.get(name) != value
    ]


def load_record(path: str) -> Any:
    try:
        with Path(path).open(encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write_record(path: str, doc: dict[str, Any]) -> None:
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
    Path(tmp).replace(path)


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["probe", "record", "forget"], "default": "probe"},
            "role": {"type": "str", "required": True},
            "inputs": {"type": "str", "default": ""},
            "spec": {"type": "dict", "default": {}},
            "dir": {"type": "path", "default": "/var/lib/gpuprov/state"},
            "wait_locks": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )


def wait_for_locks(
    module: AnsibleModule, locks: list[dict[str, Any]], result: dict[str, Any]
) -> list[str]:
    """Wait for each lock's holder to let go (under --check, do not wait: a held lock is
    returned as a difference); fail the module when a timeout runs out."""
    under_way = []
    for lock in locks:
        if lock.get("path") is None:  # no lock for this environment (not the pip method)
            continue
        try:
            path, timeout = str(lock["path"]), float(lock["timeout"])
        except (KeyError, TypeError, ValueError):
            module.fail_json(msg=f"wait_locks entries need a path and a timeout, got {lock!r}")
        what = str(lock.get("what") or "a background install")
        try:
            waited = _lw.wait(path, 0 if module.check_mode else timeout)
        except OSError as exc:
            module.fail_json(msg=f"gpuprov_state: cannot open the lock {path}: {exc.strerror}")
        result["waited"] = round(result["waited"] + waited.seconds, 3)
        if waited.timed_out and module.check_mode:
            under_way.append(f"{path} is held by {_lw.held_by(waited)}: {what} is under way")
        elif waited.timed_out:
            module.fail_json(msg=_lw.timed_out_message(path, timeout, what, waited), **result)
    return under_way


def run(module: AnsibleModule) -> dict[str, Any]:
    params = module.params
    if "/" in params["role"] or params["role"].startswith("."):
        module.fail_json(msg=f"role must be a plain name, got {params['role']!r}")
    path = str(Path(params["dir"]) / f"{params['role']}.json")
    try:
        spec = spec_of(params["spec"])
    except (ValueError, TypeError) as exc:
        module.fail_json(msg=f"gpuprov_state for role {params['role']}: {exc}")
    result: dict[str, Any] = {
        "changed": False,
        "record": path,
        "recorded": os.path.lexists(path),
        "converged": False,
        "differs": [],
        "waited": 0.0,
    }
    try:
        if params["state"] == "probe":
            under_way = wait_for_locks(module, params["wait_locks"], result)
            differs = under_way + compare(load_record(path), params["inputs"], spec, path)
            result.update(converged=not differs, differs=differs)
        elif module.check_mode:
            pass
        elif params["state"] == "forget":
            Path(path).unlink(missing_ok=True)
        else:
            seen = observe(spec)
            write_record(
                path, {"format": FORMAT, "inputs": params["inputs"], "spec": spec, "seen": seen}
            )
            result["converged"] = True
    except UnreadablePackages as exc:
        module.fail_json(msg=f"gpuprov_state for role {params['role']}: {exc}", **result)
    return result


def main() -> None:
    module = build_module()
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
