"""One licence: Apache-2.0 in LICENSE, pyproject.toml, every role's meta and README, and every
plugin file (Ansible module_utils.basic is BSD-2-Clause and Apache-2.0 is GPLv3-compatible,
so nothing here has to be GPL)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta" / "main.yml").exists())


def test_licence_file_and_package_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == (
        "Apache-2.0"
    )


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_role_says_apache(role: Path) -> None:
    meta = yaml.safe_load((role / "meta" / "main.yml").read_text())
    assert meta["galaxy_info"]["license"] == "Apache-2.0"
    readme = (role / "README.md").read_text()
    assert readme.split("## License", 1)[1].split()[0] == "Apache-2.0"


@pytest.mark.parametrize("path", sorted((ROOT / "plugins").rglob("*.py")), ids=lambda p: p.name)
def test_every_plugin_file_carries_the_spdx_header(path: Path) -> None:
    head = path.read_text().splitlines()[:3]
    assert "# SPDX-License-Identifier: Apache-2.0" in head, path


def test_no_other_licence_is_named_anywhere() -> None:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        path = ROOT / name
        if name == "LICENSE" or not path.is_file() or name.startswith("tests/unit/test_licence"):
            continue
        text = path.read_text(errors="ignore")
        assert "GPL" not in text, name
        assert "General Public License" not in text, name
