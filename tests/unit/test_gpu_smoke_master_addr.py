"""gpu_smoke_dist_master_addr's default, rendered by Ansible: the first L5 host (its address,
else its name), and empty when no host runs L5 (an empty gpu_smoke_dist_hosts made every task
of the role fail on "no element 0" before; found by a pull run on the lab's trixie-only lab)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("source", "hosts", "expected"),
    [
        ("roles/gpu_smoke/defaults/main.yml", ["h1", "h2"], "h1"),
        ("roles/gpu_smoke/defaults/main.yml", [], ""),
        ("inventories/lab/group_vars/all/gpu_smoke.yml", [], ""),
    ],
)
def test_master_addr(tmp_path: Path, source: str, hosts: list[str], expected: str) -> None:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.minimal",
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"), "localhost",
            "-m", "ansible.builtin.debug", "-a", "var=gpu_smoke_dist_master_addr",
            "-e", f"@{ROOT / source}",
            "-e", json.dumps({"gpu_smoke_dist_hosts": hosts}),
        ],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.split("=>", 1)[1])
    assert out["gpu_smoke_dist_master_addr"] == expected
