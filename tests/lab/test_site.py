"""The CI flow of playbooks/site.yml against the lab, in order, in one lab session.

1. `site.yml --check --diff` on fresh hosts fails nothing and changes nothing on them;
2. `site.yml` converges (failed=0, unreachable=0 on every host);
3. a second run changes nothing (the roles' verifying fast path), and drift injected into
   seven roles on one host is found and repaired there only, then nothing changes, and
   `--check --diff` on the converged lab predicts no change;
4. the testinfra suite passes, run exactly as users run it;
5. pinning a driver branch that drops the K40m fails before any change, naming the GPU
   and the allowed branches;
6. with one host stopped, plan.yml finishes on the others and the recap names it.

The tests depend on each other's effects and run in file order (conftest.py runs this
module first among the lab tests, so its first test sees fresh hosts). The toolkit
packages come from the lab's mirror container, a signed stand-in for NVIDIA's repository
(scripts/lab/aptrepo.py), set up by `scripts/lab.py up`.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import shared_runs
import yaml
from async_jobs import (
    JUPYTER_DOWNLOAD,
    check_jupyterlab_download,
    jupyterlab_results,
    pip_jobs,
)
from gpuprov_lab.run_doc import json_document
from lab_skips import DEFAULT_PRESET, INFRA_DEFAULT, infra_passed, infra_skips
from playbook_output import recap

import compat

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "scripts" / "lab" / "profiles.yaml"
Lab = Any  # tests/lab/conftest.py's Lab (the `lab` fixture)

SITE = "playbooks/site.yml"
# The example pin: a branch that dropped Kepler (checked against the data below).
PINNED_BRANCH = 535
PLAN = "playbooks/plan.yml"
JSON_CALLBACK = "ansible.builtin.json"
DIFF_LINES_MAX = 80  # per file, task and host; the longest configuration diff is about 40

# Files whose presence and content the check run must leave as they were.
WATCHED_FILES = (
    "/etc/docker/daemon.json",
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/etc/apt/apt.conf.d/51gpuprov-nvidia-blacklist",
    "/etc/ansible/facts.d/gpuprov.fact",
)
WATCHED_DIRS = ("/etc/apt/sources.list.d", "/etc/apt/keyrings", "/usr/share/keyrings", "/etc/cdi")

# Installed packages with their selection state (hold shows as "hi"), then the watched
# files and directories with checksums.
SNAPSHOT = (
    "LC_ALL=C dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' | sort; "
    "for f in "
    + " ".join(WATCHED_FILES)
    + "; do if [ -e $f ]; then sha256sum $f; else echo absent $f; fi; done; "
    "find " + " ".join(WATCHED_DIRS) + " -type f -exec sha256sum {} + 2>/dev/null | sort; true"
)

TIMINGS: dict[str, float] = {}


# ---------------------------------------------------------------------------
# helpers


def parse_json_output(stdout: str) -> dict[str, Any]:
    """The json callback's document, with profile_tasks' lines printed around it."""
    doc = json_document(stdout)
    assert doc is not None, f"no json callback output in:\n{stdout[-3000:]}"
    return doc


def changed_tasks(doc: dict[str, Any], host: str) -> list[str]:
    names = []
    for play in doc["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(host)
            if result and result.get("changed"):
                names.append(f"{play['play']['name']} / {task['task']['name']}")
    return names


# playbooks/driver.yml's second play: only the GPU nodes whose driver must change, in batches.
ROLLING_DRIVER_PLAY = "Roll the NVIDIA driver out in batches to the nodes whose driver changes"


def play_hosts(doc: dict[str, Any], name: str) -> set[str]:
    """The hosts any task of the play ``name`` ran on (one entry per serial batch)."""
    return {
        host
        for play in doc["plays"]
        if play["play"]["name"] == name
        for task in play["tasks"]
        for host in task["hosts"]
    }


def driver_hooks(reports: Path) -> list[tuple[str, str]]:
    """(drain|undrain, host) in the order the lab's hooks ran (inventories/lab/group_vars)."""
    log = reports / "driver-hooks.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(w, h) for w, h in (line.split() for line in lines)]


def diff_lines(doc: dict[str, Any]) -> dict[str, int]:
    """'host / task / file' -> lines of --diff text (before, after, prepared) a task printed
    for one file (a gpuprov_files task prints one diff per file it writes)."""
    lines: dict[str, int] = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                diffs = result.get("diff") or []
                for d in diffs if isinstance(diffs, list) else [diffs]:
                    if not isinstance(d, dict):
                        continue
                    count = sum(
                        str(d.get(k) or "").count("\n") for k in ("before", "after", "prepared")
                    )
                    if count:
                        where = f"{host} / {task['task']['name']} / {d.get('after_header', '')}"
                        lines[where] = lines.get(where, 0) + count
    return lines


def failed_results(doc: dict[str, Any]) -> list[str]:
    found = []
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed") or result.get("unreachable"):
                    msg = str(result.get("msg", ""))[:400]
                    found.append(f"{host}: {task['task']['name']}: {msg}")
    return found


def run_playbook(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, *args: str, callback: str = ""
) -> tuple[subprocess.CompletedProcess[str], float]:
    if callback:
        monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", callback)
    else:
        monkeypatch.delenv("ANSIBLE_STDOUT_CALLBACK", raising=False)
    start = time.monotonic()
    proc = lab.ansible_playbook(*args)  # reports: the lab's directory (report_dir)
    return proc, time.monotonic() - start


def snapshot(lab: Lab, host: str) -> str:
    return lab.ssh(host, SNAPSHOT).stdout


def report_time(capsys: pytest.CaptureFixture[str], label: str, seconds: float) -> None:
    TIMINGS[label] = seconds
    with capsys.disabled():
        print(f"\n[test_site] {label}: {seconds:.1f}s", flush=True)


@pytest.fixture(scope="module")
def report_dir(lab: Lab) -> Path:
    """The lab's report directory (not the repository's reports/): later modules read the
    smoke and serving reports of this converge there."""
    return Path(lab.reports)


@pytest.fixture(scope="module")
def k40m_host(lab: Lab) -> str:
    hosts = lab.groups.get("gpu_k40m") or []
    if not hosts:
        pytest.skip("the lab has no k40m host (GPUPROV_LAB_HOSTS)")
    return hosts[0]


@pytest.fixture(scope="module")
def converged(lab: Lab) -> dict[str, Any]:
    """Set by test_site_converges; later tests need a converged lab."""
    return {}


# ---------------------------------------------------------------------------
# the flow


def test_check_mode_changes_nothing(
    lab: Lab,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hosts = lab.groups["lab"]
    before = {h: snapshot(lab, h) for h in hosts}
    already = [h for h, snap in before.items() if re.search(r"^docker\.io ", snap, re.MULTILINE)]
    if already:
        pytest.skip(
            f"hosts not fresh (docker.io installed on {', '.join(already)}): the lab was kept "
            f"from an earlier session; `scripts/lab.py --lab {lab.name} down` first"
        )

    proc, seconds = run_playbook(
        lab, monkeypatch, SITE, "--check", "--diff", callback=JSON_CALLBACK
    )
    report_time(capsys, "site.yml --check --diff (fresh hosts)", seconds)
    doc = parse_json_output(proc.stdout)
    assert proc.returncode == 0, "\n".join(failed_results(doc)) or proc.stderr[-3000:]
    assert sorted(doc["stats"]) == sorted(hosts)
    for host, stats in doc["stats"].items():
        assert stats["failures"] == 0, (host, failed_results(doc))
        assert stats["unreachable"] == 0, host
    # The check run did evaluate the roles: on fresh GPU hosts it predicts changes.
    for host in lab.groups["gpu_nodes"]:
        assert doc["stats"][host]["changed"] > 0, (host, doc["stats"][host])
    # Every fresh node's driver must change; a check changes none, so all are predicted in
    # one batch (playbooks/driver.yml's serial under --check; the converge rolls them one by one).
    batches = [p for p in doc["plays"] if p["play"]["name"] == ROLLING_DRIVER_PLAY]
    assert len(batches) == 1, [sorted(b["tasks"][0]["hosts"]) for b in batches]
    assert play_hosts(doc, ROLLING_DRIVER_PLAY) == set(lab.groups["gpu_nodes"])
    # --diff shows configuration, not the whole text of gpuprov's own scripts and data
    # (those tasks say `diff: false`): no task prints more than DIFF_LINES_MAX lines for one
    # file on one host.
    lines = diff_lines(doc)
    assert lines, "--diff printed nothing on fresh hosts"
    long = {k: n for k, n in lines.items() if n > DIFF_LINES_MAX}
    assert not long, long
    with capsys.disabled():
        print(f"\n[test_site] --diff on fresh hosts: {sum(lines.values())} lines", flush=True)

    after = {h: snapshot(lab, h) for h in hosts}
    for host in hosts:
        assert after[host] == before[host], f"{host} changed under --check"
        assert "absent /etc/docker/daemon.json" in after[host]
        assert "absent /etc/modprobe.d/blacklist-nouveau.conf" in after[host]


def test_site_converges(
    lab: Lab,
    monkeypatch: pytest.MonkeyPatch,
    report_dir: Path,
    converged: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc, seconds = run_playbook(lab, monkeypatch, SITE, callback=JSON_CALLBACK)
    report_time(capsys, "site.yml converge", seconds)
    doc = parse_json_output(proc.stdout)
    assert proc.returncode == 0, "\n".join(failed_results(doc)) or proc.stderr[-3000:]
    assert sorted(doc["stats"]) == sorted(lab.groups["lab"])
    for host, stats in doc["stats"].items():
        assert stats["failures"] == 0, (host, failed_results(doc))
        assert stats["unreachable"] == 0, host
    for host in lab.groups["gpu_nodes"]:
        assert doc["stats"][host]["changed"] > 0, (host, doc["stats"][host])
    # Fresh nodes all need their driver: every one is rolled, in batches, between the lab's
    # drain and undrain hooks (inventories/lab/group_vars/lab.yml: a line each in the log).
    assert play_hosts(doc, ROLLING_DRIVER_PLAY) == set(lab.groups["gpu_nodes"])
    hooks = driver_hooks(report_dir)
    assert sorted(h for w, h in hooks if w == "drain") == sorted(lab.groups["gpu_nodes"]), hooks
    for drained, undrained in zip(hooks[::2], hooks[1::2], strict=True):
        assert (drained[0], undrained[0], drained[1]) == ("drain", "undrain", undrained[1]), hooks
    converged["hooks"] = len(hooks)
    # What the roles promise is really there (the testinfra suite checks the rest).
    for host in lab.groups["gpu_nodes"]:
        snap = snapshot(lab, host)
        for package in ("docker.io", "nvidia-container-toolkit"):
            # "hi": installed and held (inventories/lab/group_vars/gpu_k40m.yml holds both).
            installed = rf"^{re.escape(package)} \S+ [ih]i"
            assert re.search(installed, snap, re.MULTILINE), (host, package)
        assert "absent /etc/modprobe.d/blacklist-nouveau.conf" not in snap, host
    check_torch_and_smoke(lab, report_dir)
    check_torch_installed_in_the_background(lab, doc)
    check_tools_installed_in_the_background(lab, doc)
    check_jupyterlab_downloaded_in_the_background(lab, doc)
    converged["ok"] = True


# The lab's wheelhouse has torch 2.13.0+cpu for Python 3.11 only: the bookworm hosts get it,
# the others get pytorch_method: none (inventories/lab/group_vars/all/pytorch.yml).
NO_TORCH_REASON = "no PyTorch environment on this host (pytorch_method: none)"
TORCH_PROBE = "/opt/gpuprov/venv/bin/python -c 'import torch; print(torch.__version__)'"


def torch_hosts(lab: Lab) -> list[str]:
    """The lab hosts that get torch (bookworm: the wheelhouse's Python)."""
    return sorted(h for h in lab.groups["lab"] if lab.hosts[h]["lab_release"] == "bookworm")


def check_torch_and_smoke(lab: Lab, report_dir: Path) -> None:
    """After site.yml: torch where the wheel fits, and the smoke verdicts say so honestly."""
    with_torch = torch_hosts(lab)
    without = sorted(set(lab.groups["lab"]) - set(with_torch))
    for host in with_torch:
        assert lab.ssh(host, TORCH_PROBE).stdout.split() == ["2.13.0+cpu"], host
    for host in without:
        assert lab.ssh(host, TORCH_PROBE, check=False).returncode != 0, host
    verdicts = {
        h: json.loads((report_dir / "smoke" / f"{h}.json").read_text(encoding="utf-8"))
        for h in lab.groups["lab"]
    }
    for host, doc in verdicts.items():
        assert doc["ok"], (host, doc["not_passed"])
        layers = {v["layer"]: v for v in doc["layers"]}
        assert layers["L0"]["status"] == "pass", (host, layers["L0"])
        if host in with_torch:
            assert layers["L5"]["status"] == "pass", (host, layers["L5"])
            assert layers["L5"]["details"]["world_size"] == len(with_torch), layers["L5"]
        else:
            assert doc["required"] == ["L0"], (host, doc["required"])
            for layer in ("L3", "PERF", "L4"):
                got = (layers[layer]["status"], layers[layer]["reason"])
                assert got == ("skipped", NO_TORCH_REASON), (host, layers[layer])
            assert layers["L5"]["status"] == "skipped", (host, layers["L5"])
            assert layers["L5"]["reason"].startswith(f"{host} is not in gpu_smoke_dist_hosts"), (
                layers["L5"]
            )


TORCH_JOB = (
    "pytorch : background-start | Make the environment and start the pip install of torch"
    " (async, under the lock)"
)
TORCH_OS = "pytorch : install-pip-os | Install the OS packages of the pip method"
TORCH_WAIT = "pytorch : install-pip | Wait for a background install of torch to finish"
TORCH_COMPARE = "pytorch : install-pip | Compare the installed versions with the wanted ones"
TORCH_PIP = "pytorch : install-pip | Install torch into the virtual environment"


def check_torch_installed_in_the_background(lab: Lab, doc: dict[str, Any]) -> None:
    """On fresh torch hosts the torch install ran as site.yml's background job
    (playbooks/background_pytorch.yml, after the driver play): it started before the Docker
    play finished, succeeded, ended before the PyTorch play compared what is installed (it
    waited), and left that play's own pip task nothing to do, nor its OS packages to check."""
    results: dict[str, dict[str, Any]] = {}
    os_packages: dict[str, list[dict[str, Any]]] = {}
    compare_start = None
    for play in doc["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"]
            if name in (TORCH_JOB, TORCH_WAIT, TORCH_COMPARE, TORCH_PIP):
                for host, result in task["hosts"].items():
                    results[f"{host} / {name}"] = result
            if name == TORCH_OS:  # the background start's, then the install phase's
                for host, result in task["hosts"].items():
                    os_packages.setdefault(host, []).append(result)
            if name == TORCH_COMPARE:
                compare_start = datetime.fromisoformat(task["task"]["duration"]["start"])
    for host in torch_hosts(lab):
        assert results[f"{host} / {TORCH_JOB}"].get("ansible_job_id"), (host, results)
        assert not results[f"{host} / {TORCH_WAIT}"].get("skipped"), host
        assert not results[f"{host} / {TORCH_COMPARE}"].get("skipped"), host
        assert results[f"{host} / {TORCH_PIP}"].get("skipped"), (host, "the role installed")
        # The install phase did not check the OS packages again: the start installed them.
        assert [r.get("skipped", False) for r in os_packages[host]] == [False, True], (
            host,
            os_packages[host],
        )
        jobs = pip_jobs(lab, host, "/opt/gpuprov/venv")  # the venv the job makes
        assert jobs, (host, "no async pip job of the PyTorch environment")
        assert jobs[-1]["rc"] == 0, (host, jobs)
        # The Docker play runs after the job started and records its role at its end.
        docker = lab.ssh(host, "stat -c %Y /var/lib/gpuprov/state/docker.json").stdout
        assert jobs[-1]["start"] < int(docker), (host, jobs, docker)
        # 1 s of slack: the job's times are written on the host, the task's on the controller
        assert compare_start is not None
        assert jobs[-1]["end"] <= compare_start.timestamp() + 1, (host, jobs, compare_start)


TOOLS_JOB = (
    "object_storage : background-start | Make the tools venv and start the pip install of awscli"
    " and boto3 (async, under the lock)"
)
TOOLS_WAIT = "object_storage : install | Wait for a background install of the tools to finish"
TOOLS_PIP = "object_storage : install | Install awscli and boto3 into the tools venv"
TOOLS_VENV = "/opt/gpuprov/tools-venv"  # the role's default, which the lab keeps


def check_tools_installed_in_the_background(lab: Lab, doc: dict[str, Any]) -> None:
    """On fresh hosts with storage clients, awscli and boto3 went into the tools venv as
    site.yml's background job (playbooks/background.yml, after the PyTorch play): it started
    before the notebook play finished, succeeded, ended before the storage play's wait for it
    ended, and left that play's own pip task nothing to do. A host without python3-venv then
    (no torch: the pytorch role installs it) starts no job; its storage play installs."""
    results: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"]
            if name in (TOOLS_JOB, TOOLS_WAIT, TOOLS_PIP):
                for host, result in task["hosts"].items():
                    results[f"{host} / {name}"] = (result, task["task"]["duration"])
    hosts = [h for h in lab.groups["lab"] if lab.hosts[h].get("object_storage_method") != "none"]
    assert hosts, "no host of this lab gets storage clients"
    for host in sorted(set(hosts) - set(torch_hosts(lab))):
        job, _ = results[f"{host} / {TOOLS_JOB}"]
        assert job.get("false_condition") == "__object_storage_bg_ensurepip.rc == 0", (host, job)
        pip, _ = results[f"{host} / {TOOLS_PIP}"]
        assert pip.get("changed"), (host, pip)
    for host in sorted(set(hosts) & set(torch_hosts(lab))):
        job, _ = results[f"{host} / {TOOLS_JOB}"]
        assert job.get("ansible_job_id"), (host, job)
        wait, waited = results[f"{host} / {TOOLS_WAIT}"]
        assert not wait.get("skipped"), (host, wait)
        pip, _ = results[f"{host} / {TOOLS_PIP}"]
        assert not pip.get("skipped"), (host, pip)
        assert not pip.get("changed"), (host, pip, "the storage play installed")
        jobs = pip_jobs(lab, host, TOOLS_VENV)
        assert jobs, (host, "no async pip job of the tools venv")
        assert jobs[-1]["rc"] == 0, (host, jobs)
        # The notebook play runs after the job started; its role records at its end. A host
        # without a notebook server has no record: the storage play's own wait then bounds it.
        notebook = lab.ssh(
            host, "stat -c %Y /var/lib/gpuprov/state/jupyterlab.json", check=False
        ).stdout.strip()
        if notebook:
            assert jobs[-1]["start"] < int(notebook), (host, jobs, notebook)
        # 1 s of slack: the job's times are written on the host, the task's on the controller
        end = datetime.fromisoformat(waited["end"]).timestamp()
        assert jobs[-1]["start"] < end, (host, jobs, waited)
        assert jobs[-1]["end"] <= end + 1, (host, jobs, waited)


def check_jupyterlab_downloaded_in_the_background(lab: Lab, doc: dict[str, Any]) -> None:
    """On fresh hosts whose notebook server runs in the PyTorch environment, JupyterLab's
    packages were downloaded as site.yml's background job (beside the torch job), which exited
    0; the notebook play installed them from that download without the index (its install
    from the index skipped) and removed the download."""
    results = jupyterlab_results(doc)
    hosts = [h for h in torch_hosts(lab) if lab.hosts[h].get("jupyterlab_method") == "venv"]
    assert hosts, "no host of this lab runs JupyterLab in the PyTorch environment"
    for host in hosts:
        check_jupyterlab_download(results, host, 0)
        left = lab.ssh(host, f"test -e {JUPYTER_DOWNLOAD}", check=False).returncode
        assert left == 1, (host, f"{JUPYTER_DOWNLOAD} left behind")


# Issue 19's drift cases: one thing each role manages is broken on one host, behind the
# roles' backs. The verifying fast path (plugins/modules/gpuprov_state.py) must find each
# one, the next run must repair exactly those (changed only in those roles, nowhere else,
# on no other host) and the run after it (the next test) must change nothing.
DRIFT = {
    "docker": ("systemctl disable docker", "service | Start and enable docker"),
    "nvidia_container_toolkit": (
        'python3 -c \'import json; p="/etc/docker/daemon.json"; d=json.load(open(p));'
        ' d.pop("runtimes"); json.dump(d, open(p, "w"))\'',
        "configure | Register the nvidia runtime in daemon.json",
    ),
    "nvidia_driver": (
        "apt-mark unhold nvidia-tesla-470-smi",
        "setup-Debian | Hold the driver packages",
    ),
    # The torch import broken the way the probe can see: the distribution gone from the
    # environment (a corrupted file inside torch is the verify phase's to find: docs/design.md).
    "pytorch": (
        "/opt/gpuprov/venv/bin/pip uninstall -y -q torch",
        "install-pip | Install torch into the virtual environment",
    ),
    "jupyterlab": (
        "rm /etc/jupyterlab/jupyter_server_config.json",
        "configure | Write the server configuration and the unit",
    ),
    "gpu_monitoring": (
        "systemctl stop prometheus-node-exporter",
        "service | Enable and start node_exporter and the collector's timer",
    ),
    "model_serving": (
        "rm /opt/gpuprov/serving/bin/probe_endpoints.py",
        "install-Debian | Create the directories, copy the serving scripts and the export check",
    ),
}


def changed_by_role(doc: dict[str, Any], host: str) -> dict[str, list[str]]:
    """role -> the names of its tasks (and handlers) that reported changed on ``host``."""
    found: dict[str, list[str]] = {}
    for name in changed_tasks(doc, host):
        task = name.split(" / ", 1)[1]
        role, sep, rest = task.partition(" : ")
        found.setdefault(role if sep else "(play)", []).append(rest if sep else task)
    return found


def test_drift_is_found_and_repaired_only_where_it_is(
    lab: Lab,
    monkeypatch: pytest.MonkeyPatch,
    converged: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not converged:
        pytest.skip("site.yml did not converge")
    host = sorted(h for h in lab.groups["gpu_nodes"] if lab.hosts[h]["lab_release"] == "bookworm")[
        0
    ]
    for command, _task in DRIFT.values():
        lab.ssh(host, command)
    proc, seconds = run_playbook(lab, monkeypatch, SITE, callback=JSON_CALLBACK)
    report_time(capsys, "site.yml after drift on one host", seconds)
    doc = parse_json_output(proc.stdout)
    assert proc.returncode == 0, "\n".join(failed_results(doc))
    repaired = changed_by_role(doc, host)
    assert sorted(repaired) == sorted(DRIFT), repaired
    for role, (_command, task) in DRIFT.items():
        assert task in repaired[role], (role, repaired[role])
    for other in sorted(set(lab.groups["lab"]) - {host}):
        assert doc["stats"][other]["changed"] == 0, (other, changed_tasks(doc, other))
    # Only the node whose driver drifted (a package unheld) waits for a batch; the others were
    # verified in the first play, all at once.
    assert play_hosts(doc, ROLLING_DRIVER_PLAY) == {host}
    # The run after the repair must change nothing: test_site_second_run_changes_nothing,
    # next in this module, is that run (one no-op run of the whole site for both checks).


def test_site_second_run_changes_nothing(
    lab: Lab,
    monkeypatch: pytest.MonkeyPatch,
    converged: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    site_runs: dict[str, shared_runs.Run],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The no-op re-run of the converged lab, after the drift test repaired its host: every
    host unchanged, the repaired one included. Kept for the modules that judge a second run
    of their plays (shared_runs.py), with a copy of the reports it left."""
    if not converged:
        pytest.skip("site.yml did not converge")
    proc, seconds = run_playbook(lab, monkeypatch, SITE, callback=JSON_CALLBACK)
    report_time(capsys, "site.yml re-run (no-op)", seconds)
    doc = parse_json_output(proc.stdout)
    assert proc.returncode == 0, "\n".join(failed_results(doc))
    assert sorted(doc["stats"]) == sorted(lab.groups["lab"])
    for host, stats in doc["stats"].items():
        assert stats["failures"] == 0, (host, failed_results(doc))
        assert stats["changed"] == 0, (host, changed_tasks(doc, host))
    # No node's driver changes: no batch runs (a converged fleet is verified all at once), and
    # no node is drained.
    assert play_hosts(doc, ROLLING_DRIVER_PLAY) == set()
    assert len(driver_hooks(Path(lab.reports))) == converged["hooks"] + 2  # the drift's node
    copy = tmp_path_factory.mktemp("site-noop-reports")
    shared_runs.keep(site_runs, shared_runs.NOOP, proc.stdout, doc, (Path(lab.reports), copy))


# The playbooks of the roles that read the plan (tests/unit/test_plan_inputs.py), run alone.
ALONE = tuple(
    f"playbooks/{name}.yml"
    for name in ("driver", "pytorch", "jupyterlab", "launch", "monitoring", "serving")
)


def roles_that_differ(doc: dict[str, Any]) -> list[str]:
    """host: role: what its state probe said differs, for every probe that found a difference."""
    found = []
    for play in doc["plays"]:
        for task in play["tasks"]:
            if not task["task"]["name"].endswith("State | Say what differs"):
                continue
            for host, result in task["hosts"].items():
                if not result.get("skipped"):
                    found.append(f"{host}: {task['task']['name']}: {result.get('msg')}")
    return found


def test_component_playbooks_alone_find_their_roles_converged(
    lab: Lab,
    monkeypatch: pytest.MonkeyPatch,
    converged: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each playbook also runs alone (site.yml's header): after site.yml, the playbooks of the
    roles that read the plan, without plan.yml in the run, plan the host as plan.yml does
    and find every role converged (no change phase runs; the next site.yml, the check-mode
    run below, finds them converged too). Before, each such run converged its role again and
    recorded inputs the next site.yml did not match."""
    if not converged:
        pytest.skip("site.yml did not converge")
    total = 0.0
    for playbook in ALONE:  # one run each: a plan one of them makes would serve the next
        proc, seconds = run_playbook(lab, monkeypatch, playbook, callback=JSON_CALLBACK)
        total += seconds
        doc = parse_json_output(proc.stdout)
        assert proc.returncode == 0, (playbook, "\n".join(failed_results(doc)))
        assert roles_that_differ(doc) == [], playbook
        for host, stats in doc["stats"].items():
            assert stats["changed"] == 0, (playbook, host, changed_tasks(doc, host))
    report_time(capsys, f"{len(ALONE)} playbooks of plan readers alone (no-op)", total)


def test_check_mode_on_the_converged_lab_changes_nothing(
    lab: Lab,
    monkeypatch: pytest.MonkeyPatch,
    converged: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    site_runs: dict[str, shared_runs.Run],
) -> None:
    """--check --diff on converged hosts works from the probes' answer (issue 19): every
    role finds its host converged, no task fails or predicts a change. Kept for the modules
    that judge check mode of their plays (shared_runs.py)."""
    if not converged:
        pytest.skip("site.yml did not converge")
    proc, seconds = run_playbook(
        lab, monkeypatch, SITE, "--check", "--diff", callback=JSON_CALLBACK
    )
    report_time(capsys, "site.yml --check --diff on the converged lab", seconds)
    doc = parse_json_output(proc.stdout)
    assert proc.returncode == 0, "\n".join(failed_results(doc)) or proc.stderr[-3000:]
    for name, stats in doc["stats"].items():
        assert stats["failures"] == 0, (name, failed_results(doc))
        assert stats["changed"] == 0, (name, changed_tasks(doc, name))
    assert sorted(doc["stats"]) == sorted(lab.groups["lab"])
    assert roles_that_differ(doc) == []
    shared_runs.keep(site_runs, shared_runs.CHECK, proc.stdout, doc)


def test_testinfra_suite_passes(
    lab: Lab, converged: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if not converged:
        pytest.skip("site.yml did not converge")
    start = time.monotonic()
    junit = tmp_path / "infra.xml"
    # Two xdist workers, as a fleet's CI may run it (docs/infra-ci.md): 21 s against 30 s in one
    # process on the converged default lab, and no faster with 3 or 4 (2026-12-05, 2 cores).
    lab.testinfra("all", "tests/infra", "-n", "2", f"--junitxml={junit}")
    report_time(capsys, "testinfra suite", time.monotonic() - start)
    report = junit.read_text(encoding="utf-8")
    # Each host skips exactly what the lab's inventory decides (lab_skips.INFRA_DEFAULT).
    if os.environ.get("GPUPROV_LAB_HOSTS", DEFAULT_PRESET) == DEFAULT_PRESET:
        assert infra_skips(report, lab.groups["lab"]) == INFRA_DEFAULT
    # Every host was really tested, and the GPU-only modules ran on the GPU hosts.
    passed = infra_passed(report, lab.groups["lab"])
    for host in lab.groups["lab"]:
        assert passed.get(host), host
    for host in lab.groups["gpu_nodes"]:
        for module in ("test_toolkit.py", "test_driver.py"):
            assert any(case.startswith(f"{module}::") for case in passed[host]), (host, module)
    # The options inventories/lab/group_vars/gpu_k40m.yml turns on are checked, not skipped.
    for host in lab.groups.get("gpu_k40m", []):
        assert passed[host] >= {
            "test_docker.py::test_engine_package_held",
            "test_docker.py::test_daemon_json_has_role_options",
            "test_toolkit.py::test_toolkit_packages_held",
            "test_toolkit.py::test_daemon_json_keeps_docker_role_options",
            "test_docker.py::test_docker_users_in_group",
            "test_toolkit.py::test_containerd_nvidia_runtime",
            "test_toolkit.py::test_cdi_spec",
        }, host


def _host_vars(inventory: dict[str, Any], host: str) -> dict[str, Any]:
    """The vars dict of ``host`` in a YAML inventory (wherever a group lists it)."""
    stack: list[Any] = [inventory]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            hosts = node.get("hosts")
            if isinstance(hosts, dict) and isinstance(hosts.get(host), dict):
                found: dict[str, Any] = hosts[host]
                return found
            stack.extend(node.values())
    raise KeyError(host)


FACT_FILE = "/etc/ansible/facts.d/gpuprov.fact"


def _write(lab: Lab, host: str, path: str, text: str) -> None:
    data = base64.b64encode(text.encode()).decode()
    lab.ssh(host, f"echo {data} | base64 -d > {path}")


def test_testinfra_fails_a_host_the_role_misjudged(
    lab: Lab, converged: dict[str, Any], tmp_path: Path
) -> None:
    """issue 25: the driver suite takes its expectations from the inventory and the hardware;
    the role's fact file is checked against them, never their source. Planted: (1) the fact
    file says container on a host the inventory says is not one (an inventory copy with
    gpuprov_container_host: false), (2) a fact file whose package list is empty. Both fail,
    and with the empty list the package checks still check every package."""
    if not converged:
        pytest.skip("site.yml did not converge")
    host = sorted(lab.groups["gpu_nodes"])[0]
    inventory = yaml.safe_load(lab.inventory.read_text(encoding="utf-8"))
    _host_vars(inventory, host)["gpuprov_container_host"] = False
    claimed = tmp_path / "hosts.yml"
    claimed.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    proc = lab.run_testinfra(host, "tests/infra/test_driver.py", inventory=claimed)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert re.search(r"test_the_fact_file_agrees_with_the_intent\S* FAILED", proc.stdout)
    said = "the role judged container=True; the inventory says gpuprov_container_host=False"
    assert said in proc.stdout, proc.stdout[-3000:]
    assert re.search(r"test_nvidia_smi_answers\S* FAILED", proc.stdout)  # no longer skipped
    kept = lab.ssh(host, f"cat {FACT_FILE}").stdout
    fact = json.loads(kept)
    try:
        _write(lab, host, FACT_FILE, json.dumps({**fact, "packages": []}))
        proc = lab.run_testinfra(host, "tests/infra/test_driver.py")
    finally:
        _write(lab, host, FACT_FILE, kept)
    assert re.search(r"test_the_fact_file_agrees_with_the_intent\S* FAILED", proc.stdout)
    for check in ("installed", "held"):
        assert re.search(rf"test_driver_packages_{check}\S* PASSED", proc.stdout), check
    assert re.search(r"test_unattended_upgrades_blacklist\S* PASSED", proc.stdout)


def test_fleet_page_of_the_converged_lab_in_a_browser(
    lab: Lab,
    report_dir: Path,
    converged: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make lab`'s page from this converge's reports, opened in headless Chromium (Debian's
    chromium, installed by scripts/prereqs.sh test) from file://: after its script ran, every
    host has its card, every layer that did not pass shows its reason, and nothing was logged
    to the console. The screenshot is kept as an artifact in .lab/artifacts/."""
    if not converged:
        pytest.skip("site.yml did not converge")
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: scripts/prereqs.sh test installs it"
    argv = [sys.executable, str(REPO / "scripts" / "report.py"), "--reports", str(report_dir)]
    report = subprocess.run(
        [*argv, "--inventory", str(lab.inventory), "--html", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    page = (report_dir / "fleet.html").as_uri()
    fleet = json.loads((report_dir / "fleet.json").read_text(encoding="utf-8"))
    profile = tmp_path / "chromium-profile"
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    base += [f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*base, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    logged = [ln for ln in dom.stderr.splitlines() if re.search(r"CONSOLE|Uncaught", ln)]
    assert logged == []
    root = re.search(r"<html[^>]*>", dom.stdout)
    assert root, dom.stdout[:500]
    assert 'data-js="ready"' in root.group(0)  # the page's script ran to its end
    assert "data-js-error" not in root.group(0)  # and its error hook caught nothing
    text = " ".join(re.sub(r"<[^>]+>", " ", dom.stdout).split())
    for row in fleet["hosts"]:
        assert f'data-host="{row["host"]}"' in dom.stdout, row["host"]
        for layer, verdict in row["layers"].items():
            if verdict["category"] in ("fail", "failopt", "expected"):
                reason = " ".join(str(verdict["reason"]).split())
                assert html.escape(reason, quote=False) in text, (row["host"], layer)
    shot = REPO / ".lab" / "artifacts" / f"{lab.name}-fleet.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*base, "--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with capsys.disabled():
        print(f"\n[test_site] fleet page screenshot: {shot}", flush=True)


def test_pinned_branch_that_drops_the_gpu_is_refused(
    lab: Lab,
    k40m_host: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What to expect, from the lab profile's PCI ID and the compat data (not from a run).
    profiles = yaml.safe_load(PROFILES.read_text(encoding="utf-8"))["profiles"]
    device = profiles[lab.hosts[k40m_host]["lab_profile"]]["devices"][0]
    pci_id = f"{device['vendor'][2:]}:{device['device'][2:]}"
    gpu = compat.lookup(pci_id)
    assert len(gpu) == 1, gpu
    name = str(gpu[0]["name"])
    lo, hi = int(gpu[0]["min_driver_branch"]), int(gpu[0]["last_driver_branch"])
    allowed = [b.branch for b in compat.load().branches if lo <= b.branch <= hi]
    pinned = PINNED_BRANCH
    assert allowed, (lo, hi)
    assert pinned > hi, (pinned, hi)

    before = snapshot(lab, k40m_host)
    proc, _ = run_playbook(
        lab,
        monkeypatch,
        SITE,
        "-e",
        f"nvidia_driver_branch={pinned}",
        "--limit",
        k40m_host,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    counters = recap(proc.stdout)
    assert counters[k40m_host]["failed"] == 1, counters
    assert counters[k40m_host]["changed"] == 0, counters
    failure = [line for line in out.splitlines() if "fatal:" in line and k40m_host in line]
    assert failure, out[-3000:]
    message = failure[0]
    assert name in message, message
    assert str(pinned) in message, message
    listed = re.search(r"[Aa]llowed branches[^:]*:\s*([0-9, ]+)", message)
    assert listed, message
    assert [int(b) for b in re.findall(r"\d+", listed.group(1))] == allowed, message
    assert snapshot(lab, k40m_host) == before


@pytest.fixture
def stopped_host(lab: Lab) -> Iterator[str]:
    """A GPU host stopped with `docker stop`, started again afterwards.

    Needs two GPU nodes: with one, no other host could be seen to finish."""
    if len(lab.groups.get("gpu_nodes", [])) < 2:
        pytest.skip("needs two GPU nodes (GPUPROV_LAB_HOSTS): one stopped, one that finishes")
    candidates = [h for h in lab.groups["gpu_nodes"] if h not in lab.groups.get("gpu_k40m", [])]
    host = sorted(candidates or lab.groups["gpu_nodes"])[-1]
    container = str(lab.hosts[host]["lab_container"])
    subprocess.run(["docker", "stop", "--time", "5", container], check=True, capture_output=True)
    try:
        yield host
    finally:
        lab.start(host)
        # The lab address may change on restart: let lab.py rewrite the inventory.
        address = subprocess.run(
            [
                "docker",
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                container,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if address != lab.hosts[host]["lab_address"]:
            lab.lab_py("--inventory", str(lab.inventory), "up", "--hosts", _hosts_spec(lab))


def _hosts_spec(lab: Lab) -> str:
    return ",".join(
        f"{h}={hv['lab_profile']}:{hv['lab_release']}" for h, hv in sorted(lab.hosts.items())
    )


def test_unreachable_host_is_named_and_others_finish(
    lab: Lab,
    stopped_host: str,
    monkeypatch: pytest.MonkeyPatch,
    report_dir: Path,
) -> None:
    plans = report_dir / "plan"
    for old in plans.glob("*.json"):
        old.unlink()
    proc, _ = run_playbook(lab, monkeypatch, PLAN)
    assert proc.returncode != 0, proc.stdout[-3000:]
    counters = recap(proc.stdout)
    assert counters[stopped_host]["unreachable"] >= 1, counters
    assert stopped_host in [h for h, r in counters.items() if r["unreachable"]], counters
    others = [h for h in lab.groups["gpu_nodes"] if h != stopped_host]
    assert others, lab.groups
    for host in others:
        assert counters[host]["failed"] == 0, counters
        assert counters[host]["unreachable"] == 0, counters
    written = sorted(p.stem for p in plans.glob("*.json"))
    assert written == sorted(others), written
