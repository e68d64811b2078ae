#!/usr/bin/env python3
"""Benchmark: planning a fleet of 1,000 and 10,000 hosts (issue 23 item 5; goal: at most 1 s per
1,000 hosts).

The fleet is generated, seeded, from compat/data: GPU mixes weighted toward the common
data-centre cards (K80, K40m, M40, P100, V100, T4, A100, H100, L40S, and a tail of every other
GPU in gpus.yaml), 1-8 GPUs a host, about 10% mixed-generation hosts, 5% CPU-only hosts and a
few GPUs the matrix does not know; about 60% of the GPU hosts have a driver loaded (facts from
NVML or nvidia-smi, else from the PCI scan, as the gpu_info action plugin completes them);
Debian 12/13 and Ubuntu 22.04/24.04, each with the driver branches its OS packages
(compat.debian_packages(), roles/nvidia_driver/vars/Ubuntu.yml); and the pins an inventory
sets (nvidia_driver_branch, gpuprov_torch_version, gpuprov_expect_gpu), a few of them wrong.

The fleet depends on the seed and on compat/data (a GPU added to gpus.yaml joins the tail).

Each host is planned three ways: through the gpu_compat_plan filter as Ansible loads it
(ansible.cfg's filter_plugins) with the keyword arguments of playbooks/plan.yml; through
compat.plan_host directly; and directly with compat.plan's memo turned off (MEMO_SIZE = 0),
which shows what the memo saves. The memo lives in one process: ansible-playbook templates each
host's task in a worker forked for it, so there a plan costs about the no-memo figure (plus
loading the matrix in that worker), while this bench and scripts that plan many hosts in one
process get the memoised one. Each figure comes from a fresh child process (cold caches, its own
peak RSS); the matrix is loaded before the clock starts and timed on its own. Memory: the
child's peak RSS and, in a separate run (tracemalloc slows the code it traces), the
tracemalloc peak of planning with every plan kept, as Ansible keeps each host's fact.
Prints the figures side by side and the per-host cost of 10k against 1k (1.00 = flat). No
assertion: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

import compat
from compat import plan as compat_plan
from compat.data import Matrix

ROOT = Path(__file__).resolve().parents[1]
SEED = 23
SIZES = (1000, 10000)
WAYS = ("filter", "direct", "direct-nomemo")
PlanFn = Callable[..., dict[str, Any]]
Host = dict[str, Any]

# Card families by their names in compat/data/gpus.yaml, with their weight in the fleet;
# TAIL_WEIGHT is shared by every other GPU of gpus.yaml that has a PCI ID.
FAMILIES: dict[str, tuple[int, tuple[str, ...]]] = {
    "K80": (5, ("Tesla K80",)),
    "K40m": (3, ("Tesla K40m",)),
    "M40": (3, ("Tesla M40",)),
    "P100": (6, ("Tesla P100-PCIE-12GB", "Tesla P100-PCIE-16GB", "Tesla P100-SXM2-16GB")),
    "V100": (
        12,
        (
            "Tesla V100-PCIE-16GB",
            "Tesla V100-PCIE-32GB",
            "Tesla V100-SXM2-16GB",
            "Tesla V100-SXM2-32GB",
            "Tesla V100S-PCIE-32GB",
        ),
    ),
    "T4": (14, ("Tesla T4",)),
    "A100": (18, ("A100-PCIE-40GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "A100 80GB PCIe")),
    "H100": (14, ("H100 80GB HBM3", "H100 PCIe", "H100 NVL")),
    "L40S": (10, ("L40S",)),
}
TAIL_WEIGHT = 15
# GPUs a host has: data-centre boxes come in 1, 2, 4 and 8.
COUNTS = ((1, 22), (2, 20), (3, 2), (4, 26), (6, 2), (8, 28))
# (os_name as plan.yml passes it, weight); the packaged branches come from the data.
OSES = (("Debian 12", 35), ("Debian 13", 20), ("Ubuntu 22.04", 30), ("Ubuntu 24.04", 15))
# Drivers found loaded, per branch: releases NVIDIA shipped.
DRIVERS = {
    470: ("470.199.02", "470.239.06", "470.256.02"),
    535: ("535.104.12", "535.183.01", "535.261.03"),
    550: ("550.90.07", "550.127.05", "550.163.01"),
    570: ("570.86.15", "570.133.20", "570.172.08"),
    580: ("580.65.06", "580.82.07"),
}
TORCH_PINS = ("1.13.1", "2.1.2", "2.3.1", "2.4.1", "2.5.1", "2.5.1+cu124", "2.6.0", "2.7.1")
TORCH_PINS_KEPLER = ("1.12.1", "1.13.1", "2.0.1")
# A PCI ID the matrix does not know (a card newer than the data).
UNKNOWN_PCI = "10de:2ffe"
# MIXED_DRAW: of the hosts with more than one GPU (about 75%), the share that draws a second
# family (of another generation about 85% of the time): about 10% of all hosts.
CPU_ONLY, MIXED_DRAW, UNKNOWN_GPU = 0.05, 0.155, 0.005
DRIVER_LOADED, PIN_BRANCH, PIN_TORCH, WRONG_PIN = 0.60, 0.25, 0.15, 0.05


def packaged_branches() -> dict[str, list[int]]:
    """os_name -> the driver branches its OS packages, from where the playbooks read them."""
    debian = compat.debian_packages()
    ubuntu = yaml.safe_load((ROOT / "roles/nvidia_driver/vars/Ubuntu.yml").read_text())
    canonical = ubuntu["_nvidia_driver_packages_canonical"]
    out: dict[str, list[int]] = {}
    for os_name, _ in OSES:
        family, version = os_name.split()
        table = debian.get(version, {}) if family == "Debian" else canonical.get(version, {})
        out[os_name] = sorted(int(b) for b in table)
    return out


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, float]]) -> Any:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


def _families(m: Matrix) -> list[tuple[tuple[Any, ...], float]]:
    """(GPU rows of a family, weight); the tail is one family per GPU, TAIL_WEIGHT in all."""
    by_name = {g.name: g for g in m.gpus}
    named = {n for _, names in FAMILIES.values() for n in names}
    tail = [g for g in m.gpus if g.pci_ids and g.name not in named]
    return [
        (tuple(by_name[n] for n in names), float(weight)) for weight, names in FAMILIES.values()
    ] + [((g,), TAIL_WEIGHT / len(tail)) for g in tail]


def _draw(rng: random.Random, families: list[tuple[tuple[Any, ...], float]]) -> tuple[Any, str]:
    """A GPU and its PCI ID (one SKU a box: the same ID on each of its GPUs)."""
    gpu = rng.choice(_pick(rng, families))
    return gpu, gpu.pci_ids[0] if len(gpu.pci_ids) == 1 else rng.choice(gpu.pci_ids)


def _drives(m: Matrix, gpu: Any, branch: int) -> bool:
    arch = m.architectures[gpu.architecture]
    return arch.drives(branch) and branch >= (gpu.min_driver_branch or 0)


def _gpu_fact(gpu: Any, pci: str, index: int, driver: str | None, source: str) -> Host:
    """One GPU as the gpu_info fact has it after the action plugin (compat/plan's input)."""
    mem = None if gpu.memory_gib is None or driver is None else int(gpu.memory_gib * 1024) - 500
    return {
        "index": index,
        "pci_id": pci,
        "bus_id": f"0000:{0x17 + 0x10 * index:02x}:00.0",
        "name": gpu.name,
        "compute_capability": f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}",
        "architecture": gpu.architecture,
        "memory_mib": mem,
        "driver_version": driver,
        "source": source,
        "matrix": True,
    }


def _unknown_fact(index: int) -> Host:
    return {
        "index": index,
        "pci_id": UNKNOWN_PCI,
        "bus_id": f"0000:{0x17 + 0x10 * index:02x}:00.0",
        "name": "unknown",
        "compute_capability": None,
        "architecture": None,
        "memory_mib": None,
        "driver_version": None,
        "source": "pci",
        "matrix": False,
    }


def make_host(
    m: Matrix,
    rng: random.Random,
    name: str,
    packaged: dict[str, list[int]],
    families: list[tuple[tuple[Any, ...], float]],
) -> Host:
    """One inventory host: its gpu_info fact and the variables plan.yml passes to the filter."""
    os_name = _pick(rng, OSES)
    branches = packaged[os_name]
    if rng.random() < CPU_ONLY:
        expect = rng.random() < WRONG_PIN  # a CPU host left in gpu_nodes: refused
        return _host(name, [], os_name, branches, None, None, expect)
    count = _pick(rng, COUNTS)
    rows = [_draw(rng, families)] * count
    if count > 1 and rng.random() < MIXED_DRAW:
        other = _draw(rng, families)
        if other[0].architecture != rows[0][0].architecture:
            rows[count // 2 :] = [other] * (count - count // 2)
    usable = [b for b in branches if all(_drives(m, g, b) for g, _ in rows)]
    driver, source = None, "pci"
    if rng.random() < DRIVER_LOADED and usable:
        driver = rng.choice(DRIVERS[rng.choice(usable)])
        source = "nvml" if rng.random() < 0.9 else "nvidia-smi"
    gpus = [_gpu_fact(g, pci, i, driver, source) for i, (g, pci) in enumerate(rows)]
    if rng.random() < UNKNOWN_GPU:
        gpus[-1] = _unknown_fact(len(gpus) - 1)
    pin: Any = None
    if rng.random() < PIN_BRANCH or gpus[-1]["matrix"] is False:
        wrong = rng.random() < WRONG_PIN or not usable
        pin = rng.choice(branches) if wrong else rng.choice(usable)
        pin = str(pin) if rng.random() < 0.5 else pin  # YAML inventories spell it both ways
    torch = None
    if rng.random() < PIN_TORCH:
        kepler = any(g.architecture == "kepler" for g, _ in rows)
        torch = rng.choice(TORCH_PINS_KEPLER if kepler else TORCH_PINS)
    return _host(name, gpus, os_name, branches, pin, torch, True)


def _host(
    name: str,
    gpus: list[Host],
    os_name: str,
    branches: list[int],
    pin: Any,
    torch: str | None,
    expect_gpu: bool,
) -> Host:
    driver = next((g["driver_version"] for g in gpus if g["driver_version"]), None)
    facts = {
        "gpus": gpus,
        "source": gpus[0]["source"] if gpus else "unknown",
        "driver_version": driver,
        "smi_error": None,
        "nvidia_module_loaded": driver is not None,
        "nouveau_loaded": False,
        "unknown_pci_ids": [f"{g['pci_id']} at {g['bus_id']}" for g in gpus if not g["matrix"]],
    }
    return {
        "host": name,
        "gpu_info": facts,
        "vars": {
            "packaged_branches": branches,
            "os_name": os_name,
            "driver_branch": pin,
            "torch": torch,
            "expect_gpu": expect_gpu,
        },
    }


def fleet(n: int, seed: int = SEED, m: Matrix | None = None) -> list[Host]:
    """``n`` hosts, the same for the same seed (rack r001.. with 40 nodes a rack)."""
    m = m or compat.load()
    rng = random.Random(seed)  # noqa: S311  # a reproducible fleet, not a secret
    packaged, families = packaged_branches(), _families(m)
    return [
        make_host(m, rng, f"r{i // 40 + 1:03d}n{i % 40 + 1:02d}", packaged, families)
        for i in range(n)
    ]


def plan_filter() -> PlanFn:
    """gpu_compat_plan as Ansible loads it for plan.yml (plugins/filter, ansible.cfg's
    filter_plugins; the directory is also added by path, whichever config Ansible found)."""
    os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
    from ansible.plugins.loader import filter_loader

    filter_loader.add_directory(str(ROOT / "plugins" / "filter"))
    plugin = filter_loader.get("gpu_compat_plan")
    if plugin is None:
        raise SystemExit(f"gpu_compat_plan not found in {ROOT / 'plugins' / 'filter'}")
    fn: PlanFn = plugin.j2_function
    return fn


def plan_via_filter(fn: PlanFn, host: Host) -> dict[str, Any]:
    """The call of playbooks/plan.yml's "Plan the stack from the matrix" task."""
    v = host["vars"]
    return fn(
        host["gpu_info"],
        packaged_branches=v["packaged_branches"],
        os_name=v["os_name"],
        driver_branch=v["driver_branch"],
        torch=v["torch"],
        expect_gpu=v["expect_gpu"],
        host=host["host"],
    )


def plan_direct(host: Host) -> dict[str, Any]:
    v = host["vars"]
    return compat.plan_host(
        list(host["gpu_info"]["gpus"]),
        packaged_branches=v["packaged_branches"],
        os_name=v["os_name"],
        driver_branch=v["driver_branch"],
        torch=v["torch"],
        expect_gpu=v["expect_gpu"],
        host=host["host"],
        sysfs_root=host["gpu_info"].get("sysfs_root"),
    )


def plan_fleet(hosts: Sequence[Host], way: str) -> list[dict[str, Any]]:
    """One plan per host, in order, through the filter or compat.plan_host."""
    if way == "filter":
        fn = plan_filter()
        return [plan_via_filter(fn, h) for h in hosts]
    return [plan_direct(h) for h in hosts]


def measure(n: int, way: str, trace: bool = False) -> dict[str, Any]:
    """Plan ``n`` hosts in this process (way: filter, direct or direct-nomemo, which turns
    compat.plan's memo off); the figures of one child run."""
    start = time.perf_counter()
    compat.load()
    fn = plan_filter() if way == "filter" else None
    loaded = time.perf_counter() - start
    if way == "direct-nomemo":
        compat_plan.MEMO_SIZE = 0
    hosts = fleet(n)
    rss_before = peak_rss_mib()
    if trace:
        tracemalloc.start()
    start, cpu = time.perf_counter(), time.process_time()
    plans = [plan_via_filter(fn, h) for h in hosts] if fn else [plan_direct(h) for h in hosts]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1] if trace else None
    tracemalloc.stop()
    ok = sum(1 for p in plans if p["ok"])
    refused = sum(1 for p in plans if p["refused"])
    return {
        "hosts": n,
        "way": way,
        "load_s": loaded,
        "seconds": seconds,
        "cpu_s": cpu,
        "rss_before_mib": rss_before,
        "rss_mib": peak_rss_mib(),
        "traced_mib": None if peak is None else peak / 2**20,
        "ok": ok,
        "refused": refused,
        "no_plan": len(plans) - ok - refused,
    }


def peak_rss_mib() -> float:
    """This process's peak RSS: VmHWM (Linux; ru_maxrss there also counts the parent's image
    that the child was forked from), else ru_maxrss."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(n: int, way: str, trace: bool) -> dict[str, Any]:
    """``measure`` in a fresh interpreter: cold caches, its own peak RSS."""
    cmd = [sys.executable, __file__, "--child", str(n), "--way", way]
    out = subprocess.run([*cmd, *(["--trace"] if trace else [])], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def fleet_summary(hosts: Sequence[Host]) -> str:
    gpus = [h["gpu_info"]["gpus"] for h in hosts]
    mixed = sum(1 for g in gpus if len({x["architecture"] for x in g} - {None}) > 1)
    v = [h["vars"] for h in hosts]
    return (
        f"{len(hosts)} hosts: {sum(len(g) for g in gpus)} GPUs, {sum(not g for g in gpus)} "
        f"CPU-only, {mixed} mixed-generation, "
        f"{sum(1 for g in gpus if g and g[0]['driver_version'])} with a driver loaded, "
        f"{sum(x['driver_branch'] is not None for x in v)} driver-branch pins, "
        f"{sum(x['torch'] is not None for x in v)} torch pins"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--way", choices=WAYS, default="filter", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.way, args.trace)))
        return 0
    sizes = sorted(args.sizes)
    print(f"fleet (seed {SEED}): {fleet_summary(fleet(sizes[-1]))}")
    print(f"the goal: at most 1 s per 1,000 hosts; {os.cpu_count()} CPUs, load {_load()}")
    per_k: dict[tuple[int, str], float] = {}
    for n in sizes:
        runs = {w: _child(n, w, False) for w in WAYS}
        traced = {w: _child(n, w, True) for w in WAYS if w != "direct-nomemo"}
        print(f"\n{n} hosts{'':22}" + "".join(f"{w:>16}" for w in WAYS))

        def row(label: str, cells: list[str]) -> None:
            print(f"{label:32}" + "".join(f"{c:>16}" for c in cells))

        row(
            "ok / refused / no plan",
            [f"{r['ok']}/{r['refused']}/{r['no_plan']}" for r in runs.values()],
        )
        row("matrix (+ filter) load", [f"{r['load_s'] * 1000:.0f} ms" for r in runs.values()])
        row("planning, wall", [f"{r['seconds']:.2f} s" for r in runs.values()])
        row("planning, CPU", [f"{r['cpu_s']:.2f} s" for r in runs.values()])
        for w, r in runs.items():
            per_k[(n, w)] = r["seconds"] * 1000 / n
        row("per 1,000 hosts, wall", [f"{per_k[(n, w)]:.3f} s" for w in WAYS])
        row("per 1,000 hosts, CPU", [f"{r['cpu_s'] * 1000 / n:.3f} s" for r in runs.values()])
        row(
            "peak RSS (before planning)",
            [f"{r['rss_mib']:.0f} ({r['rss_before_mib']:.0f}) MiB" for r in runs.values()],
        )
        row(
            "tracemalloc peak, plans kept",
            [f"{traced[w]['traced_mib']:.1f} MiB" if w in traced else "-" for w in WAYS],
        )
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        flat = [f"{w} {per_k[(hi, w)] / per_k[(lo, w)]:.2f}" for w in WAYS]
        print(f"\nper-host cost, {hi} hosts / {lo} hosts (flat: 1.00): {', '.join(flat)}")
    return 0


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    raise SystemExit(main())
