"""The launch configuration the dist_launch role writes for gpuprov-launch (a 2-host example),
shared by the tests of the role's wrapper (test_dist_launch, test_gpuprov_launch)."""

from __future__ import annotations

from typing import Any


def launch_config(first: str, second: str) -> dict[str, Any]:
    """Hosts `first` (10.0.0.1, 2 slots, the master) and `second` (10.0.0.2, 3 slots)."""
    return {
        "hosts": [
            {"name": first, "address": "10.0.0.1", "slots": 2},
            {"name": second, "address": "10.0.0.2", "slots": 3},
        ],
        "master_addr": "10.0.0.1",
        "master_port": 29500,
        "rdzv_port": 29400,
        "ifname": "eth0",
        "mpi_network": "10.0.0.0/24",
        "hostfile": "/etc/gpuprov/hostfile",
        "python": "/opt/gpuprov/venv/bin/python",
        "ssh_connect_timeout": 5,
        "launcher": "/usr/local/bin/gpuprov-launch",
    }
