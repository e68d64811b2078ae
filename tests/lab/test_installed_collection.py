"""The installed collection against a lab host (issue 22; marked `lab`).

`ansible-galaxy collection build` of the checkout, `ansible-galaxy collection install` into a
temporary collections path, then a user's own playbook, in a directory of its own with an
ansible.cfg that knows nothing of the checkout (no plugin paths, no roles path), that uses
the collection only by FQCN: `import_playbook: gpuprov.fleet.plan` and
`roles: [gpuprov.fleet.nvidia_driver, gpuprov.fleet.gpu_smoke]`, on one host site.yml
converged from the checkout (test_site.py runs first).

The smoke role is given other layers than the lab's (all but L5, whose torchrun needs the
other launch hosts), so its inputs differ and its install phase runs: the payload it copies
(scripts/smoke, compat's host modules, gpu_probe.py) comes from the installed collection,
and changed=0 says it is byte for byte what the checkout installed. Nothing is simulated
here beyond the lab's PCI devices.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from gpuprov_lab.site import ansible_env
from playbook_output import CONVERGED, outcomes, recap

REPO = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"
HOST = "lab-k40m"
SMOKE_LAYERS = ["L0", "L1", "L2", "L3", "PERF", "L4", "L6"]
Lab = Any  # tests/lab/conftest.py's Lab

# A user's configuration: the collections path and the connection settings, nothing of the
# checkout's (its ansible.cfg names plugins/, roles/ and dev_collections/).
CONFIG = """[defaults]
collections_path = {collections}
interpreter_python = auto_silent
[ssh_connection]
pipelining = true
ssh_args = -o ControlMaster=auto -o ControlPersist=120s
"""


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, env=env, cwd=cwd, timeout=1200
    )


def test_a_users_playbook_runs_the_installed_collection_by_fqcn(lab: Lab, tmp_path: Path):
    bin_dir = Path(sys.executable).parent
    work = tmp_path / "user"
    work.mkdir()
    collections = tmp_path / "collections"
    (work / "ansible.cfg").write_text(CONFIG.format(collections=collections))
    env = ansible_env(lab.name)
    env["ANSIBLE_CONFIG"] = str(work / "ansible.cfg")
    env.pop("ANSIBLE_CACHE_PLUGIN_CONNECTION", None)

    build = _run(
        [
            str(bin_dir / "ansible-galaxy"),
            "collection",
            "build",
            "--output-path",
            str(tmp_path),
            str(REPO),
        ],
        env,
        work,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = tmp_path.glob("*.tar.gz")
    install = _run(
        [
            str(bin_dir / "ansible-galaxy"),
            "collection",
            "install",
            "-p",
            str(collections),
            str(tarball),
        ],
        env,
        work,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    installed = collections / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert (installed / "roles" / "gpu_smoke").is_dir()
    assert not installed.is_symlink()

    (work / "site.yml").write_text(
        yaml.safe_dump(
            [
                {"name": "Plan", "ansible.builtin.import_playbook": f"{FQCN}.plan"},
                {
                    "name": "Driver and smoke test from the installed collection",
                    "hosts": HOST,
                    "become": True,
                    "roles": [
                        {"role": f"{FQCN}.nvidia_driver"},
                        {
                            "role": f"{FQCN}.gpu_smoke",
                            # Every layer but L5 (its torchrun needs the other launch hosts
                            # in the play): the files the install writes (the floors of PERF,
                            # the opset table of L6) stay what site.yml wrote.
                            "vars": {
                                "gpu_smoke_layers": SMOKE_LAYERS,
                                "gpu_smoke_required_layers": ["L0"],
                            },
                        },
                    ],
                },
            ],
            sort_keys=False,
        )
    )
    reports = tmp_path / "reports"
    run = _run(
        [
            str(bin_dir / "ansible-playbook"),
            "-i",
            str(lab.inventory),
            "site.yml",
            "--limit",
            HOST,
            "-e",
            f"gpuprov_report_dir={reports}",
        ],
        env,
        work,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert outcomes(recap(run.stdout))[HOST] == CONVERGED, out[-6000:]
    # The roles ran from the installed collection, the smoke install phase included.
    for task in (
        f"{FQCN}.nvidia_driver : preflight",
        f"{FQCN}.gpu_smoke : install | Install the smoke scripts, the hardware probe, the compat",
    ):
        assert f"TASK [{task}" in out, task
    # L0 ran the copied probe (gpu_probe.py beside the scripts) on the host's PCI bus.
    doc = json.loads((reports / "smoke" / f"{HOST}.json").read_text())
    layers = {v["layer"]: v for v in doc["layers"]}
    assert sorted(layers) == sorted(SMOKE_LAYERS), sorted(layers)
    assert layers["L0"]["status"] == "pass", layers["L0"]
    assert layers["L0"]["details"]["source"] == "pci", layers["L0"]
