"""Lab hosts and the mirror container: run arguments, create/start/re-publish, provisioning."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuprov_lab import aptrepo, s3lab
from gpuprov_lab.common import (
    CONTAINER_SSH_PORT,
    HOST_CA_DIR,
    HOST_WHEELHOUSE,
    IMAGE_REPO,
    LABEL,
    MIRROR_DIR,
    MIRROR_LABEL,
    MIRROR_PORT,
    REPO,
    SIM_SYSFS_ROOT,
    SSH_DIR,
    STATE_ROOT,
    LabError,
    UsageError,
    log,
)
from gpuprov_lab.engine import (
    Docker,
    allocate_ports,
    container_address,
    container_port,
    marker_matches,
    port_is_free,
    port_taken_error,
    taken_ports,
)
from gpuprov_lab.inventory import LabPaths
from gpuprov_lab.profiles import HostSpec, Profile, sysfs_files, tar_bytes


def init_command(release: str, cgroup: int) -> list[str]:
    """The container command: systemd, told to accept cgroup v1 where needed.

    systemd >= 256 (trixie has 257) refuses to boot on cgroup v1 unless forced;
    inside a container it reads PID 1's arguments as its kernel command line.
    """
    if cgroup == 1 and release != "bookworm":
        return [
            "/sbin/init",
            "systemd.unified_cgroup_hierarchy=0",
            "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1",
        ]
    return ["/sbin/init"]


def container_name(lab: str, host: str) -> str:
    return f"{lab}-{host}"


def network_name(lab: str) -> str:
    return f"{lab}-net"


def docker_volume_name(lab: str, host: str) -> str:
    return f"{lab}-{host}-docker"


def mirror_name(lab: str) -> str:
    return f"{lab}-mirror"


def mirror_run_args(lab: str, image: str, repo_dir: Path) -> list[str]:
    """`docker run` arguments of the lab's mirror container.

    It serves repo_dir (the stand-in for NVIDIA's container toolkit repository,
    mounted read-only) with `python3 -m http.server` on the lab network only:
    no port is published on the controller.
    """
    return [
        "run",
        "--detach",
        "--name",
        mirror_name(lab),
        "--network",
        network_name(lab),
        "--network-alias",
        "mirror",
        "--label",
        f"{MIRROR_LABEL}={lab}",
        "--label",
        f"gpuprov.mirror.repo={repo_dir}",
        "--label",
        f"gpuprov.image={image}",
        "--restart",
        "unless-stopped",
        "--read-only",
        "--mount",
        f"type=bind,source={repo_dir},target={MIRROR_DIR},readonly",
        "--workdir",
        MIRROR_DIR,
        image,
        "python3",
        "-m",
        "http.server",
        "--bind",
        "0.0.0.0",  # noqa: S104 (the container's lab-network address only)
        "--directory",
        MIRROR_DIR,
        str(MIRROR_PORT),
    ]


def mirror_url(address: str) -> str:
    return f"http://{address}:{MIRROR_PORT}"


def docker_run_args(
    lab: str, host: HostSpec, image: str, port: int, cgroup: int, run_image: str | None = None
) -> list[str]:
    """`docker run` arguments of one lab host.

    systemd as PID 1 with a read-write cgroup mount and the host cgroup
    namespace (both v1 and v2), plus what a nested dockerd needs: SYS_ADMIN,
    NET_ADMIN, no seccomp/apparmor confinement, and /var/lib/docker on a
    volume (overlay2 cannot sit on the container's own overlay root).
    `--privileged` is not used (it fails on the machines this runs on).
    SSH is published on 127.0.0.1 only. `run_image` (default `image`) is what runs: a
    re-published host runs a commit of its old container, labelled with its base image.
    """
    name = container_name(lab, host.name)
    args = [
        "run",
        "--detach",
        "--name",
        name,
        "--hostname",
        host.name,
        "--network",
        network_name(lab),
        "--network-alias",
        host.name,
        "--label",
        f"{LABEL}={lab}",
        "--label",
        f"gpuprov.host={host.name}",
        "--label",
        f"gpuprov.profile={host.profile}",
        "--label",
        f"gpuprov.release={host.release}",
        "--label",
        f"gpuprov.image={image}",
        "--publish",
        f"127.0.0.1:{port}:{CONTAINER_SSH_PORT}",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "--volume",
        "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--cgroupns",
        "host",
        "--cap-add",
        "SYS_ADMIN",
        "--cap-add",
        "NET_ADMIN",
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "apparmor=unconfined",
        "--mount",
        f"type=volume,source={docker_volume_name(lab, host.name)},"
        f"target=/var/lib/docker,volume-label={LABEL}={lab}",
        "--env",
        "container=docker",
        "--stop-signal",
        "SIGRTMIN+3",
        run_image or image,
    ]
    return args + init_command(host.release, cgroup)


_PEM_RE = re.compile(r"-----BEGIN CERTIFICATE-----\s+(.*?)\s+-----END CERTIFICATE-----", re.DOTALL)


def split_pem_bundle(text: str) -> list[str]:
    """The certificates of a PEM bundle, each normalised to one PEM block."""
    certs = []
    for body in _PEM_RE.findall(text):
        b64 = "".join(body.split())
        lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
        certs.append(
            "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"
        )
    return certs


def extra_certs(controller_bundle: str, host_bundle: str) -> list[str]:
    """Certificates the controller trusts that the host does not (yet)."""
    have = set(split_pem_bundle(host_bundle))
    return [c for c in split_pem_bundle(controller_bundle) if c not in have]


def pip_find_links(config_list: str) -> list[str]:
    """find-links directories in `pip config list` output (in order)."""
    found: list[str] = []
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key.strip().endswith(".find-links"):
            continue
        for item in value.strip().strip("'\"").split():
            item = item.removeprefix("file://")
            if item.startswith("/") and item not in found:
                found.append(item)
    return found


def ensure_key(paths: LabPaths) -> None:
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    SSH_DIR.chmod(0o700)
    if paths.key_file.exists():
        return
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise LabError("ssh-keygen is missing: apt-get install openssh-client")
    subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "gpuprov-lab", "-f", str(paths.key_file)],
        check=True,
    )


def provision(
    docker: Docker,
    container: str,
    profile: Profile,
    pubkey: str,
    ca_bundle: str | None,
    wheelhouse: Path | None,
) -> list[str]:
    """Bring a running host to the wanted content; return what changed."""
    changes: list[str] = []
    # root's authorized key
    auth = "/root/.ssh/authorized_keys"
    if not marker_matches(docker, container, auth, pubkey.strip()):
        docker.exec(
            container,
            f"mkdir -p -m 700 /root/.ssh && cat > {auth} && chmod 600 {auth}",
            stdin=(pubkey.strip() + "\n").encode(),
        )
        changes.append("ssh key")
    # simulated PCI tree (lab only; gpu_info reads it via gpu_info_sysfs_root)
    files = sysfs_files(profile)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    marker = "/opt/gpuprov-sim/.profile.sha256"
    if not marker_matches(docker, container, marker, digest):
        docker.exec(container, "rm -rf /opt/gpuprov-sim")
        prefix = SIM_SYSFS_ROOT.strip("/")
        tree = {f"{prefix}/{k}": v for k, v in files.items()}
        tree[marker.strip("/")] = digest + "\n"
        docker.run(
            ["cp", "-", f"{container}:/"],
            stdin=tar_bytes(tree, dirs=[f"{prefix}/bus/pci/devices"]),
        )
        changes.append(f"pci profile {profile.name}")
    # CA bundle of the controller (TLS-intercepting proxies)
    if ca_bundle:
        controller = Path(ca_bundle).read_text(encoding="ascii", errors="replace")
        digest = hashlib.sha256(controller.encode()).hexdigest()
        marker = f"{HOST_CA_DIR}/.bundle.sha256"
        if not marker_matches(docker, container, marker, digest):
            host_bundle = docker.out(
                ["exec", container, "cat", "/etc/ssl/certs/ca-certificates.crt"],
                check=False,
            )
            extra = extra_certs(controller, host_bundle)
            tree = {
                f"{HOST_CA_DIR.strip('/')}/gpuprov-lab-{i:03d}.crt": c for i, c in enumerate(extra)
            }
            tree[f"{HOST_CA_DIR.strip('/')}/.bundle.sha256"] = digest + "\n"
            docker.exec(container, f"rm -rf {HOST_CA_DIR}")
            docker.run(["cp", "-", f"{container}:/"], stdin=tar_bytes(tree))
            if extra:
                docker.exec(container, "update-ca-certificates >/dev/null")
            # pip in the hosts uses the system store (Debian's pip does already).
            docker.exec(
                container,
                "test -e /etc/pip.conf || printf '[global]\\ncert = "
                "/etc/ssl/certs/ca-certificates.crt\\n' > /etc/pip.conf",
            )
            changes.append(f"ca bundle (+{len(extra)} certs)")
    # wheelhouse: one docker cp per host, skipped when the listing is unchanged
    if wheelhouse is not None:
        digest = wheelhouse_digest(wheelhouse)
        marker = f"{HOST_WHEELHOUSE}/.gpuprov-wheelhouse.sha256"
        if not marker_matches(docker, container, marker, digest):
            docker.exec(container, f"rm -rf {HOST_WHEELHOUSE}")
            docker.run(["cp", f"{wheelhouse}/.", f"{container}:{HOST_WHEELHOUSE}"])
            docker.exec(
                container,
                f"mkdir -p {HOST_WHEELHOUSE} && echo {digest} > {marker} "
                f"&& chown -R root:root {HOST_WHEELHOUSE}",
            )
            changes.append(f"wheelhouse {wheelhouse}")
    return changes


def wheelhouse_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for entry in sorted(path.rglob("*")):
        if entry.is_file():
            st = entry.stat()
            digest.update(f"{entry.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def find_wheelhouse(arg: str | None) -> Path | None:
    if arg is not None:
        if not arg:
            return None
        path = Path(arg)
        if not path.is_dir():
            raise UsageError(f"--wheelhouse {arg}: not a directory")
        return path
    pip = [sys.executable, "-m", "pip", "config", "list"]
    try:
        out = subprocess.run(pip, capture_output=True, text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for item in pip_find_links(out):
        path = Path(item)
        if path.is_dir() and any(path.glob("*.whl")):
            return path
    return None


def ensure_s3(docker: Docker, paths: LabPaths, network: str, image: str) -> dict[str, Any]:
    """The S3 stand-in (moto, signatures checked) and the lab's vault (gpuprov_lab/s3lab.py)."""
    try:
        return s3lab.ensure(
            docker, paths.name, paths.state_dir, paths.inventory.parent, network, image
        )
    except (s3lab.S3LabError, subprocess.CalledProcessError) as exc:
        raise LabError(f"{s3lab.s3_name(paths.name)}: {exc}") from exc


def ensure_mirror(docker: Docker, paths: LabPaths, image: str) -> str:
    """Build (once, cached) and serve the stand-in toolkit repository; return its URL.

    The repository is NOT NVIDIA's: stub packages with NVIDIA's names, signed with a
    throwaway key (scripts/lab/aptrepo.py). It is served by the NAME-mirror container
    on the lab network; the URL uses the container's lab-network address.
    """
    repo_dir = aptrepo.ensure_repo(paths.state_dir).resolve()
    name = mirror_name(paths.name)
    net = network_name(paths.name)
    if docker.exists("container", name):
        info = docker.inspect(name)
        labels = info["Config"].get("Labels") or {}
        if (
            labels.get("gpuprov.mirror.repo") != str(repo_dir)
            or labels.get("gpuprov.image") != image
        ):
            docker.run(["rm", "-f", name])
            log(f"{name}: removed (repository or image changed)")
        elif not info["State"].get("Running"):
            docker.run(["start", name])
    if not docker.exists("container", name):
        docker.run(mirror_run_args(paths.name, image, repo_dir))
        log(f"{name}: serving the stand-in toolkit repository {repo_dir}")
    probe = (
        "import urllib.request as u; "
        f"u.urlopen('http://127.0.0.1:{MIRROR_PORT}/gpgkey', timeout=2).read()"
    )
    deadline = time.monotonic() + 30
    while docker.run(["exec", name, "python3", "-c", probe], check=False).returncode != 0:
        if time.monotonic() > deadline:
            logs = docker.out(["logs", "--tail", "20", name], check=False)
            raise LabError(f"{name}: not serving after 30s\n{logs}")
        time.sleep(0.5)
    address = container_address(docker.inspect(name), net)
    if not address:
        raise LabError(f"{name}: no address on {net}")
    return mirror_url(address)


def remove_mirror(docker: Docker, lab: str) -> None:
    ids = docker.out(["ps", "-aq", "--filter", f"label={MIRROR_LABEL}={lab}"]).split()
    if ids:
        docker.run(["rm", "-f", *ids])
        log(f"{mirror_name(lab)}: removed")


FACT_CACHES = (REPO / ".cache" / "ansible-facts",)  # ansible.cfg's fact_caching_connection


def forget_cached_facts(lab: str, host: str) -> list[Path]:
    """Remove Ansible's cached facts of `host` (a new container is a new machine).

    The jsonfile cache is keyed by inventory host name (files `<prefix>_<host>` or
    `<host>`), and lab host names repeat across labs; the lab tests use
    .lab/NAME/facts. Returns the removed files.
    """
    removed: list[Path] = []
    for cache in (*FACT_CACHES, STATE_ROOT / lab / "facts"):
        if not cache.is_dir():
            continue
        for entry in cache.iterdir():
            if entry.is_file() and (entry.name == host or entry.name.rsplit("_", 1)[-1] == host):
                entry.unlink()
                removed.append(entry)
    return removed


# `up` creates its hosts in parallel threads: each picks the lowest free port and publishes it
# with docker run, so two threads picked the same one and retried into each other (an 8-host
# lab failed "no free port after 5 tries"). Picking and publishing is one step per process;
# the retry stays for another lab's process taking the port meanwhile.
_PUBLISH = threading.Lock()


def create_container(
    docker: Docker,
    lab: str,
    host: HostSpec,
    image: str,
    cgroup: int,
    run_image: str | None = None,
) -> None:
    """docker run on a free 127.0.0.1 port; retry when another lab took it meanwhile.

    A new container is a new machine, so its cached facts go; a re-published one
    (run_image: a commit of the old container) keeps them."""
    name = container_name(lab, host.name)
    if run_image is None:
        forget_cached_facts(lab, host.name)
    for _ in range(5):
        with _PUBLISH:
            port = allocate_ports(1, taken_ports(docker), port_is_free)[0]
            argv = docker_run_args(lab, host, image, port, cgroup, run_image)
            proc = docker.run(argv, check=False)
        if proc.returncode == 0:
            return
        err = proc.stderr.decode(errors="replace")
        docker.run(["rm", "-f", name], check=False)
        if not port_taken_error(err):
            raise LabError(f"docker run {name}: {err.strip()}")
    raise LabError(f"docker run {name}: no free port after 5 tries")


STATE_IMAGE_LABEL = "gpuprov.lab.state"


def state_image(lab: str, host: str) -> str:
    return f"{IMAGE_REPO}-state:{lab}-{host}"


def start_container(docker: Docker, lab: str, host: HostSpec, image: str, cgroup: int) -> str:
    """Start a stopped host. When its SSH port was taken meanwhile (another lab, another
    program), re-publish it on a free port: commit its filesystem, run the commit with the
    same /var/lib/docker volume, drop the old container. Returns the action taken."""
    name = container_name(lab, host.name)
    proc = docker.run(["start", name], check=False)
    if proc.returncode == 0:
        return "started"
    err = proc.stderr.decode(errors="replace")
    if not port_taken_error(err):
        raise LabError(f"docker start {name}: {err.strip()}")
    old = container_port(docker.inspect(name))
    tag = state_image(lab, host.name)
    docker.run(["commit", "--change", f"LABEL {STATE_IMAGE_LABEL}={lab}", name, tag], timeout=1800)
    docker.run(["rm", "-f", name])  # not -v: the docker volume stays for the new container
    create_container(docker, lab, host, image, cgroup, run_image=tag)
    new = container_port(docker.inspect(name))
    return f"re-published (port {old} was taken; now {new})"


REPORTS_DIR = REPO / "reports"  # gpuprov_report_dir's default (playbooks/../reports)


def created_epoch(info: Mapping[str, Any]) -> float:
    """A container's creation time (`Created`, RFC 3339 with nanoseconds) in epoch seconds."""
    text = str(info.get("Created") or "")[:19]
    try:
        stamp = datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC)
    except ValueError:
        return 0.0
    return stamp.timestamp()


def last_verdict(smoke: Mapping[str, Any] | None, written: float, created: float) -> str:
    """The host's last smoke verdict for `status`: 'ok', 'NOT OK: L0 fail, ...', or '-'
    when there is none for this container (no report, or one older than the container)."""
    if smoke is None or written < created:
        return "-"
    if smoke.get("ok"):
        return "ok"
    failed = [f"{v.get('layer')} {v.get('status')}" for v in smoke.get("not_passed") or []]
    return "NOT OK" + (f": {', '.join(failed)}" if failed else "")


def read_verdict(host: str, info: Mapping[str, Any], reports: Path = REPORTS_DIR) -> str:
    path = reports / "smoke" / f"{host}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        written = path.stat().st_mtime
    except (OSError, ValueError):
        return "-"
    return last_verdict(doc if isinstance(doc, dict) else None, written, created_epoch(info))
