"""gpuprov_installed against the real dpkg-query, on a throwaway database (--admindir), and
its parsers on captured answers: only what was asked comes back, as a result and never as
host facts (package_facts' facts cost the controller a decode and a copy per later task)."""

from __future__ import annotations

import shutil
from pathlib import Path

import gpuprov_installed  # plugins/modules/gpuprov_installed.py (pytest's pythonpath)
import pytest
import yaml
from dpkg_db import Package, make_admindir
from module_run import run_module
from task_walk import all_tasks

MODULE = Path(gpuprov_installed.__file__)
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg-query")


@pytest.fixture
def admindir(tmp_path: Path) -> Path:
    return make_admindir(
        tmp_path / "dpkg",
        [
            Package("cuda-drivers-550", version="550.1-1"),
            Package("nvidia-open", want="hold", version="560.2-1"),
            Package("cuda-drivers", want="deinstall", state="config-files", version="1"),
            Package("docker-ce", state="half-configured", version="5:27"),
            Package("docker-ce-cli", version="5:27"),
        ],
    )


@needs_dpkg
def test_names_and_regex_select_only_installed_packages(admindir: Path) -> None:
    args = {
        "packages": ["docker-ce", "podman-docker"],
        "package_regex": "^(cuda-drivers(-[0-9]+)?|nvidia-open)$",
        "admindir": str(admindir),
    }
    result = run_module(MODULE, args)
    # cuda-drivers left only its configuration files: not installed. podman-docker: unknown.
    assert result["packages"] == {
        "cuda-drivers-550": "550.1-1",
        "docker-ce": "5:27",
        "nvidia-open": "560.2-1",
    }
    assert result["manager"] == "dpkg"
    assert result["changed"] is False
    assert "ansible_facts" not in result


def test_paths_that_exist_links_followed(tmp_path: Path) -> None:
    (tmp_path / "installer").write_text("")
    (tmp_path / "build").symlink_to(tmp_path / "headers")  # dangling until the headers come
    asked = [str(tmp_path / n) for n in ("uninstall", "installer", "build")]
    assert run_module(MODULE, {"paths": asked})["paths"] == [str(tmp_path / "installer")]
    (tmp_path / "headers").mkdir()
    assert run_module(MODULE, {"paths": asked})["paths"] == asked[1:]


@needs_dpkg
def test_nothing_asked_reads_nothing(admindir: Path) -> None:
    result = run_module(MODULE, {"admindir": str(admindir)})
    assert result["packages"] == {}
    assert result["units"] == {}
    assert result["manager"] == "none"


def test_a_bad_regex_is_named() -> None:
    result = run_module(MODULE, {"package_regex": "^(nvidia"})
    assert result["failed"] is True
    assert "package_regex '^(nvidia'" in result["msg"]


def test_dpkg_lines_keep_the_first_architecture_and_drop_absent_states() -> None:
    out = (
        "libfoo\t1.0\tii \n"
        "libfoo\t1.0\tii \n"  # the same package for a second architecture
        "gone\t2\trc \n"
        "never\t\tun \n"
        "held\t3\thi \n"
        "broken line\n"
    )
    assert gpuprov_installed.parse_dpkg(out) == {"libfoo": "1.0", "held": "3"}


def test_rpm_lines() -> None:
    out = "nvidia-container-toolkit\t1.17.8-1\ndocker-ce\t27.5.1-1.el9\n\n"
    assert gpuprov_installed.parse_rpm(out) == {
        "nvidia-container-toolkit": "1.17.8-1",
        "docker-ce": "27.5.1-1.el9",
    }


def test_units_are_answered_under_the_names_asked() -> None:
    out = (
        "LoadState=loaded\nSubState=running\n\n"
        "LoadState=not-found\nSubState=dead\n\n"
        "LoadState=loaded\nSubState=dead\n"
    )
    units = ["docker.service", "crio.service", "containerd.service"]
    assert gpuprov_installed.parse_units(units, out) == {
        "docker.service": "running",
        "containerd.service": "dead",
    }
    with pytest.raises(ValueError, match="2 blocks for 3 units"):
        gpuprov_installed.parse_units(units, "LoadState=loaded\n\nLoadState=loaded\n")


FACT_MODULES = (
    "ansible.builtin.package_facts",
    "ansible.builtin.service_facts",
    "package_facts",
    "service_facts",
)


def test_no_role_or_playbook_sets_package_or_service_facts() -> None:
    """Every package and unit of a host as facts: decoded and copied for each later task of
    the host (the 4-host no-op spent half of ansible-playbook's CPU there)."""
    repo = Path(__file__).resolve().parents[2]
    files = sorted(repo.glob("roles/*/tasks/*.yml")) + sorted(repo.glob("roles/*/handlers/*.yml"))
    files += sorted(repo.glob("playbooks/*.yml"))
    used = [
        f"{path.relative_to(repo)}: {task.get('name')}"
        for path in files
        for task in all_tasks(yaml.safe_load(path.read_text()))
        if any(m in task for m in FACT_MODULES)
    ]
    assert files
    assert used == []


@pytest.mark.skipif(shutil.which("rpm") is not None, reason="rpm would answer instead")
def test_a_failed_read_leaves_the_packages_out(tmp_path: Path) -> None:
    """No dpkg database there and no rpm: failed, and no `packages` that would read as "none
    installed" to a caller that tolerates the failure (gpu_smoke's report)."""
    result = run_module(MODULE, {"packages": ["nvidia-smi"], "admindir": str(tmp_path)})
    assert result["failed"] is True
    assert result["msg"] == (
        f"cannot read the packages: neither dpkg-query with a package database ({tmp_path}"
        "/status, listing packages) nor rpm on this host's PATH"
    )
    assert "packages" not in result
