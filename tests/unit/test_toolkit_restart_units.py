"""The nvidia_container_toolkit handlers restart the units its preflight found running or
stopped; where that read did not run (`--skip-tags nvidia_container_toolkit_preflight`, which
wins over its `always` tag) they restart every unit it would have read. Before, a skipped read
left no unit to restart: a changed daemon.json was never loaded, silently (review, 2026-12-05).

The role's real vars and defaults files, evaluated by a real ansible-playbook run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from local_play import ROOT, run_local_play

ROLE = ROOT / "roles" / "nvidia_container_toolkit"
CASES = {
    "found": {"units": {"docker.service": "running"}, "changed": False},
    "skipped": {"skipped": True, "changed": False, "skip_reason": "Conditional result was False"},
}


def _restart_units(tmp_path: Path) -> dict[str, Any]:
    book = tmp_path / "book.yml"
    tasks: list[dict[str, Any]] = [
        {"ansible.builtin.include_vars": str(ROLE / "defaults" / "main.yml")},
        {"ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
    ]
    for case, registered in [("unread", None), *CASES.items()]:
        extra = {} if registered is None else {"__nvidia_container_toolkit_installed": registered}
        tasks.append(
            {
                "name": case,
                "ansible.builtin.debug": {"msg": "{{ _nvidia_container_toolkit_restart_units }}"},
                "vars": extra,
            }
        )
    book.write_text(json.dumps([{"hosts": "h1", "gather_facts": False, "tasks": tasks}]))
    proc = run_local_play(book, tmp_path, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"})
    # the JSON document, then the callbacks that print after it (gpuprov_remote, profile_tasks)
    doc = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{") :])[0]
    return {
        t["task"]["name"]: t["hosts"]["h1"]["msg"]
        for t in doc["plays"][0]["tasks"]
        if t["task"]["name"] in ("unread", *CASES)
    }


def test_the_handlers_restart_what_was_found_or_everything_the_read_covers(tmp_path: Path) -> None:
    units = _restart_units(tmp_path)
    assert units["found"] == ["docker.service"]
    # Not read: the default runtimes' unit (docker) and the two the handlers restart.
    assert sorted(units["skipped"]) == ["containerd.service", "docker.service"]
    assert sorted(units["unread"]) == ["containerd.service", "docker.service"]


def test_the_handlers_use_it() -> None:
    handlers = (ROLE / "handlers" / "main.yml").read_text(encoding="utf-8")
    assert 'in _nvidia_container_toolkit_units"' not in handlers
    assert handlers.count("_nvidia_container_toolkit_restart_units") == 3
