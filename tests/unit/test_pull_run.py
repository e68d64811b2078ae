"""roles/gpuprov_pull/files/gpuprov_pull_run.py, the pull wrapper, run for real against a
stand-in ansible-pull (a script in a temporary venv that records its argv and environment and
writes the recap the gpuprov_remote callback would): the lock, the command line, the secrets
kept from the playbook, the verdict and the report. The S3 upload and the real ansible-pull run
on a lab host (tests/lab/test_pull.py)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gpuprov_pull_run as pull
import pytest
import yaml

SCRIPT = Path(pull.__file__)

FAKE_PULL = """#!{python}
import json, os, sys
from pathlib import Path
out = Path(os.environ["FAKE_OUT"])
out.write_text(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}))
recap = {{"h1": {{"ok": 5, "changed": 1, "failures": {failures}, "unreachable": 0,
                 "skipped": 2, "rescued": 0, "ignored": 0, "remote": 4, "controller_only": 1}}}}
if not os.environ.get("FAKE_NO_RECAP"):  # a repository whose ansible.cfg lacks the callback
    Path(os.environ["GPUPROV_RECAP_FILE"]).write_text(json.dumps(recap))
checkout = Path(sys.argv[sys.argv.index("--directory") + 1])
(checkout / "reports" / "plan").mkdir(parents=True, exist_ok=True)
plan = {{"host": "h1", "plan": {{"ok": True}}}}
if not os.environ.get("FAKE_NO_PLAN"):  # a run that stopped before plan.yml
    (checkout / "reports" / "plan" / "h1.json").write_text(json.dumps(plan))
sys.exit({rc})
"""


def make_config(tmp_path: Path, *, rc: int = 0, failures: int = 0, **extra: Any) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    fake = venv / "bin" / "ansible-pull"
    fake.write_text(FAKE_PULL.format(python=sys.executable, rc=rc, failures=failures))
    fake.chmod(0o755)
    config = {
        "host": "h1",
        "repo_url": "https://git.example/fleet.git",
        "version": "main",
        "playbook": "playbooks/site.yml",
        "inventories": ["inventories/fleet"],
        "host_inventory": "../host-inventory.yml",
        "checkout": str(tmp_path / "checkout"),
        "venv": str(venv),
        "vault_password_file": "/etc/gpuprov/pull/vault-password",
        "lock": str(tmp_path / "run" / "pull.lock"),
        "state_dir": str(tmp_path / "state"),
        "report": None,
        **extra,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@contextlib.contextmanager
def pull_running(tmp_path: Path) -> Iterator[Path]:
    """The lock of make_config's run held, as a pull run holds it; yields its path."""
    lock = tmp_path / "run" / "pull.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield lock


BASE = {k: "x" for k in ("host", "repo_url", "version", "playbook", "checkout", "venv", "lock")}


def run_script(
    config: Path, tmp_path: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """The wrapper as systemd starts it (a separate Python process, the config as argument),
    or, with ``args``, as site.yml's hold and release plays run it (--hold ..., --release ...)."""
    environ = {**os.environ, "FAKE_OUT": str(tmp_path / "fake.json"), **env}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, str(config)],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_run_pulls_with_the_configured_sources_and_keeps_the_secrets_out(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    keys = {"AWS_ACCESS_KEY_ID": "AKIA-SECRET", "AWS_SECRET_ACCESS_KEY": "not-a-real-one"}
    proc = run_script(config, tmp_path, **keys)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads((tmp_path / "fake.json").read_text())
    argv = seen["argv"]
    assert argv[argv.index("--url") + 1] == "https://git.example/fleet.git"
    assert argv[argv.index("--checkout") + 1] == "main"
    assert argv[argv.index("--limit") + 1] == "h1"
    inventories = [argv[i + 1] for i, a in enumerate(argv) if a == "--inventory"]
    assert inventories == ["inventories/fleet", "../host-inventory.yml"]
    assert argv[argv.index("--vault-password-file") + 1] == "/etc/gpuprov/pull/vault-password"
    assert argv[-1] == "playbooks/site.yml"
    assert "--clean" in argv
    assert seen["cwd"] == "/"  # the relative inventories do not exist for the checkout step
    assert "--full" in argv  # no shallow clone: dumb HTTP (tests/lab/test_pull.py) has none
    assert "AWS_ACCESS_KEY_ID" not in seen["env"]
    assert "AWS_SECRET_ACCESS_KEY" not in seen["env"]
    assert seen["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "checkout")
    assert "AKIA-SECRET" not in proc.stdout + proc.stderr
    report = json.loads((tmp_path / "state" / "last-run.json").read_text())
    assert report["verdict"] == "converged"
    assert report["recap"]["changed"] == 1
    assert report["plan"] == {"host": "h1", "plan": {"ok": True}}
    assert (report["host"], report["rc"], report["version"]) == ("h1", 0, "main")
    assert report["commit"] is None  # the stand-in checkout is no git repository


def test_a_failed_run_is_reported_failed_with_its_exit_code(tmp_path: Path) -> None:
    proc = run_script(make_config(tmp_path, rc=2, failures=1), tmp_path)
    assert proc.returncode == 2
    report = json.loads((tmp_path / "state" / "last-run.json").read_text())
    assert (report["verdict"], report["rc"], report["recap"]["failures"]) == ("failed", 2, 1)


def test_exit_0_without_a_recap_is_a_failed_run(tmp_path: Path) -> None:
    """ansible-pull exited 0 but no recap came (the callback is not enabled): the unit fails."""
    proc = run_script(make_config(tmp_path), tmp_path, FAKE_NO_RECAP="1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "state" / "last-run.json").read_text())
    assert (report["verdict"], report["rc"], report["recap"]) == ("failed", 0, None)


def test_the_plan_of_an_earlier_run_is_not_reported(tmp_path: Path) -> None:
    stale = tmp_path / "checkout" / "reports" / "plan" / "h1.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"host": "h1", "plan": {"ok": False, "old": True}}))
    run_script(make_config(tmp_path), tmp_path, FAKE_NO_PLAN="1")
    report = json.loads((tmp_path / "state" / "last-run.json").read_text())
    assert report["plan"] is None


def test_the_lock_file_is_root_only(tmp_path: Path) -> None:
    """0600: another user could flock a file it can open, even read-only, and hold pulls off."""
    assert run_script(make_config(tmp_path), tmp_path).returncode == 0
    assert (tmp_path / "run" / "pull.lock").stat().st_mode & 0o777 == 0o600


def test_a_run_while_another_holds_the_lock_stops_without_pulling(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    with pull_running(tmp_path):
        proc = run_script(config, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "another run holds" in proc.stdout
    assert not (tmp_path / "fake.json").exists()
    assert run_script(config, tmp_path).returncode == 0  # released: the next run pulls
    assert (tmp_path / "fake.json").exists()


def test_a_controller_runs_hold_stops_pull_runs_until_its_release(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    before = time.time()
    held = run_script(config, tmp_path, "--hold", "ops on admin1", "run-a", "3600")
    after = time.time()
    assert held.returncode == 0, held.stderr
    hold = json.loads((tmp_path / "state" / "push-run.json").read_text())
    assert (hold["controller"], hold["run"]) == ("ops on admin1", "run-a")
    assert before + 3600 <= hold["ends"] <= after + 3600  # SECONDS from now
    proc = run_script(config, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "a controller run (ops on admin1, since " in proc.stdout
    assert f"or {hold['until']}; this one stops" in proc.stdout
    assert f"remove {tmp_path / 'state' / 'push-run.json'}" in proc.stdout  # the way out
    assert not (tmp_path / "fake.json").exists()  # no pull
    assert not (tmp_path / "state" / "last-run.json").exists()  # no report of a run not made
    released = run_script(config, tmp_path, "--release", "run-a")
    assert released.returncode == 0
    assert "pull runs on h1 go on" in released.stdout
    assert not (tmp_path / "state" / "push-run.json").exists()
    assert run_script(config, tmp_path).returncode == 0
    assert (tmp_path / "fake.json").exists()  # released: the next run pulls
    again = run_script(config, tmp_path, "--release", "run-a")
    assert again.returncode == 0
    assert "no hold at" in again.stdout  # nothing held is fine, and said


def test_a_run_releases_its_own_hold_only(tmp_path: Path) -> None:
    """Run B took the hold over (A was cut short, or the two overlap): A's release leaves it."""
    config = make_config(tmp_path)
    hold = tmp_path / "state" / "push-run.json"
    assert run_script(config, tmp_path, "--hold", "ops on admin1", "run-a", "600").returncode == 0
    assert run_script(config, tmp_path, "--hold", "ops on admin2", "run-b", "600").returncode == 0
    kept = run_script(config, tmp_path, "--release", "run-a")
    assert kept.returncode == 0
    assert "is another run's (ops on admin2); it stays" in kept.stdout
    assert json.loads(hold.read_text())["run"] == "run-b"
    assert run_script(config, tmp_path, "--release", "run-b").returncode == 0
    assert not hold.exists()


def test_a_late_release_says_the_hold_had_expired(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    assert run_script(config, tmp_path, "--hold", "ops on admin1", "run-a", "1").returncode == 0
    time.sleep(1.1)
    late = run_script(config, tmp_path, "--release", "run-a")
    assert "(the hold had expired at " in late.stdout  # pull runs may have run beside it


def test_a_hold_is_refused_while_a_pull_run_holds_the_lock(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    with pull_running(tmp_path) as lock:
        proc = run_script(config, tmp_path, "--hold", "ops on admin1", "run-a", "600")
    assert proc.returncode == pull.HOLD_REFUSED
    assert f"a pull run is converging h1 (it holds {lock})" in proc.stderr
    assert "stop gpuprov-pull.timer" in proc.stderr
    assert not (tmp_path / "state" / "push-run.json").exists()  # taken back: pulls go on


@pytest.mark.parametrize("content", ['{"controller": "ops", "ends": 1000.0}', "{half"])
def test_an_expired_or_unreadable_hold_is_removed_and_the_run_pulls(
    tmp_path: Path, content: str
) -> None:
    """A controller run cut short (its hold expired) or a hold file half written: pulls go on."""
    config = make_config(tmp_path)
    hold = tmp_path / "state" / "push-run.json"
    hold.parent.mkdir(parents=True)
    hold.write_text(content)
    proc = run_script(config, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{hold} is expired or unreadable; removed" in proc.stdout
    assert (tmp_path / "fake.json").exists()
    assert not hold.exists()


def test_the_pull_run_says_so_to_its_playbook(tmp_path: Path) -> None:
    """site.yml's hold plays skip in a pull run (GPUPROV_PULL_RUN: test_the_hold_and_release_plays),
    which holds the lock the hold would wait for."""
    assert run_script(make_config(tmp_path), tmp_path).returncode == 0
    assert json.loads((tmp_path / "fake.json").read_text())["env"]["GPUPROV_PULL_RUN"] == "1"


def _hold_play(
    tmp_path: Path, *args: str, rc: int = 0, venv: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook ARGS for real, over the local connection, on h1 in pull_nodes: pull
    mode set up under tmp_path (the run config of make_config and, with ``venv``, a pull venv
    whose Python is this one). The plays run the controller's copy of the wrapper."""
    prefix = tmp_path / "prefix"
    if not (tmp_path / "config.json").exists():
        make_config(tmp_path)
    python = prefix / "venv" / "bin" / "python"
    if venv and not python.exists():
        python.parent.mkdir(parents=True)
        python.symlink_to(sys.executable)
    h1 = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,  # the plays become root; this test runs as whoever runs it
        "gpuprov_pull_prefix": str(prefix),
        "gpuprov_pull_config_dir": str(tmp_path),
        "gpuprov_pull_push_hold": 600,
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"pull_nodes": {"hosts": {"h1": h1}}}))
    root = SCRIPT.parents[3]
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory)]
    full = {
        **{k: v for k, v in os.environ.items() if k != "GPUPROV_PULL_RUN"},
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        **env,
    }
    books = [str(root / "playbooks" / a) if a.endswith(".yml") else a for a in args]
    proc = subprocess.run(
        [*argv, *books], capture_output=True, text=True, env=full, cwd=root, check=False
    )
    assert proc.returncode == rc, proc.stdout + proc.stderr
    return proc


def test_the_hold_and_release_plays(tmp_path: Path) -> None:
    hold = tmp_path / "state" / "push-run.json"
    _hold_play(tmp_path, "pull_hold.yml", venv=False)  # pull mode not set up here: nothing
    assert not hold.exists()
    _hold_play(tmp_path, "pull_hold.yml", GPUPROV_PULL_RUN="1")  # a pull run's own site.yml
    _hold_play(tmp_path, "pull_hold.yml", "--check")  # a check changes nothing, holds nothing
    assert not hold.exists()
    # Under --tags of one phase, as site.yml runs it: held, then released by its own run.
    _hold_play(tmp_path, "pull_hold.yml", "pull_release.yml", "--tags", "nvidia_driver")
    assert not hold.exists()
    _hold_play(tmp_path, "pull_hold.yml", "--tags", "nvidia_driver")
    doc = json.loads(hold.read_text())
    assert doc["controller"].endswith(f" on {os.uname().nodename}")
    assert doc["run"].startswith(doc["controller"])
    assert 590 < doc["ends"] - time.time() <= 600  # gpuprov_pull_push_hold
    _hold_play(tmp_path, "pull_release.yml")  # another run: not its hold
    assert json.loads(hold.read_text()) == doc
    with pull_running(tmp_path):
        refused = _hold_play(tmp_path, "pull_hold.yml", rc=2)
    assert "a pull run is converging h1" in refused.stdout
    assert not hold.exists()


def test_site_yml_holds_pulls_first_and_releases_them_last() -> None:
    site = yaml.safe_load((SCRIPT.parents[3] / "playbooks" / "site.yml").read_text())
    books = [play["ansible.builtin.import_playbook"] for play in site]
    assert books[:2] == ["validate.yml", "pull_hold.yml"]  # before any change to a host
    assert books[-1] == "pull_release.yml"


def test_no_vault_file_and_no_inventories_give_no_options(tmp_path: Path) -> None:
    config = json.loads(make_config(tmp_path).read_text())
    config.update(vault_password_file="", inventories=[], host_inventory="")
    argv = pull.pull_argv(config)
    assert "--vault-password-file" not in argv
    assert "--inventory" not in argv


@pytest.mark.parametrize(
    ("rc", "recap", "expected"),
    [
        (0, {"failures": 0, "unreachable": 0}, "converged"),
        (0, {"failures": 1, "unreachable": 0}, "failed"),
        (0, {"failures": 0, "unreachable": 1}, "failed"),
        (2, {"failures": 0, "unreachable": 0}, "failed"),
        (0, None, "failed"),  # no recap: the playbook never ran (a checkout that failed)
    ],
)
def test_verdict(rc: int, recap: dict[str, int] | None, expected: str) -> None:
    assert pull.verdict(rc, recap) == expected


def test_s3_url_and_keys() -> None:
    assert pull.split_s3_url("s3://bucket/pull/fleet/") == ("bucket", "pull/fleet")
    assert pull.split_s3_url("s3://bucket") == ("bucket", "")
    report = {"host": "h1", "finished": "2026-12-03T10:00:00Z"}
    assert pull.report_keys("pull", report) == [
        "pull/h1/latest.json",
        "pull/h1/2026-12-03T10:00:00Z.json",
    ]
    assert pull.report_keys("", report)[0] == "h1/latest.json"
    for bad in ("https://bucket/x", "s3://", "s3:///x"):
        with pytest.raises(ValueError, match="gpuprov_pull_report_url"):
            pull.split_s3_url(bad)


def test_an_upload_that_fails_names_the_url_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The upload itself (boto3 against the lab's S3) is tested on the lab; here it raises."""
    target = {"url": "s3://bucket/pull", "endpoint_url": "http://s3.lab:5000", "region": "x"}
    config = json.loads(make_config(tmp_path, report=target).read_text())

    def refused(report: Any, where: Any) -> None:
        assert where == target
        assert report["host"] == "h1"
        raise ConnectionError("connection refused")

    monkeypatch.setattr(pull, "upload", refused)
    environ = {**os.environ, "FAKE_OUT": str(tmp_path / "fake.json")}
    assert pull.run(config, environ) == 1
    err = capsys.readouterr().err
    assert "s3://bucket/pull" in err
    assert "http://s3.lab:5000" in err
    assert "gpuprov_pull_report_url" in err
    assert "connection refused" in err
    assert (tmp_path / "state" / "last-run.json").exists()


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("{", "Expecting"),
        (json.dumps({"host": "h1"}), "no repo_url"),
        (json.dumps({**BASE, "inventories": ["/srv/fleet/hosts.yml"]}), "/srv/fleet/hosts.yml"),
    ],
)
def test_a_bad_config_exits_2_naming_it(tmp_path: Path, content: str, named: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    proc = run_script(path, tmp_path)
    assert proc.returncode == 2
    assert named in proc.stderr
    assert str(path) in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--hold", "c.json"],
        ["--hold", "ops", "run-a", "0", "c.json"],  # no hold at all
        ["--hold", "ops", "run-a", "4h", "c.json"],  # seconds
        ["--release", "c.json"],
        ["--release", "run-a", "b", "c.json"],
        ["--x", "c.json"],
    ],
)
def test_usage(argv: list[str]) -> None:
    assert pull.main(argv) == 2


def test_the_unit_runs_the_script_with_the_venvs_python() -> None:
    """The script has no shebang: the unit names the pull venv's Python (boto3 is there)."""
    unit = (SCRIPT.parents[1] / "templates" / "gpuprov-pull.service.j2").read_text()
    assert "ExecStart={{ _gpuprov_pull_venv }}/bin/python {{ _gpuprov_pull_script }}" in unit


@pytest.mark.parametrize(
    ("span", "ok"),
    [
        ("15min", True),
        ("1h", True),
        ("1h 30min", True),
        ("90", True),
        ("0", True),
        ("2.5s", True),
        ("1d", True),
        ("1h30min", True),
        ("1" * 40 + "x", False),  # one way to split a run of digits: no backtracking blow-up
        ("", False),
        ("soon", False),
        ("1 fortnight", False),
        ("-5min", False),
        ("infinity", False),  # only gpuprov_pull_timeout takes it (the assert says so)
    ],
)
def test_the_preflight_time_span_rule(span: str, ok: bool) -> None:
    """The rule roles/gpuprov_pull/tasks/preflight.yml applies to the schedule (Ansible's
    `match` is re.match), against spans systemd.time(7) accepts and refuses."""
    import re

    import yaml

    vars_ = yaml.safe_load((SCRIPT.parents[1] / "vars" / "main.yml").read_text())
    assert bool(re.match(vars_["_gpuprov_pull_timespan_re"], span)) is ok


def test_every_private_variable_the_role_reads_is_defined() -> None:
    """Each _gpuprov_pull_* name in the role's tasks, templates and handlers is set in its
    vars/ (a lost definition fails only on a host otherwise: it happened once)."""
    import re

    import yaml

    role = SCRIPT.parents[1]
    defined: set[str] = set()
    for path in (role / "vars").glob("*.yml"):
        defined |= set(yaml.safe_load(path.read_text()) or {})
    used: set[str] = set()
    for path in [*role.glob("tasks/*.yml"), *role.glob("templates/*"), *role.glob("handlers/*")]:
        used |= set(re.findall(r"(?<![\w])_gpuprov_pull_\w+", path.read_text()))
    for path in (role / "vars").glob("*.yml"):
        used |= set(re.findall(r"(?<![\w])_gpuprov_pull_\w+", path.read_text()))
    assert used, "the scan found nothing"
    assert sorted(used - defined) == []
