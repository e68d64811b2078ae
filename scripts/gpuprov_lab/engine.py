"""The Docker engine: the docker CLI for actions, the docker SDK for queries."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuprov_lab.common import CONTAINER_SSH_PORT, LABEL, NO_ENGINE, PORT_RANGE, LabError


def cgroup_version(fs_type: str) -> int:
    """`stat -fc %T /sys/fs/cgroup`: cgroup2fs is the unified v2 hierarchy."""
    return 2 if fs_type.strip() == "cgroup2fs" else 1


def allocate_ports(
    count: int,
    taken: Iterable[int],
    is_free: Callable[[int], bool],
    port_range: tuple[int, int] = PORT_RANGE,
) -> list[int]:
    """`count` ports in port_range, not in `taken` and free per `is_free`."""
    busy = set(taken)
    ports: list[int] = []
    for port in range(port_range[0], port_range[1] + 1):
        if len(ports) == count:
            break
        if port in busy or not is_free(port):
            continue
        ports.append(port)
        busy.add(port)
    if len(ports) < count:
        raise LabError(f"no free port left in {port_range[0]}-{port_range[1]}")
    return ports


def port_is_free(port: int, address: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def bound_ports(containers: Iterable[Mapping[str, Any]]) -> set[int]:
    """Host ports bound by these containers (`docker inspect` documents), stopped ones
    included: a stopped container gets its ports back on `docker start`."""
    ports: set[int] = set()
    for info in containers:
        for key in (("HostConfig", "PortBindings"), ("NetworkSettings", "Ports")):
            bindings = (info.get(key[0]) or {}).get(key[1]) or {}
            for entries in bindings.values():
                for entry in entries or []:
                    with contextlib.suppress(TypeError, ValueError):
                        ports.add(int(entry.get("HostPort")))
    return ports


class Docker:
    """The engine: the docker SDK for queries (containers, labels, port bindings), the
    docker CLI for actions that stream (image import, `exec` with input, `cp -`)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self._sdk: Any = None

    @property
    def sdk(self) -> Any:
        """A docker SDK client of the same engine (DOCKER_HOST or the local socket)."""
        if self._sdk is None:
            import docker as docker_sdk

            self._sdk = docker_sdk.from_env(timeout=120)
        return self._sdk

    def containers(self, label: str | None = None) -> list[dict[str, Any]]:
        """`docker inspect` documents of every container (or those with this label)."""
        import docker as docker_sdk

        filters = {"label": label} if label else {}
        api = self.sdk.api
        found = []
        for summary in api.containers(all=True, filters=filters):
            try:
                found.append(api.inspect_container(summary["Id"]))
            except docker_sdk.errors.NotFound:
                # Removed between the listing and the inspect: another host's `docker run`
                # that lost a port race and is being retried (create_container). Not a host.
                continue
        return found

    def run(
        self,
        args: Sequence[str],
        *,
        check: bool = True,
        stdin: bytes | None = None,
        timeout: float | None = 600,
    ) -> subprocess.CompletedProcess[bytes]:
        # No input: /dev/null, never the caller's stdin (whose flags other programs share).
        feed: dict[str, Any] = (
            {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
        )
        proc = subprocess.run(
            [self.binary, *args], capture_output=True, check=False, timeout=timeout, **feed
        )
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise LabError(f"docker {' '.join(args[:3])}...: {err}")
        return proc

    def out(self, args: Sequence[str], **kw: Any) -> str:
        return self.run(args, **kw).stdout.decode(errors="replace").strip()

    def exec(
        self, container: str, script: str, *, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        flags = ["-i"] if stdin is not None else []
        return self.run(["exec", *flags, container, "sh", "-ec", script], check=check, stdin=stdin)

    def exists(self, kind: str, name: str) -> bool:
        return self.run([kind, "inspect", name], check=False).returncode == 0

    def inspect(self, name: str) -> dict[str, Any]:
        data = json.loads(self.out(["inspect", name]))
        if not data:
            raise LabError(f"no such object: {name}")
        first: dict[str, Any] = data[0]
        return first


def connect_engine() -> Docker:
    binary = shutil.which("docker")
    if binary is None:
        print(NO_ENGINE, file=sys.stderr)
        raise SystemExit(2)
    docker = Docker(binary)
    try:
        ok = docker.run(["version", "--format", "{{.Server.Version}}"], check=False)
    except subprocess.TimeoutExpired:
        ok = None
    if ok is None or ok.returncode != 0:
        print(NO_ENGINE, file=sys.stderr)
        raise SystemExit(2)
    return docker


def detect_cgroup() -> int:
    stat = shutil.which("stat") or "/usr/bin/stat"
    out = subprocess.run(
        [stat, "-fc", "%T", "/sys/fs/cgroup"],
        capture_output=True,
        text=True,
        check=False,
    )
    return cgroup_version(out.stdout)


def cpu_usage_files(container_id: str, version: int) -> list[str]:
    """Where the kernel keeps a Docker container's CPU time, most likely first: cgroup v1's
    cpuacct controller (nanoseconds), v2's cpu.stat (usage_usec) under the systemd or the
    cgroupfs driver."""
    if version == 1:
        return [
            f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
            f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage",
        ]
    return [
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat",
        f"/sys/fs/cgroup/docker/{container_id}/cpu.stat",
    ]


def parse_cpu_usage(path: str, text: str) -> float:
    """CPU seconds from a file of cpu_usage_files(): cpuacct.usage (ns) or cpu.stat."""
    if path.endswith("cpuacct.usage"):
        return int(text.strip()) / 1e9
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise ValueError(f"{path}: no usage_usec line")


def container_cpu_seconds(container_id: str, version: int) -> float | None:
    """CPU seconds a container's processes have used so far, or None where the cgroup file
    is not readable here (another cgroup layout, a remote engine)."""
    for path in cpu_usage_files(container_id, version):
        with contextlib.suppress(OSError, ValueError):
            return parse_cpu_usage(path, Path(path).read_text(encoding="ascii"))
    return None


def lab_containers(docker: Docker, lab: str) -> list[dict[str, Any]]:
    return docker.containers(f"{LABEL}={lab}")


def taken_ports(docker: Docker) -> set[int]:
    return bound_ports(docker.containers())


def container_port(info: Mapping[str, Any]) -> int | None:
    bindings = (info.get("HostConfig") or {}).get("PortBindings") or {}
    for binding in bindings.get(f"{CONTAINER_SSH_PORT}/tcp") or []:
        with contextlib.suppress(TypeError, ValueError):
            return int(binding.get("HostPort"))
    return None


def container_address(info: Mapping[str, Any], network: str) -> str:
    nets = (info.get("NetworkSettings") or {}).get("Networks") or {}
    return str((nets.get(network) or {}).get("IPAddress") or "")


def network_gateway(docker: Docker, network: str) -> str | None:
    info = docker.inspect(network)
    for cfg in (info.get("IPAM") or {}).get("Config") or []:
        gateway = cfg.get("Gateway")
        if gateway:
            return str(gateway)
    return None


def wait_ready(docker: Docker, container: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        proc = docker.run(
            [
                "exec",
                container,
                "sh",
                "-c",
                "systemctl is-active ssh.service && test -s /etc/ssh/ssh_host_ed25519_key.pub",
            ],
            check=False,
        )
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            logs = docker.out(["logs", "--tail", "20", container], check=False)
            raise LabError(f"{container}: sshd not up after {timeout:.0f}s\n{logs}")
        time.sleep(1)


def marker_matches(docker: Docker, container: str, path: str, value: str) -> bool:
    proc = docker.run(["exec", container, "cat", path], check=False)
    return proc.returncode == 0 and proc.stdout.decode().strip() == value


def port_taken_error(stderr: str) -> bool:
    """Whether a `docker run`/`docker start` failed because its published port is taken."""
    return "already allocated" in stderr or "address already in use" in stderr
