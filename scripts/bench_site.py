#!/usr/bin/env python3
"""Speed of site.yml against the lab, as ratios measured side by side in one run.

    scripts/bench_site.py [--lab NAME] [--keep]

(a) provisioning: wall time of the whole site.yml on one fresh lab host (the K40m host's
    stack: driver userspace, Docker, toolkit, torch, JupyterLab, storage clients, smoke
    tests, launchers, monitoring, Flask/TorchServe/Triton) divided by the wall time of a
    plain shell script over SSH doing the same installs and writing the same files on
    another fresh host. Goal: <= 1.3. The script is generated from what the run left on its
    host (gpuprov_lab/raw_script.py): one `apt-get update`, one `apt-get install` of the
    packages it installed, the same holds, accounts, files, virtual environments (one `pip
    install` of each one's frozen set) and services. It verifies nothing: Ansible's smoke
    tests, readiness waits and reports are part of Ansible's time. The run's own task timings
    (the json callback) split its time into package installs, verification, every other task
    and the time outside any task, and the ratio without the verification is printed beside
    the goal's (for (b) too).
(b) the same for site.yml's driver, Docker and toolkit plays alone (validate.yml, plan.yml,
    sources.yml, driver.yml, docker.yml, toolkit.yml), on two more fresh hosts.
(c) scaling: no-op re-runs of (b)'s plays on 1, 4 and 8 converged hosts, interleaved, two
    rounds (the faster of each). Goal: 8 hosts <= 2.0x 1 host. A no-op has no driver batches:
    driver.yml verifies every node at once and batches only the nodes whose driver changes.
    Each run's CPU time is printed too: ansible-playbook's with its workers and ssh clients
    (not the ssh ControlPersist masters, which daemonize: the controller's figure is a lower
    bound), and the hosts' (their containers' cgroups), and what they need at least on this
    machine's cores, where the lab's hosts share the controller's CPUs (a fleet's hosts bring
    their own).
(d) the floor of (c) on this machine: the same ratios for a play of five `ping`s per host
    (scripts/bench_floor.yml), measured in the same rounds: the five host reads a verifying
    no-op of (c)'s plays makes (the GPU scan, the repository definitions, three state
    probes), each as the cheapest module run there is, and nothing else. No verifying no-op
    of those plays scales flatter here; a ratio of (c) near (d)'s is the machine's.

It brings up its own lab (default name `bench`; 11 Debian 12 hosts with a K40m, and the
toolkit packages from the lab's mirror container, a stand-in for NVIDIA's repository)
and removes it at the end unless --keep. Not part of the test suite. Exit codes: 0 both
goals met, 1 a goal missed, 2 usage or lab error.
"""

from __future__ import annotations

import argparse
import base64
import os
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml

REPO = Path(__file__).resolve().parent.parent
LAB_PY = REPO / "scripts" / "lab.py"
# scripts/ is first on sys.path: Python puts this script's directory there.
from gpuprov_lab import raw_script  # noqa: E402
from gpuprov_lab.engine import (  # noqa: E402
    connect_engine,
    container_cpu_seconds,
    detect_cgroup,
    lab_containers,
)
from gpuprov_lab.inventory import ssh_argv  # noqa: E402
from gpuprov_lab.run_doc import Share, json_document, time_by_kind  # noqa: E402
from gpuprov_lab.site import ansible_env  # noqa: E402

BIN = Path(sys.executable).parent
SITE = ["playbooks/site.yml"]
STACK = [
    f"playbooks/{name}.yml"
    for name in ("validate", "plan", "sources", "driver", "docker", "toolkit")
]
FLOOR = ["scripts/bench_floor.yml"]
SITE_HOST, SITE_SHELL_HOST = "bench-site", "bench-site-sh"
ANSIBLE_HOSTS = tuple(f"bench-a{i}" for i in range(1, 9))
FLEETS = (1, 4, 8)  # no-op re-runs on the first N hosts
SHELL_HOST = "bench-sh"
PROFILE = "k40m:bookworm"
GOAL_PROVISION = 1.3
GOAL_SCALING = 2.0

# Touched on the fresh hosts before the timed runs: what changed after it is what a run did.
MARKER = "/root/.gpuprov-bench-start"
SYSTEMCTL = "systemctl --no-legend --plain --no-pager"


class BenchError(Exception):
    pass


def run(argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)


class Run(NamedTuple):
    wall: float
    controller_cpu: float  # ansible-playbook, its workers and ssh clients
    hosts_cpu: float | None  # the hosts' containers (None: cgroups not readable)


def cpu_lines(runs: dict[int, Run], cores: int) -> list[str]:
    """What the no-op runs used, and the least wall time that much CPU needs on ``cores``."""
    lines = []
    for n, r in runs.items():
        hosts = f"{r.hosts_cpu:.1f}" if r.hosts_cpu is not None else "n/a"
        need = r.controller_cpu + (r.hosts_cpu or 0.0)
        lines.append(
            f"    {n} host{'s' if n > 1 else ''}: CPU controller {r.controller_cpu:.1f}s + hosts "
            f"{hosts}s = {need:.1f}s; on {cores} cores at least {need / cores:.1f}s "
            f"= {need / cores / runs[min(runs)].wall:.2f}x 1 host's wall time"
        )
    return lines


def time_lines(shares: dict[str, Share], t_ansible: float, t_shell: float) -> list[str]:
    """Where a provisioning run's Ansible time went, by kind of task
    (gpuprov_lab.run_doc.time_by_kind), and the ratio without the verification, which the
    shell script does not do."""
    words = {
        "install": "package installs (apt, pip)",
        "verify": "verification (verify phases, smoke tests, readiness waits)",
        "other": "every other task",
    }
    lines = [f"    where the {t_ansible:.1f}s went, by task:"]
    for kind, share in shares.items():
        each = share.seconds / share.tasks if share.tasks else 0.0
        lines.append(
            f"      {words[kind]}: {share.seconds:.1f}s in {share.tasks} tasks ({each:.2f}s each)"
        )
    timed = sum(share.seconds for share in shares.values())
    lines.append(
        f"      outside any task (start, between tasks, the end): {t_ansible - timed:.1f}s"
    )
    rest = t_ansible - shares["verify"].seconds
    lines.append(
        f"    without the verification: {rest:.1f}s / shell {t_shell:.1f}s = "
        f"{rest / t_shell:.2f} (the script verifies nothing)"
    )
    return lines


class Lab:
    def __init__(self, name: str) -> None:
        self.name = name
        self.inventory = REPO / ".lab" / name / "hosts.yml"
        self.hostvars: dict[str, dict[str, Any]] = {}
        self.container_ids: dict[str, str] = {}
        self.cgroup = 1

    def up(self) -> None:
        hosts = (SITE_HOST, SITE_SHELL_HOST, *ANSIBLE_HOSTS, SHELL_HOST)
        spec = ",".join(f"{h}={PROFILE}" for h in hosts)
        argv = [sys.executable, str(LAB_PY), "--lab", self.name]
        proc = run([*argv, "--inventory", str(self.inventory), "up", "--hosts", spec])
        if proc.returncode != 0:
            raise BenchError(f"lab.py up failed:\n{proc.stdout}{proc.stderr}")
        inv = yaml.safe_load(self.inventory.read_text(encoding="utf-8"))
        group = inv["all"]["children"]["lab"]
        lab_vars = dict(group.get("vars") or {})
        self.hostvars = {h: {**lab_vars, **(hv or {})} for h, hv in group["hosts"].items()}
        names = {str(doc.get("Name", "")).lstrip("/"): doc["Id"] for doc in self.containers()}
        self.container_ids = {
            h: names[f"{self.name}-{h}"] for h in hosts if f"{self.name}-{h}" in names
        }
        self.cgroup = detect_cgroup()

    def containers(self) -> list[dict[str, Any]]:
        return lab_containers(connect_engine(), self.name)

    def hosts_cpu(self, hosts: Sequence[str]) -> float | None:
        """CPU seconds the hosts' containers have used so far (None: not readable here)."""
        if any(h not in self.container_ids for h in hosts):
            return None  # an empty ID would name the parent cgroup: every container's CPU
        used = [container_cpu_seconds(self.container_ids[h], self.cgroup) for h in hosts]
        return None if any(u is None for u in used) else sum(u for u in used if u is not None)

    def measured(self, playbooks: Sequence[str], limit: Sequence[str]) -> Run:
        """A run of ``playbooks`` with its wall time and CPU time (controller, hosts)."""
        before_hosts = self.hosts_cpu(limit)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        took = self.playbooks(playbooks, limit)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        after_hosts = self.hosts_cpu(limit)
        controller = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        hosts = None
        if before_hosts is not None and after_hosts is not None:
            hosts = after_hosts - before_hosts
        return Run(took, controller, hosts)

    def down(self) -> None:
        run([sys.executable, str(LAB_PY), "--lab", self.name, "down"])

    def playbooks(self, playbooks: Sequence[str], limit: Sequence[str]) -> float:
        """The wall time of one run."""
        return self._run(playbooks, limit, {})[0]

    def provision(self, playbooks: Sequence[str], host: str) -> tuple[float, dict[str, Any]]:
        """The wall time of one run on ``host`` and its json callback document (the task
        timings time_lines reports)."""
        took, proc = self._run(
            playbooks, [host], {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
        )
        doc = json_document(proc.stdout)
        if doc is None:
            raise BenchError(f"{' '.join(playbooks)}: no json callback document in its output")
        return took, doc

    def _run(
        self, playbooks: Sequence[str], limit: Sequence[str], env: dict[str, str]
    ) -> tuple[float, subprocess.CompletedProcess[str]]:
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), *playbooks]
        argv += ["--limit", ",".join(limit)]
        argv += ["-e", f"gpuprov_report_dir={REPO / '.lab' / self.name / 'reports'}"]
        start = time.monotonic()
        proc = run(argv, cwd=REPO, env={**ansible_env(self.name), **env})
        took = time.monotonic() - start
        if proc.returncode != 0:
            raise BenchError(f"{' '.join(argv)} failed:\n{proc.stdout[-4000:]}{proc.stderr}")
        return took, proc

    def ssh(
        self, host: str, script: str, *, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = run(ssh_argv(self.hostvars[host], script), input=stdin, timeout=1800)
        if proc.returncode != 0:
            raise BenchError(f"ssh {host} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc


def shell_script(lab: Lab, reference: str, fresh: str) -> str:
    """A plain shell script that does on `fresh` what Ansible did on `reference`.

    Both hosts were touched at MARKER before the run; `fresh` is still untouched by it.
    """
    found = lab.ssh(reference, raw_script.find_argv(MARKER)).stdout
    owned = raw_script.dpkg_paths(lab.ssh(reference, "cat /var/lib/dpkg/info/*.list").stdout)
    venv_paths = raw_script.venv_roots(found)
    modified = raw_script.modified_package_files(lab.ssh(reference, "dpkg --verify || true").stdout)
    before, after = raw_script.split_before_apt(
        raw_script.changed_paths(found, owned, venv_paths, modified)
    )
    changes = raw_script.HostChanges(files_before_apt=before, files=after)
    both = (reference, fresh)
    manual = [lab.ssh(h, "apt-mark showmanual").stdout for h in both]
    packages = raw_script.package_diff(*manual)
    if not packages:
        raise BenchError(f"{reference}: no package installed by the playbooks?")
    query = "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(map(shlex.quote, packages))
    changes.packages = raw_script.with_versions(packages, lab.ssh(reference, query).stdout)
    changes.held = sorted(lab.ssh(reference, "apt-mark showhold").stdout.split())
    passwd = [lab.ssh(h, "getent passwd").stdout for h in both]
    group = [lab.ssh(h, "getent group").stdout for h in both]
    changes.groups, changes.users, changes.memberships = raw_script.account_diff(*passwd, *group)
    enabled = [lab.ssh(h, f"{SYSTEMCTL} list-unit-files --state=enabled").stdout for h in both]
    active = [lab.ssh(h, f"{SYSTEMCTL} list-units --state=active").stdout for h in both]
    changes.enable, changes.restart = raw_script.unit_diff(*enabled, *active)
    for path in venv_paths:
        q = shlex.quote(path)
        changes.venvs.append(
            raw_script.parse_venv(
                path,
                lab.ssh(reference, f"cat {q}/pyvenv.cfg").stdout,
                lab.ssh(reference, f"{q}/bin/python -m pip freeze --all --local").stdout,
                lab.ssh(reference, f"stat -c %U:%G {q}").stdout.strip(),
            )
        )
    wheelhouse = lab.hostvars[fresh].get("lab_wheelhouse")
    # The copies name the other host: its address (services bind to it) and its name.
    replace = {reference: fresh}
    for key in ("lab_address", "lab_hostname"):
        replace[lab.hostvars[reference][key]] = lab.hostvars[fresh][key]
    return raw_script.build_script(
        changes,
        tar_before_apt=tar_of(lab, reference, before, replace),
        tar_files=tar_of(lab, reference, after, replace),
        pip_env={"PIP_FIND_LINKS": wheelhouse} if wheelhouse else {},
    )


def time_script(lab: Lab, host: str, script: str) -> float:
    """Seconds the script took over SSH; it must reach its last line."""
    start = time.monotonic()
    out = lab.ssh(host, "sh -s", stdin=script).stdout
    took = time.monotonic() - start
    if raw_script.DONE not in out:
        raise BenchError(f"{host}: the shell script stopped early:\n{out[-2000:]}")
    return took


def tar_of(lab: Lab, host: str, paths: Sequence[str], replace: dict[str, str]) -> bytes | None:
    """A gzipped tar of `paths` on `host` (directories without their content), retargeted."""
    if not paths:
        return None
    listing = "".join(p.lstrip("/") + "\n" for p in paths)
    out = lab.ssh(host, "tar -czf - --no-recursion -C / -T - | base64 -w0", stdin=listing)
    return raw_script.retarget(base64.b64decode(out.stdout), replace)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lab", default="bench", help="lab name (default bench)")
    parser.add_argument("--keep", action="store_true", help="leave the lab up")
    args = parser.parse_args(argv)
    lab = Lab(args.lab)
    try:
        lab.up()
        # (a) site.yml, then (b) its driver/Docker/toolkit plays, on one fresh host each;
        # the same work by a shell script on another fresh host.
        # what -> Ansible's time, the script's, where Ansible's went
        provision: dict[str, tuple[float, float, dict[str, Share]]] = {}
        for what, playbooks, host, shell_host in (
            ("site.yml", SITE, SITE_HOST, SITE_SHELL_HOST),
            ("driver + docker + toolkit", STACK, ANSIBLE_HOSTS[0], SHELL_HOST),
        ):
            for h in (host, shell_host):
                lab.ssh(h, f"touch {MARKER}")
            t_ansible, doc = lab.provision(playbooks, host)
            script = shell_script(lab, host, shell_host)
            t_shell = time_script(lab, shell_host, script)
            provision[what] = (t_ansible, t_shell, time_by_kind(doc))
        # (c) converge the others, then no-op re-runs on 1, 4 and 8 hosts, interleaved.
        lab.playbooks(STACK, list(ANSIBLE_HOSTS[1:]))
        # (d) the floor: five pings per host (bench_floor.yml), in the same rounds.
        noop: dict[int, Run] = {}
        floor: dict[int, Run] = {}
        for _ in range(2):
            for n in FLEETS:
                for runs, playbooks in ((noop, STACK), (floor, FLOOR)):
                    got = lab.measured(playbooks, list(ANSIBLE_HOSTS[:n]))
                    if n not in runs or got.wall < runs[n].wall:
                        runs[n] = got
    except BenchError as exc:
        print(f"bench_site.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            lab.down()
    for (what, (t_ansible, t_shell, shares)), label in zip(provision.items(), "ab", strict=True):
        print(f"({label}) provision 1 fresh host, {what}: ansible {t_ansible:.1f}s", end="")
        goal = f" (goal <= {GOAL_PROVISION})" if what == "site.yml" else ""
        print(f" / shell {t_shell:.1f}s = {t_ansible / t_shell:.2f}{goal}")
        print("\n".join(time_lines(shares, t_ansible, t_shell)))
    cores = os.cpu_count() or 1
    for label, what, runs in (("c", "no-op re-run", noop), ("d", "five pings per host", floor)):
        for n in FLEETS[1:]:
            print(
                f"({label}) {what}: {n} hosts {runs[n].wall:.1f}s / 1 host {runs[1].wall:.1f}s",
                end="",
            )
            ratio = runs[n].wall / runs[1].wall
            goal = f" (goal <= {GOAL_SCALING})" if n == 8 and runs is noop else ""
            print(f" = {ratio:.2f}{goal}")
        print("\n".join(cpu_lines(runs, cores)))
    print(
        "    (d) is the least a verifying no-op of (c)'s plays gets on this machine's"
        f" {cores} cores, which the lab's hosts share with the controller"
    )
    t_ansible, t_shell, _ = provision["site.yml"]
    met = t_ansible / t_shell <= GOAL_PROVISION and noop[8].wall / noop[1].wall <= GOAL_SCALING
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
