#!/usr/bin/env python3
"""L2 container runtime: `docker run --gpus all IMAGE nvidia-smi -L` lists the host's GPUs.

Skipped (never passed) when the host has no working NVIDIA driver, no docker CLI, or no
NVIDIA container toolkit (nvidia-container-cli / nvidia-ctk). Compares GPU UUIDs seen
inside the container with `nvidia-smi -L` on the host.

Prints one JSON verdict. Exit 0 pass/skipped, 1 fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import smokelib as sl

UUID_RE = re.compile(r"\(UUID:\s*(GPU-[0-9a-fA-F-]+)\)")


def parse_list(text: str) -> list[str]:
    """GPU UUIDs from `nvidia-smi -L` output, in order."""
    return UUID_RE.findall(text)


def judge(
    host_uuids: Sequence[str],
    container_rc: int,
    container_out: str,
    image: str,
    started: float | None = None,
) -> dict[str, Any]:
    inside = parse_list(container_out)
    details: dict[str, Any] = {"image": image, "host": list(host_uuids), "container": inside}
    if container_rc != 0:
        tail = container_out.strip().splitlines()[-3:]
        return sl.verdict(
            "L2",
            "container",
            sl.FAIL,
            f"docker run --gpus all {image} nvidia-smi -L exited {container_rc}: "
            + " | ".join(tail),
            details,
            None,
            started,
        )
    if sorted(inside) != sorted(host_uuids):
        return sl.verdict(
            "L2",
            "container",
            sl.FAIL,
            f"the container sees {len(inside)} GPU(s), the host {len(host_uuids)}",
            details,
            None,
            started,
        )
    return sl.verdict(
        "L2",
        "container",
        sl.PASS,
        f"the container sees the same {len(inside)} GPU(s) as the host",
        details,
        None,
        started,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = sl.base_parser("L2 container runtime")
    parser.add_argument("--image", default="ubuntu:22.04")
    # The PCI scan L0 uses (the lab's simulated tree), so L2's reason agrees with L0.
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    started = time.monotonic()
    smi = shutil.which("nvidia-smi")
    v: dict[str, Any]
    host = sl.run([smi, "-L"], 60) if smi else None
    if host is None or host.returncode != 0 or not parse_list(host.stdout):
        pci = sl.scan_pci(args.sysfs_root)
        reason = sl.NO_DEVICE if not pci else "no working NVIDIA driver (see L1)"
        v = sl.verdict("L2", "container", sl.SKIPPED, reason, {}, None, started)
    elif not shutil.which("docker"):
        v = sl.verdict("L2", "container", sl.SKIPPED, "docker CLI not installed", {}, None, started)
    elif not (shutil.which("nvidia-container-cli") or shutil.which("nvidia-ctk")):
        v = sl.verdict(
            "L2",
            "container",
            sl.SKIPPED,
            "NVIDIA container toolkit not installed",
            {},
            None,
            started,
        )
    else:
        cmd = ["docker", "run", "--rm", "--gpus", "all", args.image, "nvidia-smi", "-L"]
        try:
            proc = sl.run(cmd, args.timeout)
            v = judge(
                parse_list(host.stdout),
                proc.returncode,
                proc.stdout + proc.stderr,
                args.image,
                started,
            )
        except subprocess.TimeoutExpired:
            v = sl.verdict(
                "L2",
                "container",
                sl.FAIL,
                f"docker run did not finish within {args.timeout:.0f}s (image pull?)",
                {"image": args.image},
                None,
                started,
            )
    sl.emit(v, args.out)
    return sl.exit_code(v)


if __name__ == "__main__":
    sys.exit(main())
