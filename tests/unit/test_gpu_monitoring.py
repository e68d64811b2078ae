"""The gpu_monitoring role's Python: the textfile collector and the role's filters.

Simulated, because this machine has no GPU: nvidia-smi's CSV answers (hand-written lines in
the format `--format=csv,noheader,nounits` prints, with the "[N/A]"/"[Not Supported]" an R470
Kepler board gives) and the PCI tree (sysfs-shaped files). The collector runs as a real
process here, without nvidia-smi and without a driver, as on the lab's hosts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gpu_monitoring as flt  # plugins/filter/gpu_monitoring.py
import gpu_probe  # plugins/module_utils/gpu_probe.py
import gpuprov_gpu_metrics as col  # roles/gpu_monitoring/files/gpuprov_gpu_metrics.py
import pytest
import yaml
from pci_tree import write_pci

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "gpu_monitoring"
COLLECTOR = ROLE / "files" / "gpuprov_gpu_metrics.py"


# index, uuid, name, bus, driver, util, mem util, mem total, mem used, temp, power, limit,
# sm clock, mem clock, ecc corrected, ecc uncorrected
A100 = (
    "0, GPU-aa, A100-SXM4-40GB, 00000000:3B:00.0, 550.54.15, "
    "87, 40, 40960, 1024, 61, 250.5, 400.00, 1410, 1215, 0, 2"
)
K40M = (
    "1, GPU-kk, Tesla K40m, 00000000:86:00.0, 470.256.02, "
    "3, 0, 11441, 0, 34, [N/A], [Not Supported], 324, 324, [N/A], [N/A]"
)


def test_smi_rows_keep_numbers_and_drop_what_the_gpu_does_not_report() -> None:
    rows = col.parse_smi(f"{A100}\n{K40M}\nnot, a, row\n")
    assert [r["name"] for r in rows] == ["A100-SXM4-40GB", "Tesla K40m"]
    assert rows[0]["utilization.gpu"] == 87.0
    assert rows[0]["ecc.errors.uncorrected.volatile.total"] == 2.0
    assert rows[1]["power.draw"] is None
    assert rows[1]["ecc.errors.corrected.volatile.total"] is None


def test_gpu_metrics_are_in_base_units_and_leave_out_unreported_values() -> None:
    m = col.Metrics()
    col.gpu_metrics(m, col.parse_smi(f"{A100}\n{K40M}"), {("0000:3b:00.0", "79"): 2})
    text = m.text()
    a100 = 'gpu="0",uuid="GPU-aa",name="A100-SXM4-40GB",bus_id="0000:3b:00.0"'
    assert f"gpuprov_gpu_utilization_ratio{{{a100}}} 0.87" in text
    assert f"gpuprov_gpu_memory_used_bytes{{{a100}}} 1073741824" in text
    assert f"gpuprov_gpu_sm_clock_hertz{{{a100}}} 1410000000" in text
    assert f"gpuprov_gpu_power_draw_watts{{{a100}}} 250.5" in text
    assert f"gpuprov_gpu_ecc_uncorrected_errors{{{a100}}} 2" in text
    assert 'gpuprov_gpu_power_draw_watts{gpu="1"' not in text  # [N/A], not 0
    assert 'gpuprov_gpu_ecc_corrected_errors{gpu="1"' not in text
    assert 'gpuprov_gpu_xid_errors{bus_id="0000:3b:00.0",xid="79"} 2' in text
    assert text.count("# TYPE gpuprov_gpu_temperature_celsius gauge") == 1


def test_xid_lines_are_counted_per_gpu_and_code() -> None:
    log = (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "NVRM: Xid (PCI:0000:86:00): 13, Graphics SM Warp Exception\n"
    )
    assert col.parse_xid(log) == {("0000:3b:00", "79"): 2, ("0000:86:00", "13"): 1}


@pytest.mark.parametrize(
    ("bus", "sysfs"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),  # nvidia-smi
        ("0000:3B:00", "0000:3b:00"),  # a kernel log's Xid line
        ("3b:00.0", "0000:3b:00.0"),  # no domain
        ("0000:86:00.0", "0000:86:00.0"),  # sysfs already
    ],
)
def test_bus_ids_are_spelled_as_sysfs_does(bus: str, sysfs: str) -> None:
    assert gpu_probe.normalize_bus_id(bus) == sysfs


def test_the_collector_reads_gpus_through_gpu_probe_only() -> None:
    """One source per fact (issue 22): the nvidia-smi query and its parsing, bus IDs and the
    PCI scan are gpu_probe's, which the role installs beside the collector."""
    source = COLLECTOR.read_text()
    assert "import gpu_probe" in source
    for copy in ("bus/pci/devices", '"bus", "pci"', "0x10de", "0x0302", "Not Supported", "[N/A]"):
        assert copy not in source, copy
    for gone in ("normalize_bus", "pci_gpus", "NVIDIA_VENDOR", "GPU_CLASSES", "run"):
        assert not hasattr(col, gone), gone
    install = (ROLE / "tasks" / "configure.yml").read_text()
    assert "payload: probe" in install
    assert "gpu_probe.py" in install


def test_stack_match_compares_plan_and_installed() -> None:
    plan = {"driver_branch": 470, "cuda": None, "torch": "2.13.0", "variant": "cpu"}
    have = {"driver": None, "cuda": None, "torch": "2.13.0+cpu"}
    assert col.stack_match(plan, have) == {"driver": 0, "torch": 1, "cuda": 1}
    cuda_plan = {"driver_branch": "550", "cuda": "12.4", "torch": "2.5.1"}
    have_cuda = {"driver": "550.54.15", "cuda": "12.1", "torch": "2.5.1+cu121"}
    assert col.stack_match(cuda_plan, have_cuda) == {"driver": 1, "torch": 1, "cuda": 0}
    assert col.stack_match({}, have) == {"driver": None, "torch": None, "cuda": None}


def test_facts_document_reads_only_the_plan_fields_it_needs() -> None:
    plan = {
        "torch": "2.13.0",
        "variant": "cpu",
        "cuda": None,
        "driver": {"branch": 470, "min_version": "450"},
        "ok": True,
        "reasons": ["..."],
    }
    smoke = {
        "ok": False,
        "layers": [
            {"layer": "L0", "status": "pass", "reason": "x"},
            {"layer": "L1", "status": "fail"},
        ],
    }
    doc = flt.gpu_monitoring_facts(plan, smoke)
    assert doc == {
        "plan": {
            "driver_branch": 470,
            "cuda": None,
            "torch": "2.13.0",
            "variant": "cpu",
            "ok": True,
        },
        "smoke": {
            "ok": False,
            "layers": [{"layer": "L0", "status": "pass"}, {"layer": "L1", "status": "fail"}],
        },
    }
    assert flt.gpu_monitoring_facts(None, None) == {"plan": {}, "smoke": {}}


def test_facts_hold_no_time_so_a_rerun_with_the_same_verdicts_rewrites_nothing() -> None:
    """The smoke report on the controller is rewritten (a new time) at every run; the facts
    document is the same while the plan and the verdicts are, so the file is not rewritten and
    its modification time is when they last changed (what the collector reports)."""
    plan = {"torch": "2.13.0", "variant": "cpu", "ok": True, "driver": {"branch": 470}}
    smoke = {
        "ok": True,
        "time": "2026-12-06T03:00:00Z",
        "layers": [{"layer": "L0", "status": "pass"}],
    }
    later = {**smoke, "time": "2026-12-06T04:00:00Z"}
    first = flt.gpu_monitoring_facts(plan, smoke)
    assert flt.gpu_monitoring_facts(plan, later) == first
    failed = {"ok": False, "layers": [{"layer": "L0", "status": "fail"}]}
    assert flt.gpu_monitoring_facts(plan, failed) != first
    assert flt.gpu_monitoring_facts({**plan, "torch": "2.12.0"}, smoke) != first


def test_scrape_config_has_one_target_per_host() -> None:
    cfg = flt.gpu_monitoring_scrape_config(
        [
            {"name": "a", "address": "10.0.0.1", "port": "9100"},
            {"name": "b", "address": "10.0.0.2", "port": 9100},
        ],
        "gpuprov",
    )
    text = yaml.safe_dump(cfg)
    again = yaml.safe_load(text)["scrape_configs"][0]
    assert again["job_name"] == "gpuprov"
    assert again["static_configs"] == [
        {"targets": ["10.0.0.1:9100"], "labels": {"host": "a"}},
        {"targets": ["10.0.0.2:9100"], "labels": {"host": "b"}},
    ]
    with pytest.raises(Exception, match="no hosts to scrape"):
        flt.gpu_monitoring_scrape_config([])


def test_dcgm_tag_follows_the_branch_and_names_a_missing_one() -> None:
    tags = {550: "t550", "570": "t570"}
    assert flt.gpu_monitoring_dcgm_tag(550, tags) == "t550"
    assert flt.gpu_monitoring_dcgm_tag("570", tags) == "t570"
    with pytest.raises(Exception, match=r"driver branch 470 .*known: 550, 570"):
        flt.gpu_monitoring_dcgm_tag(470, tags)


def test_collector_without_a_driver_writes_an_explicit_no_driver_state(tmp_path: Path) -> None:
    """A real run, as on the lab's hosts: no nvidia-smi, no /proc/driver/nvidia, two
    simulated NVIDIA GPUs and a NIC on the PCI bus, a venv with torch 2.13.0+cpu's version.py."""
    sysfs = tmp_path / "sys"
    write_pci(
        sysfs,
        ("0000:3b:00.0", "0x10de", "0x1023", "0x030200"),
        ("0000:86:00.0", "0x10de", "0x1023", "0x030000"),
        ("0000:01:00.0", "0x8086", "0x1023", "0x020000"),
    )
    torch_dir = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.13.0+cpu'\ndebug = False\n"
        "cuda: Optional[str] = None\ngit_version = 'x'\n"
    )
    facts = tmp_path / "monitoring.json"
    facts.write_text(
        json.dumps(
            flt.gpu_monitoring_facts(
                {
                    "torch": "2.13.0",
                    "variant": "cpu",
                    "cuda": None,
                    "driver": {"branch": 470},
                    "ok": True,
                },
                {
                    "ok": True,
                    "layers": [
                        {"layer": "L0", "status": "pass"},
                        {"layer": "L1", "status": "fail"},
                    ],
                },
            )
        )
    )
    os.utime(facts, (1700000000.0, 1700000000.0))
    out = tmp_path / "textfile"
    out.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            str(COLLECTOR),
            "--out",
            str(out),
            "--facts",
            str(facts),
            "--venv",
            str(tmp_path / "venv"),
            "--sysfs-root",
            str(sysfs),
        ],
        capture_output=True,
        text=True,
        check=False,
        # gpu_probe.py beside the collector, as the role installs it
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "plugins" / "module_utils")},
    )
    assert proc.returncode == 0, proc.stderr
    text = (out / "gpuprov.prom").read_text()
    assert "\ngpuprov_gpu_driver_loaded 0\n" in text
    assert "\ngpuprov_gpu_smi_up 0\n" in text
    assert "\ngpuprov_gpu_pci_devices 2\n" in text
    assert 'gpuprov_installed_info{driver="",cuda="",torch="2.13.0+cpu"} 1' in text
    assert 'gpuprov_plan_info{driver_branch="470",cuda="",torch="2.13.0",variant="cpu"} 1' in text
    assert 'gpuprov_stack_matches_plan{component="driver"} 0' in text
    assert 'gpuprov_stack_matches_plan{component="torch"} 1' in text
    assert 'gpuprov_smoke_layer_passed{layer="L0",status="pass"} 1' in text
    assert 'gpuprov_smoke_layer_passed{layer="L1",status="fail"} 0' in text
    assert "\ngpuprov_smoke_last_verdict_timestamp_seconds 1700000000\n" in text
    assert [p.name for p in out.iterdir()] == ["gpuprov.prom"]  # no temporary file left


def test_the_dashboard_queries_metrics_the_collector_writes() -> None:
    dash = json.loads((ROLE / "files" / "grafana-gpuprov.json").read_text())
    source = COLLECTOR.read_text()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for name in {
                w for w in target["expr"].replace("{", " ").split() if w.startswith("gpuprov_")
            }:
                suffix = name.removeprefix("gpuprov_gpu_").removeprefix("gpuprov_")
                assert suffix in source, name
