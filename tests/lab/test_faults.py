"""Fault injection on a lab host: each fault, the first run's result, and a re-run that converges.

Every case breaks something for real on the lab's GPU host (a Debian 12 container), runs the
playbooks the fault hits, and then re-runs them after the fault is gone. Nothing is mocked:
the host is `docker kill`-ed while dpkg installs the driver or Docker, or while pip writes
torch (found by polling `docker exec ... pgrep`), apt's cache is a 1 MiB tmpfs, the host's
route to the lab's mirror container (the stand-in for NVIDIA's toolkit repository) is cut,
the mirror loses its packages (404), dockerd is stopped with systemctl, daemon.json is
overwritten with invalid JSON, sshd is restarted and the controller's session processes are
killed by PID.

Cases reuse the host: each resets only what it needs (packages removed with `apt-get remove`,
their .debs kept in apt's cache so the re-run does not download them again) instead of
recreating the container. Before the first case the host gets things a user owns, which
every re-run must keep: a key of its own in /etc/docker/daemon.json, a package on hold, and a
running container (`keeper`, restart policy unless-stopped).

Each case ends with the host's testinfra modules of the driver, Docker and the toolkit
passing (`tests/infra`). The table (fault, first run, re-run) is printed at the end of the
module. The cases are marked `faults` (and `lab`); CI's `make test-lab` runs them after the
other lab modules, before test_lab_ops.py, and `make test-faults` runs them alone on a lab.

The cases marked `second_host` run on a second K40m host of the lab at the same time, in a
second pytest process, when the lab has one (the default lab's lab-mixed): fault_streams.py.
On the 2-core machine the twenty cases took 9.5-10.5 min that way (2026-12-04), about 16
min on one host.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fault_streams
import pytest
from fault_streams import mirror_lock
from gpuprov_lab import aptrepo, s3lab
from gpuprov_lab.site import ansible_env, vault_password_file
from playbook_output import recap

Lab = Any  # tests/lab/conftest.py's Lab

pytestmark = pytest.mark.faults
# May run in the second stream (fault_streams.py).
SECOND_HOST = getattr(pytest.mark, fault_streams.MARKER)

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DRIVER = ("playbooks/plan.yml", "playbooks/driver.yml")
DOCKER = ("playbooks/docker.yml",)
TOOLKIT = ("playbooks/toolkit.yml",)
PYTORCH = ("playbooks/plan.yml", "playbooks/pytorch.yml")
VENV = "/opt/gpuprov/venv"  # pytorch_venv_path's default, which the lab keeps
DRIVER_PKGS = (
    "nvidia-tesla-470-smi libnvidia-tesla-470-ml1 libnvidia-tesla-470-cuda1 "
    "libnvidia-tesla-470-cfg1"
)
USER_HOLD = "openssh-server"
USER_KEY = {"labels": ["owner=someone-else"]}
TOOLKIT_PKGS = (
    "nvidia-container-toolkit nvidia-container-toolkit-base "
    "libnvidia-container-tools libnvidia-container1"
)
ROWS: list[tuple[str, str, str]] = []


# ---------------------------------------------------------------------------
# helpers


def _k40m_host(lab: Lab) -> str:
    return next(h for h, v in sorted(lab.hosts.items()) if v.get("lab_profile") == "k40m")


def _host(lab: Lab) -> str:
    """The host this stream breaks: the K40m host, or the second stream's."""
    if fault_streams.in_second_stream():
        return os.environ[fault_streams.HOST_ENV]
    return _k40m_host(lab)


def _mirror_used(lab: Lab) -> contextlib.AbstractContextManager[None]:
    """In the second stream, the mirror held shared (a case of the first may change it)."""
    if fault_streams.in_second_stream():
        return mirror_lock(lab.state_dir, exclusive=False)
    return contextlib.nullcontext()


def _mirror_changed(lab: Lab) -> contextlib.AbstractContextManager[None]:
    """The mirror held exclusively while a case changes it."""
    return mirror_lock(lab.state_dir, exclusive=True)


def _container(lab: Lab, host: str) -> str:
    return str(lab.hosts[host]["lab_container"])


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    docker = shutil.which("docker") or "docker"
    return subprocess.run([docker, *args], capture_output=True, text=True, check=check)


def _sh(lab: Lab, host: str, cmd: str, check: bool = True) -> str:
    return str(lab.ssh(host, cmd, check=check).stdout)


def _env(lab: Lab) -> dict[str, str]:
    env = ansible_env(lab.name)
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    return env


def _argv(
    lab: Lab, playbooks: tuple[str, ...], host: str, report_dir: Path, *extra: str
) -> list[str]:
    exe = VENV_BIN / "ansible-playbook"
    return [
        str(exe) if exe.exists() else "ansible-playbook",
        "-i",
        str(lab.inventory),
        "--limit",
        host,
        *playbooks,
        "-e",
        f"gpuprov_report_dir={report_dir}",
        *extra,
    ]


def _play(
    lab: Lab, playbooks: tuple[str, ...], host: str, report_dir: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    with _mirror_used(lab):
        return subprocess.run(
            _argv(lab, playbooks, host, report_dir, *extra),
            capture_output=True,
            text=True,
            cwd=REPO,
            env=_env(lab),
            timeout=1800,
            check=False,
        )


def _start(
    lab: Lab, playbooks: tuple[str, ...], host: str, report_dir: Path
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _argv(lab, playbooks, host, report_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=_env(lab),
    )


def _when_running(
    container: str, proc: subprocess.Popen[str], pattern: str, timeout: float = 900
) -> bool:
    """Poll the host (docker exec, 0.3 s) until a process matching `pattern` runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = _docker("exec", container, "pgrep", "-f", pattern, check=False)
        if found.returncode == 0:
            return True
        time.sleep(0.3)
    return False


def _first_error(output: str) -> str:
    """The message of the failure that ended the run (a rescued task's error comes first,
    the rescue's own message last), shortened for the table."""
    for marker in ("fatal: [", "UNREACHABLE!", "[ERROR]:"):
        at = output.rfind(marker)
        if at >= 0:
            text = output[at:].split("\n", 1)[0]
            if '"msg": "' in text:
                text = text.split('"msg": "', 1)[1].split('"', 1)[0]
            return text[:260]
    return "no error"


def _verdict(proc: subprocess.CompletedProcess[str]) -> str:
    if proc.returncode == 0:
        return "ok (rc=0)"
    return f"failed (rc={proc.returncode}): {_first_error(proc.stdout + proc.stderr)}"


def _row(fault: str, first: str, rerun: str, capsys: pytest.CaptureFixture[str]) -> None:
    ROWS.append((fault, first, rerun))
    with capsys.disabled():
        print(f"\n[faults] {fault}\n  first run: {first}\n  re-run:    {rerun}", flush=True)


def _assert_nothing_lost(lab: Lab, host: str) -> None:
    daemon = json.loads(_sh(lab, host, "cat /etc/docker/daemon.json"))
    assert daemon.get("labels") == USER_KEY["labels"], daemon
    assert "nvidia" in daemon.get("runtimes", {}), daemon
    holds = _sh(lab, host, "apt-mark showhold").split()
    assert USER_HOLD in holds, holds
    assert _sh(lab, host, "dpkg --audit", check=False).strip() == ""
    running = _sh(lab, host, "docker ps --filter name=keeper --format '{{.Status}}'")
    assert running.startswith("Up"), running
    _testinfra(lab, host)


# The testinfra modules of the roles the faults hit (torch has none: the pip case checks it
# imports). A case ends green only when they pass on the host, with the user's daemon.json
# key among the keys the Docker tests require.
INFRA = ("tests/infra/test_driver.py", "tests/infra/test_docker.py", "tests/infra/test_toolkit.py")


def _testinfra(lab: Lab, host: str) -> None:
    lab.testinfra(host, *INFRA, "--docker-preserved-key", *USER_KEY)


def _recovered(lab: Lab, playbooks: tuple[str, ...], host: str, reports: Path) -> None:
    """After the re-run that converged: nothing of the user's lost, testinfra green, and the
    run after it rc=0 and changed=0 (issue 25: every case asserts its first run, its re-run
    and a further run)."""
    _assert_nothing_lost(lab, host)
    further = _play(lab, playbooks, host, reports)
    assert further.returncode == 0, further.stdout[-4000:]
    assert _recap_changed(further.stdout, host) == 0, further.stdout[-3000:]


def _toolkit_installed_nothing_then_recovered(
    lab: Lab,
    host: str,
    reports: Path,
    first: subprocess.CompletedProcess[str],
    fault: str,
    rerun_said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The tail of a toolkit case whose first run failed: no toolkit package was installed,
    the re-run with nothing else done converges, then _recovered; the table row."""
    installed = _sh(lab, host, f"dpkg-query -W -f='${{db:Status-Abbrev}} ' {TOOLKIT_PKGS}", False)
    assert "ii" not in installed.split(), installed
    rerun = _play(lab, TOOLKIT, host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    _recovered(lab, TOOLKIT, host, reports)
    _row(fault, _verdict(first), rerun_said, capsys)


# ---------------------------------------------------------------------------
# the converged host with the user's things on it


@pytest.fixture(scope="module", autouse=True)
def second_stream(
    lab: Lab, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """First stream: start the second (fault_streams.py) with this session's `second_host`
    cases, when the lab has a host for it. Second stream: hand its table rows back."""
    if fault_streams.in_second_stream():
        yield
        rows = os.environ.get(fault_streams.ROWS_ENV)
        if rows:
            Path(rows).write_text(json.dumps(ROWS), encoding="utf-8")
        return
    node_ids = [
        item.nodeid
        for item in request.session.items
        if item.path == Path(__file__) and item.get_closest_marker(fault_streams.MARKER)
    ]
    host = fault_streams.second_host(lab.hosts, _k40m_host(lab))
    if not node_ids or host is None:
        yield
        return
    # Its output and report in this session's temporary directory: kept after the lab is
    # taken down (pytest keeps the last three sessions').
    workdir = tmp_path_factory.mktemp("second-stream-")
    stream = fault_streams.SecondStream(lab.name, host, node_ids, workdir)
    fault_streams.STREAM.append(stream)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(f"\n[faults] second stream on {host}: {len(node_ids)} cases", flush=True)
    try:
        yield
    finally:
        fault_streams.STREAM.remove(stream)
        stream.stop()


@pytest.fixture(scope="module")
def faulty(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    host = _host(lab)
    reports = tmp_path_factory.mktemp("fault-reports")
    proc = _play(lab, (*DOCKER, *TOOLKIT), host, reports)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # The user's things: a daemon.json key, a held package, a running container.
    _sh(
        lab,
        host,
        f"""
        set -e
        python3 - <<'EOF'
import json
p = '/etc/docker/daemon.json'
d = json.load(open(p))
d.update({json.dumps(USER_KEY)})
json.dump(d, open(p, 'w'), indent=2)
EOF
        systemctl restart docker
        apt-mark hold {USER_HOLD}
        if ! docker image inspect gpuprov-lab/keeper >/dev/null 2>&1; then
          tar -chC / usr/bin/sleep lib/x86_64-linux-gnu/libc.so.6 lib64/ld-linux-x86-64.so.2 \
            | docker import - gpuprov-lab/keeper >/dev/null
        fi
        docker rm -f keeper >/dev/null 2>&1 || true
        docker run -d --name keeper --restart unless-stopped gpuprov-lab/keeper \
          /usr/bin/sleep infinity
    """,
    )
    _assert_nothing_lost(lab, host)
    yield host, reports
    _sh(lab, host, f"docker rm -f keeper; apt-mark unhold {USER_HOLD}", check=False)


# ---------------------------------------------------------------------------
# host killed during a package transaction


def _when_path(container: str, proc: subprocess.Popen[str], path_glob: str) -> bool:
    """Poll the host until `path_glob` exists (the install has started writing there)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if (
            _docker("exec", container, "sh", "-c", f"ls -d {path_glob}", check=False).returncode
            == 0
        ):
            return True
        time.sleep(0.3)
    return False


def _kill_during_dpkg(
    lab: Lab,
    host: str,
    reports: Path,
    playbooks: tuple[str, ...],
    reset: str,
    pattern: str = r"^/usr/bin/dpkg .*--status-fd ",
    writing: str = "",
) -> tuple[str, str]:
    """Reset, start the plays, kill the host (`docker kill`) once a process matching
    `pattern` runs (and, with `writing`, once that path exists), start it again.
    The default is the dpkg of apt's transaction (`--status-fd N --unpack|--configure`,
    after the `--force-conf*` options Ansible's apt module passes):
    `^/usr/bin/dpkg ` also matched apt's short queries (`--print-foreign-architectures`),
    and a kill that lands on one leaves nothing interrupted: the likely cause of a CI run
    (2026-12-04) whose re-run found no dpkg to repair."""
    container = _container(lab, host)
    _sh(lab, host, reset)
    with _mirror_used(lab):  # the killed run reaches the mirror too
        proc = _start(lab, playbooks, host, reports)
        landed = _when_running(container, proc, pattern)
        if landed and writing:
            landed = _when_path(container, proc, writing)
        if landed:
            _docker("kill", container)
        out, _ = proc.communicate(timeout=600)
        _docker("start", container)
    assert landed, f"{pattern} {writing} never seen:\n{out[-3000:]}"
    # The first run lost its host: it fails, naming the host unreachable or a failed task.
    assert proc.returncode != 0, out[-3000:]
    assert f"[{host}]" in out, out[-3000:]
    assert "UNREACHABLE" in out or "fatal: [" in out, out[-3000:]
    lab.settle(host)
    state = _sh(
        lab,
        host,
        "dpkg --audit | head -3; ls /var/lib/dpkg/updates | grep -c '^[0-9]' || true",
        check=False,
    )
    after = " ".join(state.split())[:160]
    if writing:
        first = f"rc={proc.returncode}, host killed while {pattern} wrote {writing}"
    else:
        first = f"rc={proc.returncode}, host killed while dpkg ran; dpkg then: {after}"
    return first, out


@SECOND_HOST
def test_host_killed_during_the_driver_transaction(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    host, reports = faulty
    pkgs = DRIVER_PKGS
    first, _ = _kill_during_dpkg(
        lab,
        host,
        reports,
        DRIVER,
        f"apt-mark unhold {pkgs} >/dev/null; "
        f"DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq {pkgs} >/dev/null",
    )
    rerun = _play(lab, DRIVER, host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert "dpkg was interrupted" in rerun.stdout + rerun.stderr
    holds = _sh(lab, host, "apt-mark showhold").split()
    assert set(pkgs.split()) <= set(holds), holds
    _recovered(lab, DRIVER, host, reports)
    _row(
        "host killed during the driver's dpkg transaction",
        first,
        "ok: apt_ready repaired dpkg (warning printed), driver packages held",
        capsys,
    )


@SECOND_HOST
def test_host_killed_during_dockers_transaction(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """docker.io removed (the engine stops, /var/lib/docker and daemon.json stay), then the
    host killed while dpkg installs it again: the re-run repairs dpkg, the engine comes back
    with the user's daemon.json key and restarts the user's container."""
    host, reports = faulty
    first, _ = _kill_during_dpkg(
        lab,
        host,
        reports,
        DOCKER,
        "apt-mark unhold docker.io >/dev/null; "
        "DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq docker.io >/dev/null",
    )
    rerun = _play(lab, DOCKER, host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert "dpkg was interrupted" in rerun.stdout + rerun.stderr
    assert _sh(lab, host, "systemctl is-active docker").strip() == "active"
    _wait_keeper(lab, host)
    _recovered(lab, DOCKER, host, reports)
    _row(
        "host killed during Docker's dpkg transaction",
        first,
        "ok: apt_ready repaired dpkg, engine active, user's container back up",
        capsys,
    )


def _wait_keeper(lab: Lab, host: str, timeout: float = 60) -> None:
    """The user's container (restart policy unless-stopped) is back once dockerd runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _sh(lab, host, "docker ps --filter name=keeper --format '{{.Status}}'", False)
        if status.startswith("Up"):
            return
        time.sleep(1)


@SECOND_HOST
def test_host_killed_during_the_pip_install_of_torch(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """torch uninstalled from the environment, the host killed while pip writes it back
    (torch/ exists in site-packages): the re-run reinstalls it and torch imports and computes."""
    host, reports = faulty
    first, _ = _kill_during_dpkg(
        lab,
        host,
        reports,
        PYTORCH,
        f"if [ -x {VENV}/bin/pip ]; then {VENV}/bin/pip uninstall -y -q torch; fi",
        pattern=r"pip3? install",
        writing=f"{VENV}/lib/python3*/site-packages/torch",
    )
    rerun = _play(lab, PYTORCH, host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    out = _sh(
        lab,
        host,
        f"{VENV}/bin/python -c 'import torch; x = torch.ones(64, 64); "
        "print(torch.__version__, float((x @ x).sum()))'",
    )
    assert out.split()[1] == str(64.0 * 64 * 64), out
    _recovered(lab, PYTORCH, host, reports)
    _row(
        "host killed during the pip install of torch",
        first,
        f"ok: torch reinstalled, imports and computes ({out.split()[0]})",
        capsys,
    )


@SECOND_HOST
def test_full_apt_cache_stops_the_driver_before_anything_is_installed(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A 1 MiB tmpfs on /var/cache/apt/archives (the driver's .debs do not fit): the role
    stops before dpkg runs, naming the directory; nothing is half-installed; with the space
    back the re-run installs and holds the driver."""
    host, reports = faulty
    archives = "/var/cache/apt/archives"
    _sh(
        lab,
        host,
        f"apt-mark unhold {DRIVER_PKGS} >/dev/null; "
        f"DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq {DRIVER_PKGS} >/dev/null; "
        f"mount -t tmpfs -o size=1m gpuprov-full {archives} && mkdir -p {archives}/partial",
    )
    try:
        first = _play(lab, DRIVER, host, reports)
        installed = _sh(
            lab, host, f"dpkg-query -W -f='${{db:Status-Abbrev}}${{Package}} ' {DRIVER_PKGS}", False
        )
    finally:
        _sh(lab, host, f"umount {archives}", check=False)
    assert first.returncode != 0
    message = _first_error(first.stdout)
    assert "enough free space" in message, message
    assert archives in message, message
    assert "re-run; nothing was installed" in first.stdout, first.stdout[-3000:]
    assert "ii " not in installed, installed
    assert _sh(lab, host, "dpkg --audit", check=False).strip() == ""
    rerun = _play(lab, DRIVER, host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    holds = _sh(lab, host, "apt-mark showhold").split()
    assert set(DRIVER_PKGS.split()) <= set(holds), holds
    _recovered(lab, DRIVER, host, reports)
    _row(
        f"apt cache full (1 MiB tmpfs on {archives})",
        _verdict(first),
        "ok: space back, driver installed and held",
        capsys,
    )


# ---------------------------------------------------------------------------
# the mirror (stand-in for NVIDIA's toolkit repository) cut off


def _mirror_address(name: str, net: str) -> str:
    info = json.loads(_docker("inspect", name).stdout)[0]
    return str((info["NetworkSettings"]["Networks"].get(net) or {}).get("IPAddress", ""))


@contextlib.contextmanager
def _mirror_unreachable(lab: Lab, host: str) -> Iterator[None]:
    """The mirror unreachable from `host` ("No route to host" at once): an `unreachable` route
    to its address in the host's network namespace (the lab's hosts have NET_ADMIN; the
    controller's `ip` runs there through nsenter). The mirror stays up for the other stream,
    which goes on meanwhile."""
    name, net = f"{lab.name}-mirror", f"{lab.name}-net"
    address = _mirror_address(name, net)
    assert address, f"{name} has no address on {net}"
    pid = _docker("inspect", "--format", "{{.State.Pid}}", _container(lab, host)).stdout.strip()
    route = ["nsenter", "--target", pid, "--net", "ip", "route"]
    subprocess.run([*route, "add", "unreachable", f"{address}/32"], check=True)
    try:
        yield
    finally:
        subprocess.run([*route, "del", "unreachable", f"{address}/32"], check=True)


def _reset_toolkit(lab: Lab, host: str, keep_source: bool, keep_lists: bool = False) -> None:
    """Remove the toolkit packages; without keep_source also its source and key; without
    keep_lists also apt_ready's freshness stamp (the next run updates); with keep_lists the
    cached .debs go instead (the next run must download them)."""
    drop = (
        ""
        if keep_source
        else (
            "rm -f /etc/apt/sources.list.d/nvidia-container-toolkit.sources "
            "/etc/apt/keyrings/nvidia-container-toolkit.*; "
        )
    )
    lists = (
        "rm -f /var/cache/apt/archives/*nvidia-container*.deb"
        if keep_lists
        else "rm -f /var/lib/gpuprov/apt-lists.json"
    )
    _sh(
        lab,
        host,
        f"apt-mark unhold {TOOLKIT_PKGS} >/dev/null; "
        f"DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq {TOOLKIT_PKGS} >/dev/null; {drop}"
        + lists,
    )


def _mirror_case(
    lab: Lab,
    faulty: tuple[str, Path],
    capsys: pytest.CaptureFixture[str],
    fault: str,
    keep_source: bool,
    expect: tuple[str, ...],
) -> None:
    host, reports = faulty
    _reset_toolkit(lab, host, keep_source)
    with _mirror_unreachable(lab, host):
        first = _play(lab, TOOLKIT, host, reports)
    assert first.returncode != 0
    text = first.stdout + first.stderr
    for word in expect:
        assert word in text, (word, _first_error(text))
    assert _sh(lab, host, "dpkg --audit", check=False).strip() == ""
    _toolkit_installed_nothing_then_recovered(
        lab, host, reports, first, fault, "ok: lists refreshed, toolkit installed", capsys
    )


def test_mirror_cut_before_the_key_download(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _mirror_case(
        lab,
        faulty,
        capsys,
        "mirror unreachable before the key download (the host's route to it cut)",
        False,
        ("nvidia_container_toolkit_apt_gpg_key_url", "/gpgkey", "proxy", "CA"),
    )


def test_mirror_cut_at_apt_update(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _mirror_case(
        lab,
        faulty,
        capsys,
        "mirror unreachable at apt update (key and source in place)",
        True,
        ("set by nvidia_container_toolkit_apt_repo_url", "not marked fresh"),
    )


@contextlib.contextmanager
def _debs_gone(lab: Lab) -> Iterator[None]:
    """The mirror answers (key, lists) but its .debs are gone (404): a mirror mid-sync. Its
    repository is a read-only bind mount of a controller directory; the files move aside."""
    with _mirror_changed(lab):  # the second stream waits meanwhile
        info = json.loads(_docker("inspect", f"{lab.name}-mirror").stdout)[0]
        (source,) = [Path(m["Source"]) for m in info["Mounts"] if m["Type"] == "bind"]
        aside = source.parent / "debs-aside"
        aside.mkdir(exist_ok=True)
        moved = [(deb, aside / deb.name) for deb in source.rglob("*.deb")]
        assert moved, f"no .deb under {source}"
        for deb, to in moved:
            deb.rename(to)
        try:
            yield
        finally:
            for deb, to in moved:
                to.rename(deb)


def test_mirror_fails_the_package_download(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Lists fresh (the re-run above updated them), the .debs not cached, and the mirror's
    packages gone (404) while its key and lists still answer: the role skips the update, the
    download fails before dpkg runs, naming the URL and its variable; nothing is installed."""
    host, reports = faulty
    _reset_toolkit(lab, host, keep_source=True, keep_lists=True)
    with _debs_gone(lab):
        first = _play(lab, TOOLKIT, host, reports)
    assert first.returncode != 0
    text = first.stdout + first.stderr
    for word in ("Downloading", "set by nvidia_container_toolkit_apt_repo_url", "404"):
        assert word in text, (word, _first_error(text))
    assert "Nothing was installed" in text, _first_error(text)
    _toolkit_installed_nothing_then_recovered(
        lab,
        host,
        reports,
        first,
        "mirror's packages gone at the download (404; lists fresh, key answers)",
        "ok: packages downloaded and installed",
        capsys,
    )


@contextlib.contextmanager
def _key_rotated(lab: Lab) -> Iterator[str]:
    """The mirror's repository re-signed with a new key, published at the same key URL (what
    NVIDIA did in 2022); the original Release signatures and key come back afterwards."""
    with _mirror_changed(lab):  # the second stream waits meanwhile
        info = json.loads(_docker("inspect", f"{lab.name}-mirror").stdout)[0]
        (source,) = [Path(m["Source"]) for m in info["Mounts"] if m["Type"] == "bind"]
        (dist,) = {p.parent for p in source.rglob("InRelease")}
        secret = source.parent / aptrepo.SIGNING_KEY_FILE
        kept = {
            p: p.read_bytes()
            for p in (dist / "InRelease", dist / "Release.gpg", source / "gpgkey", secret)
        }
        try:
            yield aptrepo.sign(source, dist)
        finally:
            for path, data in kept.items():
                path.write_bytes(data)


@contextlib.contextmanager
def _release_dated_ahead(lab: Lab, days: int) -> Iterator[None]:
    """The mirror's Release re-dated ``days`` ahead and signed with its own key (a mirror's
    clock ahead, or the host's behind); the original Release and signatures come back after."""
    with _mirror_changed(lab):  # the second stream waits meanwhile
        info = json.loads(_docker("inspect", f"{lab.name}-mirror").stdout)[0]
        (source,) = [Path(m["Source"]) for m in info["Mounts"] if m["Type"] == "bind"]
        (dist,) = {p.parent for p in source.rglob("InRelease")}
        kept = {
            p: p.read_bytes() for p in (dist / "Release", dist / "InRelease", dist / "Release.gpg")
        }
        try:
            aptrepo.redate(source, dist, time.time() + days * 86400)
            yield
        finally:
            for path, data in kept.items():
                path.write_bytes(data)


def test_release_dated_in_the_future(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A Release dated 730 days ahead (issue 20 item 4): apt refuses it as "not valid yet".
    The message names the Release file, the host's clock and the Release's Date, and says to
    fix time synchronisation first (not the mirror, proxy or CA); nothing is installed. The
    operator's action here is the clock: the mirror's Release dated right again."""
    host, reports = faulty
    _reset_toolkit(lab, host, keep_source=True)  # key and source kept, lists due
    with _release_dated_ahead(lab, 730):
        first = _play(lab, TOOLKIT, host, reports)
    assert first.returncode != 0
    said = " ".join((first.stdout + first.stderr).split())
    assert "is not valid yet for another 729d" in said, _first_error(first.stdout)
    assert "the host's clock says" in said, _first_error(first.stdout)
    assert "(its Date " in said, _first_error(first.stdout)
    assert "time synchronisation first" in said, _first_error(first.stdout)
    assert "set by nvidia_container_toolkit_apt_repo_url" in said, _first_error(first.stdout)
    _toolkit_installed_nothing_then_recovered(
        lab,
        host,
        reports,
        first,
        "toolkit repository's Release dated 730 days ahead (host clock behind)",
        "ok once the clock (here: the mirror's Release date) is right; further run changed=0",
        capsys,
    )


KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
LISTS_STAMP = "/var/lib/gpuprov/apt-lists.json"  # apt_ready's freshness stamp


def test_signing_key_rotated_at_its_url(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Same repository URL, a new key at the key URL, lists due for an update, the roles'
    records of their last converge in place (the toolkit's probe alone finds nothing to do),
    and a driver package unheld, so that the driver's converge makes the run's first update:
    before, the driver role's update failed with NO_PUBKEY on the toolkit's repository, run
    after run (the toolkit never got to fetch its key). Now the driver and Docker go on with
    a warning and mark the toolkit's record stale; the toolkit's probe finds that, its
    update reports its stale key, its repository task fetches it again, and the next run of
    all three changes nothing."""
    host, reports = faulty
    stack = (*DRIVER, *DOCKER, *TOOLKIT)  # site.yml's order
    # Lists due for an update, the records kept, and drift in the driver role (a package
    # unheld, as test_site's drift case): its converge is the run's first apt update.
    due = f"rm -f {LISTS_STAMP}; apt-mark unhold {DRIVER_PKGS.split()[0]}"
    old_key = _sh(lab, host, f"cat {KEYRING}")
    with _key_rotated(lab) as new_key:
        _sh(lab, host, due)
        first = _play(lab, stack, host, reports)
        assert first.returncode == 0, first.stdout[-4000:]
        said = first.stdout + first.stderr  # the warnings go to stderr
        assert "NO_PUBKEY" in said, said[-3000:]
        assert "another gpuprov role (nvidia_container_toolkit)" in said, said[-3000:]
        assert "marked stale by apt_ready" in said, said[-3000:]  # the toolkit's probe said it
        assert "The role fetches the key again (nvidia_container_toolkit_apt_gpg_key_url)" in said
        assert _sh(lab, host, f"cat {KEYRING}") == new_key != old_key
        third = _play(lab, stack, host, reports)
        assert third.returncode == 0, third.stdout[-4000:]
        assert _recap_changed(third.stdout, host) == 0, third.stdout[-3000:]
    # The mirror's old key is back: the same path takes the host back to it.
    _sh(lab, host, due)
    back = _play(lab, stack, host, reports)
    assert back.returncode == 0, back.stdout[-4000:]
    assert _sh(lab, host, f"cat {KEYRING}") == old_key
    _assert_nothing_lost(lab, host)
    _row(
        "toolkit repository's signing key rotated at the same URL (lists due, records kept)",
        "ok (rc=0): the driver's update marks the toolkit's record stale and goes on; the "
        "toolkit fetches its key again and verifies its packages with it",
        "changed=0; rotating back converges the same way",
        capsys,
    )


def _mirror_key_fingerprint(lab: Lab) -> str:
    """The lab mirror's signing key fingerprint, as gpg itself reads it (the expected value)."""
    info = json.loads(_docker("inspect", f"{lab.name}-mirror").stdout)[0]
    (source,) = [Path(m["Source"]) for m in info["Mounts"] if m["Type"] == "bind"]
    home = Path(tempfile.mkdtemp(prefix="gpuprov-gpg."))
    try:
        out = subprocess.run(
            ["gpg", "--batch", "--with-colons", "--show-keys", str(source / "gpgkey")],
            env=dict(os.environ, GNUPGHOME=str(home)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


def test_a_pinned_key_fingerprint_refuses_another_key(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """nvidia_container_toolkit_apt_gpg_key_fingerprint pins the key: the URL serves another
    one (here: the pin names another key), so the run stops before any apt update trusts it,
    naming both fingerprints, and the keyring is gone. With the right pin the next run
    fetches the key again and converges."""
    host, reports = faulty
    served = _mirror_key_fingerprint(lab)
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    pin = "nvidia_container_toolkit_apt_gpg_key_fingerprint"
    first = _play(lab, TOOLKIT, host, reports, "-e", f"{pin}={other}")
    assert first.returncode != 0
    text = first.stdout + first.stderr
    for word in (f"holds {served}", f"{pin} pins {other}", "The keyring was removed"):
        assert word in text, (word, _first_error(text))
    assert _sh(lab, host, f"test -e {KEYRING} && echo present || echo gone") == "gone\n"
    spaced = " ".join(served[i : i + 4] for i in range(0, len(served), 4)).lower()
    rerun = _play(lab, TOOLKIT, host, reports, "-e", json.dumps({pin: spaced}))
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert _sh(lab, host, f"test -e {KEYRING} && echo present || echo gone") == "present\n"
    unpinned = _play(lab, TOOLKIT, host, reports)  # back to the lab's inventory (no pin)
    assert unpinned.returncode == 0, unpinned.stdout[-4000:]
    _recovered(lab, TOOLKIT, host, reports)
    _row(
        "the toolkit key's fingerprint pinned to another key",
        _verdict(first),
        "ok with the served key's fingerprint pinned (spaced, lower case): key fetched again",
        capsys,
    )


# ---------------------------------------------------------------------------
# dockerd stopped, invalid daemon.json


def test_dockerd_stopped_before_the_toolkit_role(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    host, reports = faulty
    _sh(lab, host, "systemctl stop docker.socket docker.service")
    first = _play(lab, TOOLKIT, host, reports)  # the toolkit role alone meets it first
    assert first.returncode != 0, first.stdout[-3000:]
    error = _first_error(first.stdout + first.stderr)
    assert f"dockerd is not running on {host}" in error, error
    assert _recap_changed(first.stdout, host) == 0, first.stdout[-3000:]
    rerun = _play(lab, (*DOCKER, *TOOLKIT), host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    _recovered(lab, (*DOCKER, *TOOLKIT), host, reports)
    _row(
        "dockerd stopped by hand before the toolkit role",
        _verdict(first),
        "ok: docker.yml + toolkit.yml (docker role starts it, keeper back up)",
        capsys,
    )


@SECOND_HOST
def test_invalid_daemon_json_is_refused_and_left_alone(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    host, reports = faulty
    good = _sh(lab, host, "cat /etc/docker/daemon.json")
    _sh(
        lab,
        host,
        "cp /etc/docker/daemon.json /root/daemon.json.good; "
        'printf \'{"labels": ["owner=someone-else"],,}\' > /etc/docker/daemon.json',
    )
    try:
        broken = _sh(lab, host, "sha256sum /etc/docker/daemon.json")
        first = _play(lab, (*DOCKER, *TOOLKIT), host, reports)
        assert first.returncode != 0
        error = _first_error(first.stdout)
        # The docker role's preflight refuses it first, naming the file and the parse error.
        assert "refusing to overwrite /etc/docker/daemon.json" in error, error
        assert "changed=0" in first.stdout, first.stdout[-2000:]
        assert _sh(lab, host, "sha256sum /etc/docker/daemon.json") == broken
    finally:  # the owner fixes it (and a failed case leaves no broken file to the next)
        _sh(lab, host, "cp /root/daemon.json.good /etc/docker/daemon.json")
    assert _sh(lab, host, "cat /etc/docker/daemon.json") == good
    rerun = _play(lab, (*DOCKER, *TOOLKIT), host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    _recovered(lab, (*DOCKER, *TOOLKIT), host, reports)
    _row(
        "daemon.json with invalid JSON left by someone else",
        _verdict(first),
        "ok once its owner fixed it (file untouched by the failed run)",
        capsys,
    )


# ---------------------------------------------------------------------------
# an engine someone else installed

# Docker's repository is not reachable from the lab: an empty package of the same name and
# version stands in for Docker CE (dpkg-deb on the host), installed the way Docker's guide
# does it, after removing docker.io (which declares Conflicts: docker-ce). The role only
# sees what dpkg reports. An empty stand-in cannot run containers, so the lab proves
# refuse and replace; adopt (keep it, configure around it) needs a real docker-ce.
DOCKER_CE_STANDIN = """
set -e
apt-mark unhold docker.io >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq docker.io >/dev/null
d=$(mktemp -d); mkdir -p "$d/DEBIAN"
cat > "$d/DEBIAN/control" <<'CONTROL'
Package: docker-ce
Version: 5:27.3.1-1~debian.12~bookworm
Architecture: all
Maintainer: gpuprov lab <lab@localhost>
Description: stand-in for Docker CE from Docker's repository (gpuprov fault suite)
CONTROL
dpkg-deb --build "$d" /root/docker-ce-standin.deb >/dev/null
dpkg -i /root/docker-ce-standin.deb >/dev/null
"""


def _recap_changed(output: str, host: str) -> int:
    """changed= of the host's line in the PLAY RECAP (the last one of the output)."""
    return recap(output)[host]["changed"]


@SECOND_HOST
def test_docker_ce_someone_installed_is_refused_then_replaced_on_request(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The docker role used to remove a user's docker-ce silently to install docker.io (apt
    history: Remove: docker-ce, rc=0, no warning)."""
    host, reports = faulty
    installed = "dpkg-query -W -f '${Status} ${Version}' docker-ce"
    try:
        _sh(lab, host, DOCKER_CE_STANDIN)
        first = _play(lab, DOCKER, host, reports)
        assert first.returncode != 0, first.stdout[-3000:]
        error = _first_error(first.stdout)
        assert "packages from another source than docker_source=distro: docker-ce" in error, error
        assert "docker_foreign_engine" in first.stdout, error
        assert _recap_changed(first.stdout, host) == 0
        assert _sh(lab, host, installed).startswith("install ok installed 5:27.3.1"), host
    finally:
        # The one operator action, an explicit opt-in: replace it (and say so). Run whatever
        # happened above, so that the next case finds docker.io back.
        replaced = _play(lab, DOCKER, host, reports, "-e", "docker_foreign_engine=replace")
    assert replaced.returncode == 0, replaced.stdout[-4000:]
    assert "Replacing (docker_foreign_engine: replace) the engine packages someone else" in (
        replaced.stdout
    )
    gone = _sh(lab, host, installed, check=False)
    assert not gone.startswith("install ok installed"), gone  # e.g. "unknown ok not-installed"
    _assert_nothing_lost(lab, host)
    third = _play(lab, DOCKER, host, reports)
    assert third.returncode == 0, third.stdout[-4000:]
    assert _recap_changed(third.stdout, host) == 0, third.stdout[-3000:]
    _row(
        "Docker CE installed by someone else, docker_source left at distro",
        _verdict(first),
        "ok with docker_foreign_engine=replace (docker-ce removed, said so); third run changed=0",
        capsys,
    )


TOOLKIT_MARKS = (  # the role's marks (its install, an adoption), its record of the last converge
    "/var/lib/gpuprov/owned/nvidia_container_toolkit* "
    "/var/lib/gpuprov/state/nvidia_container_toolkit.json"
)


def _toolkit_version(lab: Lab, host: str) -> str:
    query = "dpkg-query -W -f='${Version} ${db:Status-Abbrev}' nvidia-container-toolkit"
    return _sh(lab, host, query).strip()


def test_a_toolkit_someone_else_installed_is_refused_kept_or_replaced(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """NVIDIA's install guide followed by hand before gpuprov came: the toolkit's packages from
    NVIDIA's repository at another version (1.17.8-1; the lab mirror's newest is 1.18.0-1), and
    no mark or record of the role's on the host. The role used to change its version or hold it
    as its own without a word. Refused by default; adopt keeps it (not upgraded, not held);
    replace installs the newest over it and holds it (the lab holds its packages)."""
    host, reports = faulty
    by_hand = " ".join(f"{p}=1.17.8-1" for p in TOOLKIT_PKGS.split())
    _reset_toolkit(lab, host, keep_source=True, keep_lists=True)
    _sh(
        lab,
        host,
        f"rm -f {TOOLKIT_MARKS}; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {by_hand}"
        " >/dev/null",
    )
    first = _play(lab, TOOLKIT, host, reports)
    assert first.returncode != 0, first.stdout[-3000:]
    error = _first_error(first.stdout)
    assert "installed by someone else (not by gpuprov): nvidia-container-toolkit 1.17.8-1" in error
    # What installing ours would do with the lab's settings (no pinned version).
    assert "Installing ours would upgrade it to the newest version and take it over" in (
        " ".join(first.stdout.split())
    ), error
    assert "nvidia_container_toolkit_foreign_toolkit" in first.stdout, error
    assert _recap_changed(first.stdout, host) == 0
    assert _toolkit_version(lab, host) == "1.17.8-1 ii", host
    adopt = ("-e", "nvidia_container_toolkit_foreign_toolkit=adopt")
    kept = _play(lab, TOOLKIT, host, reports, *adopt)
    assert kept.returncode == 0, kept.stdout[-4000:]
    assert "Keeping the toolkit someone else installed: nvidia-container-toolkit 1.17.8-1" in (
        " ".join(kept.stdout.split())
    )
    assert _toolkit_version(lab, host) == "1.17.8-1 ii", host  # not upgraded, not held
    again = _play(lab, TOOLKIT, host, reports, *adopt)
    assert again.returncode == 0, again.stdout[-4000:]
    assert _recap_changed(again.stdout, host) == 0, again.stdout[-3000:]
    replace = ("-e", "nvidia_container_toolkit_foreign_toolkit=replace")
    replaced = _play(lab, TOOLKIT, host, reports, *replace)
    assert replaced.returncode == 0, replaced.stdout[-4000:]
    assert "Replacing (nvidia_container_toolkit_foreign_toolkit: replace) the toolkit someone" in (
        " ".join(replaced.stdout.split())
    )
    assert _toolkit_version(lab, host) == "1.18.0-1 hi", host  # the newest, held (the lab holds)
    _recovered(lab, TOOLKIT, host, reports)
    _row(
        "NVIDIA Container Toolkit installed by hand from NVIDIA's repository (1.17.8-1)",
        _verdict(first),
        "ok with nvidia_container_toolkit_foreign_toolkit=adopt (kept, not held; again changed=0); "
        "ok with =replace (1.18.0-1 installed and held, said so); further run changed=0",
        capsys,
    )


# NVIDIA's driver installed by someone else, both ways NVIDIA documents: the CUDA repository's
# metapackage (a stand-in: an empty package of that name and a version of that repository) and
# the .run installer (stand-ins of its two programs; the uninstaller removes both and leaves a
# mark, as the real one removes what it installed).
FOREIGN_DRIVER_STANDIN = """
set -e
d=$(mktemp -d); mkdir -p "$d/DEBIAN"
cat > "$d/DEBIAN/control" <<'CONTROL'
Package: cuda-drivers
Version: 560.35.03-1
Architecture: all
Maintainer: gpuprov lab <lab@localhost>
Description: stand-in for cuda-drivers from NVIDIA's CUDA repository (gpuprov fault suite)
CONTROL
dpkg-deb --build "$d" /root/cuda-drivers-standin.deb >/dev/null
dpkg -i /root/cuda-drivers-standin.deb >/dev/null
printf '#!/bin/sh\necho stand-in for nvidia-installer\n' > /usr/bin/nvidia-installer
cat > /usr/bin/nvidia-uninstall <<'UNINSTALL'
#!/bin/sh
[ "$1" = --silent ] || exit 2
echo "$*" > /root/nvidia-uninstall-ran
rm -f /usr/bin/nvidia-installer /usr/bin/nvidia-uninstall
UNINSTALL
chmod 0755 /usr/bin/nvidia-installer /usr/bin/nvidia-uninstall
"""
FOREIGN_DRIVER = (
    "cuda-drivers 560.35.03-1 (a package of NVIDIA's CUDA repository), "
    "/usr/bin/nvidia-installer (NVIDIA's .run installer), "
    "/usr/bin/nvidia-uninstall (NVIDIA's .run installer)"
)


@SECOND_HOST
def test_a_driver_someone_else_installed_is_refused_kept_or_replaced(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A driver from NVIDIA's CUDA repository or its .run installer: the driver role used to
    install Debian's over it without a word. Now preflight names it and stops (nothing
    changed); adopt keeps it; replace (the explicit opt-in) removes it, says so, and the run
    after that changes nothing."""
    host, reports = faulty
    installed = "dpkg-query -W -f '${Status} ${Version}' cuda-drivers"
    ours = f"dpkg-query -W -f '${{Status}}\\n' {DRIVER_PKGS}"
    _sh(lab, host, FOREIGN_DRIVER_STANDIN)
    try:
        first = _play(lab, DRIVER, host, reports)
        assert first.returncode != 0, first.stdout[-3000:]
        error = _first_error(first.stdout)
        assert f"has an NVIDIA driver from another source: {FOREIGN_DRIVER}" in error, error
        assert "nvidia_driver_foreign_driver" in first.stdout, error
        assert _recap_changed(first.stdout, host) == 0
        kept = _play(lab, DRIVER, host, reports, "-e", "nvidia_driver_foreign_driver=adopt")
        assert kept.returncode == 0, kept.stdout[-4000:]
        assert "Keeping (nvidia_driver_foreign_driver: adopt) the NVIDIA driver someone else" in (
            kept.stdout
        )
        assert _sh(lab, host, installed).startswith("install ok installed 560.35.03-1"), host
        assert _sh(lab, host, "test -x /usr/bin/nvidia-uninstall && echo yes") == "yes\n"
    finally:
        replaced = _play(lab, DRIVER, host, reports, "-e", "nvidia_driver_foreign_driver=replace")
    assert replaced.returncode == 0, replaced.stdout[-4000:]
    assert "Replacing (nvidia_driver_foreign_driver: replace) the NVIDIA driver someone else" in (
        replaced.stdout
    )
    gone = _sh(lab, host, installed, check=False)
    assert not gone.startswith("install ok installed"), gone
    assert _sh(lab, host, "cat /root/nvidia-uninstall-ran") == "--silent\n"
    assert (
        _sh(lab, host, "ls /usr/bin/nvidia-installer /usr/bin/nvidia-uninstall", check=False) == ""
    )
    # Ours is untouched by all of it: installed and held.
    assert set(_sh(lab, host, ours).split("\n")) - {""} == {"hold ok installed"}
    _assert_nothing_lost(lab, host)
    third = _play(lab, DRIVER, host, reports)
    assert third.returncode == 0, third.stdout[-4000:]
    assert _recap_changed(third.stdout, host) == 0, third.stdout[-3000:]
    _row(
        "NVIDIA's driver installed by someone else (cuda-drivers from NVIDIA's repository, "
        "the .run installer's programs)",
        _verdict(first),
        "ok with nvidia_driver_foreign_driver=adopt (kept); ok with =replace (cuda-drivers "
        "purged, nvidia-uninstall --silent ran, said so); third run changed=0",
        capsys,
    )


SOURCES = ("playbooks/sources.yml",)
BACKUPS = "/var/backups/gpuprov/apt-sources"


def _foreign_source_case(
    lab: Lab,
    faulty: tuple[str, Path],
    capsys: pytest.CaptureFixture[str],
    *,
    fault: str,
    vendor_list: str,
    vendor: str,
    variable: str,
    playbooks: tuple[str, ...],
    extra: tuple[str, ...] = (),
    breaks_apt: bool = False,
) -> None:
    """A vendor's install guide was followed on the host before: its .list defines a URL a
    role writes its own source for. The first play names the file before any apt command and
    changes nothing; the one operator action is VARIABLE=replace (the file moved to BACKUPS,
    said so); a third run changes nothing."""
    host, reports = faulty
    _sh(lab, host, f"printf '%s' '{vendor}' > {vendor_list}")
    try:
        if breaks_apt:  # another Signed-By than the role's own source's
            broken = _sh(lab, host, "apt-get check 2>&1 || true")
            assert "Conflicting values set for option Signed-By" in broken, broken
        first = _play(lab, playbooks, host, reports, *extra)
        assert first.returncode != 0, first.stdout[-3000:]
        error = _first_error(first.stdout)
        assert f"is also defined in {vendor_list}:1" in error, error
        assert f"{variable}: replace" in first.stdout, error
        assert _recap_changed(first.stdout, host) == 0
        assert _sh(lab, host, f"cat {vendor_list}") == vendor  # untouched
        rerun = _play(lab, playbooks, host, reports, *extra, "-e", f"{variable}=replace")
        assert rerun.returncode == 0, rerun.stdout[-4000:]
        assert f"Replaced ({variable}: replace)" in rerun.stdout
        assert _sh(lab, host, f"cat {BACKUPS}/{Path(vendor_list).name}") == vendor
        assert _sh(lab, host, f"test -e {vendor_list} || echo gone").strip() == "gone"
        assert "Conflicting" not in _sh(lab, host, "apt-get check 2>&1")
        _assert_nothing_lost(lab, host)
        third = _play(lab, playbooks, host, reports, *extra)
        assert third.returncode == 0, third.stdout[-4000:]
        assert _recap_changed(third.stdout, host) == 0, third.stdout[-3000:]
    finally:  # a failed case leaves apt usable for the next ones
        _sh(lab, host, f"rm -f {vendor_list}", check=False)
    _row(
        fault,
        _verdict(first),
        f"ok with {variable}=replace (file moved to {BACKUPS}, said so); third run changed=0",
        capsys,
    )


def test_nvidias_own_source_file_is_refused_then_replaced(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """NVIDIA's install guide leaves a .list for our toolkit URL with another Signed-By, and
    every apt command fails ("Conflicting values set for option Signed-By"). Before, site.yml
    stopped in the driver role and every re-run stayed stuck until someone deleted the file."""
    host, _ = faulty
    url = str(lab.hosts[host]["nvidia_container_toolkit_apt_repo_url"]).replace("$(ARCH)", "amd64")
    vendor = f"deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] {url} /\n"
    _foreign_source_case(
        lab,
        faulty,
        capsys,
        fault="NVIDIA's own .list for the toolkit repository (another Signed-By)",
        vendor_list="/etc/apt/sources.list.d/nvidia-container-toolkit.list",
        vendor=vendor,
        variable="nvidia_container_toolkit_apt_foreign_sources",
        playbooks=(*SOURCES, *DRIVER, *TOOLKIT),
        breaks_apt=True,
    )


@SECOND_HOST
def test_dockers_own_source_file_is_refused_then_replaced(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Docker's install guide leaves /etc/apt/sources.list.d/docker.list for the URL the docker
    role writes docker.sources for (docker_source: docker-ce). The lab has no docker-ce
    repository (Docker's is unreachable here), so the URL is a path of the lab's mirror that
    serves nothing: the case runs the step that owns the definitions (playbooks/sources.yml)
    and the driver role, whose apt commands must work after the replacement; installing
    docker-ce itself is not part of it."""
    host, _ = faulty
    mirror = str(lab.hosts[host]["nvidia_container_toolkit_apt_repo_url"]).split("/stable/", 1)[0]
    url = f"{mirror}/docker-ce/linux/debian"
    _foreign_source_case(
        lab,
        faulty,
        capsys,
        fault="Docker's own docker.list for Docker's repository, docker_source docker-ce",
        vendor_list="/etc/apt/sources.list.d/docker.list",
        vendor=(
            "deb [arch=amd64 signed-by=/usr/share/keyrings/docker-archive-keyring.gpg] "
            f"{url} bookworm stable\n"
        ),
        variable="docker_ce_apt_foreign_sources",
        playbooks=(*SOURCES, *DRIVER),
        extra=("-e", "docker_source=docker-ce", "-e", f"docker_ce_apt_repo_url={url}"),
    )


@SECOND_HOST
def test_ssh_connection_dropped_mid_task(
    lab: Lab, faulty: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    host, reports = faulty
    container = _container(lab, host)
    _reset_toolkit(lab, host, True)
    with _mirror_used(lab):
        proc = _start(lab, TOOLKIT, host, reports)
        landed = _when_running(container, proc, r"apt-get|/usr/bin/dpkg ")
        if landed:
            # sshd restarted, and the controller's sessions (the children of sshd) killed by PID
            _docker(
                "exec",
                container,
                "sh",
                "-c",
                "systemctl restart ssh; for p in $(pgrep -f '^sshd: root@'); do kill -9 $p; done",
            )
        out, _ = proc.communicate(timeout=600)
    assert landed, out[-3000:]
    if proc.returncode == 0:  # ssh's retries reconnected: the run finished its work
        assert _recap_changed(out, host) > 0, out[-3000:]
        first = "rc=0: reconnected and finished"
    else:  # or it stopped, naming the host
        assert f"[{host}]" in out, out[-3000:]
        assert "UNREACHABLE" in out or "fatal: [" in out, out[-3000:]
        first = f"rc={proc.returncode}: {_first_error(out)}"
    # apt may have been cut mid-transaction too; the re-run repairs whatever is left
    rerun = _play(lab, TOOLKIT, host, reports)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    _recovered(lab, TOOLKIT, host, reports)
    _row("SSH dropped mid-task (sshd restarted, sessions killed)", first, "ok", capsys)


def test_the_lab_came_up_in_an_operators_shell(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    """The session's `lab.py up` on fresh hosts ran with an operator's ANSIBLE_VAULT_PASSWORD_FILE,
    ANSIBLE_CONFIG and ANSIBLE_INVENTORY exported (conftest.operator_shell); before the fix it
    stopped at `ansible-vault encrypt` (exit 5, two default vault ids). The lab's vault was
    written with the lab's own password: the operator's does not open it."""
    shell = lab.operator_env
    assert set(shell) == {"ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_CONFIG", "ANSIBLE_INVENTORY"}
    assert Path(shell["ANSIBLE_CONFIG"]).exists(), shell
    vault = lab.inventory.parent / s3lab.VAULT_FILE
    assert s3lab.read_vault(vault, vault_password_file(lab.name)), vault
    assert s3lab.read_vault(vault, Path(shell["ANSIBLE_VAULT_PASSWORD_FILE"])) == {}
    # And again, the lab reused, in the same shell: no ansible-vault conflict either.
    env = {**os.environ, **shell}
    again = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lab.py"), "--lab", lab.name, "status"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    _row(
        "operator's shell exports ANSIBLE_VAULT_PASSWORD_FILE, ANSIBLE_CONFIG, ANSIBLE_INVENTORY",
        "ok: lab.py up on fresh hosts wrote the lab's vault with the lab's password",
        "nothing to repair; the operator's password does not open the lab's vault",
        capsys,
    )


def test_zz_print_the_fault_table(lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    """Last in the module: the table of the cases that ran (lab-marked through `lab`)."""
    rows = ROWS + [row for stream in fault_streams.STREAM for row in stream.rows()]
    assert rows, "no fault case ran"
    with capsys.disabled():
        print("\n\nfault | first run | re-run\n--- | --- | ---")
        for fault, first, rerun in rows:
            print(f"{fault} | {first} | {rerun}")
        print(flush=True)
