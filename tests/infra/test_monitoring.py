"""Behaviour of a host after the gpu_monitoring role (playbooks/monitoring.yml).

pytest tests/infra/test_monitoring.py --hosts=ansible://all --ansible-inventory=INV
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
from conftest import role_vars

JOURNAL_UNITS = ("prometheus-node-exporter", "gpuprov-gpu-metrics")
DROPIN = "/etc/systemd/system/prometheus-node-exporter.service.d/gpuprov.conf"


@pytest.fixture
def mon(host: Any) -> dict[str, Any]:
    return role_vars(host, "gpu_monitoring")


def _listen(host: Any) -> tuple[str, int]:
    m = re.search(
        r"--web\.listen-address=\[?([^\]\s]+?)\]?:(\d+)\s", host.file(DROPIN).content_string
    )
    assert m, DROPIN
    return m.group(1), int(m.group(2))


def test_node_exporter_runs_as_its_debian_user(host: Any) -> None:
    svc = host.service("prometheus-node-exporter")
    assert svc.is_running
    assert svc.is_enabled
    users = {p.user for p in host.process.filter(comm="prometheus-node")}
    assert users == {"prometheus"}, users


def test_node_exporter_listens_on_the_inventory_address_and_port(
    host: Any, mon: dict[str, Any]
) -> None:
    address, port = _listen(host)
    assert port == int(mon["gpu_monitoring_port"])
    assert host.socket(f"tcp://{address}:{port}").is_listening
    # Only there: not on every address.
    if address not in ("0.0.0.0", "::"):  # noqa: S104  # the wildcard addresses themselves
        assert not host.socket(f"tcp://0.0.0.0:{port}").is_listening


def test_collector_timer_and_unprivileged_user(host: Any, mon: dict[str, Any]) -> None:
    assert host.service("gpuprov-gpu-metrics.timer").is_enabled
    assert host.service("gpuprov-gpu-metrics.timer").is_running
    u = host.user(mon["gpu_monitoring_user"])
    assert u.exists
    assert u.uid != 0
    assert u.shell.endswith("nologin")
    unit = host.file("/etc/systemd/system/gpuprov-gpu-metrics.service").content_string
    assert f"User={mon['gpu_monitoring_user']}" in unit


def test_textfile_is_fresh_and_has_the_driver_state(host: Any, mon: dict[str, Any]) -> None:
    prom = host.file(f"{mon['gpu_monitoring_textfile_dir']}/gpuprov.prom")
    assert prom.exists
    assert prom.user == mon["gpu_monitoring_user"]
    interval = int(mon["gpu_monitoring_interval"])
    # The file's age by the host's own clock, read in one command (the controller's clock may
    # disagree with the host's): the timer rewrites it every interval.
    path = shlex.quote(prom.path)
    age = int(host.check_output(f"echo $(( $(date +%s) - $(stat -c %Y {path}) ))"))
    assert 0 <= age < 10 * interval + 60, f"{prom.path} is {age} s old (interval {interval} s)"
    assert re.search(r"^gpuprov_gpu_driver_loaded [01]$", prom.content_string, re.M)
