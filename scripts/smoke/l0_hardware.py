#!/usr/bin/env python3
"""L0 hardware: the GPUs the inventory expects vs the GPUs this host shows.

Detection: NVML (driver loaded), else nvidia-smi, else a PCI scan of
<sysfs-root>/bus/pci/devices (vendor 0x10de, display/3D class). The lab points
--sysfs-root at its simulated tree; real hosts use /sys.

    l0_hardware.py [--sysfs-root /sys] [--expected-count N] [--expected-model NAME ...]
                   [--expected-pci-id 10de:1023 ...] [--out FILE]

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import smokelib as sl


def detect(sysfs_root: str) -> dict[str, Any]:
    """GPUs seen by the best available source, plus the PCI scan for cross-checking."""
    pci = sl.scan_pci(sysfs_root)
    found = sl.query_nvml()
    if found is None:
        found = sl.query_smi()
        if found is not None and found.get("error"):
            found = None
    if found is None:
        return {"source": "pci" if pci else "none", "gpus": pci, "pci": pci}
    return {"source": found["source"], "gpus": found["gpus"], "pci": pci}


def matches(gpu: Mapping[str, Any], models: Sequence[str], pci_ids: Sequence[str]) -> bool:
    """A GPU matches the expected model by NVML name (case-insensitive) or by PCI ID."""
    name = str(gpu.get("name") or "").lower()
    if name and name in {m.lower() for m in models}:
        return True
    return str(gpu.get("pci_id") or "").lower() in {p.lower() for p in pci_ids}


def judge(
    seen: Mapping[str, Any],
    expected_count: int | None,
    models: Sequence[str],
    pci_ids: Sequence[str],
    started: float | None = None,
) -> dict[str, Any]:
    gpus = list(seen["gpus"])
    details: dict[str, Any] = {
        "source": seen["source"],
        "detected": len(gpus),
        "expected_count": expected_count,
        "expected_models": list(models),
        "gpus": [{k: g.get(k) for k in ("index", "bus_id", "pci_id", "name")} for g in gpus],
    }
    if expected_count is None and not models:
        if not gpus:
            return sl.verdict("L0", "hardware", sl.SKIPPED, sl.NO_DEVICE, details, None, started)
        return sl.verdict(
            "L0",
            "hardware",
            sl.PASS,
            f"{len(gpus)} NVIDIA device(s) via {seen['source']} (no expectation in inventory)",
            details,
            None,
            started,
        )
    if expected_count is not None and len(gpus) != expected_count:
        return sl.verdict(
            "L0",
            "hardware",
            sl.FAIL,
            f"expected {expected_count} NVIDIA GPU(s), detected {len(gpus)} via {seen['source']}"
            + (" (a GPU fell off the bus, or the inventory is wrong)" if gpus else ""),
            details,
            "check `lspci -nn -d 10de:` and the BMC; fix gpu_smoke_expected if the host changed",
            started,
        )
    if models or pci_ids:
        wrong = [g for g in gpus if not matches(g, models, pci_ids)]
        if wrong:
            seen_as = ", ".join(
                f"{g.get('bus_id')}={g.get('name') or g.get('pci_id')}" for g in wrong
            )
            return sl.verdict(
                "L0",
                "hardware",
                sl.FAIL,
                f"expected model {' or '.join(models) or ' or '.join(pci_ids)}, found {seen_as}",
                details,
                "gpu-compat lookup <PCI ID> names the card; fix gpu_smoke_expected.model",
                started,
            )
    if not gpus:
        return sl.verdict(
            "L0",
            "hardware",
            sl.PASS,
            "no NVIDIA device, as the inventory expects",
            details,
            None,
            started,
        )
    return sl.verdict(
        "L0",
        "hardware",
        sl.PASS,
        f"{len(gpus)} NVIDIA GPU(s) as expected via {seen['source']}",
        details,
        None,
        started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser(__doc__.splitlines()[0] if __doc__ else "L0")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--expected-count", type=int)
    parser.add_argument("--expected-model", action="append", default=[])
    parser.add_argument("--expected-pci-id", action="append", default=[])
    args = parser.parse_args(argv)
    started = time.monotonic()
    v = judge(
        detect(args.sysfs_root),
        args.expected_count,
        args.expected_model,
        args.expected_pci_id,
        started,
    )
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
