"""Multi-host launch and GPU monitoring in the lab, for real (marked `lab`; needs Docker).

After site.yml converged (test_site.py, first in the session) a second run of
playbooks/launch.yml and playbooks/monitoring.yml must change nothing, and `--check --diff`
must change nothing either: in the session those are test_site.py's no-op re-run and check of
the converged lab (shared_runs.py); run alone, this module runs both playbooks itself. Then:

- `gpuprov-launch torchrun` and `gpuprov-launch mpirun` all_reduce across the lab's
  Debian 12 hosts (the launch group: hosts with torch), as the training user, over the
  SSH trust the role set up: sums checked, bus bandwidth reported;
- node_exporter on every lab host serves gpuprov's metrics, scraped from the controller
  over the lab network at the targets of the generated Prometheus scrape config: the
  explicit "no driver" state of the simulated GPUs, the PCI device count, the plan and
  the smoke verdicts shipped from the controller's reports;
- with one launch host stopped, both launchers fail fast naming it (and `fabfile.py watch`
  shows a line for it), then it is started again.

Simulated: only the PCI devices (no driver answers; gpuprov_gpu_driver_loaded 0).
Everything else is real: sshd, Open MPI, torchrun, gloo, node_exporter, systemd.

Run alone on a kept lab: GPUPROV_LAB_NAME=h8 GPUPROV_LAB_KEEP=1 pytest -m lab \
    tests/lab/test_launch_monitoring.py -p no:randomly
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import shared_runs
import yaml
from playbook_output import recap

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "playbooks" / "launch.yml"
MONITORING = REPO / "playbooks" / "monitoring.yml"
SMOKE = REPO / "playbooks" / "smoke.yml"
PYTORCH = REPO / "playbooks" / "pytorch.yml"
PLAN = REPO / "playbooks" / "plan.yml"
USER = "gpuprov-train"  # dist_launch_user's default
L5 = "/opt/gpuprov/launch/l5_launch.py"
EXIT_UNREACHABLE = 3  # gpuprov-launch: a host failed the SSH probe, no rank was started
# The lab installs torch 2.13.0+cpu from the controller's offline wheelhouse (pip's find-links
# directory, copied to the hosts by scripts/lab.py up): without it nothing here can run.
NO_WHEELHOUSE = (
    "the lab has no wheelhouse: `scripts/lab.py up` found no directory of wheels among pip's "
    "find-links (`pip config list`). Put the wheel of torch 2.13.0+cpu for Python 3.11 in a "
    "directory and `pip config set global.find-links DIR`: the lab fixture's `scripts/lab.py up` "
    "copies it to the hosts"
)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
PCI_GPUS = {"k40m": 1, "m40": 2, "mixed": 2, "a100": 1, "cpu": 0}  # scripts/lab/profiles.yaml


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text format -> name -> [(labels, value)] (no escapes in our labels)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


@pytest.fixture(scope="module")
def reports(
    tmp_path_factory: pytest.TempPathFactory, site_runs: dict[str, shared_runs.Run]
) -> Path:
    """The reports of the run judged here: site.yml's no-op re-run's (a copy), or this
    module's own directory when the session has no such run."""
    noop = site_runs.get(shared_runs.NOOP)
    if noop is not None and noop.reports is not None:
        return noop.reports
    return tmp_path_factory.mktemp("launch-reports")


@pytest.fixture(scope="module")
def launch_hosts(lab: Any) -> list[str]:
    hosts = [h for h in lab.groups["lab"] if lab.hosts[h].get("lab_release") == "bookworm"]
    if len(hosts) < 2:
        pytest.skip("needs two bookworm hosts (the launch group)")
    if not lab.hosts[hosts[0]].get("lab_wheelhouse"):
        pytest.fail(NO_WHEELHOUSE, pytrace=False)
    return hosts


def play(lab: Any, playbook: Path, reports: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return lab.ansible_playbook(playbook, "-e", f"gpuprov_report_dir={reports}", *extra)


@pytest.fixture(scope="module")
def converged(
    lab: Any, launch_hosts: list[str], reports: Path, site_runs: dict[str, shared_runs.Run]
) -> dict[str, Any]:
    """The second run of launch.yml and monitoring.yml, whose recaps the idempotence test
    judges.

    In the session test_site.py's no-op re-run of site.yml is that run (shared_runs.py): it
    ran the plan, smoke, launch and monitoring plays once more after the converge, against
    the report directory `reports` is a copy of. Run alone, this module runs them itself:
    PyTorch where missing, smoke verdicts, then launch + monitoring, and monitoring.yml twice
    (its facts follow this module's report directory)."""
    noop = site_runs.get(shared_runs.NOOP)
    if noop is not None and noop.reports == reports:
        return {"launch_recap": noop.recap, "monitoring_recap": noop.recap, "shared": noop}
    seconds: dict[str, Any] = {}
    have_torch = lab.ssh(launch_hosts[0], "test -x /opt/gpuprov/venv/bin/python", check=False)
    if have_torch.returncode != 0:
        out = play(lab, PYTORCH, reports)
        assert out.returncode == 0, out.stdout[-4000:]
    # Plans and verdicts for the monitoring role to ship (site.yml's went to test_site's own
    # report directory).
    for playbook in (PLAN, SMOKE):
        out = play(lab, playbook, reports)
        assert out.returncode == 0, out.stdout[-4000:]
    for name, playbook in (("launch", LAUNCH), ("monitoring", MONITORING)):
        started = time.monotonic()
        out = play(lab, playbook, reports)
        seconds[name] = time.monotonic() - started
        assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
        for host, r in recap(out.stdout).items():
            assert (r["failed"], r["unreachable"]) == (0, 0), (host, out.stdout[-4000:])
        seconds[f"{name}_recap"] = recap(out.stdout)
    # The monitoring facts follow this module's report directory: judge a run after it.
    again = play(lab, MONITORING, reports)
    assert again.returncode == 0, again.stdout[-4000:]
    seconds["monitoring_recap"] = recap(again.stdout)
    return seconds


def l5(lab: Any, host: str, *args: str) -> tuple[int, dict[str, Any]]:
    cmd = f"runuser -u {USER} -- /usr/bin/python3 {L5} --timeout 90 --join-timeout 45 " + " ".join(
        args
    )
    proc = lab.ssh(host, cmd, check=False, timeout=400)
    assert proc.stdout.startswith("{"), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def test_both_launchers_all_reduce_across_the_bookworm_hosts(
    lab: Any, launch_hosts: list[str], converged: dict[str, Any]
) -> None:
    rc, doc = l5(lab, launch_hosts[0])
    assert rc == 0, doc
    by = {v["details"]["launcher"]: v for v in doc["layers"]}
    assert set(by) == {"torchrun", "mpirun"}
    for launcher, v in by.items():
        assert v["status"] == "pass", v
        assert v["details"]["world_size"] == len(launch_hosts), v
        gloo = v["details"]["backends"]["gloo"]
        assert gloo["sum_ok"], v
        assert gloo["sum_expected"] == len(launch_hosts) * (len(launch_hosts) + 1) / 2
        assert gloo["busbw_gbs"] > 0, v
        assert f"busbw {gloo['busbw_gbs']} GB/s" in v["reason"], launcher
    # mpirun ranks got RANK/WORLD_SIZE from OMPI_COMM_WORLD_*: one rank per host.
    assert by["mpirun"]["details"]["rank"] in range(len(launch_hosts))


def test_launch_and_monitoring_change_nothing_on_a_second_run_and_under_check(
    lab: Any,
    launch_hosts: list[str],
    converged: dict[str, Any],
    reports: Path,
    site_runs: dict[str, shared_runs.Run],
    tmp_path: Path,
) -> None:
    for name in ("launch", "monitoring"):
        changed = {h: r["changed"] for h, r in converged[f"{name}_recap"].items()}
        assert changed, name
        assert set(changed.values()) == {0}, (name, changed)
    noop, check = converged.get("shared"), site_runs.get(shared_runs.CHECK)
    for run in (r for r in (noop, check) if r is not None):
        # the shared runs did run both playbooks' plays on these hosts
        assert run.ran(LAUNCH) >= set(launch_hosts), run.plays
        assert run.ran(MONITORING) >= set(lab.groups["lab"]), run.plays
    if check is not None:  # site.yml --check --diff of the converged lab
        assert {c["changed"] for c in check.recap.values()} == {0}, check.recap
        return
    where = reports
    if noop is not None:  # its reports stay as it left them (scrape.yml writes under --check)
        where = tmp_path / "reports"
        shutil.copytree(reports, where)
    for playbook in (LAUNCH, MONITORING):
        out = play(lab, playbook, where, "--check", "--diff")
        assert out.returncode == 0, (playbook.name, out.stdout[-4000:])
        changed = {h: r["changed"] for h, r in recap(out.stdout).items()}
        assert changed, (playbook.name, out.stdout[-2000:])
        assert set(changed.values()) == {0}, (playbook.name, changed)


def test_node_exporter_serves_gpuprov_metrics_to_the_controller(
    lab: Any, converged: dict[str, Any], reports: Path
) -> None:
    scrape = yaml.safe_load((reports / "monitoring" / "prometheus-gpuprov.yml").read_text())
    configs = scrape["scrape_configs"][0]["static_configs"]
    targets = {c["labels"]["host"]: c["targets"][0] for c in configs}
    assert set(targets) == set(lab.groups["lab"])
    for host, target in targets.items():
        hv = lab.hosts[host]
        assert target == f"{hv['lab_address']}:9100"
        # The collector's timer runs every 15 s; the role waited for the first file.
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as resp:
            metrics = parse_metrics(resp.read().decode())
        assert metrics["gpuprov_gpu_driver_loaded"] == [({}, 0.0)], host
        assert metrics["gpuprov_gpu_pci_devices"] == [({}, float(PCI_GPUS[hv["lab_profile"]]))]
        assert metrics["gpuprov_gpu_smi_up"] == [({}, 0.0)]
        assert "gpuprov_gpu_utilization_ratio" not in metrics  # no driver: no invented zeros
        assert "node_load1" in metrics  # node_exporter's own collectors still run
        smoke = json.loads((reports / "smoke" / f"{host}.json").read_text())
        got = {
            lab_["layer"]: (lab_["status"], v) for lab_, v in metrics["gpuprov_smoke_layer_passed"]
        }
        want = {
            x["layer"]: (x["status"], float(x["status"] in ("pass", "pass (cpu)")))
            for x in smoke["layers"]
        }
        assert got == want, host
        stamp = metrics["gpuprov_smoke_last_verdict_timestamp_seconds"][0][1]
        # When the verdicts last changed: the facts file's modification time (the role
        # rewrites it only when the plan or the verdicts change; the smoke report on the
        # controller is rewritten at every run).
        written = float(lab.ssh(host, "stat -c %Y /etc/gpuprov/monitoring.json").stdout)
        assert int(stamp) == int(written), host
        plan_file = reports / "plan" / f"{host}.json"
        if plan_file.exists():  # gpu_nodes only
            plan = json.loads(plan_file.read_text())["plan"]
            ((labels, _),) = metrics["gpuprov_plan_info"]
            assert labels["torch"] == str(plan["torch"]), host
        installed = metrics["gpuprov_installed_info"][0][0]
        torch = "2.13.0+cpu" if hv["lab_release"] == "bookworm" else ""
        assert (installed["driver"], installed["torch"]) == ("", torch), host


def test_a_stopped_host_fails_both_launchers_fast_and_named(
    lab: Any,
    launch_hosts: list[str],
    converged: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Stops the last launch host, then starts it again (recreated if its port was taken).

    Fast by construction, not by a wall-clock threshold (the times are printed): each
    launcher's SSH probe (a connect timeout) refused to start, exit 3, instead of the job
    running into its 90 s --timeout (exit 124)."""
    victim = launch_hosts[-1]
    container = lab.hosts[victim]["lab_container"]
    subprocess.run(["docker", "stop", "-t", "2", container], check=True, capture_output=True)
    try:
        started = time.monotonic()
        rc, doc = l5(lab, launch_hosts[0])
        wall = time.monotonic() - started
        watch = subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "fabfile.py"),
                "-i",
                str(lab.inventory),
                "--timeout",
                "5",
                "watch",
                "--count",
                "1",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        lab.start(victim)
    with capsys.disabled():
        each = ", ".join(
            f"{v.get('name')} {v.get('details', {}).get('elapsed_s')}s" for v in doc["layers"]
        )
        print(f"\n[launch] l5_launch.py with a host down: {wall:.1f}s ({each})", flush=True)
    assert rc == 1, doc
    address = lab.hosts[victim]["lab_address"]
    assert {v["details"]["launcher"] for v in doc["layers"]} == {"torchrun", "mpirun"}
    for v in doc["layers"]:
        assert v["status"] == "fail", v
        assert f"host down: {victim} ({address})" in v["reason"], v
        assert v["details"]["rc"] == EXIT_UNREACHABLE, v  # the probe, not the job's timeout
    assert watch.returncode == 1, watch.stdout + watch.stderr
    lines = watch.stdout.splitlines()
    assert any(line.startswith(victim) and "unreachable" in line for line in lines), watch.stdout
    alive = [h for h in lab.groups["gpu_nodes"] if h != victim]
    for host in alive:
        assert any(line.startswith(host) and "no driver" in line for line in lines), watch.stdout
