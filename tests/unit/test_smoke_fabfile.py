"""scripts/fabfile.py: inventory reading, the status command and its parsing.

No SSH here: the remote output (nvidia-smi CSV, the PCI-scan fallback) is given as text,
and the sysfs fallback shell line is run locally against a temporary tree.
"""

from __future__ import annotations

import subprocess
import textwrap

import fabfile as fab  # scripts/fabfile.py (scripts/ is on pytest's pythonpath)
import pytest
import yaml

INVENTORY = {
    "all": {
        "vars": {"ansible_user": "admin"},
        "children": {
            "gpu_nodes": {
                "vars": {"ansible_ssh_private_key_file": "/keys/id"},
                "hosts": {"gpu1": {"ansible_host": "10.0.0.1", "ansible_port": 2222}},
            },
            "lab": {
                "hosts": {
                    "lab1": {
                        "ansible_host": "127.0.0.1",
                        "ansible_user": "root",
                        "gpu_info_sysfs_root": "/opt/gpuprov-sim/sys",
                        "ansible_ssh_common_args": "-o UserKnownHostsFile=/k/known -o X=y",
                    }
                }
            },
        },
    }
}


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(INVENTORY))
    return path


def test_load_inventory_merges_group_vars(inventory):
    hosts = {h.name: h for h in fab.load_inventory(inventory)}
    gpu1 = hosts["gpu1"]
    assert (gpu1.address, gpu1.port, gpu1.user, gpu1.key_file) == (
        "10.0.0.1",
        2222,
        "admin",
        "/keys/id",
    )
    assert gpu1.sysfs_root == "/sys"
    lab1 = hosts["lab1"]
    assert (lab1.user, lab1.port, lab1.sysfs_root) == ("root", 22, "/opt/gpuprov-sim/sys")
    assert fab.known_hosts_file(lab1) == "/k/known"


def test_limit(inventory):
    hosts = fab.load_inventory(inventory)
    assert [h.name for h in fab.limit_hosts(hosts, "lab1")] == ["lab1"]
    with pytest.raises(fab.UsageError, match="not in the inventory: nope"):
        fab.limit_hosts(hosts, "lab1,nope")


def test_bad_inventory_is_a_usage_error(tmp_path, capsys):
    assert fab.main(["-i", str(tmp_path / "missing.yml"), "status"]) == 2
    assert "cannot read inventory" in capsys.readouterr().err


def test_format_status_from_nvidia_smi():
    out = "0, NVIDIA H200, 00000000:19:00.0, 570.86.15, 143771, 31, 0\n"
    assert fab.format_status("g", out) == [
        [
            "g",
            "0",
            "NVIDIA H200",
            "00000000:19:00.0",
            "570.86.15",
            "143771",
            "31",
            "0",
            "nvidia-smi",
        ]
    ]


def test_status_falls_back_to_the_pci_scan(tmp_path):
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "device").write_text("0x1023\n")
    (dev / "class").write_text("0x030200\n")
    other = tmp_path / "bus" / "pci" / "devices" / "0000:00:02.0"
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x1234\n")
    (other / "class").write_text("0x030000\n")
    cmd = fab.status_command(str(tmp_path)).replace("nvidia-smi", "false-nvidia-smi-missing")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False).stdout
    assert fab.format_status("lab1", out) == [
        ["lab1", "0", "10de:1023", "0000:3b:00.0", "no driver", "-", "-", "-", "pci"]
    ]
    assert fab.format_status("cpu", "NO-SMI\n")[0][2] == "no NVIDIA device"


def test_host_error_is_one_clear_line():
    msg = fab.host_error(ConnectionRefusedError("boom\n[Errno 111] Connection refused"))
    assert msg == "unreachable or failed: ConnectionRefusedError: [Errno 111] Connection refused"


def test_group_vars_directories_apply_as_for_ansible(tmp_path):
    """The bug this fixes: ansible_user/ansible_port set in group_vars/ were not seen."""
    (tmp_path / "hosts.yml").write_text(
        textwrap.dedent(
            """\
            all:
              children:
                gpu_nodes:
                  hosts:
                    gpu1:
                      ansible_host: 10.0.0.1
                    gpu2:
                      ansible_host: 10.0.0.2
                      ansible_port: 2200
            """
        )
    )
    (tmp_path / "group_vars" / "gpu_nodes").mkdir(parents=True)
    (tmp_path / "group_vars" / "gpu_nodes" / "ssh.yml").write_text(
        "ansible_user: ops\nansible_port: 2222\n"
    )
    (tmp_path / "group_vars" / "all.yml").write_text(
        "ansible_ssh_private_key_file: \"{{ '/keys/' ~ ansible_user }}\"\n"
    )
    hosts = {h.name: h for h in fab.load_inventory(tmp_path / "hosts.yml")}
    assert (hosts["gpu1"].user, hosts["gpu1"].port, hosts["gpu1"].key_file) == (
        "ops",
        2222,
        "/keys/ops",
    )
    assert hosts["gpu2"].port == 2200  # a host variable beats group_vars


def test_an_unreadable_inventory_is_a_usage_error(tmp_path):
    with pytest.raises(fab.UsageError, match=r"cannot read inventory .*: no such file"):
        fab.load_inventory(tmp_path / "missing.yml")
