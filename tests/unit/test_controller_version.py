"""plugins/lookup/controller_version.py: the controller's installed releases (roles/gpuprov_pull
installs the same on a pull host), read through a real ansible run of the lookup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError
from controller_version import controller_version

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

ROOT = Path(__file__).resolve().parents[2]


def pip_show_version(name: str) -> str:
    """The version pip's own record of this venv gives (not importlib.metadata, the lookup's)."""
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "show", name],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return next(
        line.split(":", 1)[1].strip()
        for line in pip.stdout.splitlines()
        if line.startswith("Version:")
    )


def test_the_installed_release_of_each_distribution() -> None:
    assert controller_version("ansible-core") == pip_show_version("ansible-core")


def test_a_missing_distribution_names_the_variable() -> None:
    with pytest.raises(
        AnsibleLookupError, match=r"no-such-dist-gpuprov is not installed.*set my_var"
    ):
        controller_version("no-such-dist-gpuprov", "my_var")


def test_the_lookup_by_its_collection_name(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-m", "ansible.builtin.debug",
            "-a", "msg={{ lookup('gpuprov.fleet.controller_version', 'ansible', 'ansible-core') }}",
        ],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wanted = [pip_show_version("ansible"), pip_show_version("ansible-core")]
    assert ",".join(wanted) in proc.stdout.replace(" ", ""), proc.stdout
