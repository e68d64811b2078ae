"""scripts/report.py's serving section (reports/serving/<host>.json of roles/model_serving)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report  # scripts/report.py, the tool under test (pythonpath)

DOC = {
    "host": "lab-cpu",
    "export": {"layer": "L6", "status": "pass (cpu)"},
    "endpoints": [
        {
            "stack": "flask",
            "endpoint": "http://127.0.0.1:5000",
            "health": "ready",
            "inference": {"ok": True},
            "latency": {"requests": 20, "median_ms": 3.25},
        },
        {
            "stack": "triton",
            "endpoint": "http://127.0.0.1:8000",
            "ok": False,
            "health": "not ready",
            "error": "TimeoutError: not ready after 180s",
        },
    ],
}


def test_serving_rows_and_table(tmp_path: Path) -> None:
    (tmp_path / "serving").mkdir()
    (tmp_path / "serving" / "lab-cpu.json").write_text(json.dumps(DOC))
    rows = report.serving_rows(tmp_path / "serving")
    assert [(r["stack"], r["health"], r["inference"], r["median_ms"]) for r in rows] == [
        ("flask", "ready", "ok", 3.25),
        ("triton", "not ready", "FAIL", None),
    ]
    assert rows[1]["error"] == "TimeoutError: not ready after 180s"
    text = report.render_serving(rows)
    assert (
        "lab-cpu  pass (cpu)   flask   http://127.0.0.1:5000  ready      ok         3.25 (n=20)"
        in text
    )
    assert report.serving_rows(tmp_path / "missing") == []


def test_main_prints_the_serving_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "lab-cpu.json").write_text(
        json.dumps({"host": "lab-cpu", "ok": True, "required": [], "not_passed": [], "layers": []})
    )
    (tmp_path / "serving").mkdir()
    (tmp_path / "serving" / "lab-cpu.json").write_text(json.dumps(DOC))
    assert report.main(["--reports", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\nServing\nhost     export (L6)" in out
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert len(fleet["serving"]) == 2
