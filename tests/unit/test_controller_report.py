"""plugins/lookup/controller_report.py: gpu_monitoring reads each host's smoke report
on the controller in the controller's own process (before, a delegated stat loop and a file
lookup: two module runs per host on every run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError
from controller_report import controller_report  # plugins/lookup (pytest's pythonpath)


def test_a_report_with_its_time_and_content(tmp_path: Path) -> None:
    report = tmp_path / "smoke" / "h1.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"ok": True, "layers": [{"layer": "L0", "status": "pass"}]}))
    os.utime(report, (1_700_000_000, 1_700_000_123.5))
    assert controller_report(str(report)) == {
        "exists": True,
        "mtime": 1_700_000_123.5,
        "data": {"ok": True, "layers": [{"layer": "L0", "status": "pass"}]},
    }


def test_an_absent_report(tmp_path: Path) -> None:
    assert controller_report(str(tmp_path / "plan" / "h9.json")) == {
        "exists": False,
        "mtime": None,
        "data": None,
    }


def test_a_broken_report_is_named(tmp_path: Path) -> None:
    report = tmp_path / "h1.json"
    report.write_text("{not json")
    with pytest.raises(AnsibleLookupError, match=f"controller_report: {report} is not JSON"):
        controller_report(str(report))
    with pytest.raises(AnsibleLookupError, match="cannot read"):
        controller_report(str(tmp_path))  # a directory


def test_gpu_monitoring_reads_the_reports_without_a_module_run() -> None:
    """The smoke report in gpu_monitoring's preflight. The plan entry point it includes when
    its playbook runs alone (roles/gpuprov_report, plan) reads no report: it plans."""
    root = Path(__file__).resolve().parents[2]
    preflight = (root / "roles/gpu_monitoring/tasks/preflight.yml").read_text(encoding="utf-8")
    assert preflight.count("gpuprov.fleet.controller_report") == 1
    assert "tasks_from: plan" in preflight
    loader = (root / "roles/gpuprov_report/tasks/plan.yml").read_text(encoding="utf-8")
    assert "gpuprov.fleet.controller_report" not in loader
    for text in (preflight, loader):
        assert "delegate_to: localhost" not in text
