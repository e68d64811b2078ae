"""scripts/fabfile.py: inventory reading, the status command and its parsing.

No SSH here: the status command (the hardware probe piped into python3) runs locally
against a temporary sysfs tree and a fake nvidia-smi printing canned CSV.
"""

from __future__ import annotations

import subprocess
import textwrap

import fabfile as fab  # scripts/fabfile.py (scripts/ is on pytest's pythonpath)
import pytest
import yaml
from pci_tree import K40M, write_pci

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


H200_CSV = (
    "0, 00000000:19:00.0, 0x233510DE, NVIDIA H200, 143771 MiB, 570.86.15, GPU-1, 31, 0 %,"
    " Enabled, 0, No, 9.0\n"
)


def fake_smi(bin_dir, script):
    """An nvidia-smi on PATH: the only simulated part (no GPU here)."""
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script)
    smi.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def run_status(sysfs_root, path):
    """The status command as the host's shell runs it (python3 of PATH, no site-packages:
    no pynvml, as on a host without nvidia-ml-py)."""
    cmd = fab.status_command(str(sysfs_root))
    env = {"PATH": path, "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_status_from_nvidia_smi(tmp_path):
    """The probe runs on the 'host' (python3 -, its text on stdin) and asks nvidia-smi."""
    path = fake_smi(tmp_path / "bin", f"cat <<'EOF'\n{H200_CSV}EOF\n")
    out = run_status(tmp_path / "no-sysfs", path)
    assert fab.format_status("g", out) == [
        ["g", "0", "H200", "0000:19:00.0", "570.86.15", "143771", "31", "0", "nvidia-smi"]
    ]


def test_status_falls_back_to_the_pci_scan(tmp_path):
    """nvidia-smi present but the driver not loaded (as in the lab containers)."""
    path = fake_smi(tmp_path / "bin", "echo 'NVIDIA-SMI has failed'; exit 9\n")
    out = run_status(
        write_pci(tmp_path / "sys", K40M, ("0000:00:02.0", "0x1234", None, "0x030000")), path
    )
    assert fab.format_status("lab1", out) == [
        ["lab1", "0", "10de:1023", "0000:3b:00.0", "no driver", "-", "-", "-", "pci"]
    ]


def test_status_without_any_nvidia_device(tmp_path):
    path = fake_smi(tmp_path / "bin", "exit 9\n")
    out = run_status(tmp_path / "empty", path)
    assert fab.format_status("cpu", out) == [
        ["cpu", "-", "no NVIDIA device", "-", "-", "-", "-", "-", "pci"]
    ]


def test_status_of_a_host_whose_probe_did_not_answer():
    out = "bash: python3: command not found\n"
    assert fab.format_status("h", out) == [
        ["h", "-", "probe failed: bash: python3: command not found", "-", "-", "-", "-", "-", "-"]
    ]


def test_status_command_quotes_the_sysfs_root():
    assert fab.status_command("/opt/sim sys").endswith("--sysfs-root '/opt/sim sys'")


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
