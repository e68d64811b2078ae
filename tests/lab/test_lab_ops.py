"""Lab ergonomics on a real lab: replace one host, re-publish a host whose port was taken.

Runs last in the session (conftest.LAST_MODULES): both tests leave hosts unprovisioned or
re-published. Nothing is simulated here: real containers, a real port taken by a real socket.
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any

from gpuprov_lab import ansible_inventory
from gpuprov_lab.inventory import ssh_argv

Lab = Any  # tests/lab/conftest.py's Lab (the `lab` fixture)


def _container_id(name: str) -> str:
    out = subprocess.run(
        ["docker", "inspect", "--format", "{{.Id}}", name],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _small_host(lab: Lab) -> str:
    """A host without torch (trixie) when there is one: the cheapest to commit."""
    trixie = [h for h, hv in lab.hosts.items() if hv.get("lab_release") == "trixie"]
    return (trixie or sorted(lab.hosts))[0]


def _squat(port: int, wait: float = 30) -> socket.socket:
    """A listening socket on port, once the stopped container's docker-proxy has let it go (it
    exits after `docker stop` returns). SO_REUSEADDR: the test's own SSH connection through
    that port leaves it in TIME_WAIT for a minute, which refuses a plain bind (EADDRINUSE)."""
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        else:
            return sock


def test_reset_replaces_one_host_and_keeps_the_others(lab: Lab) -> None:
    target = sorted(lab.hosts)[-1]
    before = {h: _container_id(hv["lab_container"]) for h, hv in lab.hosts.items()}
    proc = lab.lab_py("reset", target, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{target}: recreated" in proc.stdout
    after = {h: _container_id(hv["lab_container"]) for h, hv in lab.hosts.items()}
    assert after[target] != before[target]
    assert {h: i for h, i in after.items() if h != target} == {
        h: i for h, i in before.items() if h != target
    }
    unknown = lab.lab_py("reset", "no-such-host", check=False)
    assert unknown.returncode == 2
    assert "--recreate names hosts not in the lab: no-such-host" in unknown.stderr


def test_a_stopped_host_whose_port_was_taken_is_republished(lab: Lab) -> None:
    host = _small_host(lab)
    hv = lab.hosts[host]
    lab.ssh(host, "echo kept > /root/gpuprov-republish-marker")
    subprocess.run(["docker", "stop", hv["lab_container"]], capture_output=True, check=True)
    with _squat(int(hv["ansible_port"])) as squatter:
        squatter.listen(1)
        proc = lab.lab_py("up", check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{host}: re-published (port {hv['ansible_port']} was taken; now " in proc.stdout
    fresh = ansible_inventory.load(lab.inventory)[host]
    assert fresh["ansible_port"] != hv["ansible_port"]
    # The same machine (its files kept), reachable with the rewritten inventory and known_hosts.
    out = subprocess.run(
        ssh_argv(fresh, "cat /root/gpuprov-republish-marker"),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "kept"
