"""scripts/report.py: the fleet report from the plan and smoke JSON files.

The inputs are JSON documents shaped like what playbooks/plan.yml and playbooks/smoke.yml
write (written here into a temporary reports directory); nothing else is faked.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

report = importlib.import_module("report")  # scripts/ is on pytest's pythonpath

PLAN = {
    "host": "gpu1",
    "gpu_info": {
        "driver_version": "470.256.02",
        "gpus": [{"name": "Tesla K40m", "pci_id": "10de:1023"}],
    },
    "plan": {"ok": True, "torch": "1.2.0", "variant": "cu100", "driver": {"branch": 470}},
}


def verdict(layer, status, reason="", **details):
    return {"layer": layer, "status": status, "reason": reason, "hint": None, "details": details}


SMOKE_OK = {
    "host": "gpu1",
    "ok": True,
    "required": ["L0", "L5"],
    "not_passed": [],
    "layers": [
        verdict("L0", "pass"),
        verdict("L1", "skipped", "no NVIDIA device on this host"),
        verdict("L3", "fail", "CPU-only build", torch="2.13.0+cpu"),
        verdict("L5", "pass", torch="2.13.0+cpu"),
    ],
}
SMOKE_BAD = {
    "host": "cpu1",
    "ok": False,
    "required": ["L0", "L4"],
    "not_passed": [{"layer": "L4", "status": "skipped", "reason": "no NVIDIA device"}],
    "layers": [verdict("L0", "pass", gpus=[]), verdict("L4", "skipped", "no NVIDIA device")],
}


def write(root: Path, kind: str, doc: dict) -> None:
    (root / kind).mkdir(parents=True, exist_ok=True)
    (root / kind / f"{doc['host']}.json").write_text(json.dumps(doc))


@pytest.fixture
def reports(tmp_path):
    write(tmp_path, "plan", PLAN)
    write(tmp_path, "smoke", SMOKE_OK)
    write(tmp_path, "smoke", SMOKE_BAD)
    return tmp_path


def test_host_rows(reports):
    fleet = report.build(reports)
    rows = {r["host"]: r for r in fleet["hosts"]}
    gpu1 = rows["gpu1"]
    assert gpu1["gpus"] == "1x Tesla K40m"
    assert gpu1["planned_torch"] == "1.2.0+cu100"
    assert gpu1["installed_torch"] == "2.13.0+cpu"
    assert gpu1["driver"] == "470.256.02"
    assert gpu1["layers"]["L3"]["status"] == "fail"
    assert rows["cpu1"]["gpus"] == "-"
    assert fleet["summary"] == {"hosts": 2, "ok": 1, "failed": ["cpu1"], "not_smoked": []}


def test_main_writes_json_md_html_and_fails_on_a_bad_host(reports, capsys):
    assert report.main(["--reports", str(reports), "--html"]) == 1
    out = capsys.readouterr().out
    assert "1/2 hosts ok" in out
    header = out.splitlines()[0].split()
    assert header[:3] == ["host", "gpus", "driver"]
    md = (reports / "fleet.md").read_text()
    assert (
        "| gpu1 | 1x Tesla K40m | 470.256.02 | 1.2.0+cu100 | 2.13.0+cpu | pass | skip | - |" in md
    )
    assert "- **cpu1** L4 skipped: no NVIDIA device" in md
    assert "<table" in (reports / "fleet.html").read_text()
    assert json.loads((reports / "fleet.json").read_text())["summary"]["ok"] == 1


def test_all_ok_exits_zero(tmp_path, capsys):
    write(tmp_path, "smoke", SMOKE_OK)
    assert report.main(["--reports", str(tmp_path), "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_a_planned_host_without_verdicts_is_not_ok(tmp_path):
    write(tmp_path, "plan", PLAN)
    fleet = report.build(tmp_path)
    assert fleet["summary"]["not_smoked"] == ["gpu1"]
    assert report.main(["--reports", str(tmp_path), "--quiet"]) == 1


def test_no_reports_is_a_usage_error(tmp_path, capsys):
    assert report.main(["--reports", str(tmp_path)]) == 2
    assert "no reports under" in capsys.readouterr().err


def test_broken_json_is_named(tmp_path):
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "x.json").write_text("{")
    with pytest.raises(report.ReportError, match=r"x.json: not JSON"):
        report.build(tmp_path)
