#!/usr/bin/env python3
"""The gpuprov lab: Debian hosts in systemd containers, reachable over SSH.

    scripts/lab.py [--lab NAME] up [--hosts SPEC] [--recreate [HOST ...]] ...
    scripts/lab.py [--lab NAME] reset HOST [HOST ...]
    scripts/lab.py [--lab NAME] site [-- ANSIBLE-PLAYBOOK-ARGS ...]
    scripts/lab.py [--lab NAME] down
    scripts/lab.py [--lab NAME] status
    scripts/lab.py [--lab NAME] ssh HOST [-- CMD ...]

Each host is a Docker container running systemd and sshd, built from a local
base image (debootstrap + `docker import`; no registry needed), with SSH
published on 127.0.0.1 only.

The lab simulates one thing only: PCI devices. A host's profile
(scripts/lab/profiles.yaml) is written as a sysfs-shaped tree at
/opt/gpuprov-sim/sys inside the host, and the generated lab inventory sets
`gpu_info_sysfs_root: /opt/gpuprov-sim/sys` so that the gpu_info module (its
`sysfs_root` parameter, default /sys) reads that tree instead of the real
/sys. No other inventory sets it. Everything else (apt, systemd, docker, pip)
is real.

One more container, NAME-mirror, serves a signed apt repository that STANDS IN
for NVIDIA's container toolkit repository (unreachable from the lab): stub
packages with NVIDIA's package names, built by scripts/gpuprov_lab/aptrepo.py
once per recipe (cached under .lab/NAME/) and served with `python3 -m
http.server` on the lab network only. The lab inventory points the
nvidia_container_toolkit role's repository and key URLs at it; real fleets
never use it.

The code is the package scripts/gpuprov_lab/ (common, profiles, engine, images,
inventory, hosts, site, cli); this file is its entry point.

Exit codes: 0 ok, 1 failure, 2 usage error or no Docker engine.
"""

from __future__ import annotations

import sys

from gpuprov_lab.cli import main
from gpuprov_lab.inventory import ssh_argv

__all__ = ["main", "ssh_argv"]  # ssh_argv: for scripts/bench_site.py

if __name__ == "__main__":
    sys.exit(main())
