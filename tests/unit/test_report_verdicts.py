"""scripts/report_verdicts.py (what a layer's verdict means for the report: pass, skipped,
EXPECTED, FAIL), report_history.py and report_inputs.py's monitoring reader, and how the text
summary says them. The page's tests are in test_report_page.py."""

from __future__ import annotations

import json

import pytest
import report  # scripts/report.py (pythonpath)
import report_fixtures as fx
import report_history
import report_inputs
import report_verdicts as rv

CONTAINER = {"gpu_info": {"virtualization": "docker"}}
BARE_METAL = {"gpu_info": {"virtualization": "none"}}
NO_KMOD = {"packages": {"nvidia-smi": "550.163.01-2"}, "kernel_module": False}


def doc(required=("L0",), layers=None, **extra):
    layers = layers or [fx.v("L0", "hardware", "pass", "ok"), fx.v("L1", "driver", "fail", "x")]
    return fx.smoke_doc("h", list(required), layers, **extra)


def rows(smoke, plan=None, installed=None):
    return rv.layer_rows(smoke, plan, installed, report.LAYERS)


# --- expected: declared first, derived from structured fields as the fallback --------------


def test_a_declared_layer_is_expected_with_the_declared_reason():
    got, notes = rows(doc(cannot_pass={"L1": "no kernel module in a container"}), BARE_METAL)
    assert got["L1"]["category"] == "expected"
    assert (got["L1"]["expected"], got["L1"]["expected_source"]) == (
        "no kernel module in a container",
        "declared",
    )
    assert notes == []


def test_a_declaration_even_empty_replaces_the_fallback():
    got, _ = rows(doc(driver=NO_KMOD, cannot_pass={}), CONTAINER)
    assert got["L1"]["category"] == "failopt"
    assert got["L1"]["expected"] is None


@pytest.mark.parametrize(
    ("plan", "driver", "category"),
    [
        (CONTAINER, NO_KMOD, "expected"),
        (BARE_METAL, NO_KMOD, "failopt"),  # a real machine without its module: a fault
        (CONTAINER, {**NO_KMOD, "kernel_module": True}, "failopt"),
        (None, NO_KMOD, "failopt"),  # no plan, no facts: nothing derived
    ],
    ids=["container-no-module", "bare-metal-no-module", "container-with-module", "no-plan"],
)
def test_l1_is_derived_expected_only_in_a_container_without_the_module(plan, driver, category):
    got, _ = rows(doc(driver=driver), plan)
    assert got["L1"]["category"] == category
    if category == "expected":
        assert got["L1"]["expected"] == (
            "userspace only: no kernel module: a docker container has no kernel of its own "
            "(nvidia_driver installs the userspace only there)"
        )
        assert got["L1"]["expected_source"] == "derived"


@pytest.mark.parametrize(
    ("declared", "installed", "category"),
    [
        ("2.13.0+cpu", "2.13.0+cpu", "expected"),
        ("2.13.0+cpu", "2.12.0+cpu", "failopt"),  # not the declared build
        ("2.13.0+cu121", "2.13.0+cu121", "failopt"),  # a CUDA build must pass L3
        ("", "2.13.0+cpu", "failopt"),
    ],
    ids=["declared-cpu-build", "other-build", "cuda-build", "nothing-declared"],
)
def test_l3_is_derived_expected_only_for_the_declared_cpu_build(declared, installed, category):
    layers = [fx.v("L0", "hardware", "pass", "ok"), fx.v("L3", "cuda", "fail", "CPU-only build")]
    expected = {"torch": declared, "reason": "simulated GPUs"}
    got, _ = rows(doc(layers=layers, torch_expected=expected), BARE_METAL, installed)
    assert got["L3"]["category"] == category
    if category == "expected":
        assert got["L3"]["expected"] == (
            "the inventory expects the CPU build 2.13.0+cpu here (gpu_smoke_expected_torch): "
            "simulated GPUs"
        )


def test_a_required_layer_is_never_expected_and_the_contradiction_is_named():
    smoke = doc(required=["L0", "L1"], cannot_pass={"L1": "no module"})
    smoke["not_passed"] = [{"layer": "L1", "status": "fail", "reason": "x"}]
    got, notes = rows(smoke)
    assert got["L1"]["category"] == "fail"
    assert notes == [
        "L1 is declared unable to pass here (no module) but is required: the required layer "
        "counts; drop one of the two declarations"
    ]


def test_a_declared_layer_that_passes_is_a_pass_with_a_note():
    layers = [fx.v("L0", "hardware", "pass", "ok"), fx.v("L1", "driver", "pass", "550")]
    got, notes = rows(doc(layers=layers, cannot_pass={"L1": "no module"}))
    assert got["L1"]["category"] == "pass"
    assert notes == ["L1 passed although declared unable to pass here (no module)"]


def test_categories_of_skipped_missing_and_cpu_passes():
    layers = [fx.v("L0", "hardware", "pass (cpu)", "ok"), fx.v("L2", "container", "skipped", "-")]
    smoke = doc(required=["L0", "L4"], layers=layers)
    smoke["not_passed"] = [{"layer": "L4", "status": "missing", "reason": "layer not run"}]
    got, _ = rows(smoke)
    assert {k: v["category"] for k, v in got.items()} == {"L0": "pass", "L2": "skip", "L4": "fail"}


# --- why a host's torch is not the plan's, whatever the reason -----------------------------


def no_torch_doc(reason=fx.NO_TORCH, **extra):
    layers = [fx.v(x, "n", "skipped", reason) for x in ("L3", "PERF", "L4", "L6")]
    return doc(layers=[fx.v("L0", "hardware", "pass", "ok"), *layers], **extra)


@pytest.mark.parametrize(
    ("smoke", "notes", "warnings"),
    [
        (
            no_torch_doc(),
            ["h: no torch installed (the plan's is 2.15.0+cu126), on purpose: " + fx.NO_TORCH],
            [],
        ),
        (
            no_torch_doc(reason="other", no_torch="the run's --no-torch reason"),
            [
                "h: no torch installed (the plan's is 2.15.0+cu126), on purpose: the run's "
                "--no-torch reason"
            ],
            [],
        ),
        (
            doc(layers=[fx.v("L0", "hardware", "pass", "ok")]),
            [
                "h: installed torch not measured (the plan's is 2.15.0+cu126): the smoke run had "
                "no torch layer (gpu_smoke_layers)"
            ],
            [],
        ),
        (
            doc(layers=[fx.v("L3", "cuda", "skipped", "a"), fx.v("L4", "train", "skipped", "b")]),
            [
                "h: installed torch unknown (the plan's is 2.15.0+cu126): every torch layer was "
                "skipped (L3: a; L4: b)"
            ],
            [],
        ),
        (
            doc(
                layers=[
                    fx.v("L3", "cuda", "fail", "torch is not importable: No module named 'torch'")
                ]
            ),
            [],
            [
                "h: no torch found (the plan's is 2.15.0+cu126): L3 says torch is not importable: "
                "No module named 'torch'; run playbooks/pytorch.yml, or give the host no PyTorch "
                "environment on purpose (pytorch_method: none)"
            ],
        ),
    ],
    ids=[
        "pytorch-method-none",
        "declared-no-torch",
        "no-torch-layer",
        "skipped-apart",
        "torch-missing",
    ],
)
def test_a_missing_torch_is_always_explained(smoke, notes, warnings):
    assert rv.torch_notes("h", "2.15.0+cu126", None, smoke) == (notes, warnings)


def test_no_note_without_a_plan_or_verdicts_or_a_difference():
    assert rv.torch_notes("h", None, "2.13.0+cpu", doc()) == ([], [])
    assert rv.torch_notes("h", "2.15.0+cu126", None, None) == ([], [])
    assert rv.torch_notes("h", "2.15.0+cu126", "2.15.0+cu126", doc()) == ([], [])


def test_the_summary_says_why_and_what_is_expected(tmp_path, capsys):
    inventory = fx.write_case("mixed", tmp_path / "r")
    assert report.main(["--reports", str(tmp_path / "r"), "--inventory", str(inventory)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert (
        "note: lab-m40: no torch installed (the plan's is 2.15.0+cu126), on purpose: no PyTorch "
        "environment on this host (pytorch_method: none)"
    ) in out
    assert (
        "expected: L1 on lab-k40m, lab-m40: userspace only: no kernel module: a docker container "
        "has no kernel of its own (nvidia_driver installs the userspace only there)"
    ) in out
    assert (
        "not required, failed: lab-cpu L2 fail: docker run --gpus all failed: could not select "
        "device driver with capabilities gpu"
    ) in out
    k40 = next(line for line in out if line.startswith("lab-k40m "))
    assert k40.split()[-9:] == ["pass*", "exp", "skip", "exp", "skip", "cpu", "cpu*", "cpu*", "yes"]
    md = (tmp_path / "r" / "fleet.md").read_text()
    assert "## Layers that did not pass outside the required ones" in md
    fleet = json.loads((tmp_path / "r" / "fleet.json").read_text())
    assert [(e["host"], e["layer"], e["source"]) for e in fleet["findings"]["expected"]] == [
        ("lab-k40m", "L1", "derived"),
        ("lab-k40m", "L3", "derived"),
        ("lab-m40", "L1", "derived"),
        ("lab-mixed", "L1", "declared"),
        ("lab-mixed", "L3", "declared"),
    ]
    assert fleet["monitoring"] == {
        "lab-k40m": ["gpuprov: 172.18.0.4:9100"],
        "lab-m40": ["gpuprov: 172.18.0.5:9100"],
    }


# --- history and monitoring inputs ---------------------------------------------------------


def row(time, ok=True):
    return {"host": "h/../x", "smoked": True, "smoke_time": time, "ok": ok, "layers": {}}


def test_history_is_bounded_deduplicated_and_named_safely(tmp_path):
    for t in ("t1", "t2", "t2", "t3", "t4"):
        got = report_history.record(tmp_path, [row(t)], keep=3)
    assert [r["time"] for r in got["h/../x"]] == ["t2", "t3", "t4"]
    assert [p.name for p in tmp_path.iterdir()] == ["h_.._x.json"]
    assert report_history.record(tmp_path / "off", [row("t5")], keep=0) == {}
    assert not (tmp_path / "off").exists()


def test_a_broken_history_file_is_named(tmp_path):
    (tmp_path / "h.json").write_text("{")
    with pytest.raises(report_inputs.ReportError, match=r"h.json: not JSON .*remove it"):
        report_history.record(tmp_path, [{**row("t1"), "host": "h"}])


def test_monitoring_targets(tmp_path):
    assert report_inputs.monitoring_targets(tmp_path) == {}
    (tmp_path / "monitoring").mkdir()
    (tmp_path / "monitoring" / "prometheus-gpuprov.yml").write_text(fx.SCRAPE)
    assert report_inputs.monitoring_targets(tmp_path, ["lab-m40"]) == {
        "lab-m40": ["gpuprov: 172.18.0.5:9100"]
    }
    (tmp_path / "monitoring" / "prometheus-gpuprov.yml").write_text("- a\n- b\n")
    with pytest.raises(report_inputs.ReportError, match="expected a mapping with scrape_configs"):
        report_inputs.monitoring_targets(tmp_path)
