"""scripts/report.py: the fleet report from the plan and smoke JSON files.

The inputs are JSON documents shaped like what playbooks/plan.yml and playbooks/smoke.yml
write (written here into a temporary reports directory); nothing else is faked.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest
import report  # scripts/report.py (scripts/ is on pytest's pythonpath)
from smoke_modules import smoke

from compat import cli

sl = smoke("smokelib")
l1_driver = smoke("l1_driver")
l3_cuda = smoke("l3_cuda")

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
    assert fleet["summary"] == {
        "hosts": 2,
        "ok": 1,
        "failed": ["cpu1"],
        "not_smoked": [],
        "why": {"cpu1": "L4 skipped: no NVIDIA device"},
        "ignored": [],
    }
    assert fleet["required"] == {"L0": ["cpu1", "gpu1"], "L4": ["cpu1"], "L5": ["gpu1"]}


def test_main_writes_json_md_html_and_fails_on_a_bad_host(reports, capsys):
    assert report.main(["--reports", str(reports), "--html"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "1/2 hosts passed their required layers; did not: cpu1 (L4 skipped: no NVIDIA device)"
    )
    assert out[1] == "required layers: L0 on every host; L4 on cpu1; L5 on gpu1"
    header = out[3].split()
    assert header[:6] == ["host", "gpus", "driver", "plan", "torch", "installed"]
    md = (reports / "fleet.md").read_text()
    assert (
        "| gpu1 | 1x Tesla K40m | 470.256.02 | 1.2.0+cu100 | 2.13.0+cpu | L0,L5 | pass* | skip |"
        in md
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


def test_a_python_without_compat_is_told_which_python_to_use(tmp_path, capsys, monkeypatch):
    """`python3 scripts/report.py` with Debian's Python: one line, not a traceback from the
    hint check deep in build()."""
    write(tmp_path, "plan", PLAN)
    real = report.importlib.util.find_spec
    monkeypatch.setattr(
        report.importlib.util, "find_spec", lambda n, *a: None if n == "compat" else real(n, *a)
    )
    assert report.main(["--reports", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("report.py: the compat package is not installed for ")
    assert "`make report`, or .venv/bin/python scripts/report.py" in err


def test_broken_json_is_named(tmp_path):
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "x.json").write_text("{")
    with pytest.raises(report.ReportError, match=r"x.json: not JSON"):
        report.build(tmp_path)


def smoke_doc(host, installed, expected="", reason="", driver=None):
    doc = {
        "host": host,
        "ok": True,
        "required": ["L0"],
        "not_passed": [],
        "layers": [verdict("L0", "pass"), verdict("L4", "pass (cpu)", torch=installed)],
        "torch_expected": {"torch": expected, "reason": reason},
    }
    if driver is not None:
        doc["driver"] = driver
    return doc


def test_a_declared_torch_difference_is_a_note_an_undeclared_one_a_warning(tmp_path):
    write(tmp_path, "plan", PLAN)
    write(tmp_path, "smoke", smoke_doc("gpu1", "2.13.0+cpu", "2.13.0+cpu", "simulated GPUs"))
    row = report.build(tmp_path)["hosts"][0]
    assert row["notes"] == [
        "gpu1: torch 2.13.0+cpu instead of the plan's 1.2.0+cu100, on purpose: simulated GPUs"
    ]
    assert row["warnings"] == []
    write(tmp_path, "smoke", smoke_doc("gpu1", "2.13.0+cpu"))
    row = report.build(tmp_path)["hosts"][0]
    assert row["notes"] == []
    assert row["warnings"] == [
        "gpu1: installed torch 2.13.0+cpu is not the plan's 1.2.0+cu100; re-run site.yml, "
        "or declare the intent with gpu_smoke_expected_torch"
    ]


@pytest.mark.parametrize(
    ("running", "driver", "shown"),
    [
        ("535.247.01", {"packages": {"nvidia-smi": "535.247.01-1~deb12u1"}}, "535.247.01"),
        (
            None,
            {
                "packages": {
                    "libnvidia-tesla-470-ml1": "470.256.02-1~deb12u1",
                    "nvidia-tesla-470-smi": "470.256.02-2~deb12u1",
                },
                "kernel_module": False,
            },
            "470.256.02 (userspace only: no kernel module)",
        ),
        (None, {"packages": {"nvidia-smi": "1:550.163.01-2"}, "kernel_module": True}, "550.163.01"),
        (None, {"packages": {}, "kernel_module": False}, None),
        (None, None, None),
        (
            None,
            {"packages": {}, "packages_unread": "Could not detect a supported package manager"},
            "unknown (the host's packages could not be read: see its smoke report)",
        ),
        ("580.159.04", {"packages": {}, "packages_unread": "no manager"}, "580.159.04"),
    ],
    ids=[
        "running-driver-wins",
        "lab-userspace-only",
        "epoch-stripped",
        "none",
        "old-report",
        "packages-unread",
        "running-driver-despite-unread",
    ],
)
def test_installed_driver(running, driver, shown):
    assert report.installed_driver(running, driver) == shown


def test_only_hosts_of_the_inventory_are_current(tmp_path, capsys):
    write(tmp_path, "smoke", SMOKE_OK)
    write(tmp_path, "smoke", {**SMOKE_BAD, "host": "old-host"})
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        textwrap.dedent(
            """\
            all:
              children:
                gpu_nodes:
                  hosts:
                    gpu1:
                    gpu2:
            """
        )
    )
    assert report.main(["--reports", str(tmp_path), "--inventory", str(inventory)]) == 1
    out = capsys.readouterr().out
    assert "old-host" not in out.split("ignored:")[0]
    assert "ignored: reports of 1 host(s) not in the inventory (old-host)" in out
    assert "gpu2 (no smoke verdicts (playbooks/smoke.yml did not run on it))" in out
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert [r["host"] for r in fleet["hosts"]] == ["gpu1", "gpu2"]


def test_unknown_hints_are_not_shown(tmp_path):
    doc = {
        **SMOKE_BAD,
        "layers": [
            {**verdict("L0", "fail", "x"), "hint": "gpu-compat explain 'hello world'"},
            {**verdict("L3", "fail", "z"), "hint": "run the pytorch role on this host"},
            {**verdict("L4", "fail", "y"), "hint": sl.explain_hint(l3_cuda.NO_KERNEL)},
        ],
    }
    write(tmp_path, "smoke", doc)
    layers = report.build(tmp_path)["hosts"][0]["layers"]
    assert layers["L0"]["hint"] is None
    assert layers["L3"]["hint"] == "run the pytorch role on this host"  # advice, not a command
    assert layers["L4"]["hint"] == (
        "gpu-compat explain 'no kernel image is available for execution on the device'"
    )


# Every hint the smoke scripts build from a fixed text (the dynamic ones quote a runtime
# error, which `explain` may or may not know; the report shows only those it knows).
SMOKE_HINTS = [
    sl.explain_hint(l1_driver.NO_DRIVER_ERROR),
    sl.explain_hint(l3_cuda.NO_KERNEL),
    sl.explain_hint(l3_cuda.CPU_BUILD),
    sl.explain_hint("Found no NVIDIA driver on your system"),
    l3_cuda._measured_hint([{"name": "Tesla K40m"}, {"name": "Tesla M40"}]),
]


@pytest.mark.parametrize(
    "hint",
    SMOKE_HINTS,
    ids=["l1-no-driver", "l3-no-kernel", "l3-cpu-build", "l3-no-driver", "l3-measured"],
)
def test_every_smoke_hint_is_a_command_explain_recognises(hint, capsys):
    commands = [shlex.split(c) for c in hint.split("; ")]
    assert all(c[0] == "gpu-compat" for c in commands)
    for argv in commands:
        assert cli.main(argv[1:]) == 0, capsys.readouterr().out
    assert report.hint_runs(hint)


def test_the_l1_hint_keeps_the_apostrophe():
    hint = sl.explain_hint(l1_driver.NO_DRIVER_ERROR)
    assert shlex.split(hint)[2] == l1_driver.NO_DRIVER_ERROR


def test_every_layer_the_smoke_run_reports_is_shown_and_required_ones_named(tmp_path, capsys):
    """make lab printed "required L0,L5,L6" in a host's row while neither the required-layers
    line nor the table had L6: the layers the smoke scripts emit, all of them, are columns."""
    doc = {
        **SMOKE_OK,
        "required": ["L0", "L5", "L6"],
        "layers": [*SMOKE_OK["layers"], verdict("L6", "pass (cpu)")],
    }
    write(tmp_path, "smoke", doc)
    fleet = report.build(tmp_path)
    assert report.required_line(fleet).endswith("; L6 on every host")
    (row,) = fleet["hosts"]
    assert set(row["layers"]) == {"L0", "L1", "L3", "L5", "L6"}
    run_all = smoke("run_all")
    assert set(report.LAYERS) == set(run_all.SCRIPTS), "a layer the smoke run emits is not shown"


def test_a_run_that_cannot_report_leaves_no_older_report_looking_current(reports, capsys):
    """A good run, then a report cut short: the fleet.* of the good run would still say what
    it said (1/2 passed) about inputs that changed since. They are removed, and it says so."""
    assert report.main(["--reports", str(reports), "--html", "--quiet"]) == 1
    assert {p.name for p in reports.glob("fleet.*")} == {"fleet.json", "fleet.md", "fleet.html"}
    (reports / "smoke" / "cpu1.json").write_text('{"host": "cpu1", "layers": [')
    assert report.main(["--reports", str(reports), "--html"]) == 2
    err = capsys.readouterr().err
    assert "cpu1.json: not JSON" in err
    assert "removed fleet.json, fleet.md, fleet.html of an earlier run" in err
    assert list(reports.glob("fleet.*")) == []


def test_no_reports_leaves_only_the_page_that_says_so(reports, capsys):
    assert report.main(["--reports", str(reports), "--html", "--quiet"]) == 1
    for kind in ("plan", "smoke"):
        for f in (reports / kind).iterdir():
            f.unlink()
    assert report.main(["--reports", str(reports), "--html"]) == 2
    assert "removed fleet.json, fleet.md of an earlier run" in capsys.readouterr().err
    assert [p.name for p in reports.glob("fleet.*")] == ["fleet.html"]
    assert "no reports under" in (reports / "fleet.html").read_text()


def test_a_report_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "x.json").write_bytes(b'{"host": "\xff"}')
    with pytest.raises(report.ReportError, match=r"x.json: not UTF-8 text"):
        report.build(tmp_path)


def test_two_reports_of_one_host_are_refused_naming_both(reports):
    """An older run's copy beside the current report: which one is current is unknown, so
    neither is taken silently."""
    old = reports / "smoke" / "cpu1.prev.json"
    old.write_text(json.dumps({**SMOKE_BAD, "ok": True, "not_passed": []}))
    with pytest.raises(report.ReportError) as exc:
        report.build(reports)
    assert str(exc.value) == (
        f"{reports / 'smoke' / 'cpu1.json'} and {old} are both reports of host cpu1: remove the"
        " one that is not current"
    )


def test_the_driver_shown_is_what_the_smoke_run_saw_not_the_plans_earlier_scan(tmp_path):
    """site.yml plans before the driver play: after an upgrade the plan's scan names the old
    driver; L1, run after it, the new one."""
    write(tmp_path, "plan", PLAN)  # its scan: 470.256.02
    smoke_run = {
        **SMOKE_OK,
        "layers": [
            verdict("L0", "pass"),
            verdict("L1", "pass", driver_version="470.256.03"),
            verdict("L5", "pass"),
        ],
    }
    write(tmp_path, "smoke", smoke_run)
    assert report.build(tmp_path)["hosts"][0]["driver"] == "470.256.03"
    write(tmp_path, "smoke", {**smoke_run, "layers": [verdict("L0", "pass")]})
    assert report.build(tmp_path)["hosts"][0]["driver"] == "470.256.02"


def test_a_required_layer_that_did_not_pass_reads_as_a_failure_in_fleet_md(tmp_path, capsys):
    """pass (cpu) without gpu_smoke_allow_cpu, and a skipped required layer: both fail the
    host (not_passed); the page says FAIL, and so must fleet.md and the printed table."""
    write(
        tmp_path,
        "smoke",
        {
            "host": "gpu1",
            "ok": False,
            "required": ["L0", "L4", "L5"],
            "not_passed": [
                {"layer": "L4", "status": "pass (cpu)", "reason": "on the CPU"},
                {"layer": "L5", "status": "skipped", "reason": "no peers"},
            ],
            "layers": [
                verdict("L0", "pass"),
                verdict("L4", "pass (cpu)", "on the CPU"),
                verdict("L5", "skipped", "no peers"),
            ],
        },
    )
    assert report.main(["--reports", str(tmp_path)]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("gpu1"))
    # L0, L1, L2, L3, PERF, L4, L5, L6, ok
    assert row.split()[-9:] == ["pass*", "-", "-", "-", "-", "FAIL:cpu*", "FAIL:skip*", "-", "NO"]
    md = (tmp_path / "fleet.md").read_text()
    assert "| FAIL:cpu* | FAIL:skip* | - | NO |" in md
    assert "FAIL:cpu, FAIL:skip = a required layer that did not pass" in md


@pytest.mark.parametrize(
    ("kind", "doc", "message"),
    [
        ("smoke", {"host": "h1", "layers": [None]}, "layers must be a list of JSON objects"),
        ("smoke", {"host": "h1", "layers": "L0 pass"}, "layers must be a list of JSON objects"),
        (
            "serving",
            {"host": "h1", "endpoints": [{"latency": {"median_ms": "3.2"}}]},
            "latency.median_ms must be a number, not '3.2'",
        ),
    ],
    ids=["null-layer", "string-layers", "string-latency"],
)
def test_a_report_of_another_shape_is_named_not_a_traceback(
    reports, capsys, kind: str, doc: dict, message: str
) -> None:
    """Exit 1 means "a host failed": a report edited by hand must not end in a traceback
    (exit 1) but in exit 2, naming the file and what is wrong."""
    write(reports, kind, doc)
    assert report.main(["--reports", str(reports)]) == 2
    assert f"{reports / kind / 'h1.json'}: {message}" in capsys.readouterr().err


def test_a_failed_storage_profile_without_a_reason_is_shown(tmp_path) -> None:
    write(tmp_path, "smoke", SMOKE_OK)
    write(tmp_path, "storage", {"host": "gpu1", "profiles": [{"profile": "s3", "verdict": "fail"}]})
    rows = report.environment_rows(tmp_path, ["gpu1"])
    assert rows[0]["storage_reasons"] == ["no reason given"]


def inventory_of(tmp_path: Path, *hosts: str) -> Path:
    inventory = tmp_path / "hosts.yml"
    lines = ["all:", "  hosts:", *(f"    {h}:" for h in hosts)]
    inventory.write_text("\n".join(lines) + "\n")
    return inventory


def test_reports_of_hosts_outside_the_inventory_refuse_nothing(tmp_path, capsys):
    """--inventory ignores other hosts: two copies of an old host's report, or one of another
    shape, neither stop the report of the inventory's hosts nor remove it."""
    write(tmp_path, "smoke", SMOKE_OK)
    write(tmp_path, "smoke", {"host": "old", "layers": "not a list"})
    (tmp_path / "smoke" / "old.bak.json").write_text(json.dumps({"host": "old"}))
    inventory = inventory_of(tmp_path, "gpu1")
    assert report.main(["--reports", str(tmp_path), "--inventory", str(inventory)]) == 0
    assert "ignored: reports of 1 host(s) not in the inventory (old)" in capsys.readouterr().out
    assert (tmp_path / "fleet.json").is_file()


def test_an_inventory_that_cannot_be_read_keeps_the_last_report(reports, capsys):
    """A mistyped --inventory says nothing of the reports: the last report stays."""
    assert report.main(["--reports", str(reports), "--quiet"]) == 1
    missing = reports / "hosts.ym"
    assert report.main(["--reports", str(reports), "--inventory", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "removed" not in err
    assert {p.name for p in reports.glob("fleet.*")} == {"fleet.json", "fleet.md"}
