"""Pull mode on a lab host (issue 23, item 2): playbooks/pull.yml installs the timer, the timer
fires, ansible-pull converges the host from a git repository, and the run's report arrives in
the lab's S3 bucket.

Real: systemd and its timer on the host, ansible-pull and ansible-playbook (the controller's
releases, installed from PyPI on the host), git over HTTP, site.yml over the local connection,
boto3 against the lab's S3 server (moto, signature-checking). The repository is this checkout's
HEAD with the lab's inventory committed into it (inventories/pulled/), served as a bare
repository over git's dumb HTTP from this process, on the lab network's gateway (a fleet serves
it from its git server). The host is the lab's trixie host: without torch it runs no multi-host
step (torchrun across hosts needs the controller); the two host lists the controller computes
from its whole play are given to it in the per-host inventory (gpuprov_pull_host_vars).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuprov_lab.aptrepo import gateway_ip, serve, shutdown
from gpuprov_lab.s3lab import PKG_DIR, s3_name
from gpuprov_lab.site import vault_password_file
from playbook_output import recap
from test_jupyterlab_storage import host_run, lab_vault

Lab = Any  # tests/lab/conftest.py's Lab (the `lab` fixture)

REPO = Path(__file__).resolve().parents[2]
BRANCH = "pulled"
STATE = "/var/lib/gpuprov/pull/last-run.json"
LOCK = "/var/lib/gpuprov/pull/lock"
HOLD = "/var/lib/gpuprov/pull/push-run.json"  # a controller run's hold on pull runs
PULL_DEFAULTS = yaml.safe_load((REPO / "roles/gpuprov_pull/defaults/main.yml").read_text())
PREFIX = str(PULL_DEFAULTS["gpuprov_pull_prefix"])
PULL_PY = f"{PREFIX}/venv/bin/python"


@pytest.fixture(scope="module")
def pull_host(lab: Lab) -> Iterator[str]:
    trixie = [str(h) for h, hv in lab.hosts.items() if hv.get("lab_release") == "trixie"]
    if not trixie:
        pytest.skip("needs a trixie host (a host without torch) for pull mode")
    host = sorted(trixie)[0]
    yield host
    # Ansible's venv (570 MB in 50,000 files, roles/gpuprov_pull) goes when the module is done:
    # test_lab_ops.py later commits this host (the cheapest one) into an image: 54-56 s with the
    # venv in CI's runs of 2026-12-05, 15 s on a lab host that never had it.
    host_run(lab, host, f"rm -rf {shlex.quote(PREFIX)}")


def _git(*args: str, cwd: Path) -> str:
    ident = ["-c", "user.name=gpuprov lab", "-c", "user.email=lab@gpuprov.invalid"]
    proc = subprocess.run(["git", *ident, *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {shlex.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def served_repo(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(URL, commit): HEAD of this checkout plus the lab's inventory, as a bare repository."""
    root = tmp_path_factory.mktemp("pull-repo")
    work, served = root / "work", root / "served"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(work)], check=True)
    _git("checkout", "--quiet", "-b", BRANCH, cwd=work)
    pulled = work / "inventories" / "pulled"
    (pulled / "group_vars" / "all").mkdir(parents=True)
    (pulled / "hosts.yml").write_text(lab.inventory.read_text())
    vault = lab.inventory.parent / "group_vars" / "all" / "vault"
    (pulled / "group_vars" / "all" / "vault").write_text(vault.read_text())
    _git("add", "--force", "inventories/pulled", cwd=work)
    _git("commit", "--quiet", "-m", "the lab's inventory", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    served.mkdir()
    subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(work), str(served / "fleet.git")], check=True
    )
    _git("update-server-info", cwd=served / "fleet.git")
    url = serve(served, gateway_ip(f"{lab.name}-net"))
    try:
        yield f"{url}/fleet.git", commit
    finally:
        shutdown()


def _pull_vars(lab: Lab, host: str, url: str, secrets: dict[str, Any]) -> dict[str, Any]:
    hv = lab.hosts[host]
    profile, spec = sorted(hv["lab_s3_profiles"].items())[0]
    keys = secrets["vault_lab_s3_keys"][profile]
    bookworm = [h for h, v in lab.hosts.items() if v.get("lab_release", "bookworm") == "bookworm"]
    return {
        "gpuprov_pull_repo_url": url,
        "gpuprov_pull_version": BRANCH,
        "gpuprov_pull_inventories": ["inventories/pulled/hosts.yml"],
        # What the controller computes from its whole play (the lab's torch hosts).
        "gpuprov_pull_host_vars": {"dist_launch_hosts": bookworm, "gpu_smoke_dist_hosts": bookworm},
        "gpuprov_pull_first_run": "3s",
        "gpuprov_pull_interval": "1d",
        "gpuprov_pull_randomized_delay": "0",
        "gpuprov_pull_vault_password": vault_password_file(lab.name).read_text().strip(),
        "gpuprov_pull_report_url": f"s3://{spec['bucket']}/pull",
        "gpuprov_pull_report_endpoint_url": hv["lab_s3_endpoint"],
        "gpuprov_pull_report_region": spec["region"],
        "gpuprov_pull_report_access_key": keys["access_key"],
        "gpuprov_pull_report_secret_key": keys["secret_key"],
        "gpuprov_pull_pip_index_url": "https://pypi.org/simple",
    }


def _wait_for_run(lab: Lab, host: str, timeout: float = 1500) -> dict[str, Any]:
    """The report of the run the timer started, once the service is inactive again."""
    deadline = time.monotonic() + timeout
    probe = f"test -s {STATE} && ! systemctl is-active --quiet gpuprov-pull.service && cat {STATE}"
    while time.monotonic() < deadline:
        proc = host_run(lab, host, probe)
        if proc.returncode == 0:
            return dict(json.loads(proc.stdout))
        time.sleep(10)
    journal = host_run(lab, host, "journalctl -u gpuprov-pull --no-pager | tail -60").stdout
    raise AssertionError(f"{host}: no pull run finished in {timeout:.0f}s\n{journal}")


# The report's bucket, made on the S3 server itself (a fleet's exists already; on the lab the
# storage tests make it, and a lab without them has none). Keys come on stdin.
MAKE_BUCKET = r"""
import json, sys, boto3
cfg = json.load(sys.stdin)
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:5000", region_name=cfg["region"],
                  aws_access_key_id=cfg["access_key"], aws_secret_access_key=cfg["secret_key"])
if cfg["bucket"] not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket=cfg["bucket"])
"""


def _make_bucket(lab: Lab, vars_: dict[str, Any]) -> None:
    cfg = {
        "bucket": vars_["gpuprov_pull_report_url"].removeprefix("s3://").split("/")[0],
        "region": vars_["gpuprov_pull_report_region"],
        "access_key": vars_["gpuprov_pull_report_access_key"],
        "secret_key": vars_["gpuprov_pull_report_secret_key"],
    }
    argv = ["docker", "exec", "-i", "--env", f"PYTHONPATH={PKG_DIR}", s3_name(lab.name)]
    proc = subprocess.run(
        [*argv, "python3", "-c", MAKE_BUCKET],
        input=json.dumps(cfg),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


READ_REPORT = r"""
import json, sys, boto3
bucket, key, endpoint, region = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region)
print(s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode())
"""


def test_the_timer_converges_the_host_from_git_and_reports_to_s3(
    lab: Lab, pull_host: str, served_repo: tuple[str, str], tmp_path: Path
) -> None:
    url, commit = served_repo
    secrets = lab_vault(lab)
    vars_ = _pull_vars(lab, pull_host, url, secrets)
    extra = tmp_path / "pull.yml"
    # Plain types: the lab's hostvars are Ansible's string subclasses, which safe_dump refuses.
    extra.write_text(yaml.safe_dump(json.loads(json.dumps(vars_))))
    extra.chmod(0o600)
    group = tmp_path / "pull_nodes.yml"
    group.write_text(yaml.safe_dump({"pull_nodes": {"hosts": {str(pull_host): None}}}))
    host_run(lab, pull_host, f"rm -f {STATE}")
    _make_bucket(lab, vars_)
    base = ("playbooks/pull.yml", "-i", str(group), "-l", pull_host, "-e", f"@{extra}")
    # A password in the repository URL is refused before any change, and not repeated.
    leaky = lab.ansible_playbook(
        *base, "-e", "gpuprov_pull_repo_url=https://u:hunter2@git.invalid/x"
    )
    assert leaky.returncode != 0
    assert "gpuprov_pull_repo_url (required" in leaky.stdout, leaky.stdout[-3000:]
    assert "hunter2" not in leaky.stdout
    # --check first (the host has no venv or unit yet, or the previous test session's).
    check = lab.ansible_playbook(*base, "--check")
    assert check.returncode == 0, check.stdout[-4000:]
    started = time.monotonic()
    proc = lab.ansible_playbook(*base)
    assert proc.returncode == 0, proc.stdout[-4000:]
    for key in ("gpuprov_pull_report_secret_key", "gpuprov_pull_vault_password"):
        assert vars_[key] not in proc.stdout
    print(f"\n[test_pull] pull.yml: {time.monotonic() - started:.0f}s")

    # The timer fires by itself (3 s after it started); nothing here starts the service.
    report = _wait_for_run(lab, pull_host)
    print(f"[test_pull] the timer's run: {report['seconds']}s, recap {report['recap']}")
    assert report["verdict"] == "converged", report
    assert (report["host"], report["rc"], report["commit"]) == (pull_host, 0, commit)
    assert report["recap"]["failures"] == 0
    assert report["recap"]["unreachable"] == 0
    assert report["plan"]["host"] == pull_host, report["plan"]
    triggered = host_run(lab, pull_host, "systemctl show -P LastTriggerUSec gpuprov-pull.timer")
    assert triggered.stdout.strip() not in ("", "n/a", "0"), triggered

    # The same report in the lab's S3 bucket, read with the report's keys from the host.
    bucket = vars_["gpuprov_pull_report_url"].removeprefix("s3://").split("/")[0]
    argv = [PULL_PY, "-", bucket, f"pull/{pull_host}/latest.json"]
    argv += [vars_["gpuprov_pull_report_endpoint_url"], vars_["gpuprov_pull_report_region"]]
    read = host_run(
        lab,
        pull_host,
        f"set -a; . /etc/gpuprov/pull/report.env; set +a; {shlex.join(argv)}",
        stdin=READ_REPORT,
    )
    assert read.returncode == 0, read.stderr[-2000:]
    assert json.loads(read.stdout) == report

    # pull.yml again, now that the host pulled: nothing to change.
    again = lab.ansible_playbook(*base)
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout)[pull_host]["changed"] == 0, again.stdout[-4000:]

    # Secrets: root-only files, in no report, argv or journal line.
    files = "/etc/gpuprov/pull/report.env /etc/gpuprov/pull/vault-password"
    modes = host_run(lab, pull_host, f"stat -c '%a %U' {files}").stdout.splitlines()
    assert [m for m in modes if m] == ["600 root", "600 root"]
    journal = host_run(lab, pull_host, "journalctl -u gpuprov-pull --no-pager").stdout
    for secret in (vars_["gpuprov_pull_vault_password"], vars_["gpuprov_pull_report_secret_key"]):
        assert secret not in journal
        assert secret not in read.stdout


def test_a_run_while_one_holds_the_lock_does_nothing(lab: Lab, pull_host: str) -> None:
    """Started while another run holds the lock: says so and exits 0 at once (no second pull)."""
    before = host_run(lab, pull_host, f"stat -c %Y {STATE}").stdout.strip()
    # -o: the lock's descriptor closed in sleep, so that killing flock at the end releases it
    hold = f"setsid -f flock -o {LOCK} sleep 60 </dev/null >/dev/null 2>&1"
    held = host_run(lab, pull_host, f"{hold}; sleep 1; systemctl start gpuprov-pull.service")
    assert held.returncode == 0, held.stderr
    journal = host_run(lab, pull_host, "journalctl -u gpuprov-pull --no-pager -n 5").stdout
    assert f"another run holds {LOCK}" in journal, journal
    assert host_run(lab, pull_host, f"stat -c %Y {STATE}").stdout.strip() == before
    assert host_run(lab, pull_host, f"stat -c '%a %U' {LOCK}").stdout.strip() == "600 root"
    # The lock goes with the holder: the next test takes a hold, which a held lock refuses.
    assert host_run(lab, pull_host, f"pkill -f 'flock -o {LOCK}'").returncode == 0


def test_a_controller_run_holds_pull_runs_off_until_its_end(
    lab: Lab, pull_host: str, tmp_path: Path
) -> None:
    """site.yml's first play (pull_hold.yml) holds the host's pull runs off, its last
    (pull_release.yml) lets them go on: a pull started in between says so and pulls nothing.
    The plays alone here (site.yml's are these two files); a hold refused while a pull run
    converges the host: tests/unit/test_pull_run.py."""
    group = tmp_path / "pull_nodes.yml"
    group.write_text(yaml.safe_dump({"pull_nodes": {"hosts": {pull_host: None}}}))
    before = host_run(lab, pull_host, f"stat -c %Y {STATE}").stdout.strip()
    books = ("playbooks/pull_hold.yml", "-i", str(group), "-l", pull_host)
    try:
        held = lab.ansible_playbook(*books)
        assert held.returncode == 0, held.stdout[-3000:]
        assert host_run(lab, pull_host, f"test -f {HOLD}").returncode == 0
        started = host_run(lab, pull_host, "systemctl start gpuprov-pull.service")
        assert started.returncode == 0, started.stderr
        journal = host_run(lab, pull_host, "journalctl -u gpuprov-pull --no-pager -n 5").stdout
        assert "gpuprov-pull: a controller run (" in journal, journal
        assert "this one stops" in journal, journal
        assert host_run(lab, pull_host, f"stat -c %Y {STATE}").stdout.strip() == before
        # The hold and this release in one run, as site.yml's first and last plays.
        released = lab.ansible_playbook(*books[:1], "playbooks/pull_release.yml", *books[1:])
        assert released.returncode == 0, released.stdout[-3000:]
        assert host_run(lab, pull_host, f"test -e {HOLD}").returncode == 1
    finally:
        host_run(lab, pull_host, f"rm -f {HOLD}")  # a failed assertion holds no later test off


def test_a_bad_schedule_is_refused_and_disabling_stops_the_timer_and_removes_secrets(
    lab: Lab, pull_host: str, tmp_path: Path
) -> None:
    """The settings without a vault password or a report, the timer off: the root-only files
    the settings no longer name go, the timer stops; a bad time span stops in preflight."""
    group = tmp_path / "pull_nodes.yml"
    group.write_text(yaml.safe_dump({"pull_nodes": {"hosts": {pull_host: None}}}))
    base = ("playbooks/pull.yml", "-i", str(group), "-l", pull_host)
    base += ("-e", "gpuprov_pull_repo_url=https://git.invalid/fleet.git")
    bad = lab.ansible_playbook(*base, "-e", "gpuprov_pull_interval=soon")
    assert bad.returncode != 0
    assert 'gpuprov_pull_interval="soon" on ' in bad.stdout, bad.stdout[-3000:]
    # An ansible-core pin its Ansible package (12.x: ansible-core 2.19) does not go with: pip
    # refused it after the venv was made (ResolutionImpossible); preflight does now.
    pins = ("-e", "gpuprov_pull_ansible_core_version=2.20.0")
    pair = lab.ansible_playbook(*base, *pins, "-e", "gpuprov_pull_ansible_version=12.3.0")
    assert pair.returncode != 0
    said = " ".join(pair.stdout.split())
    wanted = "depends on ansible-core 2.19.x, not 2.20.0 (gpuprov_pull_ansible_core_version"
    assert wanted in said, said[-3000:]
    assert "| Install Ansible (the controller's releases)" not in said, said[-3000:]  # no pip
    # A release pair whose controller needs a newer Python than the host's: Debian 12's 3.11
    # (the trixie host has 3.13), refused in preflight before anything changes on that host.
    bookworm = sorted(str(h) for h, hv in lab.hosts.items() if hv.get("lab_release") == "bookworm")
    assert bookworm, "the lab has no Debian 12 host"
    old_python = tmp_path / "pull_nodes_bookworm.yml"
    old_python.write_text(yaml.safe_dump({"pull_nodes": {"hosts": {bookworm[0]: None}}}))
    newer = lab.ansible_playbook(
        "playbooks/pull.yml", "-i", str(old_python), "-l", bookworm[0],
        "-e", "gpuprov_pull_repo_url=https://git.invalid/fleet.git",
        "-e", "gpuprov_pull_ansible_core_version=2.20.0",
        "-e", "gpuprov_pull_ansible_version=13.0.0",
    )  # fmt: skip
    assert newer.returncode != 0
    said = " ".join(newer.stdout.split())
    assert "ansible-core 2.20.0 (gpuprov_pull_ansible_core_version, or the" in said, said[-3000:]
    assert "on Python 3.12 or newer" in said, said[-3000:]
    # As typed on a command line: the string "false" (a conditional on it failed before).
    off = lab.ansible_playbook(*base, "-e", "gpuprov_pull_enabled=false")
    assert off.returncode == 0, off.stdout[-4000:]
    state = host_run(lab, pull_host, "systemctl is-enabled gpuprov-pull.timer; "
                     "systemctl is-active gpuprov-pull.timer").stdout.split()  # fmt: skip
    assert state == ["disabled", "inactive"], state
    for gone in ("/etc/gpuprov/pull/report.env", "/etc/gpuprov/pull/vault-password"):
        assert host_run(lab, pull_host, f"test -e {gone}").returncode == 1, gone
    unit = host_run(lab, pull_host, "cat /etc/systemd/system/gpuprov-pull.service").stdout
    assert "EnvironmentFile" not in unit
