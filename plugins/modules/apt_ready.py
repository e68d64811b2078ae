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
  lock_timeout:
    description: Seconds to wait for a dpkg or apt lock held by another process.
    type: int
    default: 300
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
"""

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DPKG_UPDATES = "/var/lib/dpkg/updates"
APT_LISTS = "/var/lib/apt/lists"
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
    the `Err:N BASE SUITE` lines and their indented reason line are used.
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
            final.setdefault(url, (match.group("rest") or "").strip())
        else:
            nxt = _REASON_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
            progress.setdefault(url, nxt.group("reason").strip() if nxt else "")
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
# the module


class AptReady:
    def __init__(self, module: AnsibleModule, run: Runner | None = None) -> None:
        self.module = module
        self.params = module.params
        self.run = run or self._run
        self.dpkg_updates = DPKG_UPDATES
        self.apt_lists = APT_LISTS
        self.source_globs = SOURCE_GLOBS
        self.result: dict[str, Any] = {
            "changed": False,
            "repaired": False,
            "repair": [],
            "held": [],
            "updated": False,
            "update_reason": "",
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

    def update(self, reason: str) -> None:
        stamp = Path(self.params["stamp"])
        # Until this update succeeds the lists are not fresh, whatever happens next.
        with contextlib.suppress(FileNotFoundError):
            stamp.unlink()
        rc, out, err = self.run_locked(
            ["apt-get", "update", "-o", "APT::Update::Error-Mode=any", "-o", "Acquire::Retries=1"]
        )
        errors = fetch_errors(out + "\n" + err)
        if rc != 0 or errors:
            lines = [explain_fetch(u, r, self.params["sources"]) for u, r in errors]
            detail = (
                " ".join(lines) if lines else (err.strip().splitlines() or ["no reason given"])[-1]
            )
            self.fail(
                f"apt-get update failed ({reason}): {detail} "
                "The package lists are not marked fresh, so the next run updates them again.",
                stdout=out,
                stderr=err,
                fetch_errors=[{"url": u, "reason": r} for u, r in errors],
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
        _, out, _ = self.run(["apt-cache", "policy", *names])
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
                errors = fetch_errors(out + "\n" + err)
                if space:
                    detail = (
                        f"{space} Free space there (or point apt's cache elsewhere) and "
                        "re-run; nothing was installed."
                    )
                elif errors:
                    detail = " ".join(
                        explain_fetch(u, r, self.params["sources"]) for u, r in errors
                    )
                    detail += " Nothing was installed."
                else:
                    detail = (err.strip().splitlines() or ["no reason given"])[-1]
                self.fail(
                    f"Downloading {', '.join(specs)} failed: {detail}", stdout=out, stderr=err
                )

    def main(self) -> dict[str, Any]:
        if self.params["repair"]:
            self.repair()
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
            "lock_timeout": {"type": "int", "default": 300},
            "stamp": {"type": "path", "default": "/var/lib/gpuprov/apt-lists.json"},
        },
        supports_check_mode=True,
    )


def main() -> None:
    module = build_module()
    module.exit_json(**AptReady(module).main())


if __name__ == "__main__":
    main()
