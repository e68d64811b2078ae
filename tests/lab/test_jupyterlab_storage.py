"""Notebooks and object storage in the lab (issue 12), on the converged lab.

The lab's hosts get JupyterLab in their torch venv (bookworm; trixie has no torch env and no
notebook server) and S3 clients configured for the lab's S3 stand-in: moto's server with
signature checks (scripts/gpuprov_lab/s3lab.py), whose key pairs and a notebook token sit in
the lab's throwaway vault. Nothing here is simulated: real pip installs, systemd, JupyterLab,
kernels, boto3/awscli against a real server that refuses wrong signatures.

This module reuses the state test_site.py converged (it runs first in a session), and judges
that module's no-op re-run and converged check of site.yml as the second run and the check
run of jupyterlab.yml and storage.yml (shared_runs.py). Run alone (`-k notebook_storage`), it
converges site.yml once when the lab is not converged yet and runs both playbooks itself.
"""

from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import shared_runs
import yaml
from async_jobs import JUPYTER_DOWNLOAD, check_jupyterlab_download, jupyterlab_results
from conftest import role_ports
from gpuprov_lab.run_doc import json_document
from gpuprov_lab.site import vault_password_file
from lab import ssh_argv  # scripts/lab.py, the lab's SSH command line (pythonpath)
from playbook_output import CONVERGED, MARK, outcomes, recap_total

from compat.environment import environment

REPO = Path(__file__).resolve().parents[2]

Lab = Any  # tests/lab/conftest.py's Lab
PLAYS = ("playbooks/jupyterlab.yml", "playbooks/storage.yml")
HELPER = "/etc/jupyterlab/gpuprov_jupyter.py"
VENV_PY = "/opt/gpuprov/venv/bin/python"
# What the lab pins (inventories/lab/group_vars/all/pytorch.yml), read as data here.
LAB_PYTORCH = yaml.safe_load((REPO / "inventories/lab/group_vars/all/pytorch.yml").read_text())
# Where the object_storage role installs (its defaults; the lab keeps them).
STORAGE_DEFAULTS = yaml.safe_load((REPO / "roles/object_storage/defaults/main.yml").read_text())

# Runs on a host with the secrets on stdin (JSON list); prints where any of them appears:
# a process's argv, the journal, or a world-readable file under the listed trees.
LEAK_SCAN = r"""
import json, os, stat, subprocess, sys
secrets = [s.encode() for s in json.load(sys.stdin) if s]
hits = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read()
        except OSError:
            continue
        if any(s in argv for s in secrets):
            hits.append("argv of pid " + pid)
journal = subprocess.run(["journalctl", "--no-pager", "-o", "cat"], capture_output=True).stdout
if any(s in journal for s in secrets):
    hits.append("journal")
for top in ["/etc", "/srv", "/var/lib", "/var/log", "/home", "/run", "/tmp", "/opt", "/root"]:
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IROTH:
                    continue
                if st.st_size > 64 * 1024 * 1024:
                    continue
                data = open(path, "rb").read()
            except OSError:
                continue
            if any(s in data for s in secrets):
                hits.append("world-readable " + path)
print(json.dumps(hits))
"""


def host_run(
    lab: Lab, host: str, command: str, stdin: str = "", timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """A command on a lab host with data on stdin (secrets never go into argv)."""
    return subprocess.run(
        ssh_argv(lab.hosts[host], command),
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def lab_vault(lab: Lab) -> dict[str, Any]:
    """The lab's vaulted secrets, decrypted with its throwaway password (gpuprov_lab/s3lab.py)."""
    vault = lab.inventory.parent / "group_vars" / "all" / "vault"
    password = vault_password_file(lab.name)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-vault"),
            "view",
            "--vault-password-file",
            str(password),
            str(vault),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, Any] = yaml.safe_load(proc.stdout)
    return data


def _hosts_with_a_method(lab: Lab, variable: str) -> list[str]:
    """The lab's hosts whose ``variable`` (rendered from the lab's inventory,
    conftest.RENDERED) is not none."""
    return [h for h in lab.groups["lab"] if lab.hosts[h].get(variable) != "none"]


@pytest.fixture(scope="module")
def notebook_hosts(lab: Lab) -> list[str]:
    """lab-k40m in the default lab (inventories/lab/group_vars/all/notebook.yml)."""
    hosts = _hosts_with_a_method(lab, "jupyterlab_method")
    if not hosts:
        pytest.skip("no notebook server in this lab (jupyterlab_method none everywhere)")
    return hosts


@pytest.fixture(scope="module")
def storage_hosts(lab: Lab) -> list[str]:
    """lab-k40m and the trixie host in the default lab (group_vars/all/storage.yml)."""
    hosts = _hosts_with_a_method(lab, "object_storage_method")
    if not hosts:
        pytest.skip("no storage clients in this lab (object_storage_method none everywhere)")
    return hosts


@pytest.fixture(scope="module")
def secrets(lab: Lab) -> dict[str, Any]:
    return lab_vault(lab)


@pytest.fixture(scope="module")
def env_converged(
    lab: Lab,
    notebook_hosts: list[str],
    tmp_path_factory: pytest.TempPathFactory,
    site_runs: dict[str, shared_runs.Run],
) -> Path:
    """The lab with notebook and storage converged; site.yml runs only when it is not (and
    the session's kept runs, from before this converge, are forgotten)."""
    probe = "systemctl is-active --quiet jupyterlab && test -x /opt/gpuprov/tools-venv/bin/aws"
    if not all(host_run(lab, h, probe).returncode == 0 for h in notebook_hosts):
        site_runs.clear()
        reports = tmp_path_factory.mktemp("site-reports")
        proc = lab.ansible_playbook("playbooks/site.yml", "-e", f"gpuprov_report_dir={reports}")
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    return tmp_path_factory.mktemp("env-reports")


@pytest.fixture(scope="module")
def second_run(
    lab: Lab, env_converged: Path, site_runs: dict[str, shared_runs.Run]
) -> shared_runs.Run:
    """jupyterlab.yml + storage.yml once more: must change nothing, and re-verifies both.
    In the session that run is test_site.py's no-op re-run of site.yml (shared_runs.py)."""
    noop = site_runs.get(shared_runs.NOOP)
    if noop is not None and noop.reports is not None:
        return noop
    proc = lab.ansible_playbook(*PLAYS, "-e", f"gpuprov_report_dir={env_converged}")
    # A run that stopped before its recap fails in the test, with its output.
    counters = outcomes(recap_total(proc.stdout)) if MARK in proc.stdout else {}
    return shared_runs.Run(proc.returncode, proc.stdout, counters, env_converged)


def test_second_run_changes_nothing_and_verifies(
    lab: Lab,
    second_run: shared_runs.Run,
    notebook_hosts: list[str],
    site_runs: dict[str, shared_runs.Run],
) -> None:
    proc = second_run
    assert proc.returncode == 0, proc.stdout[-6000:]
    if proc is site_runs.get(shared_runs.NOOP):  # it ran both playbooks' plays
        _ran_both(lab, proc, notebook_hosts)
    counters = proc.recap
    assert sorted(counters) == sorted(lab.groups["lab"])
    for host, c in counters.items():
        assert c == CONVERGED, (host, c)
    # The role's own verification ran on every notebook host (REST health + kernel round trip).
    # The debug message as the callback prints it: in JSON, its quotes escaped.
    answered = re.findall(
        r'([\w.-]+): kernel \\?"PyTorch 2\.13\.0 \(CPU\)\\?" answered torch 2\.13\.0\+cpu',
        proc.stdout,
    )
    assert sorted(answered) == sorted(notebook_hosts), proc.stdout[-4000:]


def test_reports_hold_url_kernel_and_verdicts_but_no_secret(
    lab: Lab,
    second_run: shared_runs.Run,
    notebook_hosts: list[str],
    storage_hosts: list[str],
    secrets: dict[str, Any],
) -> None:
    reports = second_run.reports
    assert reports is not None
    for host in notebook_hosts:
        raw = (reports / "jupyterlab" / f"{host}.json").read_text()
        nb = json.loads(raw)
        assert nb["verdict"] == "pass", nb
        assert nb["url"] == "http://127.0.0.1:8888/lab"
        assert nb["tunnel"].startswith("ssh -N -L 8888:127.0.0.1:8888 ")
        assert (nb["display_name"], nb["torch"], nb["cuda"], nb["cuda_available"]) == (
            "PyTorch 2.13.0 (CPU)",
            "2.13.0+cpu",
            None,
            False,
        )
        assert secrets["vault_jupyterlab_token"] not in raw
    for host in storage_hosts:
        raw = (reports / "storage" / f"{host}.json").read_text()
        doc = json.loads(raw)
        assert {p["profile"]: p["verdict"] for p in doc["profiles"]} == {
            "lab-a": "pass",
            "lab-b": "pass",
        }, doc
        for keys in secrets["vault_lab_s3_keys"].values():
            assert keys["secret_key"] not in raw
            assert keys["access_key"] not in raw


def test_kernel_round_trip(
    lab: Lab, env_converged: Path, notebook_hosts: list[str], secrets: dict[str, Any]
) -> None:
    """The helper, driven from here: REST with the token, a kernel through the server."""
    expected = f"{LAB_PYTORCH['pytorch_torch_version']}+{LAB_PYTORCH['pytorch_variant']}"
    for host in notebook_hosts:
        installed = host_run(lab, host, f"{VENV_PY} -c 'import torch; print(torch.__version__)'")
        assert installed.stdout.strip() == expected, installed
        proc = host_run(
            lab,
            host,
            f"{VENV_PY} {HELPER} roundtrip --url http://127.0.0.1:8888 --kernel gpuprov-torch",
            stdin=secrets["vault_jupyterlab_token"] + "\n",
        )
        doc = json.loads(proc.stdout)
        assert proc.returncode == 0, doc
        assert (doc["output"], doc["torch"], doc["cuda_available"], doc["cuda"]) == (
            f"{expected} False None",
            expected,
            False,
            None,
        )
        assert doc["display_name"] == "PyTorch 2.13.0 (CPU)"
        # The token is really checked: a wrong one is refused at the health step.
        wrong = host_run(
            lab,
            host,
            f"{VENV_PY} {HELPER} roundtrip --url http://127.0.0.1:8888 --kernel gpuprov-torch",
            stdin="x" * 48 + "\n",
        )
        bad = json.loads(wrong.stdout)
        assert wrong.returncode == 1, bad
        assert bad["step"] == "health", bad
        assert "Forbidden" in bad["error"], bad


def test_a_host_with_jupyterlab_method_none_runs_no_notebook_server(
    lab: Lab, env_converged: Path, notebook_hosts: list[str]
) -> None:
    """lab-m40 (no torch environment), lab-mixed and lab-cpu (the lab runs one notebook
    server): the role installed, wrote and started nothing there."""
    others = sorted(set(lab.groups["lab"]) - set(notebook_hosts))
    if not others:
        pytest.skip("every host of this lab runs a notebook server")
    ports = role_ports("jupyterlab")
    assert ports == [8888], ports
    for host in others:
        left = host_run(
            lab,
            host,
            "ls /etc/systemd/system/jupyterlab.service /etc/jupyterlab 2>/dev/null; "
            "systemctl is-active jupyterlab",
        ).stdout.split()
        assert left == ["inactive"], (host, left)
        assert lab.connect_results(host, ports) == {8888: errno.ECONNREFUSED}, host


def test_a_host_with_object_storage_method_none_gets_no_clients(
    lab: Lab, env_converged: Path, storage_hosts: list[str]
) -> None:
    """lab-mixed and lab-cpu: the role installed, wrote and verified nothing there (the storage
    play ran on them: test_second_run_changes_nothing_and_verifies)."""
    others = sorted(set(lab.groups["lab"]) - set(storage_hosts))
    if not others:
        pytest.skip("every host of this lab has storage clients")
    venv = STORAGE_DEFAULTS["object_storage_tools_venv"]
    aws = f"{STORAGE_DEFAULTS['object_storage_bin_dir']}/aws"
    for host in others:
        users = lab.hosts[host]["object_storage_users"]
        left = host_run(
            lab,
            host,
            f"ls -d {venv} {aws} "
            + " ".join(f"~{user}/.aws" for user in users)
            + " 2>/dev/null; true",
        ).stdout.split()
        assert left == [], (host, left)
        assert not (lab.reports / "storage" / f"{host}.json").exists(), host


def _state(lab: Lab, host: str) -> str:
    return host_run(
        lab,
        host,
        "sha256sum /etc/jupyterlab/* /etc/systemd/system/jupyterlab.service 2>&1; "
        "systemctl show -p ActiveEnterTimestamp,MainPID jupyterlab",
    ).stdout


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "jupyterlab_token is empty"),
        ("Zq3-9xLw_Pp0t8Rk", "jupyterlab_token is 16 characters long; the minimum is 32"),
        ("changeme", "jupyterlab_token is a known placeholder, not a secret"),
    ],
    ids=["empty", "short", "placeholder"],
)
def test_bad_token_refused_before_any_change(
    lab: Lab,
    env_converged: Path,
    notebook_hosts: list[str],
    token: str,
    reason: str,
    tmp_path: Path,
) -> None:
    host = notebook_hosts[0]
    before = _state(lab, host)
    extra = tmp_path / "token.json"
    extra.write_text(json.dumps({"jupyterlab_token": token}))
    proc = lab.ansible_playbook(PLAYS[0], "--limit", host, "-e", f"@{extra}")
    assert proc.returncode != 0
    assert reason in proc.stdout, proc.stdout[-3000:]
    assert "Nothing was changed." in proc.stdout
    assert recap_total(proc.stdout)[host]["changed"] == 0
    assert _state(lab, host) == before


def _profiles(
    lab: Lab, host: str, secrets: dict[str, Any], **override: str
) -> list[dict[str, Any]]:
    hv = lab.hosts[host]
    out = []
    for name, spec in hv["lab_s3_profiles"].items():
        keys = secrets["vault_lab_s3_keys"][name]
        out.append(
            {
                "name": name,
                "endpoint_url": hv["lab_s3_endpoint"],
                "region": spec["region"],
                "addressing_style": "path",
                "verify_tls": True,
                "ca_bundle": "",
                "access_key": keys["access_key"],
                "secret_key": keys["secret_key"],
                "probe_bucket": spec["bucket"],
                "create_bucket": True,
            }
        )
    out[0].update(override)
    return out


@pytest.mark.parametrize(
    ("override", "code"),
    [
        ({"secret_key": "Wr0ng" * 8}, "SignatureDoesNotMatch"),
        ({"access_key": "AKIA" + "WRONGWRONGWRONG2"}, "InvalidAccessKeyId"),
    ],
    ids=["wrong-secret", "unknown-key"],
)
def test_wrong_key_pair_fails_with_one_clear_line(
    lab: Lab,
    env_converged: Path,
    secrets: dict[str, Any],
    override: dict[str, str],
    code: str,
    tmp_path: Path,
    storage_hosts: list[str],
) -> None:
    host = storage_hosts[0]
    extra = tmp_path / "profiles.json"
    extra.write_text(
        json.dumps({"object_storage_profiles": _profiles(lab, host, secrets, **override)})
    )
    proc = lab.ansible_playbook(
        PLAYS[1],
        "--limit",
        host,
        "--tags",
        "object_storage_preflight,object_storage_verify",
        "-e",
        f"@{extra}",
        "-e",
        f"gpuprov_report_dir={tmp_path}",
    )
    assert proc.returncode != 0
    endpoint = lab.hosts[host]["lab_s3_endpoint"]
    line = f"profile lab-a at {endpoint}: key pair refused during "
    assert line in proc.stdout, proc.stdout[-3000:]
    assert f"({code}: " in proc.stdout
    assert "object_storage_profiles entry 'lab-a' (Vault)" in proc.stdout
    assert "Traceback" not in proc.stdout
    # The other profile still passed, and the verdict file says which one failed.
    verdicts = json.loads((tmp_path / "storage" / f"{host}.json").read_text())["profiles"]
    assert [(v["profile"], v["verdict"]) for v in verdicts] == [
        ("lab-a", "fail"),
        ("lab-b", "pass"),
    ]
    if "secret_key" in override:
        assert override["secret_key"] not in proc.stdout


# Two hosts of one play probing the same missing bucket: both HEADs say 404, the other host's
# create lands first, then ours. Run on a host with the role's probe and the tools venv's boto3
# against the lab's S3 server; nothing simulated, the interleaving is only made deterministic.
RACE = r"""
import json, runpy, sys, uuid
import botocore.exceptions
probe = runpy.run_path(sys.argv[1])
profile, keys = json.loads(sys.stdin.readline()), json.loads(sys.stdin.readline())
bucket = "gpuprov-race-" + uuid.uuid4().hex[:12]
where = {"LocationConstraint": profile["region"]}
ours, theirs = probe["client"](profile, keys), probe["client"](profile, keys)
out = {"missing": probe["bucket_missing"](ours, bucket)}
theirs.create_bucket(Bucket=bucket, CreateBucketConfiguration=where)
try:
    theirs.create_bucket(Bucket=bucket, CreateBucketConfiguration=where)
    out["plain_second_create"] = "ok"
except botocore.exceptions.ClientError as exc:
    out["plain_second_create"] = exc.response["Error"]["Code"]
probe["create_bucket"](ours, bucket, profile["region"])
out["missing_after"] = probe["bucket_missing"](ours, bucket)
ours.delete_bucket(Bucket=bucket)
print(json.dumps(out))
"""


def test_a_bucket_another_host_created_since_the_head_is_not_an_error(
    lab: Lab, env_converged: Path, secrets: dict[str, Any], storage_hosts: list[str]
) -> None:
    """CI stop 17: lab-k40m failed site.yml with "create bucket failed (BucketAlreadyOwnedByYou)"
    because every host probes lab-b's bucket at once."""
    host = storage_hosts[0]
    profile = next(p for p in _profiles(lab, host, secrets) if p["region"] != "us-east-1")
    keys = {k: profile.pop(k) for k in ("access_key", "secret_key")}
    stdin = json.dumps(profile) + "\n" + json.dumps(keys) + "\n"
    probe = "/opt/gpuprov/tools-venv/bin/gpuprov-s3-probe.py"  # roles/object_storage/vars
    proc = host_run(
        lab, host, f"/opt/gpuprov/tools-venv/bin/python -c {_quote(RACE)} {probe}", stdin=stdin
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    # The server answers a plain second create the way that failed in CI, so the probe's
    # create below met the same answer and took it as done.
    assert out == {
        "missing": True,
        "plain_second_create": "BucketAlreadyOwnedByYou",
        "missing_after": False,
    }


def test_awscli_as_the_user_uses_the_written_profiles(
    lab: Lab, env_converged: Path, storage_hosts: list[str]
) -> None:
    """~/.aws as written works with the real awscli, per profile (path-style, region)."""
    for host in storage_hosts:
        for profile, spec in lab.hosts[host]["lab_s3_profiles"].items():
            proc = host_run(
                lab,
                host,
                f"sudo -u gpuprov-data -H aws --profile {profile} s3api head-bucket "
                f"--bucket {spec['bucket']} && echo ok",
            )
            assert proc.stdout.strip().splitlines()[-1] == "ok", (host, profile, proc.stderr)
        boto = host_run(lab, host, f"test ! -x {VENV_PY} || {VENV_PY} -c 'import boto3'")
        assert boto.returncode == 0, boto.stderr


def _ran_both(lab: Lab, run: shared_runs.Run, notebook_hosts: list[str]) -> None:
    """A shared site.yml run ran the notebook play on the notebook hosts, storage on all."""
    assert run.ran(REPO / PLAYS[0]) >= set(notebook_hosts), run.plays
    assert run.ran(REPO / PLAYS[1]) >= set(lab.groups["lab"]), run.plays


def test_check_mode_of_both_roles_changes_nothing(
    lab: Lab,
    env_converged: Path,
    secrets: dict[str, Any],
    site_runs: dict[str, shared_runs.Run],
    notebook_hosts: list[str],
) -> None:
    """In the session: test_site.py's --check --diff of the converged lab (shared_runs.py)."""
    kept = site_runs.get(shared_runs.CHECK)
    if kept is not None:
        _ran_both(lab, kept, notebook_hosts)
        stdout, counters = kept.stdout, kept.recap
    else:
        proc = lab.ansible_playbook(*PLAYS, "--check", "--diff")
        assert proc.returncode == 0, proc.stdout[-4000:]
        stdout, counters = proc.stdout, outcomes(recap_total(proc.stdout))
    assert sorted(counters) == sorted(lab.groups["lab"])
    for host, c in counters.items():
        assert c == CONVERGED, (host, c)
    assert secrets["vault_jupyterlab_token"] not in stdout


def test_no_secret_in_argv_journal_or_world_readable_file(
    lab: Lab, env_converged: Path, secrets: dict[str, Any]
) -> None:
    values = [secrets["vault_jupyterlab_token"]] + [
        k["secret_key"] for k in secrets["vault_lab_s3_keys"].values()
    ]
    for host in lab.groups["lab"]:
        proc = host_run(lab, host, "python3 -c " + _quote(LEAK_SCAN), stdin=json.dumps(values))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == [], host


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


# The stand-in for the torch job lets go of the lock a second after the role's wait for it
# starts (a waiter for the lock in /proc/locks), or after this many seconds without one.
HOLD_LIMIT_S = 300


def _waited_for(lock: str) -> str:
    """A shell test that is true while a process waits for ``lock`` (gpuprov_wait_lock and
    gpuprov_state wait as flock(2) waiters, which /proc/locks lists with "->")."""
    return (
        f'awk -v ino="$(stat -c %i {lock})" '
        '\'$2 == "->" && $7 ~ (":" ino "$") { found = 1 } END { exit !found }\' /proc/locks'
    )


def test_storage_waits_for_an_install_still_writing_the_torch_environment(
    lab: Lab, env_converged: Path, notebook_hosts: list[str], storage_hosts: list[str]
) -> None:
    """An interrupted site.yml leaves the pytorch role's background install running, and
    storage.yml run alone must not pip boto3 into the environment beside it: the role waits for
    the environment's install lock (the plan's environment block) first. The job is played by a
    process that holds that lock (a real flock) until a waiter shows up, a second more, and
    writes the time it let go; boto3, uninstalled before, must come back after that time."""
    both = [h for h in notebook_hosts if h in storage_hosts]
    if not both:
        pytest.skip("no host with both a torch environment and storage clients in this lab")
    host = both[0]
    lock = environment("pip", str(Path(VENV_PY).parent.parent), "")["install_lock"]
    held, released = "/tmp/gpuprov-test-lock-held", "/tmp/gpuprov-test-lock-released"
    holder = (
        f"touch {held}; i=0; while ! {_waited_for(lock)} "
        f"&& [ $i -lt {HOLD_LIMIT_S * 2} ]; do sleep 0.5; i=$((i + 1)); done; "
        f"sleep 1; date +%s.%N > {released}"
    )
    setup = host_run(
        lab,
        host,
        f"set -e; {VENV_PY} -m pip uninstall -y -q boto3; rm -f {held} {released}; "
        f"mkdir -p -m 0700 {Path(lock).parent}; "
        f"nohup setsid flock {lock} sh -c {_quote(holder)} > /dev/null 2>&1 < /dev/null & "
        f"for i in $(seq 100); do test -e {held} && exit 0; sleep 0.1; done; exit 1",
    )
    try:
        assert setup.returncode == 0, setup.stderr
        proc = lab.ansible_playbook("playbooks/storage.yml", "--limit", host)
        assert proc.returncode == 0, proc.stdout[-4000:]
        times = host_run(
            lab,
            host,
            f"cat {released} && {VENV_PY} -c 'import importlib.metadata as m, os; "
            'print(os.path.getmtime(next(f for f in m.distribution("boto3").files '
            'if f.name == "RECORD").locate()))\'',
        )
        assert times.returncode == 0, f"boto3 back while the lock was held? {times.stderr}"
        let_go, installed = (float(t) for t in times.stdout.split())
        assert installed > let_go, (installed, let_go)
    finally:
        host_run(lab, host, f"pkill -f '[t]ouch {held}'; rm -f {held} {released}")


def test_jupyterlab_installs_from_the_index_while_another_download_holds_its_directory(
    lab: Lab, env_converged: Path, notebook_hosts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """site.yml downloads JupyterLab's packages in the background on a host that lacks it
    (roles/jupyterlab/tasks/background.yml). When an earlier run's download, still going, holds
    the download directory (here a process holding its lock, a real flock, until the install
    phase waits for it, and a second more), this run's job exits busy (75) and changes nothing
    of it, and the notebook play installs from the index as it did before the download existed.
    JupyterLab is uninstalled first, so that a converged host starts a download; the host is
    converged again after it (the lab tests after this one read its roles' records)."""
    host = notebook_hosts[0]
    venv_bin = Path(VENV_PY).parent
    lock = f"{JUPYTER_DOWNLOAD}/lock"
    kept = f"{JUPYTER_DOWNLOAD}/wheels/kept-1.0-py3-none-any.whl"
    pidfile = "/tmp/gpuprov-test-download-holder"
    holder = (
        f"echo $$ > {pidfile}; i=0; "
        f"while ! {_waited_for(lock)} "
        f"&& [ $i -lt {HOLD_LIMIT_S * 2} ]; do sleep 0.5; i=$((i + 1)); done; sleep 1"
    )
    setup = host_run(
        lab,
        host,
        f"set -e; {VENV_PY} -m pip uninstall -y -q jupyterlab; test ! -e {venv_bin}/jupyter-lab; "
        f"mkdir -p -m 0700 {JUPYTER_DOWNLOAD}/wheels; touch {kept}; rm -f {pidfile}; "
        f"nohup setsid flock {lock} sh -c {_quote(holder)} > /dev/null 2>&1 < /dev/null & "
        f"for i in $(seq 100); do flock -n {lock} true || exit 0; sleep 0.1; done; exit 1",
    )
    try:
        assert setup.returncode == 0, setup.stderr
        monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.builtin.json")
        # The plays that start the download and use it, whole: a run narrowed by --tags
        # forgets every role's state record (the roles cannot vouch for what they skipped),
        # which later lab tests read.
        plays = ("plan.yml", "background_pytorch.yml", "jupyterlab.yml")
        proc = lab.ansible_playbook(*(f"playbooks/{p}" for p in plays), "--limit", host)
        doc = json_document(proc.stdout)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        assert doc is not None, proc.stdout[-4000:]
        check_jupyterlab_download(jupyterlab_results(doc), host, 75)  # busy: from the index
        after = host_run(lab, host, f"test -x {venv_bin}/jupyter-lab && test -e {kept}")
        assert after.returncode == 0, "JupyterLab not back, or the held download touched"
        records = host_run(lab, host, "ls /var/lib/gpuprov/state").stdout.split()
        assert {"jupyterlab.json", "object_storage.json", "gpu_smoke.json"} <= set(records)
    finally:
        host_run(lab, host, f"kill $(cat {pidfile}); rm -rf {pidfile} {JUPYTER_DOWNLOAD}")
