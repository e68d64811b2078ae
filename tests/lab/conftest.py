"""The `lab` session fixture: a gpuprov lab brought up for the lab tests.

The lab's hosts are Debian systemd containers made by scripts/lab.py. Only PCI
devices are simulated: each host carries a sysfs-shaped tree at
/opt/gpuprov-sim/sys, and only the lab inventory sets
`gpu_info_sysfs_root: /opt/gpuprov-sim/sys` so gpu_info reads it.

Environment:
    GPUPROV_LAB_NAME   lab name (default "gpuprov-test"; prefixes containers)
    GPUPROV_LAB_HOSTS  preset or name=profile:release,... (default "default")
    GPUPROV_LAB_KEEP   1: reuse a lab of that name and leave it up after the session
                       (faster reruns; `scripts/lab.py --lab NAME down` removes it).
                       Otherwise the session first removes a lab of that name (one a
                       killed session left) and starts from fresh hosts.
    GPUPROV_LAB_ATTACH 1: use the running lab of that name as it is (no `lab.py up`, no
                       down): the fault suite's second stream (fault_streams.py).

Without a Docker engine the lab tests fail (error), naming `make prereqs`: a lab run
that runs nothing must not pass. For the same reason a lab session fails when a lab test
skipped for a reason that tests/lab/lab_skips.py does not declare for its environment
(the unit run, `-m "not lab"`, selects no lab test and is not affected). One lab per
session; the fixture yields a `Lab` with `ssh()`, `ansible()`, `ansible_playbook()` and
the hostvars/groups read back from the generated inventory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fault_streams
import pytest
import shared_runs
import yaml
from gpuprov_lab import ansible_inventory
from gpuprov_lab.inventory import ssh_argv
from gpuprov_lab.site import ansible_env, ansible_tool, log_run, vault_password_file
from lab_skips import skip_reason, unexpected_skips

REPO = Path(__file__).resolve().parents[2]
LAB_PY = REPO / "scripts" / "lab.py"
RUNS = REPO / ".lab"  # every lab Ansible run is kept in .lab/<name>/runs/ (log_run)


@dataclasses.dataclass(frozen=True)
class Lab:
    """A running lab: its name, inventory and hosts (hostvars from the inventory)."""

    name: str
    inventory: Path
    hosts: dict[str, dict[str, Any]]
    groups: dict[str, list[str]]
    # The operator's shell (operator_shell) the session's `lab.py up` ran in.
    operator_env: dict[str, str] = dataclasses.field(default_factory=dict)
    # For a Lab used beside the running test (a background thread, test_offline_bundle.py):
    # the environment its Ansible runs start from (None: this process's, which a test's
    # monkeypatch may change meanwhile) and the label of its runs in runs/index.txt (empty:
    # the running test's id).
    base_env: dict[str, str] | None = None
    run_label: str = ""

    def lab_py(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(LAB_PY), "--lab", self.name, *args],
            capture_output=True,
            text=True,
            check=check,
        )

    def ssh(
        self, host: str, command: str, *, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a host over SSH (the generated key, strict known_hosts)."""
        argv = ssh_argv(self.hosts[host], command)
        # stdin: /dev/null, not the session's. ssh makes its stdin non-blocking while it runs,
        # and that flag is on the open file, shared: an ansible-playbook started meanwhile
        # with the same stdin (a test beside test_offline_bundle.py's background run) refuses
        # to start ("Ansible requires blocking IO on stdin").
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def connect_results(self, host: str, ports: Sequence[int]) -> dict[int, int]:
        """port -> what connect_ex to 127.0.0.1:port on the host returned (0: something
        listens; errno.ECONNREFUSED: nothing does)."""
        script = (
            "import json, socket, sys\n"
            "out = {}\n"
            "for port in map(int, sys.argv[1:]):\n"
            "    with socket.socket() as s:\n"
            "        out[port] = s.connect_ex(('127.0.0.1', port))\n"
            "print(json.dumps(out))\n"
        )
        argv = " ".join(str(p) for p in ports)
        out = self.ssh(host, f"python3 -c {shlex.quote(script)} {argv}").stdout
        return {int(k): v for k, v in json.loads(out).items()}

    def settle(self, host: str, timeout: float = 300) -> None:
        """Wait until a (re)started host answers SSH and its boot has settled: `systemctl
        is-system-running --wait` returns once no start job is left, readiness checks of the
        services site.yml installed included (TorchServe, Triton, JupyterLab). A later module
        probing those units then finds the host as site.yml left it, not half started."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                wait = "timeout 240 systemctl is-system-running --wait >/dev/null; true"
                if self.ssh(host, wait, check=False, timeout=260).returncode == 0:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"{host}: no SSH {timeout:.0f}s after it was started")
            time.sleep(2)

    def start(self, host: str) -> None:
        """`docker start` a host a test stopped, then `settle` it. Its published SSH port may
        have been taken while it was down (another lab on the machine): then lab.py recreates
        the lab's missing hosts, so later sessions find a working lab."""
        container = str(self.hosts[host]["lab_container"])
        started = subprocess.run(["docker", "start", container], check=False, capture_output=True)
        if started.returncode != 0:
            hosts = os.environ.get("GPUPROV_LAB_HOSTS", "default")
            self.lab_py("up", "--recreate", "--hosts", hosts, check=False)
        self.settle(host)

    def run_testinfra(
        self, hosts: str, *args: str, inventory: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The testinfra suite (`tests/infra`, or the modules in args, with their options)
        against an inventory pattern of this lab (or of ``inventory``), as a user runs it."""
        argv = [
            str(Path(sys.executable).parent / "pytest"),
            *(args or ("tests/infra",)),
            f"--hosts=ansible://{hosts}",
            f"--ansible-inventory={inventory or self.inventory}",
            *("-p", "no:randomly", "-p", "no:cacheprovider", "-v"),
        ]
        return subprocess.run(
            argv,
            cwd=REPO,
            env=ansible_env(self.name),
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )

    def testinfra(self, hosts: str, *args: str) -> subprocess.CompletedProcess[str]:
        """run_testinfra, asserting that it passed with nothing failed. Returns the verbose
        run (one PASSED line per test and host; with -n, in xdist's order and format)."""
        proc = self.run_testinfra(hosts, *args)
        tail = proc.stdout[-6000:] + proc.stderr[-2000:]
        assert proc.returncode == 0, f"{shlex.join(proc.args)}\n{tail}"
        summary = proc.stdout.strip().splitlines()[-1]
        assert re.search(r"\b\d+ passed\b", summary), summary
        assert not re.search(r"\b(failed|error|errors)\b", summary), summary
        return proc

    @property
    def state_dir(self) -> Path:
        """The lab's directory on the controller (lab.py's .lab/NAME: its runs, reports and the
        mirror's lock, fault_streams.mirror_lock)."""
        return REPO / ".lab" / self.name

    @property
    def reports(self) -> Path:
        """The lab's one report directory on the controller (never the repository's reports/)."""
        return self.state_dir / "reports"

    def ansible_playbook(
        self, playbook: str | Path, *args: str, check: bool = False, timeout: float = 3600
    ) -> subprocess.CompletedProcess[str]:
        """Every run writes its reports to `reports`, unless an `-e gpuprov_report_dir=` in
        args overrides it (the last -e wins). Ours goes first: ansible-playbook takes its
        playbooks as one run of positional arguments, so nothing may sit between them."""
        own = ("-e", f"gpuprov_report_dir={self.reports}")
        return self._ansible("ansible-playbook", [*own, str(playbook), *args], check, timeout)

    def ansible(
        self, pattern: str, *args: str, check: bool = False, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return self._ansible("ansible", [pattern, *args], check, timeout)

    def _ansible(
        self, tool: str, args: Sequence[str], check: bool, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        exe = ansible_tool(tool)
        # ansible.cfg, a fact cache of this lab's own (labs reuse host names, and one jsonfile
        # cache would hand one lab's facts to another) and the lab's vault.
        env = ansible_env(self.name, self.base_env)
        argv = [exe, "-i", str(self.inventory), *args]
        started = time.monotonic()
        rc: int | None = None
        out: str | bytes | None = None
        err: str | bytes | None = None
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,  # as for ssh: its own, blocking stdin
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
                cwd=REPO,
                env=env,
            )
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            out, err = exc.stdout, exc.stderr
            raise
        finally:
            seconds = time.monotonic() - started
            label = self.run_label or _test()
            log_run(RUNS / self.name / "runs", argv, rc, seconds, out, err, label)
        if check:
            proc.check_returncode()
        return proc


def _test() -> str:
    """The test that started a run (its log's label)."""
    return "test: " + os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]


# Lab test modules that must run first in the session, in this order: test_site.py starts
# with `site.yml --check` on fresh hosts, before any other module provisions them; then
# test_offline_bundle.py builds its bundle from a converged host and starts its offline host's
# converge in the background (JOINS below).
FIRST_MODULES = ("test_site.py", "test_offline_bundle.py")
# ... and last: test_pull.py converges the trixie host by itself (its timer disabled after),
# the fault suite breaks and repairs one converged host (after the modules that
# need the whole lab converged), then test_lab_ops.py replaces and re-publishes hosts, losing
# their provisioning.
LAST_MODULES = ("test_pull.py", "test_faults.py", "test_lab_ops.py")
# Tests that wait for work an earlier test started in the background, and the module they
# run just before: test_offline_bundle.py's first test starts the bundle's build (mostly
# network waits) and then the offline host's converge (one host: about one core of the two)
# right after test_site.py; the modules between run beside it, the fault suite too (its cases
# that change the lab's mirror wait for the build: fault_streams.mirror_lock). test_lab_ops.py
# replaces lab hosts, and `up` would take the offline network's hosts for the lab's.
JOINS = {
    (
        "test_offline_bundle.py",
        "test_a_host_with_no_route_out_converges_site_yml_from_the_served_bundle",
    ): "test_lab_ops.py",
}
# The collected tests marked `lab` (their ids), and those of them that skipped, as (test id,
# reason): judged at the end of the session (pytest_sessionfinish). A test's keywords would
# not do: they hold its directory's name, "lab", too.
LAB_TESTS: set[str] = set()
SKIPPED: list[tuple[str, str]] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the `lab` fixture with `lab` (deselect: -m 'not lab').

    Then order the lab tests: FIRST_MODULES first, LAST_MODULES last, each of JOINS just
    before its module (a stable sort keeps each module's own order). In a module, the tests
    of the fault suite's second stream (fault_streams.MARKER: they wait for it) come after
    the others, and a module's `test_zz_` tests (its summary) last.
    """
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.lab)
            LAB_TESTS.add(item.nodeid)

    def rank(item: pytest.Item) -> float:
        name = item.path.name
        before = JOINS.get((name, item.name))
        if before is not None:
            return rank_of(before) - 0.5
        if item.name.startswith("test_zz_"):
            return rank_of(name) + 0.25
        if item.get_closest_marker(fault_streams.MARKER) is not None:
            return rank_of(name) + 0.125
        return rank_of(name)

    def rank_of(name: str) -> float:
        if name in FIRST_MODULES:
            return FIRST_MODULES.index(name)
        if name in LAST_MODULES:
            return len(FIRST_MODULES) + 1 + LAST_MODULES.index(name)
        return len(FIRST_MODULES)

    items.sort(key=rank)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A fault case the suite's second stream ran (fault_streams.py): its outcome there, in
    place of running it here."""
    stream = fault_streams.delegated(pyfuncitem)
    if stream is None:
        return None
    fault_streams.report(stream, pyfuncitem)
    return True


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.nodeid in LAB_TESTS and not hasattr(report, "wasxfail"):
        SKIPPED.append((report.nodeid, skip_reason(report.longrepr)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a lab session in which a lab test skipped for an undeclared reason (lab_skips)."""
    if unexpected_skips(SKIPPED, os.environ) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    unexpected = unexpected_skips(SKIPPED, os.environ)
    if not unexpected:
        return
    terminalreporter.write_sep("=", "lab tests skipped for undeclared reasons", red=True)
    for test, reason in unexpected:
        terminalreporter.write_line(f"{test}: {reason}")
    terminalreporter.write_line(
        "A lab run that skips proves nothing: fix the cause, or declare the skip in "
        "tests/lab/lab_skips.py with the condition under which it is expected (the session "
        "fails)."
    )


def role_ports(role: str) -> list[int]:
    """The ports a role's defaults name (its variables ending in _port; the lab keeps them)."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    return sorted(v for k, v in defaults.items() if k.endswith("_port"))


def _docker_available() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    proc = subprocess.run(
        [docker, "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


# The lab's per-host choices that are Jinja in inventories/lab/group_vars and that tests act on:
# which hosts serve models (test_model_serving.py), run a notebook server and get storage
# clients (test_jupyterlab_storage.py).
RENDERED = ("model_serving_stacks", "jupyterlab_method", "object_storage_method")


def _read_inventory(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """hostvars and groups of the generated inventory, read with Ansible's inventory API
    (group_vars/ included, as ansible-playbook sees them; RENDERED rendered per host)."""
    inv = ansible_inventory.read(path, render=RENDERED)
    return inv.hosts, inv.groups


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """Bring up the lab (name and hosts from GPUPROV_LAB_*), yield it, take it down."""
    if not _docker_available():
        pytest.fail(
            "no Docker engine answers `docker version`: the lab tests need one; `make prereqs` "
            "installs and starts it (Debian, root)",
            pytrace=False,
        )
    name = os.environ.get("GPUPROV_LAB_NAME", "gpuprov-test")
    hosts = os.environ.get("GPUPROV_LAB_HOSTS", "default")
    keep = os.environ.get("GPUPROV_LAB_KEEP", "") == "1"
    inventory = REPO / ".lab" / name / "hosts.yml"
    if name == "gpuprov":
        inventory = REPO / "inventories" / "lab" / "hosts.yml"
    if os.environ.get(fault_streams.ATTACH_ENV, "") == "1":
        if not inventory.exists():
            pytest.fail(f"{fault_streams.ATTACH_ENV}=1: no lab {name} ({inventory})", pytrace=False)
        yield _running(name, inventory, {})
        return
    if not keep:
        # A lab that is not kept starts from fresh hosts: one left by a session that was
        # killed before its teardown (same name) would make the flow's first tests judge
        # hosts converged by other code, with another checkout's mirror key and lists.
        _run_lab_py(name, "down")
    operator_env = operator_shell(RUNS / name / "operator")
    up = subprocess.run(
        [
            sys.executable,
            str(LAB_PY),
            "--lab",
            name,
            "--inventory",
            str(inventory),
            "up",
            "--hosts",
            hosts,
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **operator_env},
    )
    if up.returncode != 0:
        pytest.fail(f"lab.py up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    try:
        yield _running(name, inventory, operator_env)
    finally:
        if not keep:
            _run_lab_py(name, "down")


@pytest.fixture(scope="session")
def site_runs() -> dict[str, shared_runs.Run]:
    """The site.yml runs of this session that other modules judge too (shared_runs.py):
    test_site.py keeps its no-op re-run and its converged check here when they pass."""
    return {}


def _running(name: str, inventory: Path, operator_env: dict[str, str]) -> Lab:
    """The running lab `name`, its vault's password exported for the inventory reads here and
    in the test modules."""
    vault_password = vault_password_file(name)
    if vault_password.exists():
        # Assigned, not setdefault: an operator's exported vault file cannot open the lab's.
        os.environ["ANSIBLE_VAULT_PASSWORD_FILE"] = str(vault_password)
    host_vars, groups = _read_inventory(inventory)
    return Lab(name, inventory, host_vars, groups, operator_env)


def operator_shell(home: Path) -> dict[str, str]:
    """What an operator's shell exports (issue 20 item 5): another vault password file, an
    ansible.cfg that names it and an inventory. The session's `lab.py up` (a fresh lab: the
    vault is written with ansible-vault) runs with these; the fault suite checks the outcome
    (test_faults.py, test_the_lab_came_up_in_an_operators_shell)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "vault-pass").write_text("the operator's fleet password\n")
    config = f"vault_password_file = {home / 'vault-pass'}\ninventory = {home / 'hosts.yml'}\n"
    (home / "ansible.cfg").write_text("[defaults]\n" + config)
    return {
        "ANSIBLE_VAULT_PASSWORD_FILE": str(home / "vault-pass"),
        "ANSIBLE_CONFIG": str(home / "ansible.cfg"),
        "ANSIBLE_INVENTORY": str(home / "hosts.yml"),
    }


def _run_lab_py(name: str, *args: str) -> None:
    """`scripts/lab.py --lab NAME ARGS` (teardown: its outcome is not judged here)."""
    subprocess.run(
        [sys.executable, str(LAB_PY), "--lab", name, *args],
        capture_output=True,
        check=False,
    )
