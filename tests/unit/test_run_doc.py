"""scripts/gpuprov_lab/run_doc.py: the json callback's document of a run, read one way for the
lab tests and the benchmarks, and where a run's time went (bench_site.py's breakdown of (a))."""

from __future__ import annotations

import json

import bench_site  # scripts/bench_site.py (scripts/ is on pytest's pythonpath)
import pytest
from gpuprov_lab.run_doc import Share, json_document, kind_of, time_by_kind


def _task(name: str, action: str, start: str, end: str) -> dict[str, object]:
    return {
        "task": {"name": name, "duration": {"start": start, "end": end}},
        "hosts": {"h1": {"action": action}},
    }


def _at(seconds: float) -> str:
    return f"2026-12-06T08:00:{seconds:06.3f}Z"


DOC = {
    "plays": [
        {
            "tasks": [
                _task("Scan the PCI bus for NVIDIA GPUs", "gpu_info", _at(0), _at(0.5)),
                _task(
                    "docker : setup-Debian | Install Docker Engine",
                    "ansible.builtin.apt",
                    _at(1),
                    _at(6),
                ),
                _task(
                    "pytorch : install-pip | Install torch", "ansible.builtin.pip", _at(6), _at(26)
                ),
                _task("docker : setup-Debian | Refresh", "apt_ready", _at(26), _at(27.5)),
                _task(
                    "pytorch : verify-python | Import torch",
                    "ansible.builtin.command",
                    _at(27.5),
                    _at(29.5),
                ),
                _task(
                    "gpu_smoke : run | Run the host layers",
                    "ansible.builtin.command",
                    _at(30),
                    _at(30.25),
                ),
                _task(
                    "jupyterlab : Wait for jupyterlab to answer",
                    "ansible.builtin.uri",
                    _at(31),
                    _at(34),
                ),
                _task(
                    "jupyterlab : configure | Write the unit",
                    "ansible.builtin.template",
                    _at(34),
                    _at(34.5),
                ),
            ]
        }
    ],
    "stats": {"h1": {"ok": 8}},
}


def test_the_document_is_found_among_other_callbacks_lines() -> None:
    out = "Sunday 06 December 2026 (0:00:01.2)\n{not json\n" + json.dumps(DOC) + "\nPLAY RECAP\n"
    assert json_document(out) == DOC
    assert json_document(json.dumps({"plays": []}) + "\n") is None  # no stats
    assert json_document(json.dumps({"plays": []}), need=("plays",)) == {"plays": []}
    assert json_document("no document") is None


def test_a_run_of_several_playbooks_gives_its_last_document() -> None:
    """ansible-playbook a.yml b.yml prints the json callback's document after each file, the
    second holding the plays of both (scripts/bench_site.py's (b) run): the whole run's is the
    last. The first document's nested objects start no line, so none is taken for one."""
    first = {"plays": DOC["plays"][:1], "stats": {"h1": {"ok": 3}}}
    nested = json.dumps(first, indent=4)
    out = f"{nested}\nPLAY RECAP\n{json.dumps(DOC, indent=4)}\nPLAY RECAP\n"
    assert json_document(out) == DOC
    assert json_document(f"{nested}\n{{broken\n") == first


@pytest.mark.parametrize(
    ("name", "action", "kind"),
    [
        ("docker : setup-Debian | Install Docker Engine", "ansible.builtin.apt", "install"),
        ("Install the tools", "ansible.builtin.pip", "install"),
        ("model_serving : verify | Probe each endpoint", "ansible.builtin.command", "verify"),
        ("pytorch : verify-python | Import torch", "ansible.builtin.command", "verify"),
        ("gpu_smoke : install | Copy the smoke scripts", "gpuprov_files", "other"),
        ("gpu_smoke : run | Run the host layers", "ansible.builtin.command", "verify"),
        ("gpu_smoke : report | Assert every required layer passed", "assert", "verify"),
        ("docker : service | Wait until docker answers", "ansible.builtin.command", "verify"),
        (
            "model_serving : install-Debian | Wait for a background install of the Triton packages",
            "ansible.builtin.command",
            "install",
        ),
        ("pytorch : converge | Wait for the lock of x", "gpuprov_wait_lock", "install"),
        ("a : b | c | Wait for d", "ansible.builtin.command", "verify"),
        ("model_serving : Wait for Triton /v2/health/ready", "ansible.builtin.uri", "verify"),
        ("verify | Write the serving report on the controller", "include_role", "verify"),
        ("docker : configure | Wait for nothing | x", "ansible.builtin.copy", "other"),
        ("Scan the PCI bus for NVIDIA GPUs", "gpu_info", "other"),
    ],
)
def test_each_task_has_one_kind(name: str, action: str, kind: str) -> None:
    assert kind_of(name, action) == kind


def test_the_time_of_a_run_by_kind() -> None:
    got = time_by_kind(DOC)
    assert got == {
        "install": Share(26.5, 3),  # 5 + 20 + 1.5
        "verify": Share(5.25, 3),  # 2 + 0.25 + 3
        "other": Share(1.0, 2),  # 0.5 + 0.5
    }
    lines = bench_site.time_lines(got, 40.0, 20.0)
    assert lines[4] == "      outside any task (start, between tasks, the end): 7.2s"  # 40 - 32.75
    assert lines[-1] == (
        "    without the verification: 34.8s / shell 20.0s = 1.74 (the script verifies nothing)"
    )
    assert "package installs (apt, pip): 26.5s in 3 tasks (8.83s each)" in lines[1]
