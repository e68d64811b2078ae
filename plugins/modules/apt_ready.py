#!/usr/bin/python
# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Make apt usable before a role installs: repair dpkg, refresh lists honestly, fetch packages."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_ready
short_description: Repair dpkg, refresh stale apt lists and fetch packages before an install
description:
  - The one place where gpuprov's roles prepare apt (nvidia_driver, docker,
    nvidia_container_toolkit, pytorch). Run it before the role's first package task.
  - Repair. An interrupted dpkg (pending files in C(/var/lib/dpkg/updates) or problems
    reported by C(dpkg --audit)) is repaired with C(dpkg --configure -a); packages that
    still need it are completed with C(apt-get -f install), but only when apt would remove
    nothing; packages left half-installed (an unpack cut short) are reinstalled from apt's
    cache or the mirror. Held packages stay held. The repair is reported as a warning and in
    C(repair).
  - Freshness. The package lists count as fresh only when the last B(successful)
    C(apt-get update) run by this module is younger than O(valid_time) and the apt source
    and keyring files are unchanged since (a digest over them is stored in O(stamp)). A
    failed or partial update (any fetch error) removes the stamp, so the next run updates
    again.
  - Packages. Each name in O(packages) must have an install candidate; when one has none,
    the lists are refreshed once before the module fails. With O(download), the packages
    are fetched into apt's cache first, so that a full disk or an unreachable mirror stops
    the role before dpkg starts.
  - Every fetch error names the URL, the inventory variable that sets it (from O(sources))
    and what to check (proxy, CA bundle, mirror).
  - Every apt failure quotes apt's own cause lines (all C(E:) lines, and the C(W:) lines that
    report a failed fetch, signature or source entry; never apt's notes such as a target
    "configured multiple times") and explains the cause it names. A Release that is "not
    valid yet" or "expired" names the host's clock (UTC) and the Release's C(Date) and
    C(Valid-Until) (read from apt's lists), and says to fix time synchronisation first. A
    signature apt cannot verify (C(NO_PUBKEY), C(EXPKEYSIG)) names the key id, the source's
    C(Signed-By) keyring and, for a keyring the role writes (O(keyrings)), the variable of
    the key URL. "Conflicting values set for option Signed-By" names every file and line
    that defines the repository (C(/etc/apt/sources.list), C(sources.list.d/*.list) and
    C(*.sources)). The same facts are returned as fields (RV(failed_sources),
    RV(missing_keys), RV(conflicts)) for the role to act on.
version_added: "0.2.0"
author: gpuprov contributors
options:
  repair:
    description: Repair an interrupted dpkg before anything else.
    type: bool
    default: true
  update:
    description: C(auto) refreshes stale lists (see above), C(always) and C(never) regardless.
    type: str
    choices: [auto, always, never]
    default: auto
  valid_time:
    description: Seconds a successful update stays fresh.
    type: int
    default: 3600
  packages:
    description: Packages (C(name) or C(name=version)) that must have an install candidate.
    type: list
    elements: str
    default: []
  download:
    description: Fetch O(packages) (and what they pull in) into apt's cache before the install.
    type: bool
    default: false
  sources:
    description:
      - Inventory variable name -> the URL it sets, for the error messages
        (for example C(nvidia_container_toolkit_apt_repo_url)).
    type: dict
    default: {}
  keyrings:
    description:
      - Inventory variable name of a key URL -> the keyring file the role writes from it
        (for example C(nvidia_container_toolkit_apt_gpg_key_url) ->
        C(/etc/apt/keyrings/nvidia-container-toolkit.asc)). A C(.asc) and a C(.gpg) file of
        the same name match either way (deb822_repository picks the suffix from the key).
      - Marks RV(missing_keys) entries as the role's own (C(managed)), with that variable.
    type: dict
    default: {}
  fingerprints:
    description:
      - Key URL variable (a key of O(keyrings)) -> C(variable) (the inventory variable that
        pins it) and C(value) (an OpenPGP fingerprint, spaces allowed; empty pins nothing).
        Before any update, the keyring the role wrote from that URL must hold a key (primary
        or subkey) with that fingerprint; otherwise the keyring is removed, so apt trusts
        nothing signed by the unexpected key, and the module fails naming both fingerprints.
        A keyring not there yet (check mode) is not checked.
    type: dict
    default: {}
  stale_keys:
    description:
      - C(fail) stops on any signature apt cannot verify. C(report) lets an update whose only
        errors are signatures of keyrings from O(keyrings) (C(NO_PUBKEY) or C(EXPKEYSIG), as
        when the key at that URL rotated) end without failing, with a warning and
        RV(stale_keys), so that the role fetches the key again; the lists are not marked fresh.
    type: str
    choices: [fail, report]
    default: fail
  owned:
    description:
      - Variable of a repository URL (a key of O(sources)) that the role writes a source for
        -> C(file) (the source file the role writes), C(others) (C(refuse) or C(replace)) and
        C(variable) (the inventory variable that chooses C(others)).
      - Before anything else, every other definition of that URL in C(sources.list),
        C(*.list) and C(*.sources) is found (two definitions of one repository make apt warn
        on every command, and fail on every command once their C(Signed-By) differ).
        C(refuse) fails naming each file and line and the variable; C(replace) moves each
        such file to O(backup_dir) (a copy kept, RV(replaced_sources), a warning) so that the
        role's source is the only one. A file that also defines other repositories is never
        moved (the module fails, naming it). In check mode nothing is moved, and the lists
        are not refreshed while a replacement is pending.
    type: dict
    default: {}
  backup_dir:
    description: Where O(owned) C(replace) keeps the files it moves out of apt's sources.
    type: path
    default: /var/backups/gpuprov/apt-sources
  lock_timeout:
    description: Seconds to wait for a dpkg or apt lock held by another process.
    type: int
    default: 300
  state_dir:
    description:
      - Where gpuprov_state keeps each role's record of its last converge. An update whose
        only errors are signatures apt cannot verify with keyrings that another gpuprov role
        wrote (a path in that role's record) does not fail this role (it does not write
        that key); the owner's record is marked stale, so that the owner's probe finds a
        difference and its own repository step fetches the key again, with a warning and
        RV(stale_records); the lists are not marked fresh. Without such a record the update
        fails, naming the keyring.
    type: path
    default: /var/lib/gpuprov/state
  stamp:
    description: Where the digest and time of the last successful update are kept.
    type: path
    default: /var/lib/gpuprov/apt-lists.json
attributes:
  check_mode:
    support: partial
    details: The lists are refreshed (metadata), nothing is repaired or downloaded.
"""

EXAMPLES = r"""
- name: Make apt ready for the toolkit packages
  apt_ready:
    packages: [nvidia-container-toolkit]
    download: true
    sources:
      nvidia_container_toolkit_apt_repo_url: "{{ nvidia_container_toolkit_apt_repo_url }}"
      nvidia_container_toolkit_apt_gpg_key_url: "{{ nvidia_container_toolkit_apt_gpg_key_url }}"
    keyrings:
      nvidia_container_toolkit_apt_gpg_key_url: /etc/apt/keyrings/nvidia-container-toolkit.asc

- name: Find other definitions of the repository before writing ours (changes nothing)
  apt_ready:
    repair: false
    update: never
    sources:
      nvidia_container_toolkit_apt_repo_url: "{{ nvidia_container_toolkit_apt_repo_url }}"
  register: __found
# __found.source_definitions.nvidia_container_toolkit_apt_repo_url: [{file, line, ...}, ...]

- name: Own the repository's definition (refuse another file that defines it, or replace it)
  apt_ready:
    repair: false
    update: never
    sources:
      docker_ce_apt_repo_url: "{{ docker_ce_apt_repo_url }}"
    owned:
      docker_ce_apt_repo_url:
        file: /etc/apt/sources.list.d/docker.sources
        others: "{{ docker_ce_apt_foreign_sources }}"
        variable: docker_ce_apt_foreign_sources
"""

RETURN = r"""
repaired:
  description: Whether an interrupted dpkg was repaired.
  type: bool
  returned: always
repair:
  description: What the repair found and ran, one line each.
  type: list
  elements: str
  returned: always
held:
  description: Packages on hold (kept on hold across the repair).
  type: list
  elements: str
  returned: always
updated:
  description: Whether C(apt-get update) ran (and succeeded).
  type: bool
  returned: always
update_reason:
  description: Why the lists were (or were not) refreshed.
  type: str
  returned: always
source_definitions:
  description:
    - For each variable in O(sources) with a URL, every enabled definition of that URL in
      C(/etc/apt) (C($(ARCH)) matches any architecture, a trailing C(/) is ignored).
    - Each is C(file), C(line) (a deb822 stanza's first line), C(types), C(uri), C(suites),
      C(signed_by) (C("") when none), C(components), C(describe) (file, line and Signed-By in
      words) and C(shared) (the file defines other repositories too).
  type: dict
  returned: always
replaced_sources:
  description:
    - The files O(owned) C(replace) moved (or, in check mode, would move) out of apt's
      sources, each with C(file), C(backup), C(url) and C(variable).
  type: list
  elements: dict
  returned: always
replaced:
  description: What RV(replaced_sources) did, in one sentence per repository (for the output).
  type: list
  elements: str
  returned: always
apt_errors:
  description: apt's own cause lines of a failed run (all C(E:) lines, the failure C(W:) lines).
  type: list
  elements: str
  returned: always (empty unless apt failed)
failed_sources:
  description:
    - One entry per cause, with C(url), C(kind) (C(fetch), C(not_valid_yet), C(expired),
      C(signature), C(conflict)), C(reason) and C(variable) (from O(sources), or null).
    - Clock entries add C(host_time), C(release_date) and C(release_valid_until) (UTC, or null).
  type: list
  elements: dict
  returned: always (empty unless apt failed)
missing_keys:
  description:
    - Signatures apt could not verify, with C(key) (the id apt names), C(status)
      (C(NO_PUBKEY), C(EXPKEYSIG), ...), C(who), C(url), C(variable), C(keyrings) (the
      source's C(Signed-By) values), C(managed) (a keyring from O(keyrings)),
      C(key_variable) and C(key_url) (when managed, else null) and C(definitions).
  type: list
  elements: dict
  returned: always (empty unless apt failed)
stale_keys:
  description: The key URL variables whose keyring apt could not verify with (O(stale_keys) report).
  type: list
  elements: str
  returned: always
stale_records:
  description:
    - The records (in O(state_dir)) of other roles whose keyring apt could not verify with,
      marked stale so that those roles fetch their key again on their next probe.
  type: list
  elements: str
  returned: always
conflicts:
  description:
    - apt's "Conflicting values set for option" errors, with C(option), C(uri), C(suite),
      C(values), C(variable) and C(definitions) (every file and line defining C(uri)).
  type: list
  elements: dict
  returned: always (empty unless apt failed)
"""

import base64
import contextlib
import dataclasses
import email.utils
import hashlib
import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DPKG_UPDATES = "/var/lib/dpkg/updates"
APT_LISTS = "/var/lib/apt/lists"
ETC_APT = "/etc/apt"
# Files whose change makes the lists stale: the sources and the keys that sign them.
SOURCE_GLOBS = (
    ("/etc/apt", "sources.list"),
    ("/etc/apt/sources.list.d", "*.list"),
    ("/etc/apt/sources.list.d", "*.sources"),
    ("/etc/apt/keyrings", "*"),
    ("/etc/apt/trusted.gpg.d", "*"),
    ("/usr/share/keyrings", "gpuprov-*"),
)
HINT = (
    "check that the mirror is up and serves that path, that the host reaches it "
    "(an http_proxy/https_proxy in the role's proxy environment, if one is needed), "
    "and for https that the host trusts the server's CA"
)
LOCK_MARKERS = ("lock was locked by another process", "Could not get lock", "is locked by another")
APT_ENV = {"LC_ALL": "C", "LANG": "C", "DEBIAN_FRONTEND": "noninteractive"}
DPKG_OPTS = ("-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold")

Runner = Callable[[Sequence[str]], tuple[int, str, str]]


# ---------------------------------------------------------------------------
# pure helpers (unit-tested)


def pending_updates(names: Iterable[str]) -> list[str]:
    """dpkg's journal entries in /var/lib/dpkg/updates (numbered files; tmp.i is scratch)."""
    return sorted(n for n in names if n.isdigit())


def audit_problems(audit_output: str) -> bool:
    """Whether `dpkg --audit` reported anything (it prints nothing when all is well)."""
    return bool(audit_output.strip())


_FETCH_RE = re.compile(
    r"^(?:[EW]: Failed to fetch|Err:\d+)\s+(?P<url>\S+)(?:\s+(?P<rest>.*))?$", re.MULTILINE
)
_REASON_RE = re.compile(r"^\s{2}(?P<reason>\S.*)$", re.MULTILINE)


def fetch_errors(output: str) -> list[tuple[str, str]]:
    """(url, reason) of every fetch apt reported as failed.

    apt ends with `W:`/`E: Failed to fetch URL  REASON` lines (the full URL); without them,
    the `Err:N BASE SUITE` lines and their indented reason line are used. A signature apt
    could not verify is listed as `Err:` too, but it was fetched: signature_errors has it.
    """
    final: dict[str, str] = {}
    progress: dict[str, str] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        match = _FETCH_RE.match(line)
        if not match:
            continue
        url = match.group("url")
        if line.startswith(("E:", "W:")):
            reason = (match.group("rest") or "").strip()
            if not signature_reason(reason):
                final.setdefault(url, reason)
        else:
            nxt = _REASON_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
            reason = nxt.group("reason").strip() if nxt else ""
            if not signature_reason(reason):
                progress.setdefault(url, reason)
    return list((final or progress).items())


def variable_for(url: str, sources: Mapping[str, str]) -> str | None:
    """The variable whose URL is the longest prefix of `url` (apt's $(ARCH) matched loosely)."""
    best: tuple[int, str] | None = None
    for name, base in sources.items():
        if not base:
            continue
        prefix = str(base).split("$", 1)[0].rstrip("/")
        if prefix and url.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), name)
    return best[1] if best else None


def explain_fetch(url: str, reason: str, sources: Mapping[str, str]) -> str:
    """One line: the URL, why it failed, the variable that sets it, what to check."""
    var = variable_for(url, sources)
    where = f"set by {var}" if var else "from the host's own apt sources (/etc/apt/sources.list*)"
    because = f" ({reason})" if reason else ""
    return f"could not fetch {url}{because}; that URL is {where}: {HINT}."


def recorded_keyrings(records: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """Keyring stem -> the record (path) of the gpuprov role that manages that path, from
    gpuprov_state's records ((path, document) pairs): their spec lists the role's paths."""
    owners: dict[str, str] = {}
    for path, doc in records:
        spec = doc.get("spec") if isinstance(doc, dict) else None
        paths = spec.get("paths") if isinstance(spec, dict) else None
        for managed in paths if isinstance(paths, list) else []:
            owners.setdefault(_keyring_stem(str(managed)), path)
    return owners


def keys_to_renew(
    fields: Mapping[str, Any], report: bool, owners: Mapping[str, str]
) -> tuple[list[str], list[str]] | None:
    """When an update failed only on signatures of keyrings gpuprov writes: (the key URL
    variables of this role's own keyrings to fetch again, the records of the other roles
    that write the rest). None when anything else failed, a keyring is nobody's in gpuprov,
    or one is this role's own and ``report`` is off (stale_keys: fail)."""
    failed = fields.get("failed_sources") or []
    missing = fields.get("missing_keys") or []
    if not missing or any(f.get("kind") != "signature" for f in failed):
        return None
    own: set[str] = set()
    others: set[str] = set()
    for key in missing:
        if key.get("managed") and key.get("key_variable"):
            if not report:
                return None
            own.add(str(key["key_variable"]))
            continue
        records = {owners.get(_keyring_stem(str(r))) for r in key.get("keyrings") or []}
        if not records or None in records:
            return None
        others.update(str(r) for r in records)
    return sorted(own), sorted(others)


def sources_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (path, content) pairs, in path order."""
    digest = hashlib.sha256()
    for path, content in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def freshness(
    stamp: Mapping[str, Any] | None,
    digest: str,
    now: float,
    valid_time: int,
    lists_present: bool,
) -> tuple[bool, str]:
    """(fresh, why) for the package lists."""
    if not lists_present:
        return False, "no package lists on the host"
    if not stamp:
        return False, "no record of a successful apt-get update by gpuprov"
    if stamp.get("digest") != digest:
        return False, "the apt sources or keys changed since the last successful update"
    age = now - float(stamp.get("time", 0))
    if age < 0 or age >= valid_time:
        return False, f"the last successful update is {int(age)} s old (valid_time {valid_time})"
    return True, f"fresh: updated successfully {int(age)} s ago, sources unchanged"


def no_candidate(policy_output: str, names: Sequence[str]) -> list[str]:
    """Names that `apt-cache policy NAMES` shows without an install candidate (or not at all)."""
    candidates: dict[str, str] = {}
    current: str | None = None
    for line in policy_output.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line[:-1].split(":", 1)[0] if ":" in line[:-1] else line[:-1]
        elif current is not None and line.strip().startswith("Candidate:"):
            candidates[current] = line.split(":", 1)[1].strip()
    return [n for n in names if candidates.get(n, "(none)") == "(none)"]


def package_name(spec: str) -> str:
    """`docker.io=26.1*` -> `docker.io`."""
    return spec.split("=", 1)[0].strip()


def removals(simulation: str) -> list[str]:
    """Packages an `apt-get -s` run would remove (its `Remv NAME` lines)."""
    return [line.split()[1] for line in simulation.splitlines() if line.startswith("Remv ")]


def reinstall_required(status_output: str) -> list[str]:
    """Packages dpkg left half-installed or marked reinstall-required (an unpack cut short):
    `dpkg --configure -a` cannot finish them; only a reinstall can. Input: lines of
    `dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'` (e.g. "iHR docker.io")."""
    found = []
    for line in status_output.splitlines():
        abbrev, _, name = line.partition(" ")
        if len(abbrev) >= 2 and name.strip() and (abbrev[1] == "H" or abbrev[2:3] == "R"):
            found.append(name.strip())
    return sorted(found)


def space_error(output: str) -> str | None:
    """apt's "not enough free space" line, if any."""
    for line in output.splitlines():
        if "enough free space" in line:
            return line.removeprefix("E: ").strip()
    return None


# ---------------------------------------------------------------------------
# why apt failed, in apt's own words (pure; tests/unit/test_apt_ready*.py feed them the text
# apt 2.6 prints, and run a real apt-get against throwaway repositories)

# W: lines that report a failure; apt's other W: lines are notes (a target "configured
# multiple times", a skipped architecture, a legacy keyring) and never the cause.
_CAUSE_WARNINGS = (
    "Failed to fetch",
    "GPG error",
    "is not signed",
    "Conflicting values",
    "Malformed",
    "Release file",
)
_KEY_STATUS_RE = re.compile(r"\b(NO_PUBKEY|EXPKEYSIG|KEYEXPIRED|REVKEYSIG|BADSIG|EXPSIG|ERRSIG)\b")


def cause_lines(output: str) -> list[str]:
    """apt's lines that say what failed, in order, once each: every `E:` line, and the `W:`
    lines that report a failed fetch, signature or source line (never the last line as such)."""
    found: list[str] = []
    for raw in output.splitlines():
        line = raw.strip()
        cause = line.startswith("E: ") or (
            line.startswith("W: ") and any(m in line for m in _CAUSE_WARNINGS)
        )
        if cause and line not in found:
            found.append(line)
    return found


def signature_reason(reason: str) -> bool:
    """Whether a fetch "reason" is really a signature check (apt lists those as Err: too)."""
    return bool(_KEY_STATUS_RE.search(reason)) or "signatures" in reason


@dataclasses.dataclass(frozen=True)
class ClockError:
    """A Release file apt refused because of its dates: "not valid yet" or "expired"."""

    url: str
    kind: str
    span: str  # apt's remaining or elapsed time, e.g. "729d 23h 59min 49s"


_CLOCK_RE = re.compile(
    r"Release file for (?P<url>\S+) is (?:not valid yet \(invalid for another (?P<ahead>[^)]*)\)"
    r"|expired \(invalid since (?P<since>[^)]*)\))"
)


def clock_errors(output: str) -> list[ClockError]:
    """Release files that are "not valid yet" (dated in the future) or "expired"."""
    found: list[ClockError] = []
    for match in _CLOCK_RE.finditer(output):
        kind = "not valid yet" if match.group("ahead") is not None else "expired"
        error = ClockError(match.group("url"), kind, match.group("ahead") or match.group("since"))
        if error not in found:
            found.append(error)
    return found


@dataclasses.dataclass(frozen=True)
class SignatureError:
    """A repository whose Release signature apt could not accept, and the key it names."""

    url: str  # the repository's URI, as apt names it
    status: str  # gpgv's status: NO_PUBKEY, EXPKEYSIG, ...
    key: str  # the key id apt names
    who: str = ""  # the key's user id, when apt names it


_GPG_ERROR_RE = re.compile(
    r"GPG error: (?P<repo>.+?): The following signatures [^:]*: (?P<keys>.*)$", re.MULTILINE
)


def signature_errors(output: str) -> list[SignatureError]:
    """apt's `GPG error` lines: each key apt names, with its status (NO_PUBKEY, EXPKEYSIG...)."""
    found: list[SignatureError] = []
    for match in _GPG_ERROR_RE.finditer(output):
        url = match.group("repo").split()[0]
        parts = _KEY_STATUS_RE.split(match.group("keys"))
        for i in range(1, len(parts) - 1, 2):
            status, words = parts[i], parts[i + 1].split()
            error = SignatureError(url, status, words[0] if words else "", " ".join(words[1:]))
            if error not in found:
                found.append(error)
    return found


@dataclasses.dataclass(frozen=True)
class Conflict:
    """apt refused to read its sources: one repository defined with different option values."""

    option: str
    uri: str
    suite: str
    values: tuple[str, ...]


_CONFLICT_RE = re.compile(
    r"Conflicting values set for option (?P<option>\S+) regarding source (?P<uri>\S+) "
    r"(?P<suite>\S+): (?P<first>.*?) != (?P<second>.*?)\s*$",
    re.MULTILINE,
)


def conflicts(output: str) -> list[Conflict]:
    """apt's "Conflicting values set for option Signed-By regarding source URI SUITE: A != B"."""
    found: list[Conflict] = []
    for m in _CONFLICT_RE.finditer(output):
        conflict = Conflict(
            m.group("option"), m.group("uri"), m.group("suite"), (m["first"], m["second"])
        )
        if conflict not in found:
            found.append(conflict)
    return found


@dataclasses.dataclass(frozen=True)
class SourceDefinition:
    """One enabled apt source entry: where it is written and what it says."""

    file: str
    line: int  # the line of a one-line entry, the first line of a deb822 stanza
    types: tuple[str, ...]
    uri: str
    suites: tuple[str, ...]
    signed_by: str  # "" when the entry has none
    components: tuple[str, ...] = ()

    def describe(self) -> str:
        key = f"Signed-By {self.signed_by}" if self.signed_by else "no Signed-By"
        return f"{self.file}:{self.line} ({key})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "types": list(self.types),
            "uri": self.uri,
            "suites": list(self.suites),
            "signed_by": self.signed_by,
            "components": list(self.components),
        }


_ONE_LINE_RE = re.compile(r"^(?P<type>deb(?:-src)?)\s+(?:\[(?P<opts>[^\]]*)\]\s*)?(?P<rest>.*)$")


def parse_one_line(text: str, file: str) -> list[SourceDefinition]:
    """Entries of a one-line-style file (sources.list, *.list): `deb [opts] URI SUITE [COMP...]`."""
    found: list[SourceDefinition] = []
    for number, raw in enumerate(text.splitlines(), 1):
        match = _ONE_LINE_RE.match(raw.split("#", 1)[0].strip())
        if not match:
            continue
        words = match.group("rest").split()
        if len(words) < 2:
            continue
        options = dict(
            (key.strip().lower(), value.strip())
            for key, sep, value in (o.partition("=") for o in (match.group("opts") or "").split())
            if sep
        )
        found.append(
            SourceDefinition(
                file,
                number,
                (match.group("type"),),
                words[0],
                (words[1],),
                options.get("signed-by", ""),
                tuple(words[2:]),
            )
        )
    return found


def _signed_by(value: str) -> str:
    if "BEGIN PGP PUBLIC KEY BLOCK" in value:
        return "(a key embedded in the file)"
    return " ".join(value.split())


def parse_deb822(text: str, file: str) -> list[SourceDefinition]:
    """Entries of a deb822 file (*.sources), one per URI of each enabled stanza."""
    found: list[SourceDefinition] = []
    stanza: dict[str, str] = {}
    start = 0
    last = ""

    def flush() -> None:
        if not stanza or stanza.get("enabled", "yes").strip().lower() == "no":
            return
        for uri in stanza.get("uris", "").split():
            found.append(
                SourceDefinition(
                    file,
                    start,
                    tuple(stanza.get("types", "").split()),
                    uri,
                    tuple(stanza.get("suites", "").split()),
                    _signed_by(stanza.get("signed-by", "")),
                    tuple(stanza.get("components", "").split()),
                )
            )

    for number, raw in enumerate([*text.splitlines(), ""], 1):
        if raw.startswith("#"):
            continue
        if not raw.strip():
            flush()
            stanza, last = {}, ""
        elif raw[0] in " \t":
            if last:
                stanza[last] += "\n" + raw.strip()
        else:
            key, sep, value = raw.partition(":")
            if sep:
                if not stanza:
                    start = number
                last = key.strip().lower()
                stanza[last] = value.strip()
    return found


def parse_sources(files: Iterable[tuple[str, str]]) -> list[SourceDefinition]:
    """Every entry of (path, text) pairs, each file by its format (`.sources`: deb822)."""
    found: list[SourceDefinition] = []
    for path, text in files:
        parse = parse_deb822 if path.endswith(".sources") else parse_one_line
        found += parse(text, path)
    return found


def same_uri(a: str, b: str) -> bool:
    """Whether two source URIs name one repository: a trailing "/" aside, and apt's
    `$(ARCH)` matching any one path segment (a role's variable against apt's message)."""

    def plain(uri: str) -> str:
        return uri.strip().rstrip("/")

    def pattern(uri: str) -> str:
        return re.escape(plain(uri)).replace(re.escape("$(ARCH)"), "[^/]+")

    return bool(re.fullmatch(pattern(a), plain(b)) or re.fullmatch(pattern(b), plain(a)))


def read_sources(etc_apt: str = "/etc/apt") -> list[tuple[str, str]]:
    """(path, text) of the files apt reads its sources from, in apt's order: sources.list,
    then sources.list.d's *.list and *.sources by name. Unreadable files are left out."""
    base = Path(etc_apt)
    paths = [base / "sources.list"]
    parts = base / "sources.list.d"
    if parts.is_dir():
        paths += sorted(
            (p for p in parts.iterdir() if p.suffix in (".list", ".sources")), key=lambda p: p.name
        )
    files: list[tuple[str, str]] = []
    for path in paths:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            files.append((str(path), path.read_text(encoding="utf-8")))
    return files


def find_definitions(uri: str, etc_apt: str = "/etc/apt") -> list[SourceDefinition]:
    """Every enabled definition of `uri` (one-line and deb822) under `etc_apt`.

    For apt's "Conflicting values" errors (which name no file), and for a role's preflight
    that must find a repository someone else already defined before it writes its own.
    """
    return [d for d in parse_sources(read_sources(etc_apt)) if same_uri(d.uri, uri)]


def foreign_definitions(
    url: str, variable: str, definitions: Sequence[Mapping[str, Any]], owned: Mapping[str, Any]
) -> tuple[str, list[str]]:
    """Another definition of a repository the role owns: (the error, "") or ("", the files to
    move). `definitions` are RV(source_definitions) entries of `url`; `owned` is an O(owned)
    entry (file, others, variable)."""
    foreign = [d for d in definitions if d["file"] != owned["file"]]
    if not foreign:
        return "", []
    where = "; ".join(str(d["describe"]) for d in foreign)
    files = list(dict.fromkeys(str(d["file"]) for d in foreign))
    shared = [f for f in files if any(d["shared"] for d in foreign if d["file"] == f)]
    if shared:
        return (
            f"{', '.join(shared)} also define{'s' if len(shared) == 1 else ''} other repositories, "
            f"so gpuprov does not move {'it' if len(shared) == 1 else 'them'}: remove the "
            f"line(s) for {url} ({variable}) there ({where}). Nothing was changed."
        ), []
    if owned["others"] != "replace":
        return (
            f"{url} ({variable}) is also defined in {where}. Two definitions of one repository "
            "make apt warn on every command, and fail on every command once their Signed-By "
            f"differ, so nothing was changed. Set {owned['variable']}: replace to move "
            f"{'that file' if len(files) == 1 else 'those files'} aside (the role's source "
            "replaces it; a copy is kept), or remove it."
        ), []
    return "", files


_APT_QUOTED = frozenset('\\|{}[]<>"^~_=!@#$%^&*')


def list_file_name(url: str) -> str:
    """The name apt gives a downloaded index in its lists directory (apt's URItoFileName):
    the URL without its scheme, user and password, odd bytes %-quoted, "/" turned into "_"."""
    parts = urllib.parse.urlsplit(url)
    text = parts.netloc.rpartition("@")[2] + parts.path
    quoted = "".join(
        f"%{byte:02x}" if byte <= 0x20 or byte >= 0x7F or chr(byte) in _APT_QUOTED else chr(byte)
        for byte in text.encode("utf-8")
    )
    return quoted.replace("/", "_")


def release_fields(text: str) -> dict[str, str]:
    """The fields (Date, Valid-Until, ...) of a Release or clearsigned InRelease file."""
    lines = text.splitlines()
    if lines and lines[0].startswith("-----BEGIN PGP SIGNED MESSAGE"):
        blank = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
        lines = lines[blank + 1 :]
    fields: dict[str, str] = {}
    for line in lines:
        if line.startswith("-----BEGIN PGP SIGNATURE") or not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and line[:1] not in " \t":
            fields.setdefault(key.strip(), value.strip())
    return fields


def utc(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def release_time(value: str) -> str:
    """A Release `Date`/`Valid-Until` (RFC 2822) in UTC; as written when it does not parse."""
    parsed = email.utils.parsedate_tz(value)
    return utc(email.utils.mktime_tz(parsed)) if parsed else value


def _origin(url: str, sources: Mapping[str, str]) -> str:
    var = variable_for(url, sources)
    return f"set by {var}" if var else "from the host's own apt sources (/etc/apt/sources.list*)"


def explain_clock(
    error: ClockError, now: float, release: Mapping[str, str], sources: Mapping[str, str]
) -> str:
    """One message for a Release refused for its dates: the host's clock, the Release's."""
    dates = [f"{f} {release_time(release[f])}" for f in ("Date", "Valid-Until") if release.get(f)]
    dated = f" (its {', '.join(dates)})" if dates else ""
    clock = f"the host's clock says {utc(now)}"
    sync = (
        "fix the host's time synchronisation first (`timedatectl`; systemd-timesyncd or "
        "chrony with a reachable NTP server)"
    )
    if error.kind == "not valid yet":
        return (
            f"the Release file {error.url} is not valid yet for another {error.span}"
            f"{dated} and {clock}: the host's clock is behind (or the mirror's ahead). "
            f"{sync[0].upper()}{sync[1:]}, then re-run; another mirror or proxy will not help. "
            "That URL is "
            f"{_origin(error.url, sources)}."
        )
    return (
        f"the Release file {error.url} expired {error.span} ago{dated} and {clock}: if that "
        f"clock is ahead, {sync}; if it is right, the mirror stopped updating (a stale mirror "
        f"or snapshot). That URL is {_origin(error.url, sources)}."
    )


def _dearmor(data: bytes) -> bytes:
    """The packets of an ASCII-armoured OpenPGP block (the binary form is returned as is)."""
    text = data.decode("ascii", errors="replace")
    if "-----BEGIN PGP" not in text:
        return data
    lines = [ln.strip() for ln in text.split("-----BEGIN PGP", 1)[1].splitlines()[1:]]
    lines = lines[: next((i for i, ln in enumerate(lines) if ln.startswith("-----END")), None)]
    if "" in lines:  # armour headers (Version:, Comment:) end at the first blank line
        lines = lines[lines.index("") + 1 :]
    body = [ln for ln in lines if ln and not ln.startswith("=")]  # "=" starts the CRC-24
    return base64.b64decode("".join(body))


def _packets(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet (RFC 9580 section 4.2, old and new headers)."""
    i = 0
    while i < len(data):
        head = data[i]
        if not head & 0x80:
            raise ValueError(f"not an OpenPGP packet at byte {i}")
        if head & 0x40:  # new format
            tag, i = head & 0x3F, i + 1
            first = data[i]
            if first < 192:
                length, i = first, i + 1
            elif first < 224:
                length, i = ((first - 192) << 8) + data[i + 1] + 192, i + 2
            elif first == 255:
                length, i = int.from_bytes(data[i + 1 : i + 5], "big"), i + 5
            else:
                raise ValueError("partial body lengths do not occur in key packets")
        else:  # old format
            tag, kind, i = (head >> 2) & 0x0F, head & 0x03, i + 1
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                raise ValueError("indeterminate packet length")
            length, i = int.from_bytes(data[i : i + size], "big"), i + size
        yield tag, data[i : i + length]
        i += length


def openpgp_fingerprints(data: bytes) -> list[str]:
    """The fingerprints (upper-case hex) of every public key and subkey in a keyring file,
    armoured or binary: v4 SHA-1 over 0x99, v5 and v6 SHA-256 over 0x9A / 0x9B."""
    found: list[str] = []
    for tag, body in _packets(_dearmor(data)):
        if tag not in (6, 14) or not body:
            continue
        version = body[0]
        if version == 4:
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()  # noqa: S324 (the v4 fingerprint is SHA-1)
        elif version in (5, 6):
            prefix = b"\x9a" if version == 5 else b"\x9b"
            digest = hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest()
        else:
            continue
        found.append(digest.upper())
    return found


def normal_fingerprint(value: str) -> str:
    return "".join(value.split()).upper().removeprefix("0X")


def _keyring_stem(path: str) -> str:
    # deb822_repository names the key file .asc or .gpg after its armour: either matches.
    return path[:-4] if path.endswith((".asc", ".gpg")) else path


def explain_signature(
    error: SignatureError,
    definitions: Sequence[SourceDefinition],
    sources: Mapping[str, str],
    keyrings: Mapping[str, str],
) -> tuple[str, dict[str, Any]]:
    """One message for a Release apt cannot verify, and the fields a role can act on: the
    key, the keyrings the source names (Signed-By) and, for a keyring the role writes
    (`keyrings`: key URL variable -> path), that variable and its URL."""
    rings = list(dict.fromkeys(d.signed_by for d in definitions if d.signed_by))
    managed = [
        (ring, var)
        for ring in rings
        for var, path in keyrings.items()
        if path and _keyring_stem(ring) == _keyring_stem(str(path))
    ]
    key_var = managed[0][1] if managed else None
    key_url = str(sources.get(key_var, "")) if key_var else ""
    repo = f"{error.url} ({_origin(error.url, sources)})"
    held = (
        f"its Signed-By keyring {' and '.join(rings)}"
        if rings
        else "the keys apt trusts for it (no Signed-By: /etc/apt/trusted.gpg.d)"
    )
    who = f" ({error.who})" if error.who else ""
    if error.status == "NO_PUBKEY":
        text = (
            f"the Release of {repo} is signed by key {error.key}{who}, which {held} does not "
            "hold (NO_PUBKEY): the repository's signing key changed (rotated), or the keyring "
            "holds another key."
        )
    elif error.status in ("EXPKEYSIG", "KEYEXPIRED", "EXPSIG"):
        text = (
            f"the Release of {repo} is signed by key {error.key}{who}, whose copy in {held} "
            f"has expired ({error.status}): the keyring holds an old copy of the key (a "
            "renewed key keeps its id)."
        )
    elif error.status == "REVKEYSIG":
        text = (
            f"the Release of {repo} is signed by key {error.key}{who}, which {held} marks as "
            "revoked (REVKEYSIG): the repository must be re-signed with its new key."
        )
    else:
        text = (
            f"the signature of the Release of {repo} by key {error.key}{who} does not verify "
            f"({error.status}): the file was changed on the way (a proxy) or the mirror is "
            "half-synced; check the mirror and the proxy."
        )
    if managed:
        text += (
            f" {managed[0][0]} is the role's copy of the key at {key_url or key_var} (set by "
            f"{key_var}): fetch it again from there (the role's repository step does) and "
            "check that this URL serves the key that signs the repository now."
        )
    elif rings:
        where = ", ".join(f"{d.file}:{d.line}" for d in definitions)
        text += (
            f" gpuprov does not write {' or '.join(rings)} (the source is defined at {where}): "
            "install the repository owner's current key there."
        )
    info = {
        "key": error.key,
        "status": error.status,
        "who": error.who,
        "url": error.url,
        "variable": variable_for(error.url, sources),
        "keyrings": rings,
        "managed": bool(managed),
        "key_variable": key_var,
        "key_url": key_url or None,
        "definitions": [d.as_dict() for d in definitions],
    }
    return text, info


def explain_conflict(
    conflict: Conflict, definitions: Sequence[SourceDefinition], sources: Mapping[str, str]
) -> str:
    """One message for apt's "Conflicting values set for option": every file defining the URI."""
    values = " != ".join(v or "(none)" for v in conflict.values)
    head = (
        f"apt cannot read its sources: {conflict.uri} (suite {conflict.suite}) is defined "
        f"with different {conflict.option} ({values})"
    )
    if definitions:
        head += f" in {len(definitions)} places: " + "; ".join(d.describe() for d in definitions)
    else:
        head += (
            " in files gpuprov could not find (it read /etc/apt/sources.list, "
            "sources.list.d/*.list and *.sources)"
        )
    return (
        f"{head}. That URI is {_origin(conflict.uri, sources)}. Keep one definition (remove or "
        f"disable the others, e.g. a file a vendor's install guide added) or give them the "
        f"same {conflict.option}; until then every apt command on this host fails."
    )


# ---------------------------------------------------------------------------
# the module


class AptReady:
    def __init__(self, module: AnsibleModule, run: Runner | None = None) -> None:
        self.module = module
        self.params = module.params
        self.run = run or self._run
        self.dpkg_updates = DPKG_UPDATES
        self.apt_lists = APT_LISTS
        self.etc_apt = ETC_APT
        self.source_globs = SOURCE_GLOBS
        self.now: Callable[[], float] = time.time
        self.result: dict[str, Any] = {
            "changed": False,
            "repaired": False,
            "repair": [],
            "held": [],
            "updated": False,
            "update_reason": "",
            "source_definitions": {},
            "apt_errors": [],
            "failed_sources": [],
            "missing_keys": [],
            "conflicts": [],
            "replaced_sources": [],
            "replaced": [],
        }

    def _run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        rc, out, err = self.module.run_command(list(argv), environ_update=APT_ENV)
        return int(rc), str(out), str(err)

    def run_locked(self, argv: Sequence[str]) -> tuple[int, str, str]:
        """Run, waiting while another process holds the dpkg/apt lock (up to lock_timeout)."""
        deadline = time.monotonic() + int(self.params["lock_timeout"])
        while True:
            rc, out, err = self.run(argv)
            if rc == 0 or not any(m in out + err for m in LOCK_MARKERS):
                return rc, out, err
            if time.monotonic() >= deadline:
                return rc, out, err
            time.sleep(3)

    def fail(self, msg: str, **extra: Any) -> None:
        self.module.fail_json(msg=msg, **{**self.result, **extra})

    # -- why apt failed --------------------------------------------------

    def release_of(self, url: str) -> dict[str, str]:
        """The fields of the Release file apt fetched from `url` (a refused one stays in
        lists/partial), {} when it is not there."""
        name = list_file_name(url)
        for directory in (Path(self.apt_lists) / "partial", Path(self.apt_lists)):
            with contextlib.suppress(OSError):
                return release_fields((directory / name).read_text(errors="replace"))
        return {}

    def explain(self, output: str, rc: int) -> tuple[str, dict[str, Any]]:
        """Why an apt run failed: one sentence per cause, then apt's own cause lines
        (cause_lines), and the same as fields a role can act on."""
        sources: Mapping[str, str] = self.params["sources"]
        parts: list[str] = []
        failed: list[dict[str, Any]] = []
        missing: list[dict[str, Any]] = []
        clashes: list[dict[str, Any]] = []
        fetches = fetch_errors(output)
        for url, reason in fetches:
            parts.append(explain_fetch(url, reason, sources))
            failed.append(
                {
                    "url": url,
                    "kind": "fetch",
                    "reason": reason,
                    "variable": variable_for(url, sources),
                }
            )
        for clock in clock_errors(output):
            release = self.release_of(clock.url)
            parts.append(explain_clock(clock, self.now(), release, sources))
            failed.append(
                {
                    "url": clock.url,
                    "kind": clock.kind.replace(" ", "_"),
                    "reason": clock.span,
                    "variable": variable_for(clock.url, sources),
                    "host_time": utc(self.now()),
                    "release_date": release_time(release["Date"]) if "Date" in release else None,
                    "release_valid_until": (
                        release_time(release["Valid-Until"]) if "Valid-Until" in release else None
                    ),
                }
            )
        for signature in signature_errors(output):
            definitions = find_definitions(signature.url, self.etc_apt)
            text, info = explain_signature(signature, definitions, sources, self.params["keyrings"])
            if text not in parts:
                parts.append(text)
            missing.append(info)
            failed.append(
                {
                    "url": signature.url,
                    "kind": "signature",
                    "reason": f"{signature.status} {signature.key}",
                    "variable": info["variable"],
                }
            )
        for conflict in conflicts(output):
            definitions = find_definitions(conflict.uri, self.etc_apt)
            parts.append(explain_conflict(conflict, definitions, sources))
            clashes.append(
                {
                    "option": conflict.option,
                    "uri": conflict.uri,
                    "suite": conflict.suite,
                    "values": list(conflict.values),
                    "variable": variable_for(conflict.uri, sources),
                    "definitions": [d.as_dict() for d in definitions],
                }
            )
            failed.append(
                {
                    "url": conflict.uri,
                    "kind": "conflict",
                    "reason": f"{conflict.option}: {' != '.join(conflict.values)}",
                    "variable": variable_for(conflict.uri, sources),
                }
            )
        quoted = cause_lines(output)
        if quoted:
            parts.append("apt said: " + " ".join(f"[{line}]" for line in quoted))
        elif not parts:
            parts.append(f"apt exited with {rc} and printed no E: line (see stdout and stderr).")
        fields = {
            "apt_errors": quoted,
            "failed_sources": failed,
            "missing_keys": missing,
            "conflicts": clashes,
            "fetch_errors": [{"url": u, "reason": r} for u, r in fetches],
        }
        return " ".join(parts), fields

    # -- repair ----------------------------------------------------------

    def holds(self) -> list[str]:
        rc, out, _ = self.run(["apt-mark", "showhold"])
        return sorted(out.split()) if rc == 0 else []

    def needs_repair(self) -> tuple[bool, str]:
        try:
            pending = pending_updates(p.name for p in Path(self.dpkg_updates).iterdir())
        except FileNotFoundError:
            pending = []
        _, audit, _ = self.run(["dpkg", "--audit"])
        why = []
        if pending:
            why.append(f"{len(pending)} pending dpkg journal file(s) in {self.dpkg_updates}")
        if audit_problems(audit):
            first = " ".join(audit.strip().splitlines()[:2])
            why.append(f"dpkg --audit: {first}")
        return bool(why), "; ".join(why)

    def repair(self) -> None:
        needed, why = self.needs_repair()
        held = self.holds()
        self.result["held"] = held
        if not needed:
            return
        log: list[str] = self.result["repair"]
        log.append(f"dpkg was interrupted ({why})")
        if self.module.check_mode:
            log.append("check mode: would run dpkg --configure -a")
            self.module.warn(" ".join(log))
            return
        rc, out, err = self.run_locked(
            ["dpkg", "--force-confdef", "--force-confold", "--configure", "-a"]
        )
        log.append(f"ran dpkg --configure -a: rc={rc}")
        still, why = self.needs_repair()
        if still:
            # Half-installed packages: apt completes them, but only if it would remove nothing.
            _, sim, _ = self.run(["apt-get", "-s", "-f", "install"])
            gone = removals(sim)
            if gone:
                self.fail(
                    f"dpkg was interrupted and `dpkg --configure -a` did not finish the repair "
                    f"({why}); `apt-get -f install` would remove {', '.join(gone)}, so gpuprov "
                    "stops here: repair the host by hand (see `dpkg --audit`).",
                    stdout=out,
                    stderr=err,
                )
            rc, out, err = self.run_locked(["apt-get", "-y", *DPKG_OPTS, "-f", "install"])
            log.append(f"ran apt-get -f install: rc={rc}")
            still, why = self.needs_repair()
            broken: list[str] = []
            if still:
                # An unpack cut short (the host died while dpkg wrote the files): the package
                # is half-installed and reinstall-required; configure cannot finish it.
                _, status, _ = self.run(
                    ["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\n"]
                )
                broken = reinstall_required(status)
                if broken:
                    rc, out, err = self.run_locked(
                        [
                            "apt-get",
                            "install",
                            "-y",
                            "--reinstall",
                            "--allow-change-held-packages",
                            *DPKG_OPTS,
                            *broken,
                        ]
                    )
                    log.append(f"reinstalled {', '.join(broken)} (left half-installed): rc={rc}")
                    still, why = self.needs_repair()
            if still:
                names = f" Packages left half-installed: {', '.join(broken)}." if broken else ""
                self.fail(
                    f"dpkg was interrupted and could not be repaired automatically ({why})."
                    f"{names} Run `dpkg --configure -a` and `apt-get -f install` (and "
                    "`apt-get install --reinstall` of those packages) on the host and read "
                    "their errors.",
                    stdout=out,
                    stderr=err,
                )
        lost = sorted(set(held) - set(self.holds()))
        if lost:
            self.run(["apt-mark", "hold", *lost])
            log.append(f"put {', '.join(lost)} back on hold")
        log.append("dpkg is consistent again")
        self.result["repaired"] = True
        self.result["changed"] = True
        self.module.warn("apt_ready: " + "; ".join(log))

    # -- freshness -------------------------------------------------------

    def digest(self) -> str:
        files: list[tuple[str, bytes]] = []
        for directory, pattern in self.source_globs:
            for path in sorted(Path(directory).glob(pattern)):
                if path.is_file():
                    with contextlib.suppress(OSError):
                        files.append((str(path), path.read_bytes()))
        return sources_digest(files)

    def read_stamp(self) -> dict[str, Any] | None:
        try:
            data = json.loads(Path(self.params["stamp"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def lists_present(self) -> bool:
        lists = Path(self.apt_lists)
        return lists.is_dir() and any(lists.glob("*_Packages*"))

    def recorded_keyrings(self) -> dict[str, str]:
        directory = self.params.get("state_dir") or ""
        records: list[tuple[str, Any]] = []
        for path in sorted(Path(directory).glob("*.json")) if directory else []:
            with contextlib.suppress(OSError, ValueError):
                records.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
        return recorded_keyrings(records)

    @staticmethod
    def mark_stale(record: str, why: str) -> None:
        """Add ``stale`` to a gpuprov_state record (its probe then reports it); atomic, 0600."""
        path = Path(record)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        doc["stale"] = why
        tmp = path.with_name(f"{path.name}.stale.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.write("\n")
        tmp.replace(path)

    def update(self, reason: str) -> None:
        stamp = Path(self.params["stamp"])
        # Until this update succeeds the lists are not fresh, whatever happens next.
        with contextlib.suppress(FileNotFoundError):
            stamp.unlink()
        rc, out, err = self.run_locked(
            ["apt-get", "update", "-o", "APT::Update::Error-Mode=any", "-o", "Acquire::Retries=1"]
        )
        output = out + "\n" + err
        if rc != 0 or fetch_errors(output) or clock_errors(output) or signature_errors(output):
            detail, fields = self.explain(output, rc)
            renew = keys_to_renew(
                fields, self.params["stale_keys"] == "report", self.recorded_keyrings()
            )
            if renew is not None:
                own, others = renew
                self.result["stale_keys"] = own
                self.result.update(fields)
                said = []
                if own:
                    said.append(f"The role fetches the key again ({', '.join(own)}).")
                if others:
                    roles = ", ".join(Path(r).stem for r in others)
                    if not self.module.check_mode:
                        for record in others:
                            self.mark_stale(record, f"apt could not verify with its key: {detail}")
                    self.result["stale_records"] = others
                    said.append(
                        f"That keyring is written by another gpuprov role ({roles}): its record "
                        f"({', '.join(others)}) is marked stale, so its probe finds a "
                        "difference and it fetches the key again."
                    )
                self.module.warn(
                    f"apt-get update ({reason}): {detail} {' '.join(said)} "
                    "The lists are not marked fresh."
                )
                return
            self.fail(
                f"apt-get update failed ({reason}): {detail} "
                "The package lists are not marked fresh, so the next run updates them again.",
                stdout=out,
                stderr=err,
                **fields,
            )
        stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = stamp.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"digest": self.digest(), "time": time.time()}) + "\n", encoding="utf-8"
        )
        tmp.replace(stamp)
        self.result["updated"] = True
        self.result["update_reason"] = reason

    def refresh(self) -> None:
        mode = self.params["update"]
        if mode == "never":
            self.result["update_reason"] = "update: never"
            return
        if mode == "always":
            self.update("update: always")
            return
        fresh, why = freshness(
            self.read_stamp(),
            self.digest(),
            time.time(),
            int(self.params["valid_time"]),
            self.lists_present(),
        )
        if fresh:
            self.result["update_reason"] = why
        else:
            self.update(why)

    # -- packages --------------------------------------------------------

    def missing(self, names: Sequence[str]) -> list[str]:
        rc, out, err = self.run(["apt-cache", "policy", *names])
        if rc != 0:
            detail, fields = self.explain(out + "\n" + err, rc)
            self.fail(f"apt-cache policy failed: {detail}", stdout=out, stderr=err, **fields)
        return no_candidate(out, names)

    def check_packages(self) -> None:
        specs = list(self.params["packages"])
        if not specs:
            return
        names = sorted({package_name(s) for s in specs})
        missing = self.missing(names)
        if missing and not self.result["updated"]:
            self.update(f"no install candidate for {', '.join(missing)}: one refresh")
            missing = self.missing(names)
        if missing:
            urls = ", ".join(f"{k}={v}" for k, v in self.params["sources"].items() if v)
            where = f" (repositories: {urls})" if urls else ""
            self.fail(
                f"No install candidate for {', '.join(missing)} after a successful "
                f"apt-get update{where}: check that the repository carries these packages "
                "for this release and architecture, and the package names and version pins."
            )
        if self.params["download"] and not self.module.check_mode:
            rc, out, err = self.run_locked(
                [
                    "apt-get",
                    "install",
                    "-y",
                    "--download-only",
                    "--no-install-recommends",
                    "--allow-change-held-packages",
                    "-o",
                    "Acquire::Retries=1",
                    *specs,
                ]
            )
            if rc != 0:
                space = space_error(out + "\n" + err)
                fields: dict[str, Any] = {}
                if space:
                    detail = (
                        f"{space} Free space there (or point apt's cache elsewhere) and "
                        "re-run; nothing was installed."
                    )
                else:
                    detail, fields = self.explain(out + "\n" + err, rc)
                    detail += " Nothing was installed."
                self.fail(
                    f"Downloading {', '.join(specs)} failed: {detail}",
                    stdout=out,
                    stderr=err,
                    **fields,
                )

    def definitions(self) -> dict[str, list[dict[str, Any]]]:
        """Every definition in /etc/apt of each URL in `sources` (for a role's preflight: a
        repository someone else defined already)."""
        files = parse_sources(read_sources(self.etc_apt))
        return {
            var: [
                {
                    **d.as_dict(),
                    "describe": d.describe(),
                    "shared": any(o.file == d.file and not same_uri(o.uri, d.uri) for o in files),
                }
                for d in files
                if same_uri(d.uri, str(url))
            ]
            for var, url in self.params["sources"].items()
            if url
        }

    def own_sources(self, definitions: Mapping[str, list[dict[str, Any]]]) -> None:
        """Refuse or move aside the other definitions (``definitions``, as `definitions` reads
        them) of each repository in `owned`, before any apt command."""
        backup_dir = Path(self.params["backup_dir"])
        for var, owned in sorted(self.params["owned"].items()):
            url = str(self.params["sources"].get(var) or "")
            if not url:
                continue
            for key in ("file", "others", "variable"):
                if not (owned or {}).get(key):
                    self.module.fail_json(msg=f"apt_ready: owned.{var} needs {key}")
            if owned["others"] not in ("refuse", "replace"):
                self.module.fail_json(
                    msg=f"apt_ready: owned.{var}.others is {owned['others']!r}, "
                    f"not refuse or replace ({owned['variable']})"
                )
            error, files = foreign_definitions(url, var, definitions.get(var, []), owned)
            if error:
                self.fail(error, foreign_sources=definitions.get(var, []))
            moved = []
            for name in files:
                data = Path(name).read_bytes()
                backup = backup_dir / Path(name).name
                if backup.exists() and backup.read_bytes() != data:
                    backup = backup.with_name(f"{backup.name}.{int(self.now())}")
                if not self.module.check_mode:
                    backup_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
                    backup.write_bytes(data)
                    backup.chmod(0o644)
                    Path(name).unlink()
                moved.append(str(backup))
                self.result["replaced_sources"].append(
                    {"file": name, "backup": str(backup), "url": url, "variable": var}
                )
            if files:
                verb = "Would replace" if self.module.check_mode else "Replaced"
                said = (
                    f"{verb} ({owned['variable']}: replace) the other definitions of {url}: "
                    f"{', '.join(files)}; copies in {', '.join(sorted(set(moved)))}."
                )
                self.result["replaced"].append(said)
                self.result["changed"] = True
                self.module.warn(said)

    def check_fingerprints(self) -> None:
        """Each pinned key URL's keyring holds the pinned key, or goes (see `fingerprints`)."""
        for key_var, pin in sorted(self.params["fingerprints"].items()):
            wanted = normal_fingerprint(str((pin or {}).get("value") or ""))
            if not wanted:
                continue
            pin_var = str(pin.get("variable") or f"the pin of {key_var}")
            ring = str(self.params["keyrings"].get(key_var) or "")
            stem = _keyring_stem(ring)
            files = [Path(f"{stem}{suffix}") for suffix in (".asc", ".gpg")] if ring else []
            for path in [f for f in files if f.is_file()]:
                try:
                    found = openpgp_fingerprints(path.read_bytes())
                except (OSError, ValueError, IndexError) as exc:
                    found, why = [], f"unreadable as an OpenPGP key ({exc})"
                else:
                    why = f"holds {', '.join(found) or 'no key'}"
                if wanted in found:
                    continue
                url = self.params["sources"].get(key_var) or key_var
                if not self.module.check_mode:
                    path.unlink(missing_ok=True)
                self.fail(
                    f"The signing key fetched from {url} (set by {key_var}) into {path} {why}; "
                    f"{pin_var} pins {wanted}. The keyring was removed, so apt trusts nothing "
                    "signed by that key, and nothing from the repository was installed. Check "
                    f"that {key_var} is the repository owner's key URL; if the owner announced "
                    f"a new key, set {pin_var} to its fingerprint.",
                    fingerprints_found=found,
                    fingerprint_pinned=wanted,
                )

    def main(self) -> dict[str, Any]:
        self.result["stale_keys"] = []
        self.result["stale_records"] = []
        definitions = self.definitions()
        self.own_sources(definitions)
        moved = bool(self.result["replaced_sources"])
        # What is left once the other files moved (read again only then).
        self.result["source_definitions"] = (
            self.definitions() if moved and not self.module.check_mode else definitions
        )
        if moved and self.module.check_mode:
            self.result["update_reason"] = (
                "not refreshed: a replacement of another source file is pending (check mode)"
            )
            return self.result
        if self.params["repair"]:
            self.repair()
        self.check_fingerprints()
        self.refresh()
        self.check_packages()
        return self.result


def build_module() -> AnsibleModule:
    """Build the AnsibleModule (a factory so that unit tests can drive it)."""
    return AnsibleModule(
        argument_spec={
            "repair": {"type": "bool", "default": True},
            "update": {"type": "str", "default": "auto", "choices": ["auto", "always", "never"]},
            "valid_time": {"type": "int", "default": 3600},
            "packages": {"type": "list", "elements": "str", "default": []},
            "download": {"type": "bool", "default": False},
            "sources": {"type": "dict", "default": {}},
            "keyrings": {"type": "dict", "default": {}},
            "owned": {"type": "dict", "default": {}},
            "backup_dir": {"type": "path", "default": "/var/backups/gpuprov/apt-sources"},
            "fingerprints": {"type": "dict", "default": {}},
            "stale_keys": {"type": "str", "default": "fail", "choices": ["fail", "report"]},
            "lock_timeout": {"type": "int", "default": 300},
            "stamp": {"type": "path", "default": "/var/lib/gpuprov/apt-lists.json"},
            "state_dir": {"type": "path", "default": "/var/lib/gpuprov/state"},
        },
        supports_check_mode=True,
    )


def main() -> None:
    module = build_module()
    module.exit_json(**AptReady(module).main())


if __name__ == "__main__":
    main()
