#!/usr/bin/env python3
"""Speed of site.yml against the lab, as two ratios measured side by side in one run.

    scripts/bench_site.py [--lab NAME] [--keep]

(a) provisioning: wall time of the driver + docker + toolkit stack (validate.yml, plan.yml,
    sources.yml, driver.yml, docker.yml, toolkit.yml: site.yml without the PyTorch and later
    plays) on one fresh lab host, divided by the wall time of a plain shell script over
    SSH doing the same on another fresh host: the same files written, `apt-get update`,
    one `apt-get install` of the same packages, the same holds, a docker restart. The
    script's package list, held packages and files are read from the host Ansible just
    provisioned, so both sides do the same work. Goal: <= 1.3.
(b) scaling: no-op re-runs of the same plays on 1, 4 and 8 converged hosts, interleaved, two
    rounds (the faster of each). Goal: 8 hosts <= 2.0x 1 host. A no-op has no driver batches:
    driver.yml verifies every node at once and batches only the nodes whose driver changes.

It brings up its own lab (default name `bench`; Debian 12 hosts with a K40m, and the
toolkit packages from the lab's mirror container, a stand-in for NVIDIA's repository)
and removes it at the end unless --keep. Not part of the test suite. Exit codes: 0 both
goals met, 1 a goal missed, 2 usage or lab error.
"""

from __future__ import annotations

import argparse
import base64
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
LAB_PY = REPO / "scripts" / "lab.py"
# scripts/ is first on sys.path: Python puts this script's directory there.
from gpuprov_lab.inventory import ssh_argv  # noqa: E402
from gpuprov_lab.site import ansible_env  # noqa: E402

BIN = Path(sys.executable).parent
PLAYBOOKS = [
    f"playbooks/{name}.yml"
    for name in ("validate", "plan", "sources", "driver", "docker", "toolkit")
]
ANSIBLE_HOSTS = tuple(f"bench-a{i}" for i in range(1, 9))
FLEETS = (1, 4, 8)  # no-op re-runs on the first N hosts
SHELL_HOST = "bench-sh"
PROFILE = "k40m:bookworm"
GOAL_PROVISION = 1.3
GOAL_SCALING = 2.0

# Files the roles write (those not owned by a package are copied by the shell side).
WRITTEN_PATHS = (
    "/etc/apt/sources.list.d",
    "/etc/apt/keyrings",
    "/usr/share/keyrings",
    "/etc/apt/apt.conf.d/51gpuprov-nvidia-blacklist",
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/etc/ansible/facts.d",
    "/etc/docker/daemon.json",
)


class BenchError(Exception):
    pass


def run(argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)


class Lab:
    def __init__(self, name: str) -> None:
        self.name = name
        self.inventory = REPO / ".lab" / name / "hosts.yml"
        self.hostvars: dict[str, dict[str, Any]] = {}

    def up(self) -> None:
        spec = ",".join(f"{h}={PROFILE}" for h in (*ANSIBLE_HOSTS, SHELL_HOST))
        argv = [sys.executable, str(LAB_PY), "--lab", self.name]
        proc = run([*argv, "--inventory", str(self.inventory), "up", "--hosts", spec])
        if proc.returncode != 0:
            raise BenchError(f"lab.py up failed:\n{proc.stdout}{proc.stderr}")
        inv = yaml.safe_load(self.inventory.read_text(encoding="utf-8"))
        group = inv["all"]["children"]["lab"]
        lab_vars = dict(group.get("vars") or {})
        self.hostvars = {h: {**lab_vars, **(hv or {})} for h, hv in group["hosts"].items()}

    def down(self) -> None:
        run([sys.executable, str(LAB_PY), "--lab", self.name, "down"])

    def playbooks(self, limit: Sequence[str], *extra: str) -> float:
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), *PLAYBOOKS]
        argv += ["--limit", ",".join(limit), *extra]
        argv += ["-e", f"gpuprov_report_dir={REPO / '.lab' / self.name / 'reports'}"]
        start = time.monotonic()
        proc = run(argv, cwd=REPO, env=ansible_env(self.name))
        took = time.monotonic() - start
        if proc.returncode != 0:
            raise BenchError(f"{' '.join(argv)} failed:\n{proc.stdout[-4000:]}{proc.stderr}")
        return took

    def ssh(
        self, host: str, script: str, *, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = run(ssh_argv(self.hostvars[host], script), input=stdin, timeout=1800)
        if proc.returncode != 0:
            raise BenchError(f"ssh {host} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc


def shell_script(lab: Lab, reference: str, fresh: str) -> str:
    """A plain shell script that does on `fresh` what Ansible did on `reference`."""
    manual_ref = set(lab.ssh(reference, "apt-mark showmanual").stdout.split())
    manual_fresh = set(lab.ssh(fresh, "apt-mark showmanual").stdout.split())
    packages = sorted(manual_ref - manual_fresh)
    held = sorted(lab.ssh(reference, "apt-mark showhold").stdout.split())
    if not packages:
        raise BenchError(f"{reference}: no package installed by the playbooks?")
    listing = lab.ssh(
        reference,
        "for p in " + " ".join(WRITTEN_PATHS) + "; do [ -e $p ] && find $p -type f; done; true",
    ).stdout.split()
    files: dict[str, bytes] = {}
    for path in listing:
        if run_ok(lab, reference, f"dpkg -S {shlex.quote(path)} >/dev/null 2>&1"):
            continue  # shipped by a package: the install writes it
        content = lab.ssh(reference, f"base64 -w0 {shlex.quote(path)}").stdout
        files[path] = base64.b64decode(content)
    lines = ["set -eu", "export DEBIAN_FRONTEND=noninteractive LC_ALL=C"]
    for path, data in sorted(files.items()):
        encoded = base64.b64encode(data).decode()
        lines.append(f"mkdir -p {shlex.quote(str(Path(path).parent))}")
        lines.append(f"echo {encoded} | base64 -d > {shlex.quote(path)}")
    lines.append("apt-get update -q")
    lines.append(
        "apt-get install -y -q --no-install-recommends " + " ".join(map(shlex.quote, packages))
    )
    if held:
        lines.append("apt-mark hold " + " ".join(map(shlex.quote, held)) + " >/dev/null")
    lines.append("systemctl restart docker && docker info >/dev/null")
    return "\n".join(lines) + "\n"


def run_ok(lab: Lab, host: str, script: str) -> bool:
    try:
        lab.ssh(host, script)
    except BenchError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lab", default="bench", help="lab name (default bench)")
    parser.add_argument("--keep", action="store_true", help="leave the lab up")
    args = parser.parse_args(argv)
    lab = Lab(args.lab)
    try:
        lab.up()
        first = ANSIBLE_HOSTS[0]
        # (a) one fresh host with Ansible, then the same work by a shell script.
        t_ansible = lab.playbooks([first])
        script = shell_script(lab, first, SHELL_HOST)
        start = time.monotonic()
        lab.ssh(SHELL_HOST, "sh -s", stdin=script)
        t_shell = time.monotonic() - start
        # (b) converge the others, then no-op re-runs on 1, 4 and 8 hosts, interleaved.
        lab.playbooks(list(ANSIBLE_HOSTS[1:]))
        noop: dict[int, float] = {}
        for _ in range(2):
            for n in FLEETS:
                took = lab.playbooks(list(ANSIBLE_HOSTS[:n]))
                noop[n] = min(noop.get(n, took), took)
    except BenchError as exc:
        print(f"bench_site.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            lab.down()
    ratio_a = t_ansible / t_shell
    ratio_b = noop[8] / noop[1]
    print(f"(a) provision 1 fresh host: ansible {t_ansible:.1f}s / shell {t_shell:.1f}s", end="")
    print(f" = {ratio_a:.2f} (goal <= {GOAL_PROVISION})")
    for n in FLEETS[1:]:
        print(f"(b) no-op re-run: {n} hosts {noop[n]:.1f}s / 1 host {noop[1]:.1f}s", end="")
        print(f" = {noop[n] / noop[1]:.2f}" + (f" (goal <= {GOAL_SCALING})" if n == 8 else ""))
    return 0 if ratio_a <= GOAL_PROVISION and ratio_b <= GOAL_SCALING else 1


if __name__ == "__main__":
    sys.exit(main())
