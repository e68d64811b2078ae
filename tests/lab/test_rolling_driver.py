"""A rolling driver change across the lab's GPU nodes (issue 23 item 4), on the converged lab.

playbooks/driver.yml verifies every GPU node at once, then rolls the nodes whose driver must
change in batches: drain hook, the driver role, its verification, undrain hook. The hooks here
append to a file on the controller (they run there, as a Slurm or kubectl command would).

1. Every node must change (a new Debian mirror for the driver's components), and the mirror is
   unreachable, so the first batch's node fails: the rollout stops there. That node was drained
   and is not undrained; the other nodes were neither drained nor touched (their sources file
   still names the old mirror).
2. The mirror fixed: only the node that failed is rolled again (drained, repaired, verified,
   undrained); the others never changed, so they are verified in the first play and left alone.
The fresh converge in test_site.py shows every node rolled in its own batch between the hooks.

The mirror change is an input change like a branch change: the state probe finds it and the
role converges the node; what differs from a branch change is only the packages apt installs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playbook_output import recap

PLAYBOOKS = ("playbooks/plan.yml", "playbooks/driver.yml")
SOURCES = "/etc/apt/sources.list.d/gpuprov-debian-nonfree.sources"
DEAD_MIRROR = "http://127.0.0.1:9/debian"


def _hooks(log: Path) -> dict[str, Any]:
    def hook(word: str) -> list[str]:
        return ["sh", "-c", f'echo "{word} {{{{ inventory_hostname }}}}" >> {log}']

    return {
        "gpuprov_driver_serial": "1",
        "gpuprov_driver_drain_command": hook("drain"),
        "gpuprov_driver_undrain_command": hook("undrain"),
    }


def _run(lab: Any, log: Path, *extra: str) -> Any:
    return lab.ansible_playbook(
        PLAYBOOKS[0], PLAYBOOKS[1], "-e", json.dumps(_hooks(log)), *extra, timeout=1800
    )


def _events(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [(w, h) for w, h in (line.split() for line in log.read_text().splitlines())]


def _mirror_of(lab: Any, host: str) -> str:
    return str(lab.ssh(host, f"cat {SOURCES} 2>/dev/null || true").stdout)


@pytest.fixture(scope="module")
def gpu_nodes(lab: Any) -> list[str]:
    nodes = sorted(lab.groups["gpu_nodes"])
    assert len(nodes) >= 2, f"a rollout needs two GPU nodes; the lab has {nodes}"
    return nodes


def test_a_failed_batch_stops_the_rollout_and_only_verified_nodes_are_undrained(
    lab: Any, gpu_nodes: list[str], tmp_path: Path
) -> None:
    log = tmp_path / "hooks.log"
    before = {h: _mirror_of(lab, h) for h in gpu_nodes}

    # 1. Every node must change; the first batch fails and the rollout stops.
    first = _run(lab, log, "-e", f"nvidia_driver_debian_mirror_url={DEAD_MIRROR}")
    assert first.returncode != 0, first.stdout[-3000:]
    events = _events(log)
    assert len(events) == 1, events
    assert events[0][0] == "drain", events
    failed = events[0][1]
    assert failed in gpu_nodes, events
    assert "127.0.0.1:9" in first.stdout, first.stdout[-3000:]
    for host in set(gpu_nodes) - {failed}:
        assert _mirror_of(lab, host) == before[host], host  # never reached: untouched

    # 2. Fixed: only the node that failed is rolled again (drained, converged, verified,
    #    undrained); the others never changed, so they are verified and left alone.
    log.unlink()
    second = _run(lab, log)
    assert second.returncode == 0, second.stdout[-4000:]
    assert _events(log) == [("drain", failed), ("undrain", failed)]
    assert "127.0.0.1:9" not in _mirror_of(lab, failed)
    counters = recap(second.stdout)
    assert counters[failed]["changed"] > 0, second.stdout[-3000:]
    for host in set(gpu_nodes) - {failed}:
        assert (counters[host]["changed"], counters[host]["failed"]) == (0, 0), (
            host,
            second.stdout[-3000:],
        )
