#!/usr/bin/env python3
"""L1 driver: the NVIDIA driver answers and every GPU is healthy.

NVML (nvidia-ml-py) when importable, else nvidia-smi. Reports the driver version and,
per GPU: name, memory, temperature, uncorrected volatile ECC errors, pending retired
pages, persistence mode. Fails on ECC errors, pending page retirement, a GPU hotter
than --max-temp, a driver that does not answer while NVIDIA devices sit on the PCI
bus, or a driver branch outside --allowed-branches (the controller computes that list
with gpu_compat_branch_check; the host has no compat data).

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import smokelib as sl

NO_DRIVER_ERROR = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"


def judge(
    answer: Mapping[str, Any] | None,
    pci: Sequence[Mapping[str, Any]],
    allowed_branches: Sequence[int] = (),
    max_temp: int = 85,
    started: float | None = None,
) -> dict[str, Any]:
    details: dict[str, Any] = {"pci_devices": len(pci)}
    if answer is None or answer.get("error") or not answer.get("gpus"):
        if not pci:
            return sl.verdict("L1", "driver", sl.SKIPPED, sl.NO_DEVICE, details, None, started)
        why = (answer or {}).get("error") or "NVML unavailable and nvidia-smi not found"
        details["error"] = why
        return sl.verdict(
            "L1",
            "driver",
            sl.FAIL,
            f"{len(pci)} NVIDIA device(s) on the PCI bus but no driver answers ({why})",
            details,
            sl.explain_hint(NO_DRIVER_ERROR),
            started,
        )
    driver = str(answer.get("driver_version") or "")
    gpus = list(answer["gpus"])
    details.update({"driver_version": driver, "source": answer.get("source"), "gpus": gpus})
    problems: list[str] = []
    warnings: list[str] = []
    for g in gpus:
        label = f"GPU {g.get('index')} {g.get('name')} ({g.get('bus_id')})"
        if (g.get("ecc_uncorrected") or 0) > 0:
            problems.append(f"{label}: {g['ecc_uncorrected']} uncorrected volatile ECC errors")
        if g.get("retired_pages_pending"):
            problems.append(f"{label}: retired pages pending (reset or reboot the GPU)")
        temp = g.get("temperature_c")
        if temp is not None and temp > max_temp:
            problems.append(f"{label}: {temp} C is above {max_temp} C")
        if g.get("persistence_mode") is False:
            warnings.append(f"{label}: persistence mode off")
    if pci and len(pci) != len(gpus):
        problems.append(f"the driver sees {len(gpus)} GPU(s) but the PCI bus has {len(pci)}")
    branch = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else None
    details["branch"] = branch
    if allowed_branches and branch is not None and branch not in allowed_branches:
        problems.append(
            f"driver branch {branch} does not drive every GPU here; allowed: "
            + ", ".join(str(b) for b in allowed_branches)
        )
    details["warnings"] = warnings
    if problems:
        return sl.verdict(
            "L1",
            "driver",
            sl.FAIL,
            "; ".join(problems),
            details,
            sl.explain_hint(problems[0]),
            started,
        )
    return sl.verdict(
        "L1",
        "driver",
        sl.PASS,
        f"driver {driver} drives {len(gpus)} GPU(s) via {answer.get('source')}",
        details,
        None,
        started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L1 driver")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--max-temp", type=int, default=85)
    parser.add_argument(
        "--allowed-branches", default="", help="comma-separated branches, e.g. 470,535"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    answer = sl.query_nvml() or sl.query_smi()
    allowed = [int(b) for b in args.allowed_branches.split(",") if b.strip()]
    v = judge(answer, sl.scan_pci(args.sysfs_root), allowed, args.max_temp, started)
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
