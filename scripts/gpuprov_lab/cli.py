"""The command line of scripts/lab.py: up, reset, site, down, status, ssh."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gpuprov_lab import s3lab
from gpuprov_lab.common import (
    DEFAULT_CA_BUNDLE,
    DEFAULT_LAB,
    DEFAULT_MIRROR,
    HOST_WHEELHOUSE,
    INVENTORY_DIR,
    LAB_NAME_RE,
    LABEL,
    MIRROR_PORT,
    MIRROR_RELEASE,
    REPO,
    LabError,
    UsageError,
    log,
)
from gpuprov_lab.engine import (
    Docker,
    connect_engine,
    container_address,
    container_port,
    detect_cgroup,
    lab_containers,
    network_gateway,
    wait_ready,
)
from gpuprov_lab.hosts import (
    STATE_IMAGE_LABEL,
    container_name,
    create_container,
    docker_volume_name,
    ensure_key,
    ensure_mirror,
    ensure_s3,
    find_wheelhouse,
    forget_cached_facts,
    mirror_name,
    network_name,
    provision,
    read_verdict,
    remove_mirror,
    start_container,
)
from gpuprov_lab.images import ensure_image
from gpuprov_lab.inventory import (
    HostRuntime,
    LabPaths,
    build_inventory,
    default_inventory,
    dump_inventory,
    known_hosts_lines,
    read_group_vars,
    write_if_changed,
)
from gpuprov_lab.profiles import HostSpec, load_lab_data, parse_hosts
from gpuprov_lab.site import SiteProgress, ansible_env, ansible_tool


def read_state(paths: LabPaths) -> dict[str, Any]:
    if not paths.state_file.exists():
        return {}
    state: dict[str, Any] = json.loads(paths.state_file.read_text(encoding="utf-8"))
    return state


def current_hosts_spec(state: Mapping[str, Any]) -> str | None:
    """The --hosts spec of the lab as it is (state.json), None for a new lab."""
    hosts = state.get("hosts") or []
    return ",".join(f"{h['name']}={h['profile']}:{h['release']}" for h in hosts) or None


def recreate_set(recreate: Sequence[str] | None, hosts: Sequence[HostSpec]) -> set[str]:
    """Host names to replace: None none, [] all, else the named ones (known hosts only)."""
    names = [h.name for h in hosts]
    if recreate is None:
        return set()
    if not recreate:
        return set(names)
    unknown = sorted(set(recreate) - set(names))
    if unknown:
        raise UsageError(
            f"--recreate names hosts not in the lab: {', '.join(unknown)} "
            f"(hosts: {', '.join(names)})"
        )
    return set(recreate)


def cmd_reset(args: argparse.Namespace, paths: LabPaths) -> int:
    """`reset HOST...`: `up --recreate HOST...` of the lab as it is."""
    state = read_state(paths)
    if not current_hosts_spec(state):
        raise UsageError(f"lab {paths.name} is not up: nothing to reset")
    args.hosts = None
    args.recreate = list(args.reset_hosts)
    return cmd_up(args, paths)


def ensure_images(docker: Docker, hosts: Sequence[HostSpec], mirror: str) -> dict[str, str]:
    """release -> image tag of every release the hosts and the mirror need, built side by
    side where missing (each build holds its own lock)."""
    releases = sorted({h.release for h in hosts} | {MIRROR_RELEASE})
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(releases)) as pool:
        built = list(pool.map(lambda r: ensure_image(docker, r, mirror), releases))
    return dict(zip(releases, built, strict=True))


def cmd_images(args: argparse.Namespace, paths: LabPaths) -> int:
    """Build the images `up --hosts SPEC` will need, and nothing else: `make test` builds
    them beside the linters and unit tests."""
    hosts = parse_hosts(args.hosts or "default", load_lab_data())
    started = time.monotonic()
    images = ensure_images(connect_engine(), hosts, args.mirror)
    log(f"images {', '.join(sorted(images.values()))} ready in {time.monotonic() - started:.0f}s")
    return 0


def cmd_up(args: argparse.Namespace, paths: LabPaths) -> int:
    data = load_lab_data()
    spec = args.hosts or current_hosts_spec(read_state(paths)) or "default"
    hosts = parse_hosts(spec, data)
    recreate = recreate_set(args.recreate, hosts)
    wheelhouse = find_wheelhouse(args.wheelhouse)
    ca_bundle: str | None = args.ca_bundle or None
    if ca_bundle and not Path(ca_bundle).is_file():
        raise UsageError(f"--ca-bundle {ca_bundle}: no such file")
    docker = connect_engine()
    cgroup = detect_cgroup()
    started = time.monotonic()
    ensure_key(paths)
    pubkey = paths.key_file.with_suffix(".pub").read_text(encoding="utf-8")

    images = ensure_images(docker, hosts, args.mirror)

    net = network_name(paths.name)
    if not docker.exists("network", net):
        docker.run(["network", "create", "--label", f"{LABEL}={paths.name}", net])
        log(f"network {net}: created")
    repo_url = ensure_mirror(docker, paths, images[MIRROR_RELEASE])
    s3_vars = ensure_s3(docker, paths, net, images[MIRROR_RELEASE])

    existing = {c["Name"].lstrip("/"): c for c in lab_containers(docker, paths.name)}
    wanted = {container_name(paths.name, h.name) for h in hosts}
    for name in sorted(set(existing) - wanted):
        docker.run(["rm", "-f", "-v", name])
        docker.run(["volume", "rm", "-f", f"{name}-docker"], check=False)
        log(f"{name}: removed (not in --hosts)")

    def bring_up(host: HostSpec) -> tuple[HostRuntime, str, bool]:
        """Create, start or reuse one host and provision it: (runtime, summary, to log)."""
        name = container_name(paths.name, host.name)
        info = existing.get(name)
        image = images[host.release]
        action = "reused"
        if info is not None:
            labels = info["Config"].get("Labels") or {}
            if (
                host.name in recreate
                or labels.get("gpuprov.profile") != host.profile
                or labels.get("gpuprov.release") != host.release
            ):
                docker.run(["rm", "-f", "-v", name])
                docker.run(
                    ["volume", "rm", "-f", docker_volume_name(paths.name, host.name)],
                    check=False,
                )
                info = None
                action = "recreated"
            else:
                if labels.get("gpuprov.image") != image:
                    # Keep a host that someone may be working in; say how to refresh.
                    log(
                        f"{host.name}: runs {labels.get('gpuprov.image')}, not {image}; "
                        f"kept (`up --recreate` or `down` + `up` to refresh)"
                    )
                if not info["State"].get("Running"):
                    action = start_container(docker, paths.name, host, image, cgroup)
        if info is None:
            create_container(docker, paths.name, host, image, cgroup)
            action = "created" if action == "reused" else action
        info = docker.inspect(name)
        wait_ready(docker, name)
        changes = provision(
            docker, name, data.profiles[host.profile], pubkey, ca_bundle, wheelhouse
        )
        port = container_port(info)
        if port is None:
            raise LabError(f"{name}: no published SSH port")
        if any(c.startswith("pci profile") for c in changes):
            # Other hardware: the cached facts (gpu_info among them) describe the old one.
            forget_cached_facts(paths.name, host.name)
        detail = f" ({', '.join(changes)})" if changes and action == "reused" else ""
        line = f"{host.name}: {action}{detail}"
        loud = action != "reused" or bool(changes)
        if loud:
            log(line)
        return HostRuntime(host, name, port, container_address(info, net)), line, loud

    # The hosts side by side (a port two of them pick at once is retried by create_container).
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        results = list(pool.map(bring_up, hosts))
    runtimes = [r[0] for r in results]
    summary = [r[1] for r in results]

    # known_hosts from the hosts' own keys (read through docker exec)
    lines: list[str] = []
    for rt in runtimes:
        keys = docker.out(["exec", rt.container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"])
        lines += known_hosts_lines(rt.port, keys.splitlines())
    kh_changed = write_if_changed(paths.known_hosts, "\n".join(lines) + "\n", 0o600)

    in_lab_dir = paths.inventory.parent.resolve() == INVENTORY_DIR.resolve()
    extra = None if in_lab_dir else read_group_vars(INVENTORY_DIR / "group_vars")
    inventory = build_inventory(
        paths.name,
        runtimes,
        data.profiles,
        paths.key_file.resolve(),
        paths.known_hosts.resolve(),
        HOST_WHEELHOUSE if wheelhouse else None,
        extra,
        network_gateway(docker, net),
        repo_url,
    )
    inventory["all"]["children"]["lab"]["vars"].update(s3_vars)
    inv_changed = write_if_changed(paths.inventory, dump_inventory(inventory, paths.name))
    state = {
        "lab": paths.name,
        "inventory": str(paths.inventory.resolve()),
        "known_hosts": str(paths.known_hosts.resolve()),
        "hosts": [dataclasses.asdict(h) for h in hosts],
        "images": {h.release: images[h.release] for h in hosts},
        "mirror": {"container": mirror_name(paths.name), "url": repo_url},
        "cgroup": cgroup,
        "wheelhouse": str(wheelhouse) if wheelhouse else None,
    }
    write_if_changed(paths.state_file, json.dumps(state, indent=2) + "\n")
    if kh_changed:
        log(f"known_hosts: {paths.known_hosts}")
    if inv_changed:
        log(f"inventory: {paths.inventory}")
    if all(s.endswith(": reused") for s in summary) and not (kh_changed or inv_changed):
        log(f"lab {paths.name}: up, no change ({len(hosts)} hosts)")
    else:
        log(f"lab {paths.name}: up ({len(hosts)} hosts, {time.monotonic() - started:.0f}s)")
    return 0


def cmd_down(args: argparse.Namespace, paths: LabPaths) -> int:
    docker = connect_engine()
    state: dict[str, Any] = {}
    if paths.state_file.exists():
        state = json.loads(paths.state_file.read_text(encoding="utf-8"))
    names = [info["Name"].lstrip("/") for info in lab_containers(docker, paths.name)]
    if names:
        # One call: the docker CLI removes the containers side by side (each one's file
        # system, a torch environment among it, takes tens of seconds to delete).
        docker.run(["rm", "-f", "-v", *names])
        for name in names:
            log(f"{name}: removed")
    remove_mirror(docker, paths.name)
    s3lab.remove(docker, paths.name)
    images = docker.out(
        ["images", "-q", "--filter", f"label={STATE_IMAGE_LABEL}={paths.name}"]
    ).split()
    if images:
        docker.run(["rmi", "-f", *sorted(set(images))], check=False)
    volumes = docker.out(["volume", "ls", "-q", "--filter", f"label={LABEL}={paths.name}"]).split()
    if volumes:
        docker.run(["volume", "rm", "-f", *volumes])
    net = network_name(paths.name)
    if docker.exists("network", net):
        docker.run(["network", "rm", net])
        log(f"network {net}: removed")
    inventory = Path(state.get("inventory") or paths.inventory)
    for path in (inventory, paths.known_hosts):
        if path.exists():
            path.unlink()
    if paths.state_dir.exists():
        shutil.rmtree(paths.state_dir)
    log(f"lab {paths.name}: down")
    return 0


def cmd_status(args: argparse.Namespace, paths: LabPaths) -> int:
    docker = connect_engine()
    containers = lab_containers(docker, paths.name)
    if not containers:
        log(f"lab {paths.name}: no hosts")
        return 1
    net = network_name(paths.name)
    rows = [("HOST", "PROFILE", "RELEASE", "STATE", "SSH", "ADDRESS", "LAST VERDICT", "IMAGE")]
    for info in sorted(containers, key=lambda c: str(c["Name"])):
        labels = info["Config"].get("Labels") or {}
        port = container_port(info)
        host = str(labels.get("gpuprov.host", "?"))
        rows.append(
            (
                host,
                str(labels.get("gpuprov.profile", "?")),
                str(labels.get("gpuprov.release", "?")),
                str(info["State"].get("Status", "?")),
                f"127.0.0.1:{port}" if port else "-",
                container_address(info, net) or "-",
                read_verdict(host, info),
                str(labels.get("gpuprov.image", "?")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if docker.exists("container", mirror_name(paths.name)):
        info = docker.inspect(mirror_name(paths.name))
        address = container_address(info, net) or "-"
        print(
            f"mirror: {mirror_name(paths.name)} {info['State'].get('Status', '?')} "
            f"http://{address}:{MIRROR_PORT} (stand-in for NVIDIA's toolkit repository)"
        )
    print(f"inventory: {paths.inventory}")
    return 0


def cmd_ssh(args: argparse.Namespace, paths: LabPaths) -> NoReturn:
    docker = connect_engine()
    name = container_name(paths.name, args.host)
    if not docker.exists("container", name):
        raise UsageError(f"no host {args.host} in lab {paths.name}")
    port = container_port(docker.inspect(name))
    ssh = shutil.which("ssh")
    if ssh is None or port is None:
        raise LabError("ssh client or published port missing")
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    argv = [
        ssh,
        "-i",
        str(paths.key_file),
        "-p",
        str(port),
        "-o",
        f"UserKnownHostsFile={paths.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "IdentitiesOnly=yes",
        "root@127.0.0.1",
        *command,
    ]
    os.execv(ssh, argv)  # noqa: S606


def cmd_site(args: argparse.Namespace, paths: LabPaths) -> int:
    inventory = paths.inventory
    if not inventory.exists():
        raise UsageError(f"no inventory {inventory}: run `lab.py --lab {paths.name} up` first")
    extra = list(args.ansible_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    logfile = paths.state_dir / "site.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    env = ansible_env(paths.name)
    env["ANSIBLE_NOCOLOR"] = "1"
    argv = [ansible_tool("ansible-playbook"), "-i", str(inventory), "playbooks/site.yml", *extra]
    log(f"site.yml on lab {paths.name} (full log {logfile})")
    progress = SiteProgress()
    with (
        logfile.open("w", encoding="utf-8") as fh,
        subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as proc,
    ):
        assert proc.stdout is not None  # noqa: S101  (stdout=PIPE)
        for line in proc.stdout:
            fh.write(line)
            fh.flush()
            for msg in progress.feed(line):
                log(msg)
        for msg in progress.close():
            log(msg)
        rc = proc.wait()
    log(f"site.yml: {'ok' if rc == 0 else f'failed (rc {rc}, log {logfile})'}")
    return 0 if rc == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab.py",
        description="gpuprov lab: Debian systemd containers with simulated GPUs (PCI only)",
    )
    parser.add_argument(
        "--lab", default=DEFAULT_LAB, help="lab name (prefixes containers, network, state)"
    )
    parser.add_argument(
        "--inventory",
        type=Path,
        help="inventory path (default inventories/lab/hosts.yml, or .lab/NAME/hosts.yml)",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create or reuse the hosts, write the inventory")
    up.add_argument(
        "--hosts",
        default=None,
        help="preset (default, full, small, trixie) or name=profile[:release],... "
        "(default: the lab's current hosts, else the preset 'default')",
    )
    up.add_argument(
        "--recreate",
        nargs="*",
        metavar="HOST",
        default=None,
        help="replace these hosts (no name: every host), keeping the others "
        "(e.g. after the image recipe changed)",
    )
    reset = sub.add_parser("reset", help="recreate HOST(s), keeping the other hosts")
    reset.add_argument("reset_hosts", nargs="+", metavar="HOST")
    images = sub.add_parser("images", help="build the images up --hosts needs (nothing else)")
    images.add_argument("--hosts", default=None, help="as for up (default: the preset 'default')")
    for p in (up, reset, images):
        p.add_argument("--mirror", default=os.environ.get("GPUPROV_LAB_MIRROR", DEFAULT_MIRROR))
    for p in (up, reset):
        p.add_argument(
            "--ca-bundle",
            default=DEFAULT_CA_BUNDLE,
            help="PEM bundle the hosts should trust ('' for none)",
        )
        p.add_argument(
            "--wheelhouse",
            default=None,
            help="directory copied to /opt/gpuprov-wheels (default: pip's find-links; '' none)",
        )
    site = sub.add_parser(
        "site", help="run playbooks/site.yml on the lab (progress lines; log .lab/NAME/site.log)"
    )
    site.add_argument("ansible_args", nargs=argparse.REMAINDER, help="more ansible-playbook args")
    sub.add_parser("down", help="remove the containers, network, volumes and state")
    sub.add_parser("status", help="table of the hosts")
    ssh = sub.add_parser("ssh", help="ssh into a host")
    ssh.add_argument("host")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def fail(message: str, code: int) -> NoReturn:
    print(f"lab.py: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not LAB_NAME_RE.match(args.lab):
        fail(f"bad lab name {args.lab!r}", 2)
    paths = LabPaths(args.lab, args.inventory or default_inventory(args.lab))
    commands: dict[str, Callable[[argparse.Namespace, LabPaths], int]] = {
        "up": cmd_up,
        "images": cmd_images,
        "site": cmd_site,
        "reset": cmd_reset,
        "down": cmd_down,
        "status": cmd_status,
        "ssh": cmd_ssh,
    }
    try:
        return commands[args.cmd](args, paths)
    except UsageError as exc:
        fail(str(exc), 2)
    except LabError as exc:
        fail(str(exc), 1)
    except subprocess.CalledProcessError as exc:
        # e.g. a missing or failing tool (dpkg-scanpackages, gpg): one line, no traceback
        tool = exc.cmd[0] if isinstance(exc.cmd, list | tuple) else exc.cmd
        fail(f"{tool} failed (exit {exc.returncode}); `make prereqs` installs the lab's tools", 1)
    except FileNotFoundError as exc:
        fail(f"{exc.filename or exc}: not found; `make prereqs` installs the lab's tools", 1)
    except OSError as exc:
        fail(str(exc), 1)
    except KeyboardInterrupt:
        fail("interrupted", 1)
