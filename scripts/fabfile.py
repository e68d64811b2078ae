#!/usr/bin/env python3
"""Fleet operations over SSH with Fabric, straight from an Ansible YAML inventory.

    scripts/fabfile.py -i INVENTORY [--limit host1,host2] status
    scripts/fabfile.py -i INVENTORY [--limit ...] smoke [--layers L0,L1] [--python PY]
    scripts/fabfile.py -i INVENTORY [--limit ...] plan [--reports DIR]
    scripts/fabfile.py -i INVENTORY [--limit ...] watch [--interval S] [--count N]

status  GPU table of every host, in parallel (ThreadingGroup): gpuprov's hardware probe
        (plugins/module_utils/gpu_probe.py, run with the host's python3 over SSH): NVML, else
        nvidia-smi, else the PCI scan of the host's sysfs (gpu_info_sysfs_root in the lab).
smoke   copy scripts/smoke/ to the hosts and run run_all.py; one line per host and layer.
plan    show the plan of each host from reports/plan/<host>.json (playbooks/plan.yml).
watch   the fleet-wide `watch nvidia-smi`: the status table every --interval seconds (a line
        per GPU; "no driver" rows for GPUs without one, "unreachable" for a host that is down).

Hosts come from the inventory's ansible_host, ansible_port, ansible_user and
ansible_ssh_private_key_file, read with Ansible's inventory API (group_vars/ and
host_vars/ included; a vault needs ANSIBLE_VAULT_PASSWORD_FILE). A host that is down gets a clear
per-host error, and the others still answer.

Exit codes: 0 every host answered, 1 some host failed or is down, 2 usage error.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprov_lab import ansible_inventory

REPO = Path(__file__).resolve().parent.parent
SMOKE_DIR = REPO / "scripts" / "smoke"
REMOTE_DIR = "/tmp/gpuprov-smoke"  # noqa: S108  # a per-run scratch copy, overwritten
# gpuprov's stdlib-only modules L3 needs next to the scripts (smokelib.COMPAT_MODULES).
COMPAT_MODULES = ("__init__.py", "model.py", "rules.py", "fatbin.py", "inspect_torch.py")
# gpuprov's one hardware probe (NVML, nvidia-smi, PCI scan), the gpu_info module's too: status
# runs it on each host as `python3 -` and reads the JSON it prints; smoke copies it.
PROBE = REPO / "plugins" / "module_utils" / "gpu_probe.py"


class UsageError(Exception):
    """Bad input (exit 2)."""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int
    user: str
    key_file: str | None
    sysfs_root: str
    ssh_common_args: str


def load_inventory(path: Path) -> list[Host]:
    """Hosts of an Ansible inventory, read with Ansible's own inventory API: group_vars/
    and host_vars/ next to it apply, as for ansible-playbook (the connection variables
    rendered with the host's variables)."""
    try:
        merged = ansible_inventory.load(path)
    except ansible_inventory.InventoryError as exc:
        raise UsageError(str(exc)) from exc
    hosts = []
    for name, hv in merged.items():
        hosts.append(
            Host(
                name=name,
                address=str(hv.get("ansible_host", name)),
                port=int(hv.get("ansible_port", 22)),
                user=str(hv.get("ansible_user", "root")),
                key_file=str(hv["ansible_ssh_private_key_file"])
                if hv.get("ansible_ssh_private_key_file")
                else None,
                sysfs_root=str(hv.get("gpu_info_sysfs_root", "/sys")),
                ssh_common_args=str(hv.get("ansible_ssh_common_args", "")),
            )
        )
    return hosts


def limit_hosts(hosts: Sequence[Host], limit: str | None) -> list[Host]:
    if not limit:
        return list(hosts)
    wanted = [x.strip() for x in limit.split(",") if x.strip()]
    unknown = sorted(set(wanted) - {h.name for h in hosts})
    if unknown:
        raise UsageError(f"--limit names hosts not in the inventory: {', '.join(unknown)}")
    return [h for h in hosts if h.name in wanted]


def known_hosts_file(h: Host) -> str | None:
    """The UserKnownHostsFile of ansible_ssh_common_args, if any (the lab sets one)."""
    for part in h.ssh_common_args.split():
        if part.startswith("UserKnownHostsFile="):
            return part.split("=", 1)[1]
    return None


def status_command(sysfs_root: str) -> str:
    """One shell line: the hardware probe's text (base64, so no quoting can break it) piped
    into the host's python3, which prints the probe's JSON answer."""
    code = base64.b64encode(PROBE.read_bytes()).decode("ascii")
    return f"printf %s {code} | base64 -d | python3 - --sysfs-root {shlex.quote(sysfs_root)}"


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def format_status(host: str, stdout: str) -> list[list[str]]:
    """Table rows from the probe's JSON: one per GPU; "no driver" rows for GPUs seen only on
    the PCI bus; one row when there is no NVIDIA device, or when the probe did not answer."""
    try:
        answer = json.loads(stdout)
        gpus = list(answer["gpus"])
    except (ValueError, KeyError, TypeError):
        tail = stdout.strip().splitlines()[-1:] or ["no output"]
        return [[host, "-", f"probe failed: {tail[0]}"[:100], "-", "-", "-", "-", "-", "-"]]
    if not gpus:
        return [[host, "-", "no NVIDIA device", "-", "-", "-", "-", "-", "pci"]]
    rows = []
    for g in gpus:
        if g.get("source") == "pci":
            pci_row = [host, str(g["index"]), str(g["pci_id"]), str(g["bus_id"]), "no driver"]
            rows.append([*pci_row, "-", "-", "-", "pci"])
            continue
        rows.append(
            [
                host,
                str(g["index"]),
                _cell(g.get("name")),
                _cell(g.get("bus_id")),
                _cell(g.get("driver_version")),
                _cell(g.get("memory_mib")),
                _cell(g.get("temperature_c")),
                _cell(g.get("utilization_pct")),
                _cell(g.get("source")),
            ]
        )
    return rows


def render(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def connections(hosts: Sequence[Host], timeout: int) -> list[Any]:
    """Fabric connections (strict host keys from the inventory's UserKnownHostsFile)."""
    from fabric import Connection

    conns = []
    for h in hosts:
        kwargs: dict[str, Any] = {"timeout": timeout}
        if h.key_file:
            kwargs["key_filename"] = h.key_file
        c = Connection(h.address, user=h.user, port=h.port, connect_kwargs=kwargs)
        kh = known_hosts_file(h)
        if kh:
            c.client.load_host_keys(kh)
        conns.append(c)
    return conns


def host_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return f"unreachable or failed: {type(exc).__name__}: {text}"[:300]


def run_parallel(
    hosts: Sequence[Host],
    command_for: Callable[[Host], str],
    timeout: int,
    run_timeout: int,
) -> dict[str, Any]:
    """host name -> fabric Result or the exception, all hosts at once (ThreadingGroup).

    Hosts sharing a command share one group; a host that is down yields its exception
    and never stops the others."""
    from fabric import ThreadingGroup
    from fabric.exceptions import GroupException

    by_command: dict[str, list[Host]] = {}
    for h in hosts:
        by_command.setdefault(command_for(h), []).append(h)
    out: dict[str, Any] = {}
    for command, members in by_command.items():
        conns = connections(members, timeout)
        names = {(c.host, c.port, c.user): h.name for c, h in zip(conns, members, strict=True)}
        group = ThreadingGroup.from_connections(conns)
        try:
            results = group.run(command, hide=True, warn=True, timeout=run_timeout)
        except GroupException as exc:
            results = exc.result
        for c, r in results.items():
            out[names[(c.host, c.port, c.user)]] = r
    return out


def cmd_status(hosts: Sequence[Host], timeout: int) -> int:
    rows = [["host", "gpu", "name", "bus", "driver", "mem MiB", "temp C", "util %", "source"]]
    results = run_parallel(hosts, lambda h: status_command(h.sysfs_root), timeout, timeout * 6)
    bad = 0
    for h in hosts:
        res = results.get(h.name)
        if res is None or isinstance(res, BaseException):
            bad += 1
            rows.append(
                [
                    h.name,
                    "-",
                    host_error(res or RuntimeError("no answer")),
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                ]
            )
        else:
            rows.extend(format_status(h.name, res.stdout))
    sys.stdout.write(render(rows))
    return 1 if bad else 0


def cmd_smoke(hosts: Sequence[Host], timeout: int, layers: str, python: str) -> int:
    rows = [["host", "layer", "status", "reason"]]
    bad = 0
    ready: list[Host] = []
    for h, c in zip(hosts, connections(hosts, timeout), strict=True):
        try:
            c.run(f"mkdir -p {REMOTE_DIR}", hide=True)
            c.run(f"mkdir -p {REMOTE_DIR}/compat", hide=True)
            for f in sorted(SMOKE_DIR.glob("*.py")):
                c.put(str(f), f"{REMOTE_DIR}/{f.name}")
            c.put(str(PROBE), f"{REMOTE_DIR}/{PROBE.name}")
            for name in COMPAT_MODULES:
                c.put(str(REPO / "compat" / name), f"{REMOTE_DIR}/compat/{name}")
            ready.append(h)
        except Exception as exc:  # a down host: one clear line, the others go on
            bad += 1
            rows.append([h.name, "-", "error", host_error(exc)])
    results = run_parallel(
        ready,
        lambda h: (
            f"python3 {REMOTE_DIR}/run_all.py --layers {layers} --required '' "
            f"--sysfs-root {h.sysfs_root} --python {python}"
        ),
        timeout,
        1800,
    )
    for h in ready:
        res = results.get(h.name)
        if res is None or isinstance(res, BaseException):
            bad += 1
            rows.append([h.name, "-", "error", host_error(res or RuntimeError("no answer"))])
            continue
        try:
            report = json.loads(res.stdout)
        except json.JSONDecodeError:
            bad += 1
            tail = (res.stdout + res.stderr).strip().splitlines()[-1:] or ["no output"]
            rows.append([h.name, "-", "error", f"run_all.py: {tail[0]}"[:200]])
            continue
        for v in report["layers"]:
            rows.append([h.name, v["layer"], v["status"], str(v["reason"])[:100]])
            bad += v["status"] == "fail"
    sys.stdout.write(render(rows))
    return 1 if bad else 0


def cmd_plan(hosts: Sequence[Host], reports: Path) -> int:
    rows = [["host", "gpus", "driver branch", "cuda", "torch", "container", "ok"]]
    missing = 0
    for h in hosts:
        f = reports / "plan" / f"{h.name}.json"
        if not f.exists():
            missing += 1
            rows.append([h.name, "-", "-", "-", f"no plan ({f} missing)", "-", "-"])
            continue
        doc = json.loads(f.read_text(encoding="utf-8"))
        p = doc.get("plan") or {}
        gpus = ", ".join(str(g.get("name")) for g in (doc.get("gpu_info") or {}).get("gpus", []))
        torch = f"{p.get('torch')}+{p.get('variant')}" if p.get("variant") else str(p.get("torch"))
        rows.append(
            [
                h.name,
                gpus or "-",
                str((p.get("driver") or {}).get("branch")),
                str(p.get("cuda")),
                torch,
                str((p.get("container") or {}).get("image", "-")),
                str(p.get("ok")),
            ]
        )
    sys.stdout.write(render(rows))
    return 1 if missing else 0


def cmd_watch(hosts: Sequence[Host], timeout: int, interval: float, count: int) -> int:
    """cmd_status again and again (clearing a terminal); `count` rounds, 0 = until Ctrl-C."""
    import time

    rounds, rc = 0, 0
    try:
        while True:
            if sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")
            stamp = time.strftime("%H:%M:%S")
            sys.stdout.write(f"gpuprov watch: {len(hosts)} hosts, every {interval:g}s  {stamp}\n")
            rc = cmd_status(hosts, timeout)
            sys.stdout.flush()
            rounds += 1
            if count and rounds >= count:
                return rc
            time.sleep(interval)
    except KeyboardInterrupt:
        return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-i", "--inventory", type=Path, required=True)
    parser.add_argument("--limit", help="comma-separated host names")
    parser.add_argument("--timeout", type=int, default=10, help="SSH connect timeout (s)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="GPU table of every host")
    smoke = sub.add_parser("smoke", help="run the smoke scripts on every host")
    smoke.add_argument("--layers", default="L0,L1,L2,L3,PERF,L4")
    smoke.add_argument("--python", default="/opt/gpuprov/venv/bin/python")
    plan = sub.add_parser("plan", help="show each host's plan (reports/plan)")
    plan.add_argument("--reports", type=Path, default=REPO / "reports")
    watch = sub.add_parser("watch", help="the status table, refreshed (fleet-wide watch)")
    watch.add_argument("--interval", type=float, default=2.0)
    watch.add_argument("--count", type=int, default=0, help="rounds (default: until Ctrl-C)")
    args = parser.parse_args(argv)
    try:
        hosts = limit_hosts(load_inventory(args.inventory), args.limit)
    except UsageError as exc:
        sys.stderr.write(f"fabfile.py: {exc}\n")
        return 2
    if not hosts:
        sys.stderr.write("fabfile.py: no hosts in the inventory\n")
        return 2
    if args.cmd == "status":
        return cmd_status(hosts, args.timeout)
    if args.cmd == "smoke":
        return cmd_smoke(hosts, args.timeout, args.layers, args.python)
    if args.cmd == "watch":
        return cmd_watch(hosts, args.timeout, args.interval, args.count)
    return cmd_plan(hosts, args.reports)


if __name__ == "__main__":
    sys.exit(main())
