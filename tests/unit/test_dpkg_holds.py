"""dpkg_holds against the real dpkg, on a throwaway database (--admindir): one call reads
every selection and sets only those that differ; unknown names are left out, not re-set on
every run; check mode changes nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import dpkg_holds  # plugins/modules/dpkg_holds.py (pytest's pythonpath)
import pytest
from dpkg_db import Package, make_admindir
from module_run import run_module
from task_walk import all_tasks

MODULE = Path(dpkg_holds.__file__)

pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg (Debian)")


@pytest.fixture
def admindir(tmp_path: Path) -> Path:
    return make_admindir(
        tmp_path / "dpkg",
        [Package("foo"), Package("bar", want="hold", arch="all"), Package("libqux1")],
    )


def _holds(admindir: Path, names: list[str], selection: str, check: bool = False) -> Any:
    args = {
        "names": names,
        "selection": selection,
        "admindir": str(admindir),
        "_ansible_check_mode": check,
    }
    return run_module(MODULE, args)


def _selections(admindir: Path) -> dict[str, str]:
    out = subprocess.run(
        ["dpkg", "--admindir", str(admindir), "--get-selections"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split() for line in out.splitlines())


def test_holds_only_what_differs_then_nothing(admindir: Path) -> None:
    first = _holds(admindir, ["foo", "bar", "libqux1"], "hold")
    assert first["changed"] is True
    assert first["changed_names"] == ["foo", "libqux1"]  # bar was held already
    assert first["before"] == {"foo": "install", "bar": "hold", "libqux1": "install"}
    assert _selections(admindir) == {"foo": "hold", "bar": "hold", "libqux1": "hold"}
    again = _holds(admindir, ["foo", "bar", "libqux1"], "hold")
    assert again["changed"] is False
    assert again["changed_names"] == []


def test_release(admindir: Path) -> None:
    released = _holds(admindir, ["bar", "foo"], "install")
    assert released["changed_names"] == ["bar"]
    assert _selections(admindir)["bar"] == "install"


def test_check_mode_reports_and_changes_nothing(admindir: Path) -> None:
    before = _selections(admindir)
    checked = _holds(admindir, ["foo"], "hold", check=True)
    assert checked["changed"] is True
    assert checked["diff"] == {"before": "foo install\n", "after": "foo hold\n"}
    assert _selections(admindir) == before


def test_an_unknown_name_is_left_out_and_said(admindir: Path) -> None:
    result = _holds(admindir, ["foo", "not-installed"], "hold")
    assert result["unknown"] == ["not-installed"]
    assert result["changed_names"] == ["foo"]
    assert "dpkg does not know not-installed" in json.dumps(result.get("warnings"))
    assert _holds(admindir, ["foo", "not-installed"], "hold")["changed"] is False


def test_parse_strips_the_architecture() -> None:
    out = "libqux1:amd64\t\t\thold\nfoo\t\tinstall\n"
    assert dpkg_holds.parse_selections(out) == {"libqux1": "hold", "foo": "install"}


PACKAGE_MODULES = (
    "ansible.builtin.apt",
    "ansible.builtin.dnf",
    "ansible.builtin.package",
    "ansible.builtin.dpkg_selections",
    "dpkg_holds",
)


def test_no_role_loops_a_package_task() -> None:
    """issue 19: a package task over a loop is a module run per item; every package module
    takes a list (and dpkg_holds replaced the looped dpkg_selections)."""
    import yaml

    roles = Path(__file__).resolve().parents[2] / "roles"
    looped = [
        f"{path.relative_to(roles)}: {task.get('name')}"
        for path in sorted(roles.glob("*/tasks/*.yml"))
        for task in all_tasks(yaml.safe_load(path.read_text()))
        if any(m in task for m in PACKAGE_MODULES)
        and any(k in task for k in ("loop", "with_items", "with_list"))
    ]
    assert looped == []
