"""gpu_info's `reuse: run` (plugins/action/gpu_info.py): a role's preflight answers with this
run's last scan of the host instead of scanning again (issue 19: six scans per host per run
were five too many), and never with a scan of an earlier run, which may predate a hardware
or driver change. Real ansible-playbook runs over the local connection; the PCI tree is a
simulated one (the seam every gpu_info test uses: this machine has no GPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gpu_info_action  # registered by conftest.py (its file name clashes with the module's)
import pytest
from local_play import run_local_play
from pci_tree import K40M, write_pci


def test_run_id_is_the_parent_and_its_start_time(tmp_path: Path) -> None:
    parent = os.getppid()
    stat = tmp_path / str(parent) / "stat"
    stat.parent.mkdir()
    # comm may hold spaces and parentheses; field 22 (starttime) is the 20th after it
    after = ["S", *[str(n) for n in range(4, 22)], "987654", "0"]
    stat.write_text(f"{parent} (ansible (play) x) " + " ".join(after) + "\n", encoding="ascii")
    assert gpu_info_action.run_id(tmp_path) == f"{parent}:987654"
    assert gpu_info_action.run_id(tmp_path / "none") is None


def test_only_a_scan_of_this_run_with_the_same_arguments_and_user_is_reused() -> None:
    scan = {"gpus": [], "source": "pci"}
    stamp = {"run": "7:1", "args": {"sysfs_root": "/sys"}, "user": "root"}
    facts = {"gpu_info": scan, "gpu_info_scan": stamp}
    assert gpu_info_action.reusable(facts, dict(stamp)) == scan
    assert gpu_info_action.reusable(facts, {**stamp, "run": "7:2"}) is None
    assert gpu_info_action.reusable(facts, {**stamp, "args": {"sysfs_root": "/other"}}) is None
    # validate and plan scan without become; a root-only NVML answers the roles, which become
    assert gpu_info_action.reusable(facts, {**stamp, "user": "deploy"}) is None
    assert (
        gpu_info_action.reusable(
            {**facts, "gpu_info_scan": {**stamp, "run": None}}, {**stamp, "run": None}
        )
        is None
    )
    assert gpu_info_action.reusable({"gpu_info": scan}, stamp) is None


def _scan(name: str, sysfs: Path, reuse: str) -> dict[str, Any]:
    return {
        "name": name,
        "gpu_info": {"sysfs_root": str(sysfs), "reuse": reuse},
        "register": "scan",
    }


def _results(proc_stdout: str) -> dict[str, tuple[bool, int]]:
    doc = json.JSONDecoder().raw_decode(proc_stdout[proc_stdout.index("{") :])[0]
    return {
        t["task"]["name"]: (bool(h.get("reused")), len(h["ansible_facts"]["gpu_info"]["gpus"]))
        for t in doc["plays"][0]["tasks"]
        if t["task"]["name"].startswith("scan")
        for h in [t["hosts"]["h1"]]
    }


def test_a_run_reuses_its_own_scan_and_never_an_earlier_runs(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    write_pci(sysfs, K40M)
    second = sysfs / "bus" / "pci" / "devices" / "0000:3c:00.0"
    add_gpu = {
        "name": "a second GPU appears (between two scans of one run)",
        "ansible.builtin.command": {
            "argv": ["cp", "-r", str(second.with_name("0000:3b:00.0")), str(second)]
        },
        "run_once": True,
    }
    first = [
        _scan("scan 1", sysfs, "run"),  # nothing of this run yet: scans
        add_gpu,
        _scan("scan 2 reused", sysfs, "run"),  # this run's scan: the GPU added since is not seen
        _scan("scan 3 forced", sysfs, "never"),
        _scan("scan 4 reused", sysfs, "run"),  # this run's last scan, the forced one
    ]
    book = tmp_path / "book.yml"
    env = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    book.write_text(json.dumps([{"hosts": "h1", "gather_facts": False, "tasks": first}]))
    got = _results(run_local_play(book, tmp_path, env=env).stdout)
    assert got == {
        "scan 1": (False, 1),
        "scan 2 reused": (True, 1),
        "scan 3 forced": (False, 2),
        "scan 4 reused": (True, 2),
    }
    # The cached stamp is plain data: a template origin (the playbook's arguments) kept as a
    # tagged string is decoded again for every later task of every host.
    cached = [f.read_text(encoding="utf-8") for f in (tmp_path / "facts").iterdir()]
    assert cached
    assert all("gpu_info_scan" in c and "__ansible_type" not in c for c in cached)
    # A later run with the same fact cache: the cached scan is another run's, so it scans.
    second.joinpath("device").write_text("0x17fd\n", encoding="ascii")  # now an M40
    book.write_text(
        json.dumps(
            [{"hosts": "h1", "gather_facts": False, "tasks": [_scan("scan 5", sysfs, "run")]}]
        )
    )
    proc = run_local_play(book, tmp_path, env=env)
    assert _results(proc.stdout) == {"scan 5": (False, 2)}
    assert "0x17fd" in proc.stdout or "Tesla M40" in proc.stdout


def test_an_unknown_reuse_value_is_refused(tmp_path: Path) -> None:
    book = tmp_path / "book.yml"
    task = {"name": "scan", "gpu_info": {"sysfs_root": str(tmp_path), "reuse": "always"}}
    book.write_text(json.dumps([{"hosts": "h1", "gather_facts": False, "tasks": [task]}]))
    proc = run_local_play(book, tmp_path, rc=2)
    assert "gpu_info: reuse is 'always'; one of never, run" in proc.stdout


@pytest.mark.parametrize(
    "path",
    [
        "roles/nvidia_driver/tasks/preflight.yml",
        "roles/pytorch/tasks/preflight.yml",
        "roles/gpu_smoke/tasks/preflight.yml",
        "roles/dist_launch/tasks/preflight.yml",
        "roles/model_serving/tasks/preflight.yml",
        "roles/gpuprov_report/tasks/plan.yml",  # plan.yml's, and a plan reader's run alone
    ],
)
def test_the_preflights_reuse_and_the_driver_scans_after_a_change(path: str) -> None:
    root = Path(__file__).resolve().parents[2]
    assert "reuse: run" in (root / path).read_text(encoding="utf-8")
    converge = (root / "roles/nvidia_driver/tasks/converge.yml").read_text(encoding="utf-8")
    scans = converge.split("gpu_info:")
    assert len(scans) == 2, "the driver's converge scans once, after its changes"
    assert "reuse" not in scans[1].split("- name:")[0]
    # the first scan of a run (validate.yml) and the driver's verification never reuse
    for never in ("playbooks/validate.yml", "roles/nvidia_driver/tasks/service.yml"):
        assert "reuse:" not in (root / never).read_text(encoding="utf-8")
