"""PyTorch and the smoke test in the lab, for real (marked `lab`; needs a Docker engine).

Two bookworm hosts of the lab (Python 3.11, the wheelhouse's torch 2.13.0+cpu): one with a
simulated NVIDIA GPU and one without. A host whose Python has no such wheel (trixie: 3.13)
gets `pytorch_method: none` from the lab's group_vars: no environment, the reason printed,
its torch smoke layers skipped with the reason, and no part in L5. Only the PCI devices are
simulated; pip, torch, torchrun and the network between the hosts are real. The lab
settings of both roles come from inventories/lab/group_vars/all/{pytorch,gpu_smoke}.yml,
passed with -e @file because the fixture's inventory lives under .lab/<name>/.

Run: GPUPROV_LAB_HOSTS=small pytest -m lab tests/lab/test_pytorch_smoke.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from l5_distributed import TIMEOUT_RCS  # scripts/smoke: timeout(1) gave up or killed torchrun
from playbook_output import recap

REPO = Path(__file__).resolve().parents[2]
GROUP_VARS = REPO / "inventories" / "lab" / "group_vars" / "all"
EXTRA = ["-e", f"@{GROUP_VARS / 'pytorch.yml'}", "-e", f"@{GROUP_VARS / 'gpu_smoke.yml'}"]
JOIN_TIMEOUT = 45  # gpu_smoke_dist_join_timeout in the lab file
DIST_TIMEOUT = 90  # gpu_smoke_dist_timeout in the lab file
DOWN_JOIN = 15  # the join timeout of the run with a host down (it can only time out)
# The lab installs torch 2.13.0+cpu from the controller's offline wheelhouse (pip's find-links
# directory, copied to the hosts by scripts/lab.py up): without it nothing here can run.
NO_WHEELHOUSE = (
    "the lab has no wheelhouse: `scripts/lab.py up` found no directory of wheels among pip's "
    "find-links (`pip config list`). Put the wheel of torch 2.13.0+cpu for Python 3.11 in a "
    "directory and `pip config set global.find-links DIR`: the lab fixture's `scripts/lab.py up` "
    "copies it to the hosts"
)


def test_the_timeouts_are_the_lab_files():
    """The bounded-time test below judges L5 against these (runs without a lab)."""
    lab_vars = yaml.safe_load((GROUP_VARS / "gpu_smoke.yml").read_text())
    got = (lab_vars["gpu_smoke_dist_join_timeout"], lab_vars["gpu_smoke_dist_timeout"])
    assert got == (JOIN_TIMEOUT, DIST_TIMEOUT)


@pytest.fixture(scope="module")
def pair(lab):
    """(gpu host, cpu host): bookworm hosts, one with a simulated NVIDIA GPU, one without."""
    bookworm = [h for h, hv in lab.hosts.items() if hv.get("lab_release") == "bookworm"]
    gpu = [h for h in bookworm if lab.hosts[h]["lab_profile"] != "cpu"]
    cpu = [h for h in bookworm if lab.hosts[h]["lab_profile"] == "cpu"]
    if not gpu or not cpu:
        pytest.skip("needs a bookworm GPU-profile host and a bookworm cpu host (preset small)")
    if not lab.hosts[gpu[0]].get("lab_wheelhouse"):
        pytest.fail(NO_WHEELHOUSE, pytrace=False)
    return gpu[0], cpu[0]


@pytest.fixture(scope="module")
def no_torch(lab):
    """Hosts whose Python has no wheel in the wheelhouse (not bookworm): pytorch_method none."""
    return sorted(h for h, hv in lab.hosts.items() if hv.get("lab_release") != "bookworm")[:1]


NO_TORCH_REASON = "no PyTorch environment on this host (pytorch_method: none)"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return tmp_path_factory.mktemp("reports")


def play(lab, playbook, hosts, reports, *extra):
    return lab.ansible_playbook(
        REPO / "playbooks" / playbook,
        "--limit",
        ",".join(hosts),
        *EXTRA,
        "-e",
        f"gpuprov_report_dir={reports}",
        *extra,
    )


def test_pytorch_installs_from_the_wheelhouse_and_is_idempotent(lab, pair, no_torch, reports):
    first = play(lab, "pytorch.yml", [*pair, *no_torch], reports)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    # After site.yml (test_site.py) the first run is already a re-run: it is the proof.
    converged_before = all(c["changed"] == 0 for c in recap(first.stdout).values())
    second = first if converged_before else play(lab, "pytorch.yml", [*pair, *no_torch], reports)
    assert second.returncode == 0, second.stdout[-4000:]
    for host in [*pair, *no_torch]:
        assert recap(second.stdout)[host]["changed"] == 0, second.stdout[-4000:]
    for host in no_torch:
        # The role says why and installs nothing.
        assert f"{host}: {NO_TORCH_REASON}: the lab's wheelhouse has torch 2.13.0+cpu" in (
            " ".join(first.stdout.split())
        ), first.stdout[-4000:]
        assert recap(first.stdout)[host]["changed"] == 0, first.stdout[-4000:]
        absent = lab.ssh(host, "test -e /opt/gpuprov/venv/bin/python", check=False)
        assert absent.returncode == 1, host
    for host in pair:
        got = lab.ssh(
            host,
            "/opt/gpuprov/venv/bin/python -c "
            "'import torch; print(torch.__version__, torch.version.cuda)'",
        )
        assert got.stdout.split() == ["2.13.0+cpu", "None"]


def test_pytorch_refuses_a_cpu_build_on_a_gpu_host_unless_allowed(lab, pair, reports):
    out = play(
        lab,
        "pytorch.yml",
        pair,
        reports,
        "-e",
        '{"pytorch_allow_cpu_build": false}',
        "--tags",
        "pytorch_preflight",
    )
    assert out.returncode != 0
    assert "a CPU-only build uses none of them. Set pytorch_allow_cpu_build: true" in (
        out.stdout + out.stderr
    )


def load(reports, host):
    doc = json.loads((reports / "smoke" / f"{host}.json").read_text())
    return doc, {v["layer"]: v for v in doc["layers"]}


def test_smoke_verdicts_are_honest_and_all_reduce_passes(lab, pair, no_torch, reports):
    out = play(lab, "smoke.yml", [*pair, *no_torch], reports)
    assert out.returncode == 0, out.stdout[-6000:]
    gpu, cpu = pair
    _, v = load(reports, gpu)
    assert v["L0"]["status"] == "pass"
    assert v["L0"]["details"]["source"] == "pci"
    assert v["L0"]["details"]["detected"] >= 1
    for layer in ("L1", "L2", "L3", "PERF", "L4"):
        assert v[layer]["status"] in ("fail", "skipped"), (layer, v[layer])
    assert "no driver answers" in v["L1"]["reason"]
    # L3 measured the venv's torch from its binaries (no driver, no CUDA in the lab) and
    # names each GPU of the host (compute capability from the matrix, on the controller).
    l3 = v["L3"]
    assert re.search(r"CPU-only build: no CUDA kernels for .+ sm_\d+", l3["reason"]), l3
    if lab.hosts[gpu]["lab_profile"] == "k40m":
        assert "CPU-only build: no CUDA kernels for Tesla K40m sm_35" in l3["reason"]
    measured = l3["details"]["measured"]
    assert (measured["torch_version"], measured["cpu_only"]) == ("2.13.0+cpu", True)
    assert measured["sass"] == measured["ptx"] == []
    assert {g["result"] for g in l3["details"]["gpus"]} == {"no kernel image"}
    assert l3["hint"].startswith("gpu-compat explain 'no kernel image is available")
    assert "gpu-compat resolve --gpu '" in l3["hint"]
    _, w = load(reports, cpu)
    assert w["L0"]["reason"] == "no NVIDIA device, as the inventory expects"
    for layer in ("L1", "L2", "L3", "PERF"):
        assert (w[layer]["status"], w[layer]["reason"]) == (
            "skipped",
            "no NVIDIA device on this host",
        )
    assert w["L4"]["status"] == "pass (cpu)"
    assert w["L4"]["details"]["fit"]["final_loss"] < 50
    for report in (v, w):
        l5 = report["L5"]
        assert l5["status"] == "pass", l5
        assert l5["details"]["world_size"] == 2
        gloo = l5["details"]["backends"]["gloo"]
        assert gloo["sum_ok"]
        assert gloo["busbw_gbs"] > 0
    # A host without torch: its torch layers are skipped with the reason, and it is not one of
    # L5's ranks (world size 2 above): L5 is skipped there too, and not required.
    for host in no_torch:
        doc, n = load(reports, host)
        assert doc["ok"], doc["not_passed"]
        assert doc["required"] == ["L0"], doc["required"]
        assert n["L0"]["status"] == "pass", n["L0"]
        for layer in ("L3", "PERF", "L4"):
            got = (n[layer]["status"], n[layer]["reason"])
            assert got == ("skipped", NO_TORCH_REASON), n[layer]
        assert n["L5"]["status"] == "skipped", n["L5"]
        assert n["L5"]["reason"].startswith(f"{host} is not in gpu_smoke_dist_hosts ("), n["L5"]
        assert n["L5"]["reason"].endswith(f"; {NO_TORCH_REASON}"), n["L5"]


def test_report_collects_the_verdicts(lab, pair, no_torch, reports):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "report.py"), "--reports", str(reports), "--html"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    fleet = json.loads((reports / "fleet.json").read_text())
    assert {r["host"] for r in fleet["hosts"]} == {*pair, *no_torch}
    assert (reports / "fleet.md").exists()
    assert (reports / "fleet.html").exists()


def test_a_stopped_host_fails_l5_in_bounded_time(lab, pair, reports, capsys):
    """Runs last: stops the cpu host; L5 on the other host fails after the join timeout.

    Bounded by construction, not by a wall-clock threshold (the times are printed): L5 ran
    under the lab's timeouts, and the rendezvous's own join timeout ended it (its message,
    and an exit status that is not timeout(1)'s kill)."""
    gpu, cpu = pair
    container = lab.hosts[cpu]["lab_container"]
    subprocess.run(["docker", "stop", "-t", "2", container], check=True, capture_output=True)
    try:
        started = time.monotonic()
        # A shorter join timeout than the lab's, for this run only: the host is down, so the
        # rendezvous can only time out, and the lab's 45 s would be waited out in full.
        join = f"gpu_smoke_dist_join_timeout={DOWN_JOIN}"
        out = play(lab, "smoke.yml", pair, reports, "-e", join)
        wall = time.monotonic() - started
    finally:
        lab.start(cpu)
    assert out.returncode != 0
    _, v = load(reports, gpu)
    l5 = v["L5"]
    assert l5["status"] == "fail"
    details = l5["details"]
    with capsys.disabled():
        print(
            f"\n[pytorch_smoke] smoke.yml with a host down: {wall:.1f}s; L5 gave up after "
            f"{details.get('elapsed_s')}s (join timeout {details.get('join_timeout_s')}s)",
            flush=True,
        )
    assert l5["reason"].startswith("the rendezvous timed out: not every host joined")
    assert (details["join_timeout_s"], details["timeout_s"]) == (DOWN_JOIN, DIST_TIMEOUT)
    assert details["rc"] not in TIMEOUT_RCS, l5
