"""One source per fact: each test fails when a copy comes back."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from task_walk import all_tasks

import compat

ROOT = Path(__file__).resolve().parents[2]


def test_debian_driver_packages_live_in_the_matrix_only() -> None:
    vars_text = (ROOT / "roles" / "nvidia_driver" / "vars" / "Debian.yml").read_text()
    # The role reads the map through the filter; no package name or branch table in the file.
    assert "gpu_compat_os_packages" in vars_text
    assert not re.search(r"\bnvidia-(tesla-\d+-)?kernel-dkms\b|\blibcuda1\b", vars_text)
    data = yaml.safe_load((ROOT / "compat" / "data" / "drivers.yaml").read_text())["debian"]
    packages = compat.debian_packages()
    assert sorted(packages) == sorted({str(r["version"]) for r in data})
    for row in data:
        got = packages[str(row["version"])][int(row["branch"])]
        assert got == {
            "kernel": row["packages"]["kernel"],
            "userspace": row["packages"]["userspace"],
        }


def test_debian_packages_match_the_archive_facts() -> None:
    # From apt-cache policy against deb.debian.org (see drivers.yaml): Kepler's 470 is
    # packaged for bookworm only; trixie has the unversioned family at 550 and tesla-535.
    packages = compat.debian_packages()
    assert sorted(packages["12"]) == [470, 535]
    assert sorted(packages["13"]) == [535, 550]
    assert packages["13"][535]["kernel"] == ["nvidia-tesla-535-kernel-dkms"]
    assert packages["12"][535]["kernel"] == packages["13"][550]["kernel"] == ["nvidia-kernel-dkms"]


def test_filter_refuses_an_unknown_os_family() -> None:
    import gpu_compat as plugin  # plugins/filter is on pytest's pythonpath
    import pytest
    from ansible.errors import AnsibleFilterError

    assert plugin.gpu_compat_os_packages("Debian") == compat.debian_packages()
    with pytest.raises(AnsibleFilterError, match="'RedHat'"):
        plugin.gpu_compat_os_packages("RedHat")


# ---------------------------------------------------------------------------
# the controller's report directory (issue 8 item 3)

REPORT_DEFAULT = re.compile(r"/\.\./reports")
# The one default, in roles/gpuprov_report; its argument spec must repeat it (test_roles.py
# checks that the specs equal the defaults), so these two files are one fact.
REPORT_DEFAULT_HOME = {
    "roles/gpuprov_report/defaults/main.yml",
    "roles/gpuprov_report/meta/argument_specs.yml",
}
# Each <kind>/<host>.json report and the file whose task writes it through the role.
REPORT_WRITERS = {
    "plan": "roles/gpuprov_report/tasks/plan.yml",  # playbooks/plan.yml includes it
    "smoke": "roles/gpu_smoke/tasks/report.yml",
    "jupyterlab": "roles/jupyterlab/tasks/verify.yml",
    "storage": "roles/object_storage/tasks/verify.yml",
    "serving": "roles/model_serving/tasks/verify.yml",
}


WRITE_CALL = {"name": "gpuprov_report", "tasks_from": "write"}


def _yaml_files() -> list[Path]:
    return sorted(
        p
        for d in ("roles", "playbooks")
        for p in (ROOT / d).rglob("*")
        if p.suffix in (".yml", ".yaml")
    )


def test_report_dir_default_lives_in_gpuprov_report_only() -> None:
    found = {
        str(p.relative_to(ROOT)) for p in _yaml_files() if REPORT_DEFAULT.search(p.read_text())
    }
    assert found == REPORT_DEFAULT_HOME, (
        f"a second copy of the report directory's default: {sorted(found - REPORT_DEFAULT_HOME)}; "
        "include roles/gpuprov_report (gpuprov_report_root, or tasks_from: write) instead"
    )
    defaults = yaml.safe_load((ROOT / "roles/gpuprov_report/defaults/main.yml").read_text())
    assert defaults == {"gpuprov_report_dir": "{{ playbook_dir ~ '/../reports' }}"}


def test_no_role_defaults_gpuprov_report_dir_itself() -> None:
    # Another spelling of a default (`gpuprov_report_dir | default(...)`) is a copy too.
    offenders = [
        str(p.relative_to(ROOT))
        for p in _yaml_files()
        if re.search(r"gpuprov_report_dir\s*\|\s*default", p.read_text())
    ]
    assert offenders == []


def test_every_host_report_is_written_through_gpuprov_report() -> None:
    for kind, rel in REPORT_WRITERS.items():
        writes = [
            t
            for t in all_tasks(yaml.safe_load((ROOT / rel).read_text()))
            if t.get("ansible.builtin.include_role") == WRITE_CALL
            and (t.get("vars") or {}).get("gpuprov_report_kind") == kind  # type: ignore[union-attr]
        ]
        assert len(writes) == 1, f"{rel}: no (or more than one) gpuprov_report write of {kind}/"
