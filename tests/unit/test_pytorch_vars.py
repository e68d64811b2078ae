"""The pytorch role consumes the install document as data: its computed variables rendered by
a real ansible-playbook run (localhost) for a plan from compat and for a pinned build, and a
scan that no string parsing of plan values or copy of the index URL comes back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import compat

# Their ansible-playbook, ansible-builder and pip children run no measured file (conftest.py).
pytestmark = pytest.mark.usefixtures("unmeasured_children")

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "pytorch"


def render(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    out = tmp_path / "vars.json"
    extra_vars = {"out": str(out), "ansible_python_interpreter": sys.executable, **extra}
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_FACT_CACHING": "memory",
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(ROOT / "tests" / "unit" / "playbooks" / "pytorch_vars.yml"),
            "-e",
            json.dumps(extra_vars),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rendered: dict[str, Any] = json.loads(out.read_text())
    return rendered


def test_role_installs_what_the_plan_says(tmp_path: Path) -> None:
    k40m = {"index": 0, "pci_id": "10de:1023", "name": "Tesla K40m", "compute_capability": "3.5"}
    plan = compat.plan_host([k40m], packaged_branches=[470], channel="conda")
    assert plan["ok"], plan["reasons"]
    got = render(tmp_path, gpuprov_plan=plan)
    pip = plan["install"]["pip"]
    assert got["requirements"] == pip["requirements"]
    index = ["--index-url", pip["index_url"]] if pip["index_url"] else []
    links = ["--find-links", pip["find_links"]] if pip["find_links"] else []
    assert got["pip_args"] == index + links
    assert got["conda_specs"] == [*plan["install"]["conda"]["specs"], "python=3.11"]
    assert got["cuda"] == plan["cuda"]
    assert (got["version"], got["variant"]) == (plan["torch"], plan["variant"])


def test_role_installs_a_pin_like_the_lab(tmp_path: Path) -> None:
    got = render(
        tmp_path,
        pytorch_torch_version="2.13.0",
        pytorch_variant="cpu",
        pytorch_pin_local_version=True,
        pytorch_install_companions=False,
        pytorch_find_links="/opt/wheels",
        pytorch_index_url="https://pypi.org/simple",
        pytorch_packages_extra=["numpy==2.4.6"],
    )
    assert got["requirements"] == ["torch==2.13.0+cpu", "numpy==2.4.6"]
    assert got["pip_args"] == [
        "--index-url",
        "https://pypi.org/simple",
        "--find-links",
        "/opt/wheels",
    ]
    # A CPU build: torch.version.cuda is None, and verify-python.yml compares with == (a
    # rendered "None" or "" would fail that check on every host).
    assert got["cuda"] is None
    assert got["want"] == {"torch": "2.13.0+cpu"}


def test_role_parses_no_plan_value_and_holds_no_index_url() -> None:
    plan_value = re.compile(r"_pytorch_(plan|install|pip_source|plan_image)\b|gpuprov_plan")
    for path in sorted([*ROLE.glob("tasks/*.yml"), *ROLE.glob("vars/*.yml")]):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if plan_value.search(line):
                assert not re.search(r"\bsplit\b|regex_|\[2:-1\]", line), f"{path}:{n}: {line}"
        # The index URL lives in compat/install.py only (defaults and docs may name it).
        assert "download.pytorch.org" not in path.read_text(), path


def test_a_torch_that_does_not_import_is_force_reinstalled() -> None:
    """An install cut short leaves torch's metadata and a torch that fails to import; pip's
    `present` would call that satisfied. The pip task's state, rendered from the task file."""
    import jinja2
    import yaml

    tasks = yaml.safe_load((ROLE / "tasks" / "install-pip.yml").read_text())
    (task,) = [t for t in tasks if t["name"].endswith("Install torch into the virtual environment")]
    state = jinja2.Environment(autoescape=True).from_string(task["ansible.builtin.pip"]["state"])
    assert state.render(_pytorch_mismatch=["import"]).strip() == "forcereinstall"
    assert state.render(_pytorch_mismatch=["cuda"]).strip() == "forcereinstall"
    assert state.render(_pytorch_mismatch=["torch"]).strip() == "present"
    assert state.render(_pytorch_mismatch=["venv"]).strip() == "present"
