"""The offline bundle on the lab (issue 23 item 1; docs/bundle.md): what a converged lab host
installed, collected and downloaded once, installs in full on a fresh container of the same
image that has no network at all (`docker run --network none`).

Runs after test_site.py has converged the lab. Real: the collect playbook on the host, the
downloads from Debian's archive, PyPI and the lab's stand-in toolkit repository, the signed
repository checked by apt, pip installing from the bundle's index. Not yet here: the roles
provisioning from a served bundle (docs/bundle.md, "Not built yet")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import bundle
import pytest
from conftest import Lab

# Run in the networkless container: the bundle's repository as the only apt source, every
# package the host has, then each environment from the bundle's index.
OFFLINE = r"""
set -euo pipefail
if getent ahosts deb.debian.org >/dev/null 2>&1; then echo "NETWORK"; exit 3; fi
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
mkdir -p /etc/apt/keyrings
install -m 0644 /b/apt/gpgkey /etc/apt/keyrings/gpuprov-bundle.asc
printf 'Types: deb\nURIs: file:///b/apt\nSuites: /\nSigned-By: %s\n' \
  /etc/apt/keyrings/gpuprov-bundle.asc > /etc/apt/sources.list.d/gpuprov-bundle.sources
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --allow-downgrades \
  $(cat /w/debs.txt) >/tmp/apt.log 2>&1 || { tail -25 /tmp/apt.log; exit 1; }
echo "== dpkg"
dpkg-query -W -f '${db:Status-Abbrev}\t${binary:Package}=${Version}\n'
for reqs in /w/venv-*.txt; do
  name=$(basename "$reqs" .txt)
  python3 -m venv "/tmp/$name"
  "/tmp/$name/bin/pip" install -q --index-url file:///b/simple/ -r "$reqs" >&2
  echo "== $name"
  "/tmp/$name/bin/pip" list --format=freeze
done
"""


def _installed(dpkg_lines: str) -> set[str]:
    """name=version of installed packages (status letter `i`: ii, and hi when held)."""
    found = set()
    for line in dpkg_lines.splitlines():
        status, _, spec = line.partition("\t")
        if status[1:2] == "i":
            found.add(spec.replace(":amd64", ""))
    return found


def _sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("== "):
            current = line[3:]
            sections[current] = []
        elif current:
            sections[current].append(line)
    return sections


def test_a_bundle_installs_a_converged_host_s_packages_with_no_network(
    lab: Lab, tmp_path: Path
) -> None:
    hosts = [
        h
        for h, v in lab.hosts.items()
        if v.get("lab_release", "bookworm") == "bookworm" and h in lab.groups.get("gpu_nodes", [])
    ]
    if not hosts:
        pytest.skip("needs a Debian 12 GPU node")
    host = hosts[0]
    out = tmp_path / "out"
    lab.ansible_playbook(
        "playbooks/bundle.yml", "--limit", host, "-e", f"gpuprov_report_dir={out}", check=True
    )
    manifest = bundle.build(out)
    print(
        f"\nbundle of {host}: {manifest['debs']} packages, {manifest['wheels']} wheels, "
        f"{manifest['bytes'] / 1e6:.0f} MB, fetched {manifest['fetched_bytes'] / 1e6:.0f} MB "
        f"in {manifest['build_seconds']} s; plans {json.dumps(manifest['plans'])}"
    )
    assert manifest["not_downloadable"] == {}
    again = bundle.build(out)
    assert again["fetched_bytes"] == 0, "a second build downloads nothing"
    root = out / "bundle"
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=root, check=True)

    # What the host has, asked of the host itself (not of the module's answer).
    want_debs = _installed(
        lab.ssh(
            host, "dpkg-query -W -f '${db:Status-Abbrev}\\t${binary:Package}=${Version}\\n'"
        ).stdout
    )
    venvs = [
        v["path"] for v in json.loads((out / "installed" / f"{host}.json").read_text())["venvs"]
    ]
    assert "/opt/gpuprov/venv" in venvs
    want_venvs = {}
    work = tmp_path / "work"
    work.mkdir()
    (work / "debs.txt").write_text("\n".join(sorted(want_debs)) + "\n")
    for number, path in enumerate(venvs):
        frozen = lab.ssh(host, f"{path}/bin/pip list --format=freeze").stdout.split()
        want_venvs[f"venv-{number}"] = sorted(frozen)
        (work / f"venv-{number}.txt").write_text("\n".join(frozen) + "\n")
    (work / "offline.sh").write_text(OFFLINE)
    image = subprocess.run(
        ["docker", "inspect", "-f", "{{.Config.Image}}", lab.hosts[host]["lab_container"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ran = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{root}:/b:ro",
            "-v",
            f"{work}:/w:ro",
            image,
            "bash",
            "/w/offline.sh",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    got = _sections(ran.stdout)
    assert want_debs <= _installed("\n".join(got["dpkg"])), want_debs - _installed(
        "\n".join(got["dpkg"])
    )
    for name, frozen in want_venvs.items():
        assert sorted(got[name]) == frozen, name
