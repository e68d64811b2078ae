"""shared_runs.py without a lab (in `make unit`): what a kept run holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import shared_runs

# The json callback's stats of one host, as ansible-core 2.19 prints them.
DOC = {
    "plays": [],
    "stats": {
        "lab-k40m": {
            "changed": 0,
            "failures": 2,
            "ignored": 0,
            "ok": 31,
            "rescued": 0,
            "skipped": 40,
            "unreachable": 1,
        }
    },
}


def test_the_recap_is_the_play_recaps_counters() -> None:
    runs: dict[str, shared_runs.Run] = {}
    shared_runs.keep(runs, shared_runs.CHECK, "out", DOC)
    run = runs[shared_runs.CHECK]
    assert run.recap == {"lab-k40m": {"changed": 0, "unreachable": 1, "failed": 2}}
    assert (run.returncode, run.stdout, run.reports) == (0, "out", None)


def test_the_reports_are_kept_as_the_run_left_them(tmp_path: Path) -> None:
    """Later runs rewrite the lab's report directory (a check run, a plan with a host
    stopped deletes the plans): the kept run's reports do not follow."""
    lab_reports = tmp_path / "reports"
    (lab_reports / "plan").mkdir(parents=True)
    (lab_reports / "plan" / "lab-k40m.json").write_text('{"torch": "2.13.0"}')
    (lab_reports / "smoke").mkdir()
    (lab_reports / "smoke" / "lab-k40m.json").write_text("{}")
    # The metrics' "verdicts last changed" stamp is judged against the smoke report's mtime.
    os.utime(lab_reports / "smoke" / "lab-k40m.json", (1_700_000_000, 1_700_000_000))
    runs: dict[str, shared_runs.Run] = {}
    shared_runs.keep(runs, shared_runs.NOOP, "", DOC, (lab_reports, tmp_path / "kept"))
    (lab_reports / "plan" / "lab-k40m.json").unlink()
    (lab_reports / "smoke" / "lab-k40m.json").write_text('{"ok": false}')
    kept = runs[shared_runs.NOOP].reports
    assert kept == tmp_path / "kept"
    assert (kept / "plan" / "lab-k40m.json").read_text() == '{"torch": "2.13.0"}'
    assert (kept / "smoke" / "lab-k40m.json").read_text() == "{}"
    assert (kept / "smoke" / "lab-k40m.json").stat().st_mtime == 1_700_000_000


def test_a_run_names_the_hosts_each_playbooks_plays_did_work_on(tmp_path: Path) -> None:
    playbook = tmp_path / "both.yml"
    playbook.write_text(
        "- name: First\n  hosts: all\n  tasks: []\n"
        "- name: Second\n  hosts: gpu\n  tasks: []\n"
        "- ansible.builtin.import_playbook: other.yml\n"
    )
    # Every targeted host answers the implicit fact gathering: that is not the play's work.
    facts = {"task": {"name": "Gathering Facts"}, "hosts": {"a": {}, "b": {}, "c": {}, "d": {}}}
    own = {"task": {"name": "role : a task"}}
    doc = {
        **DOC,
        "plays": [
            {
                "play": {"name": "First"},
                "tasks": [facts, {**own, "hosts": {"a": {}, "b": {"skipped": True}, "c": {}}}],
            },
            {
                "play": {"name": "Second"},
                "tasks": [facts, {**own, "hosts": {"a": {}, "b": {"skipped": True}}}],
            },
        ],
    }
    runs: dict[str, shared_runs.Run] = {}
    shared_runs.keep(runs, shared_runs.NOOP, "", doc)
    # b skipped all its own tasks, c is not in Second's, d only gathered facts
    assert runs[shared_runs.NOOP].ran(playbook) == {"a"}
    del doc["plays"][1]
    shared_runs.keep(runs, shared_runs.NOOP, "", doc)
    with pytest.raises(AssertionError, match=r"plays \['Second'\] not in the run"):
        runs[shared_runs.NOOP].ran(playbook)
