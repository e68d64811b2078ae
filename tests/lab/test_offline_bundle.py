"""The offline bundle on the lab (issue 23 item 1; docs/bundle.md): what a converged lab host
installed is collected and downloaded once; a cache host serves it (roles/gpuprov_bundle); a
fresh host on a lab network with no route out converges `site.yml` from it alone.

Runs after test_site.py has converged the lab. Real: the collect playbook on the staging host,
the downloads from Debian's archive, PyPI, the lab's wheelhouse and the lab's stand-in toolkit
repository, the signed repository checked by apt, pip installing from the bundle's index, the
whole of site.yml on the offline host. The offline network is a Docker `--internal` network:
no gateway, no route out, no name but its members'. On it: the cache host, the offline host
(both fresh containers of the lab's image, reached by the controller over that network), and
the lab's S3 server (the storage role's endpoint; connected for this test)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bundle
import pytest
import yaml
from conftest import REPO, Lab
from fault_streams import mirror_lock
from gpuprov_lab import hosts as lab_hosts
from gpuprov_lab import s3lab
from gpuprov_lab.engine import Docker, connect_engine, detect_cgroup, wait_ready
from gpuprov_lab.profiles import HostSpec, load_lab_data
from playbook_output import recap

# Below 1024: the unprivileged service binds it with the one capability its unit grants. A
# Docker container lets anyone bind any port (net.ipv4.ip_unprivileged_port_start=0); the cache
# host gets a real host's 1024 back first (PRIVILEGED_PORTS).
PORT = 847
PRIVILEGED_PORTS = (
    "mount -o remount,bind,rw /proc/sys"  # bind: this mount only (not /proc's superblock)
    " && echo 1024 > /proc/sys/net/ipv4/ip_unprivileged_port_start"
    " && mount -o remount,bind,ro /proc/sys"
)
# pip settings someone else wrote on the offline host: kept (the trusted host beside the
# bundle's).
FOREIGN_PIP_CONF = "[global]\ntimeout = 60\ntrusted-host = pypi-mirror.example\n"
# What a host reaches outside: each must fail on the offline host.
NO_ROUTE = r"""
import socket
for target in [("1.1.1.1", 80), ("deb.debian.org", 80), ("pypi.org", 443)]:
    try:
        socket.create_connection(target, timeout=3).close()
        print("REACHED", target)
    except OSError as exc:
        print("unreachable", target, exc)
"""


# The offline host's steps run in the background; the test that waits for them gives up after
# this long (its converge takes 4-8 minutes on the 2-core development machine).
JOIN_TIMEOUT = 3600
DPKG = "dpkg-query -W -f '${db:Status-Abbrev}\\t${binary:Package}=${Version}\\n'"
FREEZE = "/opt/gpuprov/venv/bin/pip list --format=freeze"


@dataclasses.dataclass(frozen=True)
class Staged:
    """What the staging host had installed when its bundle was built."""

    debs: set[str]
    freeze: list[str]


def _freeze(lab: Lab, host: str) -> list[str]:
    """The main environment's packages, name==version, sorted."""
    return sorted(lab.ssh(host, FREEZE).stdout.split())


def _installed(dpkg_lines: str) -> set[str]:
    """name=version of installed packages (status letter `i`: ii, and hi when held)."""
    found = set()
    for line in dpkg_lines.splitlines():
        status, _, spec = line.partition("\t")
        if status[1:2] == "i":
            found.add(spec.replace(":amd64", ""))
    return found


def _said(output: str) -> str:
    """Ansible's output as one line of text (the YAML result format may fold a message, and
    doubles an apostrophe in a single-quoted one)."""
    return " ".join(output.replace("''", "'").split())


@dataclasses.dataclass
class OfflineNet:
    docker: Docker
    lab: Lab
    name: str
    tmp: Path
    containers: list[str] = dataclasses.field(default_factory=list)
    connected: list[str] = dataclasses.field(default_factory=list)

    def address(self, container: str) -> str:
        nets = self.docker.inspect(container)["NetworkSettings"]["Networks"]
        return str(nets[self.name]["IPAddress"])

    def connect(self, container: str) -> str:
        self.docker.run(["network", "connect", self.name, container])
        self.connected.append(container)
        return self.address(container)

    def host(self, name: str, profile: str, image: str) -> dict[str, Any]:
        """A fresh lab host on this network only: the lab's run arguments, its network
        swapped and its published port dropped (an internal network publishes none)."""
        spec = HostSpec(name, profile, "bookworm")
        argv = lab_hosts.docker_run_args(self.lab.name, spec, image, 0, detect_cgroup())
        at = argv.index("--publish")
        del argv[at : at + 2]
        argv[argv.index("--network") + 1] = self.name
        container = lab_hosts.container_name(self.lab.name, name)
        self.docker.run(["rm", "-f", container], check=False)
        # A new machine: facts an earlier run cached under this name are not its own.
        lab_hosts.forget_cached_facts(self.lab.name, name)
        self.docker.run(argv)
        self.containers.append(container)
        wait_ready(self.docker, container)
        data = load_lab_data()
        key = Path(str(next(iter(self.lab.hosts.values()))["ansible_ssh_private_key_file"]))
        pubkey = Path(f"{key}.pub").read_text()
        # The lab's SSH key and simulated PCI tree; no CA bundle, no wheelhouse.
        lab_hosts.provision(self.docker, container, data.profiles[profile], pubkey, None, None)
        address = self.address(container)
        hostkey = self.docker.out(["exec", container, "cat", "/etc/ssh/ssh_host_ed25519_key.pub"])
        known = self.tmp / f"known_hosts.{name}"
        known.write_text(f"{address} {' '.join(hostkey.split()[:2])}\n")
        return {
            "ansible_host": address,
            "ansible_port": 22,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
            "lab_container": container,
            "lab_address": address,
        }

    def close(self) -> None:
        for container in self.containers:
            self.docker.run(["rm", "-f", "--volumes", container], check=False)
            volume = container + "-docker"
            self.docker.run(["volume", "rm", "-f", volume], check=False)
        for container in self.connected:
            self.docker.run(["network", "disconnect", "-f", self.name, container], check=False)
        self.docker.run(["network", "rm", self.name], check=False)


@dataclasses.dataclass
class Background:
    """The bundle's build and the offline host's part of this test (steps 2-6), run in a
    thread beside the modules that follow, the fault suite included (conftest.JOINS): the
    build mostly waits on the network, and one host's converge keeps about one of the
    machine's two cores busy, where the lab's other modules leave about a fifth idle.
    `notes`: what it printed."""

    thread: threading.Thread
    notes: list[str] = dataclasses.field(default_factory=list)
    error: BaseException | None = None


@pytest.fixture(scope="session")
def offline_run(lab: Lab) -> Iterator[dict[str, Background]]:
    """Where the first test leaves its background run for the second; at the session's end
    (before the lab goes down) a run nobody waited for is waited for."""
    runs: dict[str, Background] = {}
    yield runs
    for background in runs.values():
        background.thread.join(timeout=JOIN_TIMEOUT)


def _offline_net(docker: Docker, lab: Lab, tmp: Path) -> OfflineNet:
    name = f"{lab.name}-offline"
    docker.run(["network", "rm", name], check=False)
    label = f"{lab_hosts.LABEL}={lab.name}"
    docker.run(["network", "create", "--internal", "--label", label, name])
    return OfflineNet(docker, lab, name, tmp)


def _staging_host(lab: Lab) -> str:
    staging_hosts = [
        h
        for h, v in lab.hosts.items()
        if v.get("lab_release", "bookworm") == "bookworm" and h in lab.groups.get("gpu_k40m", [])
    ]
    if not staging_hosts:
        pytest.skip("needs a Debian 12 K40m node")
    return staging_hosts[0]


def test_a_converged_hosts_bundle_is_built_and_an_offline_host_starts_from_it(
    lab: Lab, offline_run: dict[str, Background], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Collects what the converged staging host installed (here: the modules after this one
    change that host) and starts the rest in the background: the bundle's build (downloads,
    mostly waiting on the network), then the offline host (steps 2-6)."""
    staging = _staging_host(lab)
    tmp_path = tmp_path_factory.mktemp("offline")

    # 1. Collect what the converged staging host installed.
    out = tmp_path / "out"
    lab.ansible_playbook(
        "playbooks/bundle.yml", "--limit", staging, "-e", f"gpuprov_report_dir={out}", check=True
    )
    # The fleet to provision (collect --fleet): planned by plan.yml; the build checks that a
    # staging host ran each of its plans (for its release).
    lab.ansible_playbook(
        "playbooks/plan.yml",
        "--limit",
        staging,
        "-e",
        f"gpuprov_report_dir={out / 'fleet'}",
        check=True,
    )
    # What the staging host has now: the offline host must end with the same (the modules
    # that run beside it may change the staging host meanwhile).
    staged = Staged(_installed(lab.ssh(staging, DPKG).stdout), _freeze(lab, staging))
    docker = connect_engine()
    image = docker.out(
        [
            "inspect",
            "-f",
            '{{index .Config.Labels "gpuprov.image"}}',
            str(lab.hosts[staging]["lab_container"]),
        ]
    )

    # The build and 2-6 in the background (Background), beside the modules up to
    # test_lab_ops.py: its own environment (a test's monkeypatch must not reach its runs) and
    # report directory.
    background_lab = dataclasses.replace(
        lab, base_env=dict(os.environ), run_label="test: offline host (background)"
    )
    net = _offline_net(docker, lab, tmp_path)
    notes: list[str] = []

    def run() -> None:
        try:
            _build(lab, staging, out, notes)
            _offline_host(background_lab, net, staging, image, out, staged, tmp_path, notes)
        except BaseException as exc:  # handed to the test that waits (re-raised there)
            offline_run["run"].error = exc
        finally:
            net.close()

    offline_run["run"] = Background(threading.Thread(target=run, daemon=True), notes)
    offline_run["run"].thread.start()


def _build(lab: Lab, staging: str, out: Path, notes: list[str]) -> None:
    """The bundle built from the collected lists (twice: the second downloads nothing), with
    the lab's mirror held shared: the fault suite's cases that change it wait."""
    with mirror_lock(lab.state_dir, exclusive=False):
        manifest = bundle.build(out)
        again = bundle.build(out)
    assert manifest["fleet"] == {staging: next(iter(manifest["plans"]))}, manifest["plans"]
    notes.append(
        f"bundle of {staging}: {manifest['debs']} packages, {manifest['wheels']} wheels, "
        f"{manifest['bytes'] / 1e6:.0f} MB, fetched {manifest['fetched_bytes'] / 1e6:.0f} MB "
        f"in {manifest['build_seconds']} s; plans {json.dumps(manifest['plans'])}"
    )
    assert manifest["not_downloadable"] == {}
    assert again["fetched_bytes"] == 0, "a second build downloads nothing"
    subprocess.run(
        ["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=out / "bundle", check=True
    )
    # The controller's side resolves from the bundle's index alone: Ansible at the
    # controller's versions, and gpuprov's package (its metadata built in an isolated
    # environment whose setuptools comes from the bundle).
    resolved = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--quiet"),
            *("--index-url", (out / "bundle" / "simple").as_uri() + "/"),
            *manifest["controller"]["requirements"][:2],
            str(REPO),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert resolved.returncode == 0, resolved.stderr[-3000:]


def test_a_host_with_no_route_out_converges_site_yml_from_the_served_bundle(
    lab: Lab, offline_run: dict[str, Background], capsys: pytest.CaptureFixture[str]
) -> None:
    """Waits for the run the test above started (steps 2-6) and fails as it failed."""
    _staging_host(lab)
    background = offline_run.get("run")
    if background is None:
        pytest.fail("the offline host's run did not start: the test before this one failed")
    started = time.monotonic()
    background.thread.join(timeout=JOIN_TIMEOUT)
    with capsys.disabled():
        print(
            f"\n[offline] waited {time.monotonic() - started:.0f} s for the background run; "
            + "; ".join(background.notes),
            flush=True,
        )
    assert not background.thread.is_alive(), f"still running after {JOIN_TIMEOUT} s"
    if background.error is not None:
        raise background.error


def _offline_host(
    lab: Lab,
    net: OfflineNet,
    staging: str,
    image: str,
    out: Path,
    staged: Staged,
    tmp_path: Path,
    notes: list[str],
) -> None:
    """Steps 2-6: the offline network, the cache host serving the bundle, the offline host's
    --check and its converge from the bundle alone, then again. ``lab``'s runs write their
    reports under ``tmp_path`` (the lab's own report directory is the running modules')."""
    reports = ("-e", f"gpuprov_report_dir={tmp_path / 'reports'}")
    # 2. The offline network: a cache host and a fresh host of the staging host's image and
    # profile; the lab's S3 server joins it (the storage role's endpoint).
    cache = net.host("bundle-cache", "cpu", image)
    offline = net.host("offline-k40m", str(lab.hosts[staging]["lab_profile"]), image)
    s3_address = net.connect(s3lab.s3_name(lab.name))
    offline_lab = dataclasses.replace(
        lab, hosts={**lab.hosts, "bundle-cache": cache, "offline-k40m": offline}
    )
    reach = offline_lab.ssh("offline-k40m", f"python3 -c '{NO_ROUTE}'").stdout
    assert "REACHED" not in reach, reach
    assert reach.count("unreachable") == 3, reach
    # Prepared as an air-gapped host is: the image's Debian source (deb.debian.org) removed;
    # someone's pip settings there.
    offline_lab.ssh(
        "offline-k40m",
        "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* && "
        f"printf '{FOREIGN_PIP_CONF}' > /etc/pip.conf",
    )
    offline_lab.ssh("bundle-cache", PRIVILEGED_PORTS)

    url = f"http://{cache['ansible_host']}:{PORT}"
    s3_port = str(lab.hosts[staging].get("lab_s3_endpoint", "")).rsplit(":", 1)[-1] or "5000"
    extra = tmp_path / "offline.yml"
    extra.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "bundle_mirrors": {
                            "hosts": {
                                "bundle-cache": {
                                    **cache,
                                    "gpuprov_bundle_src": str(out / "bundle"),
                                    "gpuprov_bundle_listen_address": cache["ansible_host"],
                                    "gpuprov_bundle_port": PORT,
                                }
                            }
                        },
                        "lab": {
                            "children": {
                                "gpu_nodes": {
                                    "children": {
                                        f"gpu_{lab.hosts[staging]['lab_profile']}": {
                                            "hosts": {
                                                "offline-k40m": {
                                                    **offline,
                                                    **{
                                                        k: lab.hosts[staging][k]
                                                        for k in (
                                                            "lab_profile",
                                                            "lab_release",
                                                            "lab_debian_version",
                                                        )
                                                    },
                                                    "gpu_info_sysfs_root": lab.hosts[staging][
                                                        "gpu_info_sysfs_root"
                                                    ],
                                                    "gpuprov_container_host": True,
                                                    "lab_hostname": "offline-k40m",
                                                    "lab_s3_endpoint": f"http://{s3_address}:{s3_port}",
                                                    "gpuprov_bundle_url": url,
                                                    "gpuprov_bundle_apt_foreign_sources": "replace",
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        },
                    }
                }
            },
            sort_keys=False,
        )
    )

    # 3. A first deployment under --check, before the cache host serves anything: the offline
    # host says what it would write, fails nowhere and changes nothing; its package roles are
    # not predicted (their packages have no source yet), and it says why.
    first_check = lab.ansible_playbook(
        *("playbooks/site.yml", "-i", str(extra), "--limit", "offline-k40m", "--check", "--diff"),
        *reports,
    )
    assert first_check.returncode == 0, first_check.stdout[-6000:] + first_check.stderr[-2000:]
    assert recap(first_check.stdout)["offline-k40m"]["failed"] == 0, first_check.stdout[-6000:]
    said = _said(first_check.stdout)
    assert f"Check mode: Could not fetch the bundle's key {url}/apt/gpgkey" in said
    assert "the roles that install packages end here without predicting" in said
    assert "+URIs: " + url + "/apt" in first_check.stdout, "the client's source shown as a diff"
    untouched = offline_lab.ssh(
        "offline-k40m",
        "ls /etc/apt/sources.list.d/ /etc/apt/keyrings/; cat /etc/pip.conf; "
        "ls /opt/gpuprov 2>&1 || true",
    ).stdout
    assert "gpuprov-bundle" not in untouched, untouched
    assert FOREIGN_PIP_CONF in untouched, untouched
    assert "No such file" in untouched, untouched

    # Another definition of the bundle's repository (an admin's, another key) and an index
    # someone else set for pip: the index is refused by default, before anything on the host
    # changes (the admin's file stays, though the run may replace it); the file is moved aside
    # by the converge below (gpuprov_bundle_apt_foreign_sources: replace in the inventory).
    admin_list = "/etc/apt/sources.list.d/admin-bundle.list"
    offline_lab.ssh(
        "offline-k40m",
        f"echo 'deb [signed-by=/etc/apt/keyrings/admin.gpg] {url}/apt /' > {admin_list} && "
        "sed -i 's|^timeout = 60$|&\\nindex_url = https://devpi.example/simple/|' /etc/pip.conf",
    )
    foreign = lab.ansible_playbook(
        *("playbooks/sources.yml", "-i", str(extra), "--limit", "offline-k40m"), *reports
    )
    assert foreign.returncode != 0, foreign.stdout[-3000:]
    assert (
        "/etc/pip.conf sets index-url = https://devpi.example/simple/ ([global] index_url) (not "
        f"the bundle's {url}/simple/): nothing was changed. Set gpuprov_bundle_pip_foreign_index:"
    ) in _said(foreign.stdout), foreign.stdout[-3000:]
    listed = offline_lab.ssh("offline-k40m", "ls /etc/apt/sources.list.d/").stdout
    assert listed.split() == ["admin-bundle.list"], listed
    pip_left = offline_lab.ssh(
        "offline-k40m",
        "sed -i '/^index_url = https:\\/\\/devpi/d' /etc/pip.conf; cat /etc/pip.conf",
    ).stdout
    assert pip_left == FOREIGN_PIP_CONF, pip_left

    # 4. Serve it: site.yml's first play on the cache host (bundle_mirrors); then again, no change.
    # Left on the cache host before: half a copy of this bundle (a run interrupted while
    # unpacking), a directory of its name without its SHA256SUMS (a removal cut short, the
    # bundle deployed again), an older bundle and a half-removed one (*.gone). The first two
    # are redone, the others removed.
    release = hashlib.sha1((out / "bundle" / "SHA256SUMS").read_bytes()).hexdigest()[:16]  # noqa: S324 (Ansible's stat checksum)
    releases = "/srv/gpuprov-bundle/releases"
    left = offline_lab.ssh(
        "bundle-cache",
        f"mkdir -p {releases}/{release}.part/apt {releases}/{release}/apt "
        f"{releases}/0123456789abcdef {releases}/fedcba9876543210.gone && "
        f"echo half > {releases}/{release}.part/apt/InRelease && "
        f"echo half > {releases}/{release}/apt/InRelease",
        check=False,
    )
    assert left.returncode == 0, (left.returncode, left.stdout, left.stderr)
    served = lab.ansible_playbook(
        "playbooks/bundle_mirror.yml", "-i", str(extra), "--limit", "bundle-cache", *reports
    )
    assert served.returncode == 0, served.stdout[-4000:] + served.stderr[-2000:]
    assert recap(served.stdout)["bundle-cache"]["failed"] == 0
    again_served = lab.ansible_playbook(
        "playbooks/bundle_mirror.yml", "-i", str(extra), "--limit", "bundle-cache", *reports
    )
    assert recap(again_served.stdout)["bundle-cache"]["changed"] == 0, again_served.stdout[-3000:]
    unit = offline_lab.ssh(
        "bundle-cache", "systemctl show -p User -p ActiveState gpuprov-bundle.service"
    ).stdout
    assert "User=gpuprov-bundle" in unit, unit
    assert "ActiveState=active" in unit, unit
    assert offline_lab.ssh("bundle-cache", f"ls {releases}").stdout.split() == [release]

    # 5. The offline host converges site.yml from the bundle alone.
    started = time.monotonic()
    run = lab.ansible_playbook(
        "playbooks/site.yml", "-i", str(extra), "--limit", "offline-k40m", *reports
    )
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    counters = recap(run.stdout)["offline-k40m"]
    notes.append(f"offline converge of offline-k40m: {seconds:.0f} s, {counters}")
    assert counters["failed"] == 0
    assert counters["unreachable"] == 0

    # Its apt sources: the bundle's only; its pip index: the bundle's.
    sources = offline_lab.ssh(
        "offline-k40m", "grep -rh '^URIs:\\|^deb ' /etc/apt/sources.list.d/ || true"
    ).stdout.split("\n")
    assert [s for s in sources if s.strip()] == [f"URIs: {url}/apt"], sources
    backups = offline_lab.ssh("offline-k40m", "ls /var/backups/gpuprov/apt-sources/").stdout
    assert backups.split() == ["admin-bundle.list"], "the admin's definition, moved aside"
    pip_conf = offline_lab.ssh("offline-k40m", "cat /etc/pip.conf").stdout
    assert f"index-url = {url}/simple/" in pip_conf, pip_conf
    host = cache["ansible_host"]
    assert f"trusted-host = pypi-mirror.example {host}" in pip_conf, pip_conf
    assert "timeout = 60" in pip_conf, pip_conf

    # What it installed is what the staging host has, at the same versions; the main
    # environment is the same pip freeze; torch imports.
    have = _installed(offline_lab.ssh("offline-k40m", DPKG).stdout)
    assert have <= staged.debs, sorted(have - staged.debs)
    key_packages = ["docker.io", "nvidia-container-toolkit", "openmpi-bin"]
    key_packages += ["openjdk-17-jre-headless"]
    for package in key_packages:
        assert any(p.startswith(package + "=") for p in have), package
    assert _freeze(offline_lab, "offline-k40m") == staged.freeze

    # 6. Again: nothing changes.
    rerun = lab.ansible_playbook(
        "playbooks/site.yml", "-i", str(extra), "--limit", "offline-k40m", *reports
    )
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert recap(rerun.stdout)["offline-k40m"]["changed"] == 0, rerun.stdout[-5000:]
    # And --check --diff says so too (the client's key is read, not fetched as a change).
    checked = lab.ansible_playbook(
        "playbooks/site.yml",
        "-i",
        str(extra),
        "--limit",
        "offline-k40m",
        "--check",
        "--diff",
        *reports,
    )
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert recap(checked.stdout)["offline-k40m"]["changed"] == 0, checked.stdout[-5000:]
