"""gpuprov-launch's launches (roles/dist_launch/files/gpuprov_launch.py), in this process.

The hosts are stand-ins: an `ssh` and an `mpirun` on PATH (shell scripts) that answer as
OpenSSH and Open MPI do: a host that is down prints OpenSSH's own line ("ssh: connect to host
ADDRESS port 22: No route to host", exit 255), a node command runs the shell code the test
gives. The pure parts and the real ssh client against an unroutable address are in
tests/unit/test_dist_launch.py; the real launch across hosts is the lab's
(tests/lab/test_launch_monitoring.py).
"""

from __future__ import annotations

import gc
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import gpuprov_launch as gl  # roles/dist_launch/files/gpuprov_launch.py
import l5_launch  # scripts/smoke/l5_launch.py: reads gpuprov-launch's messages
import pytest
from launch_config import launch_config

RAW = launch_config("lab-k40m", "lab-m40")
NO_ROUTE = "ssh: connect to host 10.0.0.2 port 22: No route to host"
FAKE_SSH = """#!/bin/sh
# ssh [-o OPTION]... ADDRESS [COMMAND...]
while [ "$1" = "-o" ]; do shift 2; done
addr=$1; shift
for down in $FAKE_SSH_DOWN; do
  if [ "$down" = "$addr" ]; then
    echo "ssh: connect to host $addr port 22: No route to host" >&2
    exit 255
  fi
done
[ "$*" = "true" ] && exit 0
echo "$addr $*" >> "$FAKE_LOG"
eval "$FAKE_NODE"
"""
FAKE_MPIRUN = """#!/bin/sh
echo "$*" >> "$FAKE_LOG"
eval "$FAKE_MPI"
"""


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The configuration file; `ssh` and `mpirun` stand-ins first on PATH; their log file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("mpirun", FAKE_MPIRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_SSH_DOWN", "")
    monkeypatch.setenv("FAKE_NODE", "exit 0")
    monkeypatch.setenv("FAKE_MPI", "exit 0")
    config = tmp_path / "launch.json"
    config.write_text(json.dumps(RAW))
    return config


# run_torchrun neither closes the nodes' output pipes nor waits for a node it killed
# (harmless in a process that exits next; Python warns when the Popen objects go, and keeps
# an unwaited one until its next subprocess): ignored where it runs, and the objects are let
# go before the test ends (the `reaped` fixture), not in a later test.
NODE_PIPES_LEFT_OPEN = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def reaped() -> Iterator[None]:
    yield
    time.sleep(0.1)  # a killed node's exit
    subprocess.run(["true"], check=True)  # the subprocess module waits for its leftovers here
    gc.collect()


def launched(fleet: Path) -> list[str]:
    log = fleet.parent / "log"
    return log.read_text().splitlines() if log.exists() else []


def test_messages_name_hosts_addresses_and_the_timeout() -> None:
    cfg = gl.parse_config(RAW)
    assert gl.unreachable_message({"lab-m40": NO_ROUTE}, cfg.hosts) == (
        f"1 of 2 hosts unreachable over SSH, nothing started: lab-m40 (10.0.0.2): {NO_ROUTE}"
    )
    assert gl.timeout_message("torchrun", 90, ["a", "b"]) == (
        "torchrun did not finish within 90s and was killed; still running on: a, b"
    )
    assert gl.timeout_message("mpirun", 90, []).endswith("still running on: all ranks")
    text = "ORTE was unable to reliably start one or more daemons (node 10.0.0.2)"
    assert gl.name_addresses(text, cfg.hosts) == ["lab-m40"]


def test_name_addresses_matches_whole_names_and_addresses() -> None:
    hosts = gl.parse_config(
        {
            **RAW,
            "hosts": [
                {"name": "gpu1", "address": "10.0.0.1", "slots": 1},
                {"name": "gpu12", "address": "10.0.0.12", "slots": 1},
            ],
        }
    ).hosts
    text = "ORTE was unable to reliably start one or more daemons on gpu12 (10.0.0.12)"
    assert gl.name_addresses(text, hosts) == ["gpu12"]


def test_hosts_says_all_reachable(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gl.main(["--config", str(fleet), "hosts"]) == 0
    assert capsys.readouterr().out == "all 2 hosts reachable\n"


@pytest.mark.parametrize("launcher", ["hosts", "torchrun", "mpirun"])
def test_a_down_host_stops_every_launcher_before_anything_starts(
    fleet: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    launcher: str,
) -> None:
    monkeypatch.setenv("FAKE_SSH_DOWN", "10.0.0.2")
    command = [] if launcher == "hosts" else ["--", "train.py"]
    assert gl.main(["--config", str(fleet), launcher, *command]) == gl.EXIT_UNREACHABLE == 3
    err = capsys.readouterr().err
    prefix = "gpuprov-launch" if launcher == "hosts" else f"gpuprov-launch {launcher}"
    assert err == (
        f"{prefix}: 1 of 2 hosts unreachable over SSH, nothing started: lab-m40 (10.0.0.2): "
        f"{NO_ROUTE}\n"
    )
    assert launched(fleet) == []
    if launcher != "hosts":
        # What L5 (scripts/smoke/l5_launch.py) and the lab test read from it.
        verdict = l5_launch.judge(launcher, 3, err, None, 5.1, 90)
        assert verdict["status"] == "fail"
        assert verdict["reason"] == f"{launcher}: host down: lab-m40 (10.0.0.2): {NO_ROUTE}"


@NODE_PIPES_LEFT_OPEN
def test_torchrun_starts_one_node_per_host_and_passes_their_output_on(
    fleet: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reaped: None,
) -> None:
    monkeypatch.setenv("FAKE_NODE", 'echo "node on $addr"')
    argv = ["--config", str(fleet), "torchrun", "--join-timeout", "45", "--run-id", "job7"]
    assert gl.main([*argv, "--", "train.py", "--epochs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == ["[lab-k40m] node on 10.0.0.1", "[lab-m40] node on 10.0.0.2"]
    nodes = sorted(launched(fleet))
    assert [line.split()[0] for line in nodes] == ["10.0.0.1", "10.0.0.2"]
    common = (
        "/usr/local/bin/gpuprov-launch node -- /opt/gpuprov/venv/bin/python -m "
        "torch.distributed.run --nnodes=2 --nproc-per-node=1 --max-restarts=0 "
        "--rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29400 --rdzv-id=job7 "
        "--rdzv-conf=join_timeout=45,is_host={} train.py --epochs 1"
    )
    assert nodes == [
        "10.0.0.1 " + common.format("true"),
        "10.0.0.2 " + common.format("false"),
    ]


@NODE_PIPES_LEFT_OPEN
def test_torchrun_names_each_failed_node_and_exits_with_the_worst(
    fleet: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reaped: None,
) -> None:
    monkeypatch.setenv("FAKE_NODE", 'case "$addr" in 10.0.0.1) exit 1;; *) exit 2;; esac')
    assert gl.main(["--config", str(fleet), "torchrun", "--", "train.py"]) == 2
    assert capsys.readouterr().err == (
        "gpuprov-launch torchrun: failed on lab-k40m (exit 1), lab-m40 (exit 2)\n"
    )


@NODE_PIPES_LEFT_OPEN
def test_torchrun_kills_a_job_past_its_timeout_naming_the_hosts(
    fleet: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reaped: None,
) -> None:
    monkeypatch.setenv("FAKE_NODE", "exec sleep 60")
    argv = ["--config", str(fleet), "torchrun", "--timeout", "1", "--", "train.py"]
    assert gl.main(argv) == gl.EXIT_TIMEOUT == 124
    err = capsys.readouterr().err
    assert err == (
        "gpuprov-launch torchrun: torchrun did not finish within 1s and was killed; still "
        "running on: lab-k40m, lab-m40\n"
    )
    assert l5_launch.judge("torchrun", 124, err, None, 1.2, 1)["reason"] == (
        f"torchrun: killed after 1s: {err.strip()}"
    )


def test_mpirun_runs_over_the_hostfile_with_rank0_on_the_first_host(
    fleet: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_MPI", "echo rank output")
    argv = ["--config", str(fleet), "mpirun", "--per-host", "1", "--", "python", "train.py"]
    assert gl.main(argv) == 0
    assert capsys.readouterr().out == "rank output\n"
    (line,) = launched(fleet)
    assert line.startswith("--hostfile /etc/gpuprov/hostfile -np 2 --map-by ppr:1:node ")
    # The hosts are not this machine: rank 0 runs on the hostfile's first host.
    assert line.endswith(
        "/usr/local/bin/gpuprov-launch exec --master-addr 10.0.0.1 -- python train.py"
    )


def test_mpirun_failure_names_the_host_its_output_mentions(
    fleet: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon = "ORTE was unable to reliably start one or more daemons.\n  node: 10.0.0.2\n"
    monkeypatch.setenv("FAKE_MPI", f"printf '{daemon}' >&2; exit 1")
    assert gl.main(["--config", str(fleet), "mpirun", "--", "python", "train.py"]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"{daemon}gpuprov-launch mpirun: exit 1 (the output names lab-m40)\n")


def test_mpirun_past_its_timeout_is_killed(
    fleet: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_MPI", "exec sleep 60")
    argv = ["--config", str(fleet), "mpirun", "--timeout", "1", "--", "python", "train.py"]
    assert gl.main(argv) == 124
    assert capsys.readouterr().err == (
        "gpuprov-launch mpirun: mpirun did not finish within 1s and was killed; still running "
        "on: all ranks\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read {path}: No such file or directory (the dist_launch role writes it)"),
        ("{", "{path} is not JSON: Expecting property name enclosed in double quotes"),
        (json.dumps({**RAW, "hosts": []}), "launch configuration: 'hosts' is empty"),
        (
            json.dumps({**RAW, "master_port": "29x"}),
            "launch configuration: bad value: invalid literal for int() with base 10: '29x'",
        ),
    ],
    ids=["missing", "not-json", "no-hosts", "bad-port"],
)
def test_a_bad_configuration_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "launch.json"
    if content is not None:
        path.write_text(content)
    assert gl.main(["--config", str(path), "hosts"]) == gl.EXIT_USAGE == 2
    assert capsys.readouterr().err.startswith("gpuprov-launch: " + message.format(path=path))


def test_a_launch_without_a_command_is_a_usage_error(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gl.main(["--config", str(fleet), "torchrun"]) == 2
    assert capsys.readouterr().err == "gpuprov-launch torchrun: give the command after --\n"
    assert launched(fleet) == []
