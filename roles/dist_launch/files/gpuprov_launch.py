#!/usr/bin/env python3
"""gpuprov-launch: start a multi-host torch.distributed job with torchrun or mpirun.

Installed by the dist_launch role as /usr/local/bin/gpuprov-launch; it reads the fleet's
launch configuration that the role writes (/etc/gpuprov/launch.json: the hosts of the
hostfile with their addresses and slots, the rendezvous endpoint, this host's
NCCL/Gloo interface, the MPI network) and runs as the training user:

    gpuprov-launch hosts                          every host reachable over SSH? (names the others)
    gpuprov-launch torchrun [opts] -- SCRIPT ARGS  torchrun on every host at once (over SSH),
                                                  c10d rendezvous at the inventory's endpoint
    gpuprov-launch mpirun [opts] -- SCRIPT ARGS    mpirun over the hostfile; each rank gets
                                                  RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/
                                                  MASTER_PORT mapped from OMPI_COMM_WORLD_*
    gpuprov-launch exec -- CMD ARGS               (what mpirun runs) map the MPI environment,
                                                  then exec CMD
    gpuprov-launch env                            print the mapped environment of this rank

Both launchers first probe every host (SSH, BatchMode, a connect timeout): a host that is
down fails the launch at once, named, before any rank starts; the whole job runs under a
bounded timeout (killed, with the hosts that had not finished named), never a hang.

Standard library only. Exit codes: the job's (0 ok), 3 a host unreachable, 124 timed out,
2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG = Path("/etc/gpuprov/launch.json")
EXIT_UNREACHABLE = 3
EXIT_TIMEOUT = 124
EXIT_USAGE = 2


class ConfigError(Exception):
    """The launch configuration is missing or malformed (exit 2)."""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    slots: int


@dataclass(frozen=True)
class Config:
    hosts: tuple[Host, ...]
    master_addr: str
    master_port: int
    rdzv_port: int
    ifname: str
    mpi_network: str
    hostfile: str
    python: str
    ssh_connect_timeout: int
    launcher: str

    @property
    def master(self) -> Host:
        return self.hosts[0]


def parse_config(raw: Mapping[str, Any]) -> Config:
    """The configuration from its JSON document; errors name the key."""
    try:
        hosts = tuple(
            Host(str(h["name"]), str(h["address"]), int(h["slots"])) for h in raw["hosts"]
        )
        if not hosts:
            raise ConfigError("launch configuration: 'hosts' is empty")
        for h in hosts:
            if h.slots < 1:
                raise ConfigError(f"launch configuration: host {h.name} has slots={h.slots} (< 1)")
        return Config(
            hosts=hosts,
            master_addr=str(raw.get("master_addr") or hosts[0].address),
            master_port=int(raw["master_port"]),
            rdzv_port=int(raw["rdzv_port"]),
            ifname=str(raw.get("ifname") or ""),
            mpi_network=str(raw.get("mpi_network") or ""),
            hostfile=str(raw["hostfile"]),
            python=str(raw["python"]),
            ssh_connect_timeout=int(raw.get("ssh_connect_timeout", 5)),
            launcher=str(raw.get("launcher", "/usr/local/bin/gpuprov-launch")),
        )
    except KeyError as exc:
        raise ConfigError(f"launch configuration lacks the key {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"launch configuration: bad value: {exc}") from exc


def load_config(path: Path) -> Config:
    try:
        return parse_config(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path}: {exc.strerror} (the dist_launch role writes it)"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from exc


# ---------------------------------------------------------------------------
# Pure parts (unit-tested)


def torch_env_from_mpi(
    environ: Mapping[str, str], master_addr: str, master_port: int
) -> dict[str, str]:
    """torch.distributed's env:// variables from Open MPI's per-rank environment.

    OMPI_COMM_WORLD_RANK -> RANK, OMPI_COMM_WORLD_SIZE -> WORLD_SIZE,
    OMPI_COMM_WORLD_LOCAL_RANK -> LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE -> LOCAL_WORLD_SIZE,
    OMPI_COMM_WORLD_NODE_RANK -> GROUP_RANK (when given); MASTER_ADDR/MASTER_PORT: the
    address of rank 0's host (see rank0_host) and the configured port.
    """
    need = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
    missing = [k for k in need if k not in environ]
    if missing:
        raise ConfigError(
            f"not started by mpirun: {', '.join(missing)} unset "
            "(use `gpuprov-launch mpirun -- SCRIPT`, which runs `gpuprov-launch exec` per rank)"
        )
    out = {
        "RANK": environ["OMPI_COMM_WORLD_RANK"],
        "WORLD_SIZE": environ["OMPI_COMM_WORLD_SIZE"],
        "LOCAL_RANK": environ["OMPI_COMM_WORLD_LOCAL_RANK"],
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }
    if "OMPI_COMM_WORLD_LOCAL_SIZE" in environ:
        out["LOCAL_WORLD_SIZE"] = environ["OMPI_COMM_WORLD_LOCAL_SIZE"]
    if "OMPI_COMM_WORLD_NODE_RANK" in environ:
        out["GROUP_RANK"] = environ["OMPI_COMM_WORLD_NODE_RANK"]
    return out


def ifname_env(ifname: str) -> dict[str, str]:
    return {"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname} if ifname else {}


def ssh_options(connect_timeout: int) -> list[str]:
    """Non-interactive SSH: the user's key, pinned known_hosts, a bounded connect."""
    return [
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
        "-o",
        "UpdateHostKeys=no",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=3",
    ]


def torchrun_node_argv(
    cfg: Config,
    host: Host,
    nproc_per_node: int,
    run_id: str,
    join_timeout: int,
    command: Sequence[str],
) -> list[str]:
    """The torchrun command one host runs (c10d rendezvous on the master's rdzv port)."""
    is_host = "true" if host.address == cfg.master_addr or host == cfg.master else "false"
    return [
        cfg.python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={len(cfg.hosts)}",
        f"--nproc-per-node={nproc_per_node}",
        "--max-restarts=0",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={cfg.master_addr}:{cfg.rdzv_port}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=join_timeout={join_timeout},is_host={is_host}",
        *command,
    ]


def is_local_address(address: str) -> bool:
    """Whether address belongs to this machine (a socket binds only to a local address)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError:
            return False
    return True


def rank0_host(hosts: Sequence[Host], is_local: Callable[[str], bool]) -> Host:
    """Where Open MPI starts rank 0: on the launching machine when it is one of the hosts
    (mpirun puts its own node first, whatever the hostfile's order), else the hostfile's
    first host. Measured on the lab with Open MPI 4.1 (Debian 12): launched from lab-cpu,
    listed third, rank 0 ran on lab-cpu."""
    return next((h for h in hosts if is_local(h.address)), hosts[0])


def mpirun_argv(
    cfg: Config, per_host: int | None, command: Sequence[str], master_addr: str | None = None
) -> list[str]:
    """mpirun over the hostfile; every rank runs `gpuprov-launch exec -- COMMAND`, told the
    address of rank 0's host (master_addr; default the configured one)."""
    np = len(cfg.hosts) * per_host if per_host else sum(h.slots for h in cfg.hosts)
    argv = ["mpirun", "--hostfile", cfg.hostfile, "-np", str(np)]
    if per_host:
        argv += ["--map-by", f"ppr:{per_host}:node"]
    rsh = " ".join(ssh_options(cfg.ssh_connect_timeout))
    argv += ["--mca", "plm_rsh_args", rsh]
    if cfg.mpi_network:
        argv += ["--mca", "btl_tcp_if_include", cfg.mpi_network]
        argv += ["--mca", "oob_tcp_if_include", cfg.mpi_network]
    # TCP only: no shared-memory or UCX transports to probe in containers or across hosts.
    argv += ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp"]
    master = master_addr or cfg.master_addr
    return [*argv, cfg.launcher, "exec", "--master-addr", master, "--", *command]


def unreachable_message(down: Mapping[str, str], hosts: Sequence[Host]) -> str:
    by_name = {h.name: h for h in hosts}
    parts = [f"{n} ({by_name[n].address}): {why}" for n, why in sorted(down.items())]
    return f"{len(down)} of {len(hosts)} hosts unreachable over SSH, nothing started: " + "; ".join(
        parts
    )


def timeout_message(launcher: str, timeout: int, unfinished: Sequence[str]) -> str:
    names = ", ".join(unfinished) if unfinished else "all ranks"
    return f"{launcher} did not finish within {timeout}s and was killed; still running on: {names}"


def _mentions(text: str, word: str) -> bool:
    """`word` as a whole name or address in `text` (gpu1 is not in "gpu12", nor 10.0.0.1 in
    "10.0.0.12"): no letter, digit, dot, dash or underscore on either side."""
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-]|\.\w)", text) is not None


def name_addresses(text: str, hosts: Sequence[Host]) -> list[str]:
    """Hosts whose address or name a launcher's error output mentions."""
    return [h.name for h in hosts if _mentions(text, h.address) or _mentions(text, h.name)]


# ---------------------------------------------------------------------------
# Effects


def probe(cfg: Config) -> dict[str, str]:
    """host name -> why it is unreachable, for the hosts an SSH `true` does not reach."""

    def one(h: Host) -> tuple[str, str | None]:
        argv = ["ssh", *ssh_options(cfg.ssh_connect_timeout), h.address, "true"]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                timeout=cfg.ssh_connect_timeout + 10,
            )
        except subprocess.TimeoutExpired:
            return h.name, f"no answer within {cfg.ssh_connect_timeout + 10}s"
        if proc.returncode == 0:
            return h.name, None
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        return h.name, (lines[-1] if lines else f"ssh exit {proc.returncode}")[:200]

    with ThreadPoolExecutor(max_workers=min(32, len(cfg.hosts))) as pool:
        results = list(pool.map(one, cfg.hosts))
    return {name: why for name, why in results if why is not None}


def _pump(prefix: str, stream: Any, sink: list[str], lock: threading.Lock) -> None:
    for line in stream:
        with lock:
            sink.append(f"{prefix}{line}")
            sys.stdout.write(f"{prefix}{line}")
            sys.stdout.flush()


def run_torchrun(
    cfg: Config,
    nproc_per_node: int,
    run_id: str,
    join_timeout: int,
    timeout: int,
    command: Sequence[str],
) -> int:
    down = probe(cfg)
    if down:
        sys.stderr.write(f"gpuprov-launch torchrun: {unreachable_message(down, cfg.hosts)}\n")
        return EXIT_UNREACHABLE
    procs: dict[str, subprocess.Popen[str]] = {}
    lines: list[str] = []
    lock = threading.Lock()
    threads = []
    for h in cfg.hosts:
        node = torchrun_node_argv(cfg, h, nproc_per_node, run_id, join_timeout, command)
        remote = shlex.join([cfg.launcher, "node", "--", *node])
        argv = ["ssh", *ssh_options(cfg.ssh_connect_timeout), h.address, remote]
        p = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        procs[h.name] = p
        t = threading.Thread(target=_pump, args=(f"[{h.name}] ", p.stdout, lines, lock))
        t.start()
        threads.append(t)
    deadline = time.monotonic() + timeout
    rcs: dict[str, int] = {}
    while len(rcs) < len(procs) and time.monotonic() < deadline:
        for name, p in procs.items():
            if name not in rcs and p.poll() is not None:
                rcs[name] = p.returncode
        first_failed = [n for n, rc in rcs.items() if rc != 0]
        if first_failed:
            # One node failed: the others cannot finish (their rendezvous or collective
            # waits for it). Give them a moment to report, then stop them.
            grace = min(deadline, time.monotonic() + 5)
            while time.monotonic() < grace and len(rcs) < len(procs):
                for name, p in procs.items():
                    if name not in rcs and p.poll() is not None:
                        rcs[name] = p.returncode
                time.sleep(0.2)
            break
        time.sleep(0.2)
    unfinished = [n for n in procs if n not in rcs]
    for n in unfinished:
        procs[n].kill()
    for t in threads:
        t.join(timeout=5)
    if unfinished and not [n for n, rc in rcs.items() if rc != 0]:
        sys.stderr.write(
            f"gpuprov-launch torchrun: {timeout_message('torchrun', timeout, unfinished)}\n"
        )
        return EXIT_TIMEOUT
    failed: dict[str, int] = {n: rc for n, rc in rcs.items() if rc != 0}
    if failed or unfinished:
        named = ", ".join(f"{n} (exit {rc})" for n, rc in sorted(failed.items()))
        also = f"; stopped on {', '.join(unfinished)}" if unfinished else ""
        sys.stderr.write(f"gpuprov-launch torchrun: failed on {named}{also}\n")
        return max(failed.values(), default=1) or 1
    return 0


def run_mpirun(cfg: Config, per_host: int | None, timeout: int, command: Sequence[str]) -> int:
    down = probe(cfg)
    if down:
        sys.stderr.write(f"gpuprov-launch mpirun: {unreachable_message(down, cfg.hosts)}\n")
        return EXIT_UNREACHABLE
    argv = mpirun_argv(cfg, per_host, command, rank0_host(cfg.hosts, is_local_address).address)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        sys.stdout.write(out)
        sys.stderr.write(f"gpuprov-launch mpirun: {timeout_message('mpirun', timeout, [])}\n")
        return EXIT_TIMEOUT
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        named = name_addresses(proc.stdout + proc.stderr, cfg.hosts)
        where = f" (the output names {', '.join(named)})" if named else ""
        sys.stderr.write(f"gpuprov-launch mpirun: exit {proc.returncode}{where}\n")
    return proc.returncode


def exec_rank(cfg: Config, command: Sequence[str], master_addr: str | None = None) -> int:
    env = dict(os.environ)
    env.update(torch_env_from_mpi(env, master_addr or cfg.master_addr, cfg.master_port))
    if env["RANK"] == "0" and not is_local_address(env["MASTER_ADDR"]):
        # Every other rank would wait for a store that nobody serves, until its timeout.
        raise ConfigError(
            f"rank 0 runs on {socket.gethostname()}, but MASTER_ADDR is {env['MASTER_ADDR']}, "
            "not an address of this machine (start jobs with `gpuprov-launch mpirun`)"
        )
    env.update(ifname_env(cfg.ifname))
    os.execvpe(command[0], list(command), env)  # noqa: S606  # the user's own command
    return 0  # pragma: no cover


def exec_node(cfg: Config, command: Sequence[str]) -> int:
    env = dict(os.environ)
    env.update(ifname_env(cfg.ifname))
    os.execvpe(command[0], list(command), env)  # noqa: S606  # torchrun, built above
    return 0  # pragma: no cover


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuprov-launch", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("hosts", help="probe every host over SSH")
    tr = sub.add_parser("torchrun", help="torchrun on every host (c10d rendezvous)")
    tr.add_argument("--nproc-per-node", type=int, default=1)
    tr.add_argument("--run-id", default="gpuprov-launch")
    tr.add_argument("--join-timeout", type=int, default=60)
    tr.add_argument("--timeout", type=int, default=600)
    mp = sub.add_parser("mpirun", help="mpirun over the hostfile")
    mp.add_argument("--per-host", type=int, default=None, help="ranks per host (default: slots)")
    mp.add_argument("--timeout", type=int, default=600)
    ex = sub.add_parser("exec", help=argparse.SUPPRESS)
    ex.add_argument("--master-addr", default=None)
    sub.add_parser("node", help=argparse.SUPPRESS)
    sub.add_parser("env", help="print the torch.distributed environment of this MPI rank")
    args, rest = parser.parse_known_args(argv)
    command = rest[1:] if rest[:1] == ["--"] else rest
    try:
        cfg = load_config(args.config)
        if args.cmd == "hosts":
            down = probe(cfg)
            if down:
                sys.stderr.write(f"gpuprov-launch: {unreachable_message(down, cfg.hosts)}\n")
                return EXIT_UNREACHABLE
            sys.stdout.write(f"all {len(cfg.hosts)} hosts reachable\n")
            return 0
        if args.cmd == "env":
            # Under `gpuprov-launch exec` (what mpirun runs), MASTER_ADDR is rank 0's host.
            master = os.environ.get("MASTER_ADDR") or cfg.master_addr
            mapped = torch_env_from_mpi(os.environ, master, cfg.master_port)
            for k, v in {**mapped, **ifname_env(cfg.ifname)}.items():
                sys.stdout.write(f"{k}={v}\n")
            return 0
        if not command:
            sys.stderr.write(f"gpuprov-launch {args.cmd}: give the command after --\n")
            return EXIT_USAGE
        if args.cmd == "torchrun":
            return run_torchrun(
                cfg, args.nproc_per_node, args.run_id, args.join_timeout, args.timeout, command
            )
        if args.cmd == "mpirun":
            return run_mpirun(cfg, args.per_host, args.timeout, command)
        if args.cmd == "exec":
            return exec_rank(cfg, command, args.master_addr)
        return exec_node(cfg, command)
    except ConfigError as exc:
        sys.stderr.write(f"gpuprov-launch: {exc}\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
