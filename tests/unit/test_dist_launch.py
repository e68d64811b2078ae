"""The dist_launch role's Python: its filters (hostfile, slots, interface, known_hosts), the
gpuprov-launch wrapper (MPI -> torch.distributed environment, launcher commands, fail-fast
probe) and scripts/smoke/l5_launch.py's verdicts.

The wrapper runs for real in subprocesses (its `exec` step maps a real environment and execs
`env`; its probe runs the real ssh client against a TEST-NET address that answers nothing).
Setup facts are hand-written in the shape Ansible's setup module returns.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import dist_launch as flt  # plugins/filter/dist_launch.py
import gpuprov_launch as gl  # roles/dist_launch/files/gpuprov_launch.py
import pytest
from launch_config import launch_config
from smoke_modules import smoke

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "dist_launch"
WRAPPER = ROLE / "files" / "gpuprov_launch.py"


l5l = smoke("l5_launch")

# Public key blobs: a length-prefixed key type, then key material (shortened here).
ED25519 = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + b"k" * 32).decode()
ECDSA = base64.b64encode(b"\x00\x00\x00\x13ecdsa-sha2-nistp256" + b"p" * 16).decode()

FACTS = {
    "interfaces": ["lo", "eth0", "eth1-data"],
    "lo": {"ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0"}},
    "eth0": {"ipv4": {"address": "172.18.0.3", "netmask": "255.255.0.0"}},
    "eth1_data": {
        "ipv4": {"address": "10.1.0.7", "netmask": "255.255.255.0"},
        "ipv4_secondaries": [{"address": "10.9.0.7", "netmask": "255.255.255.0"}],
    },
    "processor_vcpus": 8,
    "ssh_host_key_ed25519_public": ED25519,
    "ssh_host_key_ecdsa_public": ECDSA,
}


# ---------------------------------------------------------------------------
# Filters


def test_the_interface_is_the_one_holding_the_peer_address() -> None:
    assert flt.dist_launch_ifname(FACTS, "172.18.0.3") == "eth0"
    assert flt.dist_launch_ifname(FACTS, "10.1.0.7") == "eth1-data"
    assert flt.dist_launch_ifname(FACTS, "10.9.0.7") == "eth1-data"  # a secondary address


def test_no_interface_with_the_address_names_it_and_the_interfaces() -> None:
    with pytest.raises(
        Exception, match=r"'192\.168\.5\.5'.*eth0=172\.18\.0\.3.*dist_launch_ifname"
    ):
        flt.dist_launch_ifname(FACTS, "192.168.5.5")


def test_network_is_the_cidr_of_that_interface() -> None:
    assert flt.dist_launch_network(FACTS, "172.18.0.3") == "172.18.0.0/16"
    assert flt.dist_launch_network(FACTS, "10.9.0.7") == "10.9.0.0/24"


def test_slots_are_gpus_else_cpus_unless_overridden() -> None:
    two_gpus = {**FACTS, "gpu_info": {"gpus": [{"index": 0}, {"index": 1}]}}
    assert flt.dist_launch_slots(two_gpus) == 2
    assert flt.dist_launch_slots(FACTS) == 8
    assert flt.dist_launch_slots({**FACTS, "gpu_info": {"gpus": []}}) == 8
    assert flt.dist_launch_slots(two_gpus, 4) == 4
    with pytest.raises(Exception, match="neither GPUs"):
        flt.dist_launch_slots({})


ENTRIES = [
    {"name": "a", "address": "10.0.0.1", "slots": 2, "facts": FACTS},
    {"name": "b", "address": "10.0.0.2", "slots": 8, "facts": FACTS},
]


def test_hostfile_keeps_inventory_order_and_slots() -> None:
    text = flt.dist_launch_hostfile(ENTRIES)
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == ["10.0.0.1 slots=2  # a", "10.0.0.2 slots=8  # b"]


def test_hostfile_refuses_an_empty_group_and_shared_addresses() -> None:
    with pytest.raises(Exception, match="dist_launch_hosts is empty"):
        flt.dist_launch_hostfile([])
    with pytest.raises(Exception, match=r"share the address 10\.0\.0\.1"):
        flt.dist_launch_hostfile([ENTRIES[0], {**ENTRIES[1], "address": "10.0.0.1"}])


def test_known_hosts_pin_every_host_key_by_name_and_address() -> None:
    lines = flt.dist_launch_known_hosts(ENTRIES).splitlines()
    assert lines == [
        f"a,10.0.0.1 ssh-ed25519 {ED25519}",
        f"a,10.0.0.1 ecdsa-sha2-nistp256 {ECDSA}",
        f"b,10.0.0.2 ssh-ed25519 {ED25519}",
        f"b,10.0.0.2 ecdsa-sha2-nistp256 {ECDSA}",
    ]
    with pytest.raises(Exception, match="host c reported no SSH host key"):
        flt.dist_launch_known_hosts([{"name": "c", "address": "x", "slots": 1, "facts": {}}])


def test_entries_come_from_each_hosts_own_facts_and_name_a_missing_one() -> None:
    hostvars = {
        "a": {
            "_dist_launch_addr": "10.0.0.1",
            "_dist_launch_nslots": "2",
            "_dist_launch_key_facts": {},
        },
    }
    assert flt.dist_launch_entries(["a"], hostvars) == [
        {"name": "a", "address": "10.0.0.1", "slots": 2, "facts": {}}
    ]
    with pytest.raises(Exception, match=r"host b .* no _dist_launch_addr"):
        flt.dist_launch_entries(["a", "b"], {**hostvars, "b": {}})


# ---------------------------------------------------------------------------
# The wrapper

RAW = launch_config("a", "b")


def test_mpi_environment_maps_to_torch_distributed() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "5",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
        "OMPI_COMM_WORLD_NODE_RANK": "1",
    }
    assert gl.torch_env_from_mpi(env, "10.0.0.1", 29500) == {
        "RANK": "3",
        "WORLD_SIZE": "5",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "3",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }


def test_without_mpirun_the_mapping_says_what_is_missing() -> None:
    with pytest.raises(gl.ConfigError, match="OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK"):
        gl.torch_env_from_mpi({"OMPI_COMM_WORLD_RANK": "0"}, "h", 1)


def test_config_errors_name_the_key() -> None:
    bad = {k: v for k, v in RAW.items() if k != "rdzv_port"}
    with pytest.raises(gl.ConfigError, match="'rdzv_port'"):
        gl.parse_config(bad)
    with pytest.raises(gl.ConfigError, match="host b has slots=0"):
        gl.parse_config({**RAW, "hosts": [RAW["hosts"][0], {**RAW["hosts"][1], "slots": 0}]})


def test_mpirun_command_uses_the_hostfile_slots_and_exec_per_rank() -> None:
    cfg = gl.parse_config(RAW)
    argv = gl.mpirun_argv(cfg, None, ["python", "train.py"])
    assert argv[:5] == ["mpirun", "--hostfile", "/etc/gpuprov/hostfile", "-np", "5"]
    assert argv[-7:] == [
        "/usr/local/bin/gpuprov-launch",
        "exec",
        "--master-addr",
        "10.0.0.1",
        "--",
        "python",
        "train.py",
    ]
    moved = gl.mpirun_argv(cfg, None, ["x"], "10.0.0.2")
    assert moved[moved.index("--master-addr") + 1] == "10.0.0.2"
    assert "btl_tcp_if_include" in argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "10.0.0.0/24"
    per_host = gl.mpirun_argv(cfg, 1, ["x"])
    assert per_host[per_host.index("-np") + 1] == "2"
    assert per_host[per_host.index("--map-by") + 1] == "ppr:1:node"
    rsh = per_host[per_host.index("plm_rsh_args") + 1]
    assert "BatchMode=yes" in rsh
    assert "ConnectTimeout=5" in rsh


def test_rank0_is_the_launching_host_when_it_is_in_the_hostfile_else_the_first() -> None:
    # Open MPI 4.1 starts rank 0 on its own node, whatever the hostfile's order (seen on the
    # lab: launched from the third host, rank 0 ran there and the first host's store never
    # came up). The seam is "is this address mine?": the hosts here are not this machine's.
    cfg = gl.parse_config(RAW)
    a, b = cfg.hosts
    assert gl.rank0_host(cfg.hosts, lambda addr: addr == b.address) == b
    assert gl.rank0_host(cfg.hosts, lambda addr: False) == a


def test_local_addresses_are_the_ones_this_machine_binds() -> None:
    assert gl.is_local_address("127.0.0.1") is True
    assert gl.is_local_address("192.0.2.1") is False  # TEST-NET-1, never assigned


def test_rank0_refuses_a_master_address_that_is_not_its_own(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    }
    base = [sys.executable, str(WRAPPER), "--config", str(_config_file(tmp_path)), "exec"]

    def rank0(master: str) -> subprocess.CompletedProcess[str]:
        argv = [*base, "--master-addr", master, "--", "env"]
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)

    wrong = rank0("192.0.2.1")
    assert wrong.returncode == 2
    assert "but MASTER_ADDR is 192.0.2.1, not an address of this machine" in wrong.stderr
    ok = rank0("127.0.0.1")
    assert ok.returncode == 0, ok.stderr
    assert "MASTER_ADDR=127.0.0.1" in ok.stdout.splitlines()


def test_torchrun_rendezvous_is_the_inventory_endpoint_and_only_the_master_hosts() -> None:
    cfg = gl.parse_config(RAW)
    a, b = cfg.hosts
    on_a = gl.torchrun_node_argv(cfg, a, 1, "job", 30, ["train.py"])
    on_b = gl.torchrun_node_argv(cfg, b, 1, "job", 30, ["train.py"])
    assert "--rdzv-endpoint=10.0.0.1:29400" in on_a
    assert "--nnodes=2" in on_a
    assert "--rdzv-conf=join_timeout=30,is_host=true" in on_a
    assert "--rdzv-conf=join_timeout=30,is_host=false" in on_b
    assert on_a[-1] == "train.py"


def _config_file(tmp_path: Path, **over: object) -> Path:
    path = tmp_path / "launch.json"
    path.write_text(json.dumps({**RAW, **over}))
    return path


def test_exec_maps_the_environment_of_a_real_process(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    }
    proc = subprocess.run(
        [
            sys.executable,
            str(WRAPPER),
            "--config",
            str(_config_file(tmp_path)),
            "exec",
            "--",
            "env",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    got = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert (got["RANK"], got["WORLD_SIZE"], got["LOCAL_RANK"]) == ("1", "2", "0")
    assert (got["MASTER_ADDR"], got["MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert got["GLOO_SOCKET_IFNAME"] == got["NCCL_SOCKET_IFNAME"] == "eth0"


def test_env_prints_the_master_address_exec_set(tmp_path: Path) -> None:
    # `gpuprov-launch mpirun -- gpuprov-launch env`: each rank runs it under exec, which set
    # MASTER_ADDR to rank 0's host; env prints that one, not the configuration's.
    env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    }
    base = [sys.executable, str(WRAPPER), "--config", str(_config_file(tmp_path))]
    run = [*base, "exec", "--master-addr", "10.0.0.2", "--", *base, "env"]
    proc = subprocess.run(run, capture_output=True, text=True, check=True, env=env)
    assert "MASTER_ADDR=10.0.0.2" in proc.stdout.splitlines()
    alone = subprocess.run([*base, "env"], capture_output=True, text=True, check=True, env=env)
    assert "MASTER_ADDR=10.0.0.1" in alone.stdout.splitlines()


def test_a_down_host_fails_both_launchers_at_once_and_is_named(tmp_path: Path) -> None:
    """192.0.2.1 (TEST-NET-1) answers nothing: the real ssh client gives up after 1 s."""
    config = _config_file(
        tmp_path,
        hosts=[{"name": "gone", "address": "192.0.2.1", "slots": 1}],
        master_addr="192.0.2.1",
        ssh_connect_timeout=1,
    )
    for launcher in ("torchrun", "mpirun"):
        proc = subprocess.run(
            [sys.executable, str(WRAPPER), "--config", str(config), launcher, "--", "true"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == gl.EXIT_UNREACHABLE, proc.stderr
        assert "1 of 1 hosts unreachable over SSH, nothing started: gone (192.0.2.1)" in proc.stderr


def test_a_missing_configuration_names_the_file_and_the_role(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(WRAPPER), "--config", str(tmp_path / "nope.json"), "hosts"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert f"cannot read {tmp_path / 'nope.json'}" in proc.stderr
    assert "dist_launch role" in proc.stderr


# ---------------------------------------------------------------------------
# L5 with the launchers

RESULT = {
    "world_size": 3,
    "backends": {
        "gloo": {
            "sum_ok": True,
            "sum_got": 6.0,
            "sum_expected": 6.0,
            "size_mib": 16,
            "busbw_gbs": 1.25,
        }
    },
}


def test_l5_launch_commands() -> None:
    tr = l5l.launch_argv("/gl", "torchrun", "/py", "/r.json", 90, 45, 16, 5)
    assert tr[:2] == ["/gl", "torchrun"]
    assert tr[tr.index("--") + 1].endswith("l5_distributed.py")
    mp = l5l.launch_argv("/gl", "mpirun", "/py", "/r.json", 90, 45, 16, 5)
    assert mp[:6] == ["/gl", "mpirun", "--per-host", "1", "--timeout", "90"]
    assert mp[mp.index("--") + 1] == "/py"
    with pytest.raises(ValueError, match="unknown launcher 'srun'"):
        l5l.launch_argv("/gl", "srun", "/py", "/r", 1, 1, 1, 1)


def test_l5_launch_verdicts() -> None:
    ok = l5l.judge("mpirun", 0, "", RESULT, 3.0, 90)
    assert ok["status"] == "pass"
    assert ok["reason"] == "mpirun: all_reduce across 3 ranks ok: gloo 16 MiB busbw 1.25 GB/s"
    down = l5l.judge(
        "torchrun",
        3,
        "gpuprov-launch torchrun: 1 of 3 hosts unreachable over SSH, nothing started: "
        "lab-cpu (172.18.0.4): ssh: connect to host 172.18.0.4 port 22: No route to host\n",
        None,
        3.1,
        90,
    )
    assert down["status"] == "fail"
    assert down["reason"].startswith("torchrun: host down: lab-cpu (172.18.0.4): ssh: connect")
    killed = l5l.judge("mpirun", 124, "gpuprov-launch mpirun: did not finish", None, 90.0, 90)
    assert killed["reason"] == "mpirun: killed after 90s: gpuprov-launch mpirun: did not finish"
    wrong = {**RESULT, "backends": {"gloo": {**RESULT["backends"]["gloo"], "sum_ok": False}}}
    assert l5l.judge("mpirun", 0, "", wrong, 1.0, 90)["status"] == "fail"
