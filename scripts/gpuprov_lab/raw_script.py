"""The plain shell script that redoes on a fresh host what a site.yml run did on another.

`scripts/bench_site.py` times `site.yml` on one fresh lab host against this script on a
second fresh host: raw install time, with none of Ansible's per-task cost. The script is
generated from what the run left on its host, read back over SSH as plain listings (the
functions here are pure; bench_site.py does the reading):

- packages: `apt-mark showmanual` of the provisioned host less the fresh one's, one
  `apt-get update` and one `apt-get install`, then the same `apt-mark hold`s;
- accounts: users and groups the provisioned host has and the fresh one lacks (created
  after the install, unless a package made them), and their added group memberships;
- files: every file, link and directory changed since the run began (`find -cnewer`) that
  no package owns and that is not inside a virtual environment's installed tree, shipped
  in the script as a tar; apt's sources and keys before the install, the rest after;
- virtual environments: `python3 -m venv` and one `pip install` of the environment's
  `pip freeze --all`;
- services: the units enabled or active on the provisioned host and not on the fresh
  one, enabled and (re)started after everything is written.

Verification (smoke tests, health checks, reports) is Ansible's alone: the script only
installs and writes, as the issue's goal asks ("does the same installs and writes the
same files").
"""

from __future__ import annotations

import base64
import io
import re
import shlex
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import PurePosixPath

# Trees find(1) does not enter: kernel and runtime state, caches, logs, the package
# managers' and systemd's own state, container storage, Ansible's and pip's scratch.
PRUNED = (
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/tmp",  # noqa: S108 (pruned from the listing, never written)
    "/var/tmp",  # noqa: S108
    "/var/cache",
    "/var/log",
    "/var/lib/apt",
    "/var/lib/dpkg",
    "/var/lib/systemd",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/ucf",
    "/root/.ansible",
    "/root/.cache",
)
# Top-level directories that are links into /usr on a merged-/usr system.
MERGED_USR = ("/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/")
# Account databases (the script runs useradd/groupadd instead) and their backups.
ACCOUNT_FILES = frozenset(
    f"/etc/{name}{suffix}"
    for name in ("passwd", "group", "shadow", "gshadow", "subuid", "subgid")
    for suffix in ("", "-")
)
# Written before `apt-get update`: where apt reads sources, keys and pins.
BEFORE_APT = ("/etc/apt/", "/usr/share/keyrings/")
# What `python3 -m venv` and pip create inside an environment.
VENV_TREE = ("bin", "include", "lib", "lib64", "share", "pyvenv.cfg")
# Unit files systemd itself writes when units are enabled.
UNIT_LINK_DIRS = (".wants", ".requires")


@dataclass(frozen=True)
class Venv:
    path: str
    system_site_packages: bool
    requirements: tuple[str, ...]
    owner: str = "root:root"


@dataclass(frozen=True)
class Account:
    """A line of getent passwd (user) or getent group (group)."""

    name: str
    system: bool
    home: str = ""
    shell: str = ""
    group: str = ""


@dataclass
class HostChanges:
    packages: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    groups: list[Account] = field(default_factory=list)
    users: list[Account] = field(default_factory=list)
    memberships: dict[str, list[str]] = field(default_factory=dict)  # user -> groups
    files_before_apt: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    venvs: list[Venv] = field(default_factory=list)
    enable: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)


def find_argv(marker: str) -> str:
    """The find(1) command that lists what changed since `marker` was touched."""
    prune = " -o ".join(f"-path {shlex.quote(p)}" for p in PRUNED)
    return (
        f"find / -xdev \\( {prune} \\) -prune -o -cnewer {shlex.quote(marker)} "
        "\\( -type f -o -type l -o -type d \\) -printf '%y %p\\n'"
    )


def package_diff(manual_ref: str, manual_fresh: str) -> list[str]:
    """Packages marked manual on the provisioned host and not on the fresh one."""
    return sorted(set(manual_ref.split()) - set(manual_fresh.split()))


def with_versions(packages: Sequence[str], query: str) -> list[str]:
    """`name=version` for each package, from `dpkg-query -W -f '${Package} ${Version}\\n'`
    (a role's pin may be older than the candidate apt would pick)."""
    versions = dict(line.split(" ", 1) for line in query.splitlines() if " " in line)
    missing = [p for p in packages if p not in versions]
    if missing:
        raise ValueError(f"no installed version of {', '.join(missing)}")
    return [f"{p}={versions[p]}" for p in packages]


def dpkg_paths(lists: str) -> set[str]:
    """Paths packages own, from the concatenated /var/lib/dpkg/info/*.list files.

    With merged /usr (Debian 12 and later) a package's /lib/x is also /usr/lib/x, the path
    find(1) reports.
    """
    owned = {line for line in lists.splitlines() if line.startswith("/")}
    return owned | {"/usr" + p for p in owned if p.startswith(MERGED_USR)}


def venv_roots(found: str) -> list[str]:
    """Virtual environments among changed paths (directories with a new pyvenv.cfg)."""
    roots = []
    for line in found.splitlines():
        kind, _, path = line.partition(" ")
        if kind == "f" and path.endswith("/pyvenv.cfg"):
            roots.append(path.removesuffix("/pyvenv.cfg"))
    return sorted(roots)


def modified_package_files(verify: str) -> set[str]:
    """Package files whose content differs from the package's, from `dpkg --verify` lines:
    nine check characters, a space, `c` for a conffile or a space, a space, the path
    (`??5?????? c /etc/x`: the third character 5 is a failed digest check)."""
    found = set()
    for line in verify.splitlines():
        flags, path = line[:9], line[12:]
        if len(flags) == 9 and flags[2] == "5" and line[9] == " " and path.startswith("/"):
            found.add(path)
    return found


def changed_paths(
    found: str, owned: set[str], venvs: Sequence[str], modified: AbstractSet[str] = frozenset()
) -> list[str]:
    """Paths the run wrote: changed, owned by no package or edited after the install (a
    conffile a role rewrote: `modified`), outside venvs' installed trees."""
    inside = tuple(f"{v}/{part}" for v in venvs for part in VENV_TREE)
    kept = []
    for line in found.splitlines():
        kind, _, path = line.partition(" ")
        if not path or path == "/" or path in ACCOUNT_FILES:
            continue
        if path in owned and path not in modified:
            continue
        if any(path == p or path.startswith(p + "/") for p in inside):
            continue
        parent = PurePosixPath(path).parent.name
        if kind == "l" and parent.endswith(UNIT_LINK_DIRS):
            continue  # `systemctl enable` makes these
        if "__pycache__" in PurePosixPath(path).parts or "/.cache/" in path:
            continue
        kept.append(path)
    return sorted(kept)


def split_before_apt(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    before: list[str] = []
    after: list[str] = []
    for path in paths:
        (before if path.startswith(BEFORE_APT) else after).append(path)
    return before, after


def parse_venv(path: str, pyvenv_cfg: str, freeze: str, owner: str) -> Venv:
    system = False
    for line in pyvenv_cfg.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "include-system-site-packages":
            system = value.strip().lower() == "true"
    requirements = tuple(
        r.strip()
        for r in freeze.splitlines()
        if r.strip() and not r.lstrip().startswith(("#", "-"))
    )
    return Venv(path, system, requirements, owner)


def _getent(text: str) -> dict[str, list[str]]:
    return {f[0]: f for f in (line.split(":") for line in text.splitlines()) if len(f) >= 4}


def account_diff(
    passwd_ref: str, passwd_fresh: str, group_ref: str, group_fresh: str
) -> tuple[list[Account], list[Account], dict[str, list[str]]]:
    """(groups, users, user -> added supplementary groups) the fresh host lacks.

    Members a group gained are listed whether or not the fresh host has the group yet
    (a package may make it during the install, as docker.io makes `docker`).
    """
    users_ref, users_fresh = _getent(passwd_ref), _getent(passwd_fresh)
    groups_ref, groups_fresh = _getent(group_ref), _getent(group_fresh)
    gid_names = {int(f[2]): name for name, f in groups_ref.items()}
    groups = [
        Account(name, system=int(f[2]) < 1000)
        for name, f in sorted(groups_ref.items())
        if name not in groups_fresh
    ]
    users = []
    for name, f in sorted(users_ref.items()):
        if name in users_fresh or len(f) < 7:
            continue
        users.append(
            Account(name, int(f[2]) < 1000, home=f[5], shell=f[6], group=gid_names[int(f[3])])
        )
    memberships: dict[str, list[str]] = {}
    for gname, f in sorted(groups_ref.items()):
        before = set(groups_fresh[gname][3].split(",")) if gname in groups_fresh else set()
        for member in f[3].split(","):
            if member and member not in before:
                memberships.setdefault(member, []).append(gname)
    return groups, users, memberships


def unit_diff(
    enabled_ref: str, enabled_fresh: str, active_ref: str, active_fresh: str
) -> tuple[list[str], list[str]]:
    """(units to enable, units to restart): enabled or active there and not here.

    Inputs are `systemctl list-unit-files --state=enabled` and `systemctl list-units
    --state=active`, both with `--no-legend --plain`: the unit is each line's first word.
    """

    def names(text: str) -> set[str]:
        return {line.split()[0] for line in text.splitlines() if line.split()}

    enable = sorted(names(enabled_ref) - names(enabled_fresh))
    restart = sorted(
        u
        for u in names(active_ref) - names(active_fresh)
        if u.endswith((".service", ".socket", ".timer"))
    )
    return enable, restart


def retarget(tar_gz: bytes, replace: Mapping[str, str]) -> bytes:
    """The tar with each text file's host-specific strings (address, name) replaced.

    Files copied from the provisioned host name it: a service bound to its address would
    not start on the other host. Binary files pass unchanged.
    """
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(tar_gz), mode="r:gz") as src,
        tarfile.open(fileobj=out, mode="w:gz") as dst,
    ):
        for member in src.getmembers():
            handle = src.extractfile(member) if member.isfile() else None
            if handle is None:
                dst.addfile(member)
                continue
            data = handle.read()
            try:
                text = data.decode()
            except UnicodeDecodeError:
                pass
            else:
                for old, new in replace.items():
                    # whole names only: 10.0.0.4 is not in 10.0.0.40, nor lab-a1 in lab-a10
                    text = re.sub(rf"(?<![\w.-]){re.escape(old)}(?![\w-]|\.\d)", new, text)
                data = text.encode()
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out.getvalue()


# The script's last line prints this: the caller checks it (a step that read the script's
# stdin would end it early, and sh would still exit 0).
DONE = "gpuprov-raw-script: done"
TAR_FILE = "/root/.gpuprov-raw-files.tgz"


def _tar_lines(tar_gz: bytes) -> list[str]:
    encoded = base64.b64encode(tar_gz).decode()
    return [
        f"echo {encoded} | base64 -d > {TAR_FILE}",  # the pipeline's status is base64's
        f"tar -xzpf {TAR_FILE} -C / && rm -f {TAR_FILE}",
    ]


def build_script(
    changes: HostChanges,
    *,
    tar_before_apt: bytes | None,
    tar_files: bytes | None,
    pip_env: Mapping[str, str],
) -> str:
    """The shell script; the tars hold `files_before_apt` and `files` (gzip, paths from /)."""
    q = shlex.quote
    lines = ["set -eu", "export DEBIAN_FRONTEND=noninteractive LC_ALL=C"]
    if tar_before_apt:
        lines += _tar_lines(tar_before_apt)
    if changes.packages:
        lines.append("apt-get update -q")
        lines.append(
            "apt-get install -y -q --no-install-recommends " + " ".join(map(q, changes.packages))
        )
    if changes.held:
        lines.append("apt-mark hold " + " ".join(map(q, changes.held)) + " >/dev/null")
    for g in changes.groups:
        opt = "--system " if g.system else ""
        lines.append(f"getent group {q(g.name)} >/dev/null || groupadd {opt}{q(g.name)}")
    for u in changes.users:
        opt = "--system " if u.system else ""
        lines.append(
            f"id -u {q(u.name)} >/dev/null 2>&1 || useradd {opt}-M -d {q(u.home)} "
            f"-s {q(u.shell)} -g {q(u.group)} {q(u.name)}"
        )
    for user, groups in sorted(changes.memberships.items()):
        lines.append(f"usermod -a -G {q(','.join(groups))} {q(user)}")
    if tar_files:
        lines += _tar_lines(tar_files)
    env = " ".join(f"{k}={q(v)}" for k, v in sorted(pip_env.items()))
    for v in changes.venvs:
        opt = "--system-site-packages " if v.system_site_packages else ""
        lines.append(f"python3 -m venv {opt}{q(v.path)}")
        pins = " ".join(map(q, v.requirements))
        lines.append(f"{env + ' ' if env else ''}{q(v.path)}/bin/pip install -q {pins}")
        if v.owner != "root:root":
            lines.append(f"chown -R {q(v.owner)} {q(v.path)}")
    if changes.enable or changes.restart:
        lines.append("systemctl daemon-reload")
    if changes.enable:
        lines.append("systemctl enable -q " + " ".join(map(q, changes.enable)))
    if changes.restart:
        lines.append("systemctl restart " + " ".join(map(q, changes.restart)))
    lines.append(f"echo {q(DONE)}")
    return "\n".join(lines) + "\n"
