"""scripts/gpuprov_lab/raw_script.py: the shell script bench_site.py times against site.yml.

The inputs are listings as the hosts print them (written here by hand, in the formats of
find -printf '%y %p', getent and systemctl --no-legend --plain); the script is checked by
sh -n and by running its file-writing lines into a temporary directory.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest
from gpuprov_lab import raw_script as rs

FOUND = """\
d /opt/gpuprov
d /opt/gpuprov/venv
f /opt/gpuprov/venv/pyvenv.cfg
f /opt/gpuprov/venv/pip.conf
f /opt/gpuprov/venv/bin/python3
f /opt/gpuprov/venv/lib/python3.11/site-packages/torch/__init__.py
f /etc/docker/daemon.json
f /etc/apt/sources.list.d/nvidia.list
f /usr/share/keyrings/nvidia.gpg
f /usr/bin/dockerd
f /etc/passwd
f /etc/group-
l /etc/systemd/system/multi-user.target.wants/jupyterlab.service
f /etc/systemd/system/jupyterlab.service
f /srv/notebooks/__pycache__/x.cpython-311.pyc
f /home/jupyter/.cache/pip/http/1
d /
"""


def test_changed_paths_keep_what_the_run_wrote_and_drop_what_installs_make() -> None:
    venvs = rs.venv_roots(FOUND)
    assert venvs == ["/opt/gpuprov/venv"]
    kept = rs.changed_paths(FOUND, owned={"/usr/bin/dockerd"}, venvs=venvs)
    assert kept == [
        "/etc/apt/sources.list.d/nvidia.list",
        "/etc/docker/daemon.json",
        "/etc/systemd/system/jupyterlab.service",
        "/opt/gpuprov",
        "/opt/gpuprov/venv",
        "/opt/gpuprov/venv/pip.conf",  # written into the venv, not by pip
        "/usr/share/keyrings/nvidia.gpg",
    ]
    before, after = rs.split_before_apt(kept)
    assert before == ["/etc/apt/sources.list.d/nvidia.list", "/usr/share/keyrings/nvidia.gpg"]
    assert "/etc/docker/daemon.json" in after


def test_package_diff_and_dpkg_paths() -> None:
    assert rs.package_diff("docker.io\npython3\nnvidia-smi\n", "python3\n") == [
        "docker.io",
        "nvidia-smi",
    ]
    assert rs.dpkg_paths("/.\n/usr\n/usr/bin/dockerd\n\n") == {"/.", "/usr", "/usr/bin/dockerd"}
    # merged /usr: find(1) reports /usr/lib/... for what dpkg lists as /lib/...
    owned = rs.dpkg_paths("/lib/systemd/system/docker.service\n/libexec/x\n")
    assert "/usr/lib/systemd/system/docker.service" in owned
    assert "/usr/libexec/x" not in owned


def test_parse_venv() -> None:
    cfg = "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n"
    venv = rs.parse_venv("/v", cfg, "pip==23.0.1\ntorch==2.13.0+cpu\n\n", "jupyter:jupyter")
    assert venv == rs.Venv("/v", True, ("pip==23.0.1", "torch==2.13.0+cpu"), "jupyter:jupyter")
    assert not rs.parse_venv(
        "/v", cfg.replace("true", "false"), "", "root:root"
    ).system_site_packages


USERS_FRESH = "root:x:0:0:root:/root:/bin/bash\n"
GROUP_FRESH = "root:x:0:\nvideo:x:44:\n"
USERS_REF = USERS_FRESH + (
    "jupyter:x:999:996::/home/jupyter:/usr/sbin/nologin\nops:x:1000:1000::/home/ops:/bin/bash\n"
)
GROUP_REF = "root:x:0:\nvideo:x:44:jupyter\njupyter:x:996:\ndocker:x:995:jupyter,ops\nops:x:1000:\n"


def test_account_diff_lists_new_accounts_and_added_members() -> None:
    groups, users, members = rs.account_diff(USERS_REF, USERS_FRESH, GROUP_REF, GROUP_FRESH)
    assert [(g.name, g.system) for g in groups] == [
        ("docker", True),
        ("jupyter", True),
        ("ops", False),
    ]
    assert users == [
        rs.Account("jupyter", True, "/home/jupyter", "/usr/sbin/nologin", "jupyter"),
        rs.Account("ops", False, "/home/ops", "/bin/bash", "ops"),
    ]
    assert members == {"jupyter": ["docker", "video"], "ops": ["docker"]}


def test_unit_diff() -> None:
    enabled_fresh = "ssh.service enabled enabled\n"
    enabled_ref = (
        enabled_fresh + "docker.service enabled enabled\njupyterlab.service enabled enabled\n"
    )
    active_fresh = "ssh.service loaded active running OpenBSD Secure Shell server\n"
    active_ref = active_fresh + (
        "docker.service loaded active running Docker\n"
        "docker.socket loaded active running Docker Socket\n"
        "multi-user.target loaded active active Multi-User System\n"
        "run-docker-netns.mount loaded active mounted /run/docker/netns\n"
    )
    enable, restart = rs.unit_diff(enabled_ref, enabled_fresh, active_ref, active_fresh)
    assert enable == ["docker.service", "jupyterlab.service"]
    assert restart == ["docker.service", "docker.socket"]


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o640
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _script() -> str:
    changes = rs.HostChanges(
        packages=["docker.io", "nvidia-smi"],
        held=["nvidia-smi"],
        groups=[rs.Account("jupyter", system=True)],
        users=[rs.Account("jupyter", True, "/home/jupyter", "/usr/sbin/nologin", "jupyter")],
        memberships={"jupyter": ["docker", "video"]},
        venvs=[rs.Venv("/opt/v", True, ("torch==2.13.0+cpu",), "jupyter:jupyter")],
        enable=["jupyterlab.service"],
        restart=["docker.service", "jupyterlab.service"],
    )
    return rs.build_script(
        changes,
        tar_before_apt=_tar({"etc/apt/sources.list.d/x.list": b"deb http://m/ ./\n"}),
        tar_files=_tar({"etc/docker/daemon.json": b"{}\n"}),
        pip_env={"PIP_FIND_LINKS": "/opt/gpuprov-wheels"},
    )


def test_the_script_parses_and_runs_its_steps_in_order() -> None:
    script = _script()
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    lines = script.splitlines()

    def first(prefix: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(prefix))

    tars = [i for i, line in enumerate(lines) if line.startswith(f"tar -xzpf {rs.TAR_FILE} -C /")]
    assert len(tars) == 2
    # apt's sources before the one update; the one install; accounts before the files they
    # own; venvs after; services last.
    assert tars[0] < first("apt-get update") < first("apt-get install") < first("apt-mark hold")
    assert first("apt-mark hold") < first("getent group jupyter") < first("id -u jupyter")
    assert first("usermod -a -G docker,video jupyter") < tars[1] < first("python3 -m venv")
    assert "python3 -m venv --system-site-packages /opt/v" in lines
    assert "PIP_FIND_LINKS=/opt/gpuprov-wheels /opt/v/bin/pip install -q torch==2.13.0+cpu" in lines
    assert first("chown -R jupyter:jupyter /opt/v") < first("systemctl daemon-reload")
    assert lines[-2] == "systemctl restart docker.service jupyterlab.service"
    assert lines[-1] == f"echo '{rs.DONE}'"
    # the payload goes through a file: a failed base64 fails the script (set -e)
    assert lines[tars[0] - 1].endswith(f"| base64 -d > {rs.TAR_FILE}")
    assert sum(line.startswith("apt-get update") for line in lines) == 1


def test_the_scripts_tar_lines_write_the_files(tmp_path: Path) -> None:
    lines = _script().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"tar -xzpf {rs.TAR_FILE} "):
            # The same two lines, with the test's directory for the file and the host's root.
            staged = str(tmp_path / "payload.tgz")
            pair = "\n".join((lines[i - 1], line)).replace(rs.TAR_FILE, staged)
            subprocess.run(["sh", "-ec", pair.replace(" -C / ", f" -C {tmp_path} ")], check=True)
            assert not Path(staged).exists()
    assert (tmp_path / "etc/apt/sources.list.d/x.list").read_text() == "deb http://m/ ./\n"
    written = tmp_path / "etc/docker/daemon.json"
    assert written.read_bytes() == b"{}\n"
    assert written.stat().st_mode & 0o777 == 0o640


def test_nothing_to_install_writes_no_apt_or_systemd_lines() -> None:
    script = rs.build_script(rs.HostChanges(), tar_before_apt=None, tar_files=None, pip_env={})
    assert script == f"set -eu\nexport DEBIAN_FRONTEND=noninteractive LC_ALL=C\necho '{rs.DONE}'\n"


def test_a_failed_payload_stops_the_script_before_its_last_line(tmp_path: Path) -> None:
    lines = _script().splitlines()
    i = next(i for i, line in enumerate(lines) if line.endswith(f"base64 -d > {rs.TAR_FILE}"))
    broken = "echo 'not base64!' | base64 -d > " + str(tmp_path / "x.tgz")
    proc = subprocess.run(
        ["sh", "-c", f"set -eu\n{broken}\necho '{rs.DONE}'\n"], capture_output=True, text=True
    )
    assert lines[i].startswith("echo ")
    assert proc.returncode != 0
    assert rs.DONE not in proc.stdout


def test_package_files_a_role_edited_are_written_and_versions_pinned() -> None:
    verify = (
        "??5?????? c /etc/default/prometheus-node-exporter\n"
        "??5??????   /usr/lib/x.so\n"
        "?????????   /etc/y\n"
        "missing   c /etc/z\n"
    )
    modified = rs.modified_package_files(verify)
    assert modified == {"/etc/default/prometheus-node-exporter", "/usr/lib/x.so"}
    found = "f /etc/default/prometheus-node-exporter\nf /etc/default/other\n"
    owned = {"/etc/default/prometheus-node-exporter", "/etc/default/other"}
    assert rs.changed_paths(found, owned, [], modified) == ["/etc/default/prometheus-node-exporter"]
    query = "docker.io 26.1.5+dfsg1-1\nnvidia-container-toolkit 1.17.8-1\n"
    assert rs.with_versions(["nvidia-container-toolkit", "docker.io"], query) == [
        "nvidia-container-toolkit=1.17.8-1",
        "docker.io=26.1.5+dfsg1-1",
    ]
    with pytest.raises(ValueError, match="no installed version of curl"):
        rs.with_versions(["curl"], query)


def test_pip_freeze_comments_and_editables_are_not_requirements() -> None:
    freeze = "# Editable install with no version control\n-e /src/x\ntorch==2.13.0+cpu\n"
    assert rs.parse_venv("/v", "", freeze, "root:root").requirements == ("torch==2.13.0+cpu",)


def test_find_argv_prunes_runtime_trees_and_lists_kinds() -> None:
    argv = rs.find_argv("/root/.mark")
    assert argv.startswith("find / -xdev ")
    for pruned in ("/proc", "/var/lib/dpkg", "/root/.cache"):
        assert f"-path {pruned} " in argv
    assert "-cnewer /root/.mark" in argv
    subprocess.run(["sh", "-n", "-c", argv], check=True)


def test_retarget_replaces_whole_names_in_text_files_only() -> None:
    binary = b"\x00\xff172.18.0.4"
    tar = _tar(
        {
            "etc/x.conf": b"--listen=172.18.0.4:9100 172.18.0.40 host lab-a1 lab-a10 lab-a1.lan\n",
            "usr/bin/blob": binary,
        }
    )
    out = rs.retarget(tar, {"172.18.0.4": "172.18.0.9", "lab-a1": "lab-sh"})
    with tarfile.open(fileobj=io.BytesIO(out), mode="r:gz") as t:
        files = {m.name: (t.extractfile(m) or io.BytesIO()).read() for m in t.getmembers()}
        modes = {m.name: m.mode for m in t.getmembers()}
    assert (
        files["etc/x.conf"]
        == b"--listen=172.18.0.9:9100 172.18.0.40 host lab-sh lab-a10 lab-sh.lan\n"
    )
    assert files["usr/bin/blob"] == binary
    assert modes["etc/x.conf"] == 0o640
